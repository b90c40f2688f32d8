"""A library with a run-time dim on aarch64: the PP-OCR classifier compiled with a
run-time batch 1..8 and a specialized path for batch 2 (``CLS_DYN_KW``) for
``c -mtriple=aarch64-linux-gnu``, run under qemu-aarch64 by ``examples/c/run_model.c``
built for aarch64 (fixtures in conftest.py) at batch 2 (specialized path) and 3 (generic
path); each run's shape as on the host, its values the host library's within 1e-4 of
their range (another ISA, other roundings)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from capihelp import cls_batch, python_outputs, qemu_run_model

pytestmark = pytest.mark.slow


def test_dynamic_aarch64_library_under_qemu_matches_host(
    qemu, arm_exe, export_cls_dyn, cls_inputs, tmp_path
):
    arm_lib = export_cls_dyn("c -mtriple=aarch64-linux-gnu", "cls_dyn_aarch64.so")
    host_lib = export_cls_dyn("c", "cls_dyn_host.so")
    assert arm_lib.read_bytes()[18] == 183, "e_machine EM_AARCH64"
    for batch in (2, 3):
        x = cls_batch(cls_inputs["line"], batch)
        x.tofile(tmp_path / f"x{batch}.bin")
        t0 = time.perf_counter()
        res = qemu_run_model(
            qemu, arm_exe, str(arm_lib), "-i", f"{tmp_path / f'x{batch}.bin'}@{batch},3,48,192",
            "-o", str(tmp_path / f"out{batch}"), "-t", "2",
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        assert res.returncode == 0, res.stderr
        assert "threads: 2" in res.stdout
        assert "input 0: x float32[1..8,3,48,192] (884736 bytes at most)" in res.stdout
        assert f"this run: [{batch},2] ({batch * 8} bytes)" in res.stdout
        got = np.fromfile(tmp_path / f"out{batch}.0.bin", np.float32)
        (want,) = python_outputs(host_lib, x)
        assert want.shape == (batch, 2)
        want = want.ravel()
        diff = float(np.abs(got - want).max())
        span = float(want.max() - want.min())
        print(f"batch {batch}: aarch64 under qemu {seconds:.2f} s, max |diff| {diff:.3g} "
              f"(range {span:.3g})")  # fmt: skip
        assert diff <= 1e-4 * max(span, 1e-6), (got, want)
        np.testing.assert_array_equal(got.reshape(batch, 2).argmax(1),
                                      want.reshape(batch, 2).argmax(1))  # fmt: skip
