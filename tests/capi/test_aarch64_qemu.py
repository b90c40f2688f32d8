"""The aarch64 library for real: the PP-OCR classifier cross-compiled with
``target="c -mtriple=aarch64-linux-gnu"`` (zig), ``examples/c/run_model.c`` built for
aarch64 by zig against Debian's glibc 2.36, run under ``qemu-aarch64 -L
/usr/aarch64-linux-gnu`` (Debian ``qemu-user`` + ``libc6-arm64-cross``); its outputs
match the host library's (1e-4 of their range: another ISA, other roundings)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from capihelp import EXAMPLE, INCLUDE, python_outputs, zig_cc

SYSROOT = Path("/usr/aarch64-linux-gnu")
# Debian 12's glibc; zig links against the version named in the triple, so the
# program asks for nothing newer than the sysroot's C library has.
GLIBC = "2.36"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qemu() -> str:
    exe = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if exe is None:
        pytest.skip("qemu-aarch64 not installed (Debian: apt-get install qemu-user)")
    if not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists():
        pytest.skip(f"no aarch64 C library in {SYSROOT} (apt-get install libc6-arm64-cross)")
    if zig_cc() is None:
        pytest.skip("zig's C compiler not installed (pip install ziglang)")
    return exe


@pytest.fixture(scope="module")
def arm_exe(qemu, tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("arm") / "run_model"
    cmd = [
        *zig_cc(),
        "-target",
        f"aarch64-linux-gnu.{GLIBC}",
        "-std=c99",
        "-O2",
        "-Wall",
        "-Werror",
        f"-I{INCLUDE}",
        str(EXAMPLE),
        "-o",
        str(exe),
        "-ldl",
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return exe


def test_aarch64_library_under_qemu_matches_host(qemu, arm_exe, export_cls, cls_inputs, tmp_path):
    arm_lib = export_cls("c -mtriple=aarch64-linux-gnu", "cls_aarch64.so")
    host_lib = export_cls("c", "cls_host.so")
    assert arm_lib.read_bytes()[18] == 183, "e_machine EM_AARCH64"
    for name, x in cls_inputs.items():
        x.tofile(tmp_path / f"{name}.bin")
        t0 = time.perf_counter()
        res = subprocess.run(
            [
                qemu,
                "-L",
                str(SYSROOT),
                str(arm_exe),
                str(arm_lib),
                "-i",
                str(tmp_path / f"{name}.bin"),
                "-o",
                str(tmp_path / name),
                "-t",
                "2",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        seconds = time.perf_counter() - t0
        assert res.returncode == 0, res.stderr
        assert "threads: 2" in res.stdout
        got = np.fromfile(tmp_path / f"{name}.0.bin", np.float32)
        (want,) = python_outputs(host_lib, x)
        want = want.ravel()
        diff = float(np.abs(got - want).max())
        span = float(want.max() - want.min())
        print(
            f"{name}: aarch64 under qemu {seconds:.2f} s, max |diff| {diff:.3g} "
            f"(range {span:.3g}): {got} vs host {want}"
        )
        assert diff <= 1e-4 * max(span, 1e-6), (got, want)
        assert int(got.argmax()) == int(want.argmax())
