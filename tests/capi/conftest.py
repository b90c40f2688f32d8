"""Fixtures of the C API tests: the PP-OCR classifier exported once per session
(shared by the pytest-xdist workers through a file lock), its inputs, and the example
program built with the system C compiler (helpers in ``capihelp.py``)."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from capihelp import CLS_SHAPE, EXAMPLE, INCLUDE


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
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            f"-I{INCLUDE}",
            str(EXAMPLE),
            "-o",
            str(exe),
            "-ldl",
        ],
        check=True,
    )
    return exe


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


@pytest.fixture(scope="session")
def export_cls(cls_model, tmp_path_factory):
    """``export_cls(target, name) -> Path``: the classifier compiled for ``target`` and
    exported once per test session (workers share it under a file lock)."""
    import monolib

    shared = _shared_dir(tmp_path_factory)

    def get(target: str, name: str) -> Path:
        out = shared / name
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not out.exists():
                factory = monolib.compile(str(cls_model), target=target, shapes={"x": CLS_SHAPE})
                factory.export_library(str(out))
        return out

    return get


@pytest.fixture(scope="session")
def cls_inputs() -> dict[str, np.ndarray]:
    """Inputs of the classifier: a rendered text line (upright) and seeded noise (its
    softmax is not saturated, so the comparison sees every bit)."""
    pytest.importorskip("PIL")
    from monolib.models import ocr

    line = ocr.line_preprocess(ocr.render_line("Hello World 2024"), 48, 192)
    noise = np.random.default_rng(5).normal(0, 1.5, CLS_SHAPE).astype(np.float32)
    return {"line": np.ascontiguousarray(line, np.float32), "noise": noise}
