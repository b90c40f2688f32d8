"""FoldBatchNorm: BatchNormalization and per-channel Mul/Add/Sub folded into convs,
checked by evaluating the graph (ops' NumPy references) before and after."""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model, requires_ops
from onnx import helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import FoldBatchNorm
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(1)


def _bn_params(prefix: str, c: int) -> dict[str, np.ndarray]:
    return {
        f"{prefix}_s": RNG.uniform(0.5, 1.5, c).astype(np.float32),
        f"{prefix}_b": RNG.standard_normal(c).astype(np.float32),
        f"{prefix}_m": RNG.standard_normal(c).astype(np.float32),
        f"{prefix}_v": RNG.uniform(0.1, 2.0, c).astype(np.float32),
    }


def _bn(prefix: str, x: str, y: str, **attrs):
    return helper.make_node(
        "BatchNormalization",
        [x, f"{prefix}_s", f"{prefix}_b", f"{prefix}_m", f"{prefix}_v"],
        [y],
        name=prefix,
        **attrs,
    )


def _check_fold(model, x_shape, expect_ops, atol=1e-5):
    g = import_model(model)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    before = evaluate(g, {"x": x})[0]
    np.testing.assert_allclose(before, ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    result = FoldBatchNorm()(g)
    assert result.modified
    assert result.graph.op_counts() == expect_ops
    after = evaluate(result.graph, {"x": x})[0]
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=atol)
    assert result.graph.outputs[0].name == "y"
    assert not FoldBatchNorm()(result.graph).modified
    return result.graph


@requires_ops("Conv", "BatchNormalization", "Relu")
@pytest.mark.parametrize("bias, opset", [(True, 15), (False, 12), (True, 14)])
def test_conv_bn_folds(bias, opset):
    inits = {"w": RNG.standard_normal((8, 4, 3, 3)).astype(np.float32), **_bn_params("bn", 8)}
    conv_in = ["x", "w"]
    if bias:
        inits["cb"] = RNG.standard_normal(8).astype(np.float32)
        conv_in.append("cb")
    nodes = [
        helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], name="conv"),
        _bn("bn", "c", "b", epsilon=1e-3),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    model = make_model(
        nodes, [("x", F32, [1, 4, 6, 7])], [("y", F32, [1, 8, 6, 7])], inits, opset=opset
    )
    g = _check_fold(model, (1, 4, 6, 7), {"Conv": 1, "Relu": 1})
    conv = g.nodes[0]
    assert len(conv.inputs) == 3 and conv.inputs[2].shape == (8,)
    assert conv.outputs[0] is g.nodes[1].inputs[0]


@requires_ops("ConvTranspose", "BatchNormalization")
def test_grouped_conv_transpose_bn_folds():
    inits = {"w": RNG.standard_normal((4, 3, 2, 2)).astype(np.float32), **_bn_params("bn", 6)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=2), _bn("bn", "c", "y")]
    model = make_model(nodes, [("x", F32, [1, 4, 5, 5])], [("y", F32, [1, 6, 6, 6])], inits)
    _check_fold(model, (1, 4, 5, 5), {"ConvTranspose": 1})


@requires_ops("Conv", "Mul", "Add", "Sub")
def test_per_channel_mul_add_sub_fold():
    inits = {
        "w": RNG.standard_normal((6, 3, 1, 1)).astype(np.float32),
        "k": RNG.standard_normal((6, 1, 1)).astype(np.float32),
        "a": RNG.standard_normal((1, 6, 1, 1)).astype(np.float32),
        "s": np.float32(0.25),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Mul", ["k", "c"], ["m"]),
        helper.make_node("Add", ["m", "a"], ["p"]),
        helper.make_node("Sub", ["p", "s"], ["y"]),
    ]
    model = make_model(nodes, [("x", F32, [2, 3, 4, 4])], [("y", F32, [2, 6, 4, 4])], inits)
    _check_fold(model, (2, 3, 4, 4), {"Conv": 1})


@requires_ops("Conv", "BatchNormalization", "Relu", "Mul", "Add")
def test_not_folded_when_unsafe():
    inits = {
        "w": RNG.standard_normal((4, 4, 1, 1)).astype(np.float32),
        **_bn_params("bn", 4),
        "sp": RNG.standard_normal((1, 1, 3, 3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        _bn("bn", "c", "b"),  # c has a second reader: no fold
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["b", "r"], ["t"]),
        helper.make_node("Conv", ["t", "w"], ["c2"]),
        helper.make_node("Mul", ["c2", "sp"], ["y"]),  # spatial, not per-channel: no fold
    ]
    model = make_model(nodes, [("x", F32, [1, 4, 3, 3])], [("y", F32, [1, 4, 3, 3])], inits)
    g = import_model(model)
    counts = g.op_counts()
    assert not FoldBatchNorm()(g).modified and g.op_counts() == counts


@requires_ops("Conv", "BatchNormalization")
def test_conv_output_that_is_a_graph_output_is_kept():
    inits = {"w": RNG.standard_normal((2, 2, 1, 1)).astype(np.float32), **_bn_params("bn", 2)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), _bn("bn", "c", "y")]
    model = make_model(
        nodes,
        [("x", F32, [1, 2, 2, 2])],
        [("y", F32, [1, 2, 2, 2]), ("c", F32, [1, 2, 2, 2])],
        inits,
    )
    g = import_model(model)
    assert not FoldBatchNorm()(g).modified
