"""OneHotMatMulToGather: the one-hot embedding MatMul becomes a Gather, exactly,
out-of-range indices included; look-alikes are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model, ort_run, requires_ops
from onnx import TensorProto, helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import OneHotMatMulToGather, simplify
from monolib.compiler.reference_eval import evaluate

RNG = np.random.default_rng(5)
OPS = ("Equal", "Cast", "MatMul", "Reshape", "Gather", "Where", "Less", "Greater", "Or")


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


@requires_ops(*OPS)
@pytest.mark.parametrize("swap, itype", [(False, TensorProto.INT32), (True, TensorProto.INT64)])
def test_onehot_matmul_becomes_exact_gather(swap, itype):
    k = 10
    model = _onehot_model(k, np.arange(k).reshape(1, 1, k), swap, itype)
    g = import_model(model)
    dt = np.int32 if itype == TensorProto.INT32 else np.int64
    idx = RNG.integers(-3, k + 3, (2, 16)).astype(dt)  # some indices out of range
    assert OneHotMatMulToGather()(g).modified
    simplify(g, onehot_gather=True)
    counts = g.op_counts()
    assert counts.get("Gather") == 1 and "MatMul" not in counts and "Equal" not in counts
    got, want = evaluate(g, {"idx": idx})[0], ort_run(model, {"idx": idx})[0]
    np.testing.assert_array_equal(got, want)
    assert g.outputs[0].name == "y"


@requires_ops(*OPS)
def test_not_an_arange_is_left_alone():
    k = 10
    classes = np.arange(k)[::-1].reshape(1, 1, k).copy()  # permuted classes: not one-hot by index
    g = import_model(_onehot_model(k, classes))
    assert not OneHotMatMulToGather()(g).modified
    assert g.op_counts()["MatMul"] == 1


@requires_ops(*OPS)
def test_off_by_default_in_simplify():
    g = import_model(_onehot_model(10, np.arange(10).reshape(1, 1, 10)))
    simplify(g)
    assert g.op_counts()["MatMul"] == 1
