"""Fixtures of the WebAssembly tests (issue 17): the PP-OCR classifier and recognizer
compiled to ``.wasm`` once per test session (shared by the pytest-xdist workers through
a file lock, and by the Python and JavaScript hosts' tests), and their inputs.

The first ``.wasm`` build on a machine also builds zig's wasi-libc (a few minutes,
then cached by zig); the tests are skipped without ``ziglang``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

#: name -> (model key, input shape) of the .wasm builds
WASM_BUILDS = {"cls": ("ppocr_cls", (1, 3, 48, 192)), "rec": ("ppocr_rec", (1, 3, 48, 320))}
#: the target (one of the spellings it takes; the tests of targets.py check the others)
WASM_TARGET = "c -mtriple=wasm32-wasi"
TEXT = "Hello World 2024"


@pytest.fixture(scope="session")
def wasm_dir(tmp_path_factory) -> Path:
    """A directory every xdist worker of this session shares."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    d = base / "monolib-wasm"
    d.mkdir(exist_ok=True)
    return d


def _build(name: str, out: Path) -> None:
    """``monolib compile`` (the CLI, in a child process) to ``out`` (no suffix given:
    the target's ``.wasm`` is appended)."""
    from monolib.models import fetch_model

    key, shape = WASM_BUILDS[name]
    stem = out.with_suffix("")
    cmd = [sys.executable, "-m", "monolib.cli", "compile", str(fetch_model(key)), "-o", str(stem),
           "--shape", "x=" + ",".join(map(str, shape)), "--target", WASM_TARGET]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if res.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n"
                           f"{(res.stderr or res.stdout)[-3000:]}")


@pytest.fixture(scope="session")
def wasm_lib(wasm_dir):
    """``wasm_lib(name) -> Path`` of the ``.wasm`` of ``WASM_BUILDS[name]``, built once
    per session; a failure is recorded so other workers fail fast with it."""
    pytest.importorskip("ziglang")

    def get(name: str) -> Path:
        lib, err = wasm_dir / f"{name}.wasm", wasm_dir / f"{name}.err"
        with open(wasm_dir / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if err.exists():
                pytest.fail(err.read_text())
            if not lib.exists():
                try:
                    _build(name, lib)
                except Exception as exc:  # noqa: BLE001  (recorded for the other workers)
                    err.write_text(str(exc))
                    raise
        return lib

    return get


@pytest.fixture(scope="session")
def text_line() -> np.ndarray:
    """``TEXT`` rendered black on white (uint8 RGB)."""
    pytest.importorskip("PIL")
    from monolib.models import ocr

    return ocr.render_line(TEXT)
