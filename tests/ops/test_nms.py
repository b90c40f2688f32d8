"""NonMaxSuppression on run-time data (issue 13): the selected count is a computed
dim; a real C kernel (ops/tensor/nms.h) matched with ONNX Runtime's selection exactly
on random boxes (ties in score, both box formats, several batches and classes, the
limit and thresholds as constants or run-time inputs, an empty selection)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import monolib
from monolib.compiler.testing import ort_run, run_model

B, C, N = 2, 3, 24


def _model(center: int, runtime: bool, limit=3, iou=0.4, thr=0.2, gather=False):
    ins = [h.make_tensor_value_info("boxes", T.FLOAT, [B, N, 4]),
           h.make_tensor_value_info("scores", T.FLOAT, [B, C, N])]
    inits = []
    names = ["boxes", "scores", "max_out", "iou", "thr"]
    for name, value, dt, np_dt in (("max_out", limit, T.INT64, np.int64),
                                   ("iou", iou, T.FLOAT, np.float32),
                                   ("thr", thr, T.FLOAT, np.float32)):
        if runtime:
            ins.append(h.make_tensor_value_info(name, dt, [1]))
        else:
            inits.append(numpy_helper.from_array(np.array([value], np_dt), name))
    nodes = [h.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center,
                         name="nms")]
    outs = [h.make_tensor_value_info("sel", T.INT64, ["k", 3])]
    if gather:  # the selected boxes of batch 0: boxes[0][sel[:, 2]]
        inits += [numpy_helper.from_array(np.array([2], np.int64), "col"),
                  numpy_helper.from_array(np.array([0], np.int64), "zero"),
                  numpy_helper.from_array(np.array([1], np.int64), "one")]
        nodes += [h.make_node("Gather", ["sel", "col"], ["idx2"], axis=1),
                  h.make_node("Squeeze", ["idx2", "one"], ["idx"]),
                  h.make_node("Gather", ["boxes", "zero"], ["b0"], axis=0),
                  h.make_node("Squeeze", ["b0", "zero"], ["b0s"]),
                  h.make_node("Gather", ["b0s", "idx"], ["picked"], axis=0)]
        outs.append(h.make_tensor_value_info("picked", T.FLOAT, ["k", 4]))
    g = h.make_graph(nodes, "nms", ins, outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def _data(rng, center: int):
    xy = rng.uniform(0, 10, size=(B, N, 2)).astype(np.float32)
    wh = rng.uniform(0.5, 4, size=(B, N, 2)).astype(np.float32)
    if center:
        boxes = np.concatenate([xy, wh], -1)
    else:  # [y1, x1, y2, x2], some with the corners swapped
        boxes = np.concatenate([xy, xy + wh], -1)
        boxes[:, ::3] = boxes[:, ::3][..., [2, 3, 0, 1]]
    boxes[:, 5] = boxes[:, 4]  # identical boxes
    scores = (rng.integers(0, 8, size=(B, C, N)) / 8).astype(np.float32)  # many ties
    return boxes, scores


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("runtime", [False, True])
def test_nms_matches_ort(center, runtime):
    rng = np.random.default_rng(10 + center + 2 * runtime)
    model = _model(center, runtime, gather=True)
    lib = monolib.compile(model)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    cases = [(3, 0.4, 0.2), (24, 0.0, 0.0), (1, 0.9, 0.5), (0, 0.5, 0.0), (5, 0.5, 2.0)]
    for limit, iou, thr in cases if runtime else cases[:1]:
        boxes, scores = _data(rng, center)
        feeds = {"boxes": boxes, "scores": scores}
        if runtime:
            feeds.update(max_out=np.array([limit], np.int64), iou=np.array([iou], np.float32),
                         thr=np.array([thr], np.float32))
        want = ort_run(model, feeds)
        gm.run(**feeds)
        for i, w in enumerate(want):
            got = gm.get_output(i).numpy()
            assert got.shape == w.shape and np.array_equal(got, w), (limit, iou, thr, i)


def test_nms_bound_and_empty_selection():
    model = _model(0, False, limit=2, thr=0.99)
    syms = monolib.compile(model).get_graph_json()["symbols"]
    assert [(s["lo"], s["hi"], s.get("computed")) for s in syms] == [(0, 2 * C * B, True)]
    boxes, scores = _data(np.random.default_rng(3), 0)
    got = run_model(model, {"boxes": boxes, "scores": scores * 0.5})
    assert got[0].shape == (0, 3)


def test_nms_with_a_run_time_number_of_boxes():
    model = _model(0, False, limit=4)
    for vi in model.graph.input:  # boxes [B, n, 4], scores [B, C, n]
        vi.type.tensor_type.shape.dim[1 if vi.name == "boxes" else 2].dim_param = "n"
    lib = monolib.compile(model, shapes={"boxes": (B, (1, N), 4), "scores": (B, C, (1, N))})
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    rng = np.random.default_rng(21)
    for n in (N, 1, 9):
        boxes, scores = _data(rng, 0)
        feeds = {"boxes": np.ascontiguousarray(boxes[:, :n]),
                 "scores": np.ascontiguousarray(scores[:, :, :n])}
        gm.run(**feeds)
        (want,) = ort_run(model, feeds)
        got = gm.get_output(0).numpy()
        assert got.shape == want.shape and np.array_equal(got, want), n


def test_nms_without_score_threshold_negative_scores_and_signed_zeros():
    """No score_threshold: every box is a candidate; negative scores order below
    positive ones, and -0.0 ties with 0.0 (the lower box index first), as in ORT."""
    g = h.make_graph(
        [h.make_node("NonMaxSuppression", ["boxes", "scores", "max_out"], ["sel"])], "nms",
        [h.make_tensor_value_info("boxes", T.FLOAT, [B, N, 4]),
         h.make_tensor_value_info("scores", T.FLOAT, [B, C, N])],
        [h.make_tensor_value_info("sel", T.INT64, ["k", 3])],
        [numpy_helper.from_array(np.array([N], np.int64), "max_out")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    boxes, scores = _data(np.random.default_rng(17), 0)
    scores = scores - np.float32(0.5)
    scores[:, :, 0:8:2] = -0.0
    scores[:, :, 1:8:2] = 0.0
    feeds = {"boxes": boxes, "scores": scores}
    (want,) = ort_run(model, feeds)
    (got,) = run_model(model, feeds)
    assert got.shape == want.shape and np.array_equal(got, want)
