"""Fixtures of the C API tests: the PP-OCR classifier (static, and with a run-time
batch) exported once per session (shared by the pytest-xdist workers through a file
lock), its inputs, the example program built with the system C compiler and for
aarch64 with qemu to run it (helpers in ``capihelp.py``)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from capihelp import CLS_DYN_KW, CLS_SHAPE, EXAMPLE, GLIBC, INCLUDE, SYSROOT, zig_cc


@pytest.fixture(scope="session")
def cc() -> str:
    """The system C compiler (what monolib itself uses on the host)."""
    from monolib.export.toolchain import find_compiler
    from monolib.errors import ToolchainError

    try:
        return find_compiler("c")[0]
    except ToolchainError as exc:
        pytest.skip(f"no C compiler: {exc}")


@pytest.fixture(scope="session")
def run_model_exe(cc, tmp_path_factory) -> Path:
    """``examples/c/run_model.c`` built with the system compiler, warnings as errors."""
    exe = tmp_path_factory.mktemp("example") / "run_model"
    subprocess.run(_example_cmd([cc, "-Wextra", "-pedantic"], exe), check=True)
    return exe


def _example_cmd(compiler: list[str], exe: Path) -> list[str]:
    """The command that builds ``examples/c/run_model.c`` into ``exe`` with ``compiler``
    (the compiler and its extra flags), warnings as errors."""
    return [*compiler, "-std=c99", "-O2", "-Wall", "-Werror", f"-I{INCLUDE}", str(EXAMPLE),
            "-o", str(exe), "-ldl"]  # fmt: skip


def _shared_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # every worker's basetemp lies in one session directory
    path = base / "monolib-capi-libs"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def cls_model():
    """Path of the PP-OCR classifier .onnx (fetched once, cached)."""
    pytest.importorskip("onnx")
    from monolib.models import fetch_model

    return fetch_model("ppocr_cls")


def _exporter(cls_model, tmp_path_factory, **compile_kw):
    """``get(target, name) -> Path``: the classifier compiled for ``target`` with
    ``compile_kw`` and exported once per test session (workers share it under a file
    lock)."""
    import monolib

    shared = _shared_dir(tmp_path_factory)

    def get(target: str, name: str) -> Path:
        out = shared / name
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not out.exists():
                factory = monolib.compile(str(cls_model), target=target, **compile_kw)
                factory.export_library(str(out))
        return out

    return get


@pytest.fixture(scope="session")
def export_cls(cls_model, tmp_path_factory):
    """``export_cls(target, name) -> Path``: the classifier at its static shape."""
    return _exporter(cls_model, tmp_path_factory, shapes={"x": CLS_SHAPE})


@pytest.fixture(scope="session")
def export_cls_dyn(cls_model, tmp_path_factory):
    """``export_cls_dyn(target, name) -> Path``: the classifier with a run-time batch in
    [1, 8] and a static path for batch 2 (``CLS_DYN_KW``)."""
    return _exporter(cls_model, tmp_path_factory, **CLS_DYN_KW)


@pytest.fixture(scope="session")
def qemu() -> str:
    """qemu-aarch64 with an aarch64 C library and zig to build for it, else skip."""
    exe = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if exe is None:
        pytest.skip("qemu-aarch64 not installed (Debian: apt-get install qemu-user)")
    if not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists():
        pytest.skip(f"no aarch64 C library in {SYSROOT} (apt-get install libc6-arm64-cross)")
    if zig_cc() is None:
        pytest.skip("zig's C compiler not installed (pip install ziglang)")
    return exe


@pytest.fixture(scope="session")
def arm_exe(qemu, tmp_path_factory) -> Path:
    """``examples/c/run_model.c`` built for aarch64 by zig against glibc ``GLIBC``."""
    exe = tmp_path_factory.mktemp("arm") / "run_model"
    cmd = _example_cmd([*zig_cc(), "-target", f"aarch64-linux-gnu.{GLIBC}"], exe)
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return exe


@pytest.fixture(scope="session")
def cls_inputs() -> dict[str, np.ndarray]:
    """Inputs of the classifier: a rendered text line (upright) and seeded noise (its
    softmax is not saturated, so the comparison sees every bit)."""
    pytest.importorskip("PIL")
    from monolib.models import ocr

    line = ocr.line_preprocess(ocr.render_line("Hello World 2024"), 48, 192)
    noise = np.random.default_rng(5).normal(0, 1.5, CLS_SHAPE).astype(np.float32)
    return {"line": np.ascontiguousarray(line, np.float32), "noise": noise}
