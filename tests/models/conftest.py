"""Fixtures of the real-model tests: fetched models, libraries compiled once per test
session (shared by the pytest-xdist workers through a file lock), a fresh-process
runner, ONNX Runtime sessions and the meaningful inputs.

Each library is compiled with ``monolib.compile`` and exported with
``export_library``; the tests load it in a fresh process (``fresh_run.py``) and compare
with ONNX Runtime on the same inputs.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from monolib.models import fetch_model

FRESH_RUN = Path(__file__).with_name("fresh_run.py")


@dataclass(frozen=True)
class Build:
    """How a test library is compiled: model key, static shapes, constant inputs."""

    key: str
    shapes: dict
    constants: dict = field(default_factory=dict)


BUILDS = {
    "det": Build("ppocr_det", {"x": (1, 3, 640, 640)}),
    "rec": Build("ppocr_rec", {"x": (1, 3, 48, 320)}),
    "cls": Build("ppocr_cls", {"x": (1, 3, 48, 192)}),
    "silero": Build("silero_vad", {"input": (1, 576), "state": (2, 1, 128)}, {"sr": 16000}),
    "silero_seq": Build("silero_vad_sequence", {"input": (32, 576), "h": (1, 1, 128),
                                                "c": (1, 1, 128)}),
    "magika": Build("magika", {"bytes": (1, 2048)}),
}


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A directory all xdist workers of this session share."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    d = base / "monolib-model-libs"
    d.mkdir(exist_ok=True)
    return d


def _compile_export(build: Build, lib: Path) -> str:
    import monolib

    t0 = time.perf_counter()
    factory = monolib.compile(str(fetch_model(build.key)), target="c", shapes=build.shapes,
                              constants=build.constants or None)
    t1 = time.perf_counter()
    factory.export_library(str(lib))
    t2 = time.perf_counter()
    return f"compile {t1 - t0:.2f} s, export {t2 - t1:.2f} s, {lib.stat().st_size} bytes"


def shared_library(shared_dir: Path, name: str, key: str, shapes: dict) -> Path:
    """``shared_dir/name.so``: model ``key`` compiled at ``shapes`` and exported, once per
    test session (the xdist workers share it through a file lock; a finished library is
    renamed into place, so no worker loads half a file)."""
    import monolib

    path = shared_dir / f"{name}.so"
    with open(shared_dir / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            tmp = shared_dir / f"{name}.tmp.so"
            monolib.compile(str(fetch_model(key)), target="c",
                            shapes=shapes).export_library(str(tmp))
            tmp.rename(path)
    return path


@pytest.fixture(scope="session")
def model_lib(shared_dir):
    """``model_lib(name) -> Path`` of the exported library of ``BUILDS[name]``,
    compiled once per session; a failure is recorded so other workers fail fast with
    the same message."""

    def get(name: str) -> Path:
        lib = shared_dir / f"{name}.so"
        err = shared_dir / f"{name}.err"
        with open(shared_dir / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if err.exists():
                pytest.fail(err.read_text(), pytrace=False)
            if not lib.exists():
                try:
                    info = _compile_export(BUILDS[name], lib)
                except Exception as exc:
                    msg = f"building {name} ({BUILDS[name].key}) failed: {type(exc).__name__}: {exc}"
                    err.write_text(msg)
                    raise
                print(f"\n[{name}] {info}")
        return lib

    return get


@pytest.fixture(scope="session")
def fresh_run(tmp_path_factory):
    """``fresh_run(lib, inputs, steps=0, carry=()) -> [outputs]``: load ``lib`` in a
    new Python process and run it (see ``fresh_run.py`` for ``steps``/``carry``)."""
    work = tmp_path_factory.mktemp("fresh")
    counter = iter(range(1_000_000))

    def run(lib: Path, inputs: dict, steps: int = 0, carry=()) -> list[np.ndarray]:
        n = next(counter)
        inp, out = work / f"in{n}.npz", work / f"out{n}.npz"
        np.savez(inp, **inputs)
        cmd = [sys.executable, str(FRESH_RUN), str(lib), str(inp), str(out)]
        if steps:
            cmd += ["--steps", str(steps)]
        for c in carry:
            cmd += ["--carry", c]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            pytest.fail(f"fresh process failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}",
                        pytrace=False)
        with np.load(out) as z:
            return [z[f"out{i}"] for i in range(len(z.files))]

    return run


@pytest.fixture(scope="session")
def ort_session():
    """``ort_session(key, optimized=True)``: a cached single-threaded ONNX Runtime
    session; ``optimized=False`` disables ORT's graph optimizations (fusions change
    the float rounding: the difference between the two is ORT's own noise)."""
    pytest.importorskip("onnxruntime")
    from monolib.compiler.testing import ort_session as session

    cache = {}

    def get(key: str, optimized: bool = True):
        if (key, optimized) not in cache:
            cache[key, optimized] = session(fetch_model(key), optimize=optimized)
        return cache[key, optimized]

    return get


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def assert_matches(got: list, want: list, what: str, rel: float = 1e-4,
                   want_unopt: list | None = None) -> None:
    """Every output has ONNX Runtime's shape and ``max|got - want| <= rel * scale``;
    ``scale`` is the output's range (``ptp``), or its largest magnitude when bigger (an
    output of one value has range 0). When ``want_unopt`` (ORT without graph
    optimizations) is given, the bound holds against either ORT configuration: ORT's
    fused kernels disagree with its own plain ones by more than 1e-4 of the range on
    deep conv stacks (2.7e-4 on PP-OCR det), while monolib stays within 1e-4 of the
    plain run (5e-5)."""
    assert len(got) >= len(want), f"{what}: {len(got)} outputs, ONNX Runtime has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what} output {i}: shape {g.shape}, ORT {w.shape}"
        scale = max(float(np.ptp(w)), float(np.abs(w).max()), 1e-12)
        tol = rel * scale
        diffs = {"ORT": _max_diff(g, w)}
        if want_unopt is not None:
            diffs["ORT without graph optimizations"] = _max_diff(g, want_unopt[i])
        peer, diff = min(diffs.items(), key=lambda kv: kv[1])
        assert diff <= tol, (
            f"{what} output {i}: max abs diff {diff:.3g} from {peer} > {tol:.3g} = "
            f"{rel:g} * range {scale:.3g} (all: {diffs})")


@pytest.fixture(scope="session")
def matches():
    """The :func:`assert_matches` check, as a fixture."""
    return assert_matches


# ---- meaningful inputs -------------------------------------------------------------

TEXT = "Hello World 2024"
PAGE = ["Hello World 2024", "monolib compiles ONNX"]
SPEECH = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="session")
def text_line():
    """``TEXT`` rendered black on white, uint8 RGB ``[h, w, 3]``."""
    from monolib.models import ocr

    pytest.importorskip("PIL")
    return ocr.render_line(TEXT)


@pytest.fixture(scope="session")
def page():
    """Two text lines on a 640x640 page: (image, [(y0, y1) per line])."""
    from monolib.models import ocr

    pytest.importorskip("PIL")
    return ocr.render_page(PAGE)


@pytest.fixture(scope="session")
def speech():
    """Spoken ``SPEECH`` with 1 s of silence around it, padded to whole 32-chunk
    blocks: (chunks [N, 576] with N % 32 == 0, first speech chunk, last speech chunk)."""
    from monolib.models import vad

    audio, start, end = vad.speech_with_silence(SPEECH)
    block = 32 * vad.CHUNK
    audio = np.pad(audio, (0, -len(audio) % block))
    return vad.vad_chunks(audio), start // vad.CHUNK, end // vad.CHUNK
