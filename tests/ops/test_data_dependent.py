"""Ops whose output shape depends on input values: Compress with a constant condition
(the data at run time), NonZero and Unique folded from constants, and a run-time
deciding input compiled with a computed (data-dependent) dim (issue 13; the kernels'
own tests: tests/ops/test_compress_unique.py, test_nms.py)."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from refnode import check_node

from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("axis", [None, -2])
def test_compress_constant_condition(axis):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    cond = np.array([1, 0, 1, 1], bool) if axis is not None else RNG.random(20) > 0.5
    attrs = {} if axis is None else {"axis": axis}
    check_node("Compress", {"x": x}, ["y"], opset=13, consts={"c": cond}, **attrs)


def test_nonzero_and_unique_fold_from_constants():
    x = np.array([[3, 0, 1], [1, 0, 3]], np.int64)
    check_node("NonZero", {}, ["y"], opset=13, consts={"x": x})
    check_node("Unique", {}, ["y", "i", "inv", "n"], opset=13,
               consts={"x": np.array([2.0, 1.0, 2.0, 5.0, 1.0], np.float32)}, sorted=0)


def test_unique_of_a_runtime_input_runs():
    node = helper.make_node("Unique", ["x"], ["y"])
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rep = MonolibBackend.prepare(model, "CPU")
    (y,) = rep.run([np.array([2.0, 1.0, 2.0, 5.0, 1.0], np.float32)])
    np.testing.assert_array_equal(y, [1.0, 2.0, 5.0])


def test_nms_folds_from_constants():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3], [1, 1, 0, 0]]],
                     np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.95], [0.1, 0.6, 0.65, 0.2]]], np.float32)
    check_node("NonMaxSuppression", {}, ["sel"], opset=11,
               consts={"b": boxes, "s": scores, "m": np.array([2]),
                       "iou": np.array([0.5], np.float32), "smin": np.array([0.15], np.float32)})
