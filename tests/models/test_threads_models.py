"""PP-OCR cls and PP-OCRv4 det on the library's thread pool: loaded in a fresh process
with MONOLIB_NUM_THREADS=2, matched against ONNX Runtime, and equal bit for bit to the
same library at 1 and 3 threads (the tasks split outputs, never a sum)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from monolib.models import ocr

pytestmark = pytest.mark.slow

_RUN = """
import ctypes, sys
import numpy as np
import monolib
lib_path, inp, out = sys.argv[1:4]
mod = monolib.load_module(lib_path)
gm = monolib.GraphModule(mod["default"](monolib.cpu()))
x = np.load(inp)["x"]
outs = {}
threads = ctypes.CDLL(lib_path).monolib_set_num_threads(0)
for n in (None, 1, 3):
    if n is not None:
        monolib.runtime.set_num_threads(n)
    gm.run(x=x)
    outs[f"t{n or threads}"] = gm.get_output(0).numpy().copy()
np.savez(out, **outs)
print(threads)
"""


def _run_threaded(lib, x, tmp_path) -> dict:
    inp, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inp, x=x)
    env = dict(os.environ, MONOLIB_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", _RUN, str(lib), str(inp), str(out)],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split()[-1] == "2", "MONOLIB_NUM_THREADS=2 was not in effect at load"
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name,key", [("cls", "ppocr_cls"), ("det", "ppocr_det")])
def test_two_threads_match_onnxruntime(name, key, model_lib, ort_session, matches, text_line,
                                       page, tmp_path):
    if name == "cls":
        x = ocr.line_preprocess(text_line, 48, 192)
    else:
        x = ocr.det_preprocess(page[0])
    got = _run_threaded(model_lib(name), x, tmp_path)
    want = ort_session(key).run(None, {"x": x})
    unopt = ort_session(key, optimized=False).run(None, {"x": x}) if name == "det" else None
    matches([got["t2"]], want, f"{name} at 2 threads", want_unopt=unopt)
    np.testing.assert_array_equal(got["t2"], got["t1"])
    np.testing.assert_array_equal(got["t3"], got["t1"])
