"""``examples/user_module/run.py``: a user module type shipped inside the compiled
PP-OCR classifier library, loaded and called in a fresh process; without the import,
the error names the Python module to import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from monolib.compiler.testing import ort_run
from monolib.models import fetch_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_run_example_in_fresh_processes(tmp_path):
    MODEL = str(fetch_model("ppocr_cls"))

    res = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "examples", "user_module", "run.py"),
            "--out",
            str(tmp_path),
            "--model",
            MODEL,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),  # not the repo root: the script must find its package itself
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert os.path.isfile(report["library"])

    ran = report["run"]
    assert ran["imports"] == ["library", "example_cls_postprocess"]
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)
    want = ort_run(MODEL, {"x": x})[0]
    np.testing.assert_allclose(np.array(ran["probs"]), want, rtol=1e-4, atol=1e-5)
    k = int(want[0].argmax())
    assert ran["label"] == ["0", "180"][k]
    assert abs(ran["score"] - float(want[0, k])) < 1e-4

    refused = report["without_import"]
    assert refused["error"] == "UnknownTypeKeyError"
    assert "'example_cls_postprocess'" in refused["message"]
    assert "import examples.user_module.postprocess" in refused["message"]
