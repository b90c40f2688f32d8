"""The command line on a real model: ``monolib compile`` then ``monolib run`` on the
PP-OCR line classifier, compared with ONNX Runtime."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from monolib.models import fetch_model, ocr

pytestmark = pytest.mark.slow


def _monolib_cmd() -> list[str]:
    exe = shutil.which("monolib")
    return [exe] if exe else [sys.executable, "-c", "from monolib.cli import main; main()"]


def test_cli_compile_and_run_cls(tmp_path, text_line, ort_session, matches):
    model = fetch_model("ppocr_cls")
    lib = tmp_path / "cls.so"
    x = ocr.line_preprocess(text_line, 48, 192)
    np.save(tmp_path / "x.npy", x)
    for args in (["compile", str(model), "-o", str(lib), "--shape", "x=1,3,48,192"],
                 ["run", str(lib), "--input", f"x={tmp_path / 'x.npy'}",
                  "--output", str(tmp_path / "out.npz")]):
        proc = subprocess.run(_monolib_cmd() + args, capture_output=True, text=True,
                              timeout=600, check=False)
        assert proc.returncode == 0, f"monolib {args[0]} failed:\n{proc.stderr[-3000:]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls.so", "out.npz", "x.npy"]
    want = ort_session("ppocr_cls").run(None, {"x": x})
    with np.load(tmp_path / "out.npz") as z:
        got = [z[k] for k in z.files]
    assert len(got) == 1, z.files
    matches(got, want, "monolib run (cls)")
    assert got[0][0, 0] > 0.9
