"""QuantizeLinear / DequantizeLinear (per tensor, per axis) against ONNX Runtime, and
a QDQ pattern through the whole compiler (constant weights folded at compile time)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
from harness import check_op, make_node

from monolib.compiler.testing import ort_run, run_model
from monolib.errors import ShapeError

R = np.random.default_rng(3)


def f32(*shape, k=4.0):
    return (R.standard_normal(shape) * k).astype(np.float32)


CASES = [
    (
        "QuantizeLinear",
        [f32(2, 3, 4), np.array(0.05, np.float32), np.array(3, np.uint8)],
        {},
        13,
        (1, 2),
    ),
    (
        "QuantizeLinear",
        [f32(2, 3, 4), np.array(0.02, np.float32), np.array(-5, np.int8)],
        {},
        19,
        (1, 2),
    ),
    ("QuantizeLinear", [f32(2, 3, 4), np.array(0.1, np.float32)], {}, 10, (1,)),
    (
        "QuantizeLinear",
        [f32(2, 3, 4), np.array([0.1, 0.02, 0.05], np.float32), np.array([1, -2, 0], np.int8)],
        {"axis": 1},
        13,
        (1, 2),
    ),
    (
        "QuantizeLinear",
        [
            f32(2, 3, 4),
            np.array([0.1, 0.02, 0.05, 0.3], np.float32),
            np.array([1, 2, 0, 9], np.uint8),
        ],
        {"axis": -1},
        13,
        (1, 2),
    ),
    (
        "QuantizeLinear",
        [
            np.array([0.5, 1.5, 2.5, -0.5, -1.5], np.float32),
            np.array(1.0, np.float32),
            np.array(0, np.int8),
        ],
        {},
        13,
        (1, 2),
    ),
    (
        "DequantizeLinear",
        [
            R.integers(0, 255, (2, 3, 4)).astype(np.uint8),
            np.array(0.05, np.float32),
            np.array(128, np.uint8),
        ],
        {},
        13,
        (1, 2),
    ),
    (
        "DequantizeLinear",
        [
            R.integers(-128, 127, (2, 3, 4)).astype(np.int8),
            np.array([0.1, 0.2, 0.3], np.float32),
            np.array([0, 1, -1], np.int8),
        ],
        {"axis": 1},
        13,
        (1, 2),
    ),
    (
        "DequantizeLinear",
        [R.integers(-1000, 1000, (5,)).astype(np.int32), np.array(0.01, np.float32)],
        {},
        10,
        (1,),
    ),
    (
        "DequantizeLinear",
        [R.integers(-128, 127, (2, 3)).astype(np.int8), np.array(0.5, np.float32)],
        {},
        21,
        (1,),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_quantize_matches_ort(case):
    op, ins, attrs, opset, consts = case
    check_op(op, ins, attrs, opset=opset, const=consts)


def test_blocked_quantization_scale_shape_checked():
    # blocked quantization is supported (tests/ops/test_quant_linear.py); a scale whose
    # blocked dim is not ceil(4 / 2) is refused
    with pytest.raises(ShapeError, match="block_size 2"):
        make_node(
            "DequantizeLinear",
            [R.integers(0, 9, (4, 4)).astype(np.int8), np.ones((4, 3), np.float32)],
            {"block_size": 2},
            21,
            (1,),
        )


def test_qdq_matmul_model_through_compiler():
    """A QDQ model: Q/DQ on the activation at run time, DQ of the int8 weight folded."""
    w = R.integers(-127, 127, (8, 5)).astype(np.int8)
    inits = [
        onh.from_array(w, "wq"),
        onh.from_array(np.array(0.02, np.float32), "ws"),
        onh.from_array(np.array(0, np.int8), "wz"),
        onh.from_array(np.array(0.03, np.float32), "xs"),
        onh.from_array(np.array(2, np.uint8), "xz"),
    ]
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        oh.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
        oh.make_node("MatMul", ["xd", "wd"], ["m"]),
        oh.make_node("Relu", ["m"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "qdq",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 8])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 5])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=10)
    x = np.abs(f32(3, 8, k=2.0))
    got = run_model(model, {"x": x})
    want = ort_run(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
