"""A library with a run-time dim on aarch64: the PP-OCR classifier compiled with a
run-time batch 1..8 and a specialized path for batch 2 (``CLS_DYN_KW``) for
``c -mtriple=aarch64-linux-gnu``, run under qemu-aarch64 by ``examples/c/run_model.c``
built for aarch64 (fixtures in conftest.py) at batch 2 (specialized path) and 3 (generic
path); each run's shape as on the host, its values the host library's within 1e-4 of
their range (another ISA, other roundings). Likewise ``conv_head_model`` (run-time batch,
height and width in steps of 8) at two sizes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from capihelp import (
    CONV_HEAD_SHAPES,
    assert_near_host,
    cls_batch,
    conv_head_model,
    python_outputs,
    qemu_run_model,
)

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
        assert_near_host(got, want, f"batch {batch}: aarch64 under qemu {seconds:.2f} s")
        np.testing.assert_array_equal(got.reshape(batch, 2).argmax(1),
                                      want.reshape(batch, 2).argmax(1))  # fmt: skip


def test_three_run_time_dims_on_aarch64_under_qemu(qemu, arm_exe, tmp_path):
    import monolib

    libs = {}
    for target, name in (("c -mtriple=aarch64-linux-gnu", "arm.so"), ("c", "host.so")):
        factory = monolib.compile(conv_head_model(), target=target, shapes=CONV_HEAD_SHAPES)
        libs[name] = factory.export_library(str(tmp_path / name))
    for batch, h, w in [(3, 24, 16), (1, 8, 32)]:
        x = np.random.default_rng(h + w).normal(size=(batch, 3, h, w)).astype(np.float32)
        x.tofile(tmp_path / "x.bin")
        res = qemu_run_model(
            qemu, arm_exe, libs["arm.so"], "-i", f"{tmp_path / 'x.bin'}@{batch},3,{h},{w}",
            "-o", str(tmp_path / "out"),
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert f"this run: [{batch},4,{h // 2},{w // 2}]" in res.stdout
        for i, want in enumerate(python_outputs(libs["host.so"], x)):
            got = np.fromfile(tmp_path / f"out.{i}.bin", np.float32)
            assert got.size == want.size, (i, want.shape)
            assert_near_host(got, want.ravel(), f"({batch}, 3, {h}, {w}) output {i}")
