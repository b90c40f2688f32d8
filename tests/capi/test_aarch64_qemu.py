"""The aarch64 library for real: the PP-OCR classifier cross-compiled with
``target="c -mtriple=aarch64-linux-gnu"`` (zig), ``examples/c/run_model.c`` built for
aarch64 by zig against Debian's glibc 2.36, run under ``qemu-aarch64 -L
/usr/aarch64-linux-gnu`` (Debian ``qemu-user`` + ``libc6-arm64-cross``); its outputs
match the host library's (1e-4 of their range: another ISA, other roundings).
Fixtures ``qemu`` and ``arm_exe`` in conftest.py; the run-time batch library in
test_aarch64_qemu_dynamic.py."""

from __future__ import annotations

import time

import numpy as np
import pytest
from capihelp import assert_near_host, python_outputs, qemu_run_model

pytestmark = pytest.mark.slow


def test_aarch64_library_under_qemu_matches_host(qemu, arm_exe, export_cls, cls_inputs, tmp_path):
    arm_lib = export_cls("c -mtriple=aarch64-linux-gnu", "cls_aarch64.so")
    host_lib = export_cls("c", "cls_host.so")
    assert arm_lib.read_bytes()[18] == 183, "e_machine EM_AARCH64"
    for name, x in cls_inputs.items():
        x.tofile(tmp_path / f"{name}.bin")
        t0 = time.perf_counter()
        res = qemu_run_model(
            qemu, arm_exe, str(arm_lib), "-i", str(tmp_path / f"{name}.bin"),
            "-o", str(tmp_path / name), "-t", "2",
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        assert res.returncode == 0, res.stderr
        assert "threads: 2" in res.stdout
        got = np.fromfile(tmp_path / f"{name}.0.bin", np.float32)
        (want,) = python_outputs(host_lib, x)
        want = want.ravel()
        assert_near_host(got, want, f"{name}: aarch64 under qemu {seconds:.2f} s")
        assert int(got.argmax()) == int(want.argmax())
