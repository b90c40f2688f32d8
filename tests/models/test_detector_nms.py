"""Issue 13, "An end-to-end detector": PP-OCRv4 det (fetched from the RapidOCR wheel)
with a box head, ONNX's NonMaxSuppression and Gather appended with ``onnx.helper``
(:func:`monolib.models.detector.detector_with_nms`), compiled to ONE library and run on
rendered 320x320 pages with 0, 1 and 3 text lines: the selected indices and boxes match
ONNX Runtime's exactly, the count is the run's (a computed dim: 0 on the blank page),
and the boxes lie on the text."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import ort_session
from monolib.models import fetch_model, ocr
from monolib.models.detector import detector_with_nms

pytestmark = pytest.mark.slow

PAGES = {0: [], 1: ["Hello monolib"], 3: ["one library", "NMS inside", "many lines"]}


@pytest.fixture(scope="module")
def detector():
    model = detector_with_nms(fetch_model("ppocr_det"))
    lib = monolib.compile(model)
    return model, lib, monolib.GraphModule(lib["default"](monolib.cpu()))


def test_one_library_with_a_computed_count(detector):
    _, lib, _ = detector
    graph = lib.get_graph_json()
    assert {"NonMaxSuppression", "Gather"} <= {n["op"] for n in graph["nodes"]}
    (count,) = graph["symbols"]  # no input dim is run-time: only NMS's count
    assert count["computed"] and (count["lo"], count["hi"]) == (0, 64)
    assert graph["outputs"][0]["shape"] == [count["name"], 3]


@pytest.mark.parametrize("lines", sorted(PAGES))
def test_detector_matches_ort_exactly(detector, lines):
    model, _, gm = detector
    image, bands = ocr.render_page(PAGES[lines], size=320, font_size=24, top=40, spacing=70)
    x = ocr.det_preprocess(image)
    gm.run(x=x)
    selected, boxes = (gm.get_output(i).numpy() for i in range(2))
    sess = ort_session(model)
    want_sel, want_boxes = sess.run(None, {"x": x})
    assert selected.shape == want_sel.shape and np.array_equal(selected, want_sel)
    assert boxes.shape == want_boxes.shape and np.array_equal(boxes, want_boxes)
    if lines == 0:
        assert selected.shape == (0, 3)
        return
    assert len(selected) >= lines
    centers = (boxes[:, 0] + boxes[:, 2]) / 2  # every box on a text band
    assert all(any(y0 - 12 <= c <= y1 + 12 for y0, y1 in bands) for c in centers)
    assert all(any(y0 - 12 <= c <= y1 + 12 for c in centers) for y0, y1 in bands)
