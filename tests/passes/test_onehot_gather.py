"""OneHotMatMulToGather: the one-hot embedding MatMul becomes a Gather, exactly,
out-of-range indices included; the index may come through Expand (Magika's
BroadcastTo); the elementwise tail (bias + tanh-GELU) is folded into the table;
look-alikes and unsafe cases are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model, requires_ops
from onnx import TensorProto, helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import OneHotMatMulToGather, simplify
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run, run_model

RNG = np.random.default_rng(5)
OPS = ("Equal", "Cast", "MatMul", "Reshape", "Gather", "Where", "Less", "Greater", "Or")
GELU_OPS = (*OPS, "Expand", "Add", "Mul", "Tanh", "ReduceSum")


def _onehot_model(k: int, arange: np.ndarray, swap: bool = False, itype=TensorProto.INT32):
    dt = np.int32 if itype == TensorProto.INT32 else np.int64
    inits = {
        "shape3": np.array([2, 16, 1], np.int64),
        "classes": arange.astype(dt),
        "table": RNG.standard_normal((k, 4)).astype(np.float32),
    }
    eq_in = ["classes", "idx3"] if swap else ["idx3", "classes"]
    nodes = [
        helper.make_node("Reshape", ["idx", "shape3"], ["idx3"]),
        helper.make_node("Equal", eq_in, ["eq"]),
        helper.make_node("Cast", ["eq"], ["oh"], to=F32),
        helper.make_node("MatMul", ["oh", "table"], ["y"]),
    ]
    return make_model(nodes, [("idx", itype, [2, 16])], [("y", F32, [2, 16, 4])], inits)


def _magika_like(
    k: int,
    expand_to: list[int],
    table: np.ndarray | None = None,
    bias_shape=(1, 1, 8),
    itype=TensorProto.INT32,
):
    """Magika's embedding: Reshape(idx) -> Expand (BroadcastTo) -> Equal with a
    [1, 1, K] arange -> Cast -> MatMul -> Add bias -> tanh-GELU; outputs the GELU and
    a ReduceSum of it (a non-elementwise reader)."""
    dt = {TensorProto.INT32: np.int32, TensorProto.UINT8: np.uint8}[itype]
    inits = {
        "shape3": np.array([2, 16, 1], np.int64),
        "to": np.array(expand_to, np.int64),
        "classes": np.arange(k).reshape(1, 1, k).astype(dt),
        "table": RNG.standard_normal((k, 8)).astype(np.float32) if table is None else table,
        "bias": RNG.standard_normal(bias_shape).astype(np.float32),
        "c0": np.array(0.044715, np.float32),
        "c1": np.array(0.7978846, np.float32),
        "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32),
        "axes": np.array([2], np.int64),
    }
    nodes = [
        helper.make_node("Reshape", ["idx", "shape3"], ["idx3"]),
        helper.make_node("Expand", ["idx3", "to"], ["idxb"]),
    ]
    nodes += [
        helper.make_node("Equal", ["idxb", "classes"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["oh"], to=F32),
        helper.make_node("MatMul", ["oh", "table"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["x"]),
        helper.make_node("Mul", ["c0", "x"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["b"]),
        helper.make_node("Mul", ["x", "b"], ["c"]),
        helper.make_node("Add", ["x", "c"], ["d"]),
        helper.make_node("Mul", ["c1", "d"], ["e"]),
        helper.make_node("Tanh", ["e"], ["f"]),
        helper.make_node("Add", ["one", "f"], ["g"]),
        helper.make_node("Mul", ["half", "g"], ["h"]),
        helper.make_node("Mul", ["x", "h"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["s"], keepdims=0),
    ]
    outs = [("y", F32, [2, 16, 8]), ("s", F32, [2, 16])]
    return make_model(nodes, [("idx", itype, [2, 16])], outs, inits)


@requires_ops(*OPS)
@pytest.mark.parametrize("swap, itype", [(False, TensorProto.INT32), (True, TensorProto.INT64)])
def test_onehot_matmul_becomes_exact_gather(swap, itype):
    k = 10
    model = _onehot_model(k, np.arange(k).reshape(1, 1, k), swap, itype)
    g = import_model(model)
    dt = np.int32 if itype == TensorProto.INT32 else np.int64
    idx = RNG.integers(-3, k + 3, (2, 16)).astype(dt)  # some indices out of range
    assert OneHotMatMulToGather()(g).modified
    simplify(g)
    counts = g.op_counts()
    assert counts.get("Gather") == 1 and "MatMul" not in counts and "Equal" not in counts
    got, want = evaluate(g, {"idx": idx})[0], ort_run(model, {"idx": idx})[0]
    np.testing.assert_array_equal(got, want)
    assert g.outputs[0].name == "y"


@requires_ops(*GELU_OPS)
@pytest.mark.parametrize("expand_to", [[2, 16, 1], [1, 1, 1], [2, 16, 12]])
def test_magika_pattern_expand_and_gelu_fold_into_the_table(expand_to):
    # [2, 16, 1]: the Expand keeps the shape (Magika); [1, 1, 1]: broadcasts nothing
    # new either; [2, 16, 12]: broadcasts the index along the class axis (K = 12)
    k = 12
    model = _magika_like(k, expand_to)
    idx = RNG.integers(-4, k + 4, (2, 16)).astype(np.int32)
    idx[0, :3] = [-1, k, np.iinfo(np.int32).max]  # out of range at both ends
    before = import_model(model)
    want = evaluate(before, {"idx": idx})
    g = import_model(model)
    simplify(g)
    counts = g.op_counts()
    assert counts.get("Gather") == 1, counts
    for gone in ("MatMul", "Equal", "Expand", "Tanh", "Mul", "Add"):
        assert gone not in counts, counts  # the GELU chain lives in the table now
    got = evaluate(g, {"idx": idx})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
    ort = ort_run(model, {"idx": idx})
    for a, b in zip(run_model(model, {"idx": idx}), ort):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # an out-of-range row is the GELU of the bias alone, as the MatMul path gives
    np.testing.assert_array_equal(got[0][0, 0], got[0][0, 1])


@requires_ops(*GELU_OPS)
def test_uint8_index_with_256_classes_gets_a_wide_zero_row_index():
    k = 256  # the zero row's index, 256, does not fit uint8
    model = _magika_like(k, [2, 16, 1], itype=TensorProto.UINT8)
    idx = RNG.integers(0, 256, (2, 16)).astype(np.uint8)
    g = import_model(model)
    simplify(g)
    assert "MatMul" not in g.op_counts() and g.op_counts()["Cast"] == 1  # to int64
    want = ort_run(model, {"idx": idx})
    for a, b in zip(run_model(model, {"idx": idx}), want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@requires_ops(*GELU_OPS)
def test_bias_varying_along_rows_keeps_the_matmul():
    # a [1, 16, 8] "bias" differs per gathered row: the Add cannot go into the table,
    # and as the Gather's epilogue it would be slow, so nothing is rewritten
    g = import_model(_magika_like(12, [2, 16, 1], bias_shape=(1, 16, 8)))
    assert not OneHotMatMulToGather()(g).modified
    assert g.op_counts()["MatMul"] == 1


@requires_ops(*GELU_OPS)
def test_non_finite_table_keeps_the_matmul():
    table = RNG.standard_normal((12, 8)).astype(np.float32)
    table[3, 2] = np.inf  # 0 * inf = NaN: the MatMul's rows all differ from a Gather's
    g = import_model(_magika_like(12, [2, 16, 1], table=table))
    assert not OneHotMatMulToGather()(g).modified


@requires_ops(*OPS)
def test_not_an_arange_is_left_alone():
    k = 10
    classes = np.arange(k)[::-1].reshape(1, 1, k).copy()  # permuted classes: not one-hot by index
    g = import_model(_onehot_model(k, classes))
    assert not OneHotMatMulToGather()(g).modified
    assert g.op_counts()["MatMul"] == 1


@requires_ops(*OPS)
def test_opt_out_in_simplify():
    g = import_model(_onehot_model(10, np.arange(10).reshape(1, 1, 10)))
    simplify(g, onehot_gather=False)
    assert g.op_counts()["MatMul"] == 1
    simplify(g)
    assert "MatMul" not in g.op_counts()
