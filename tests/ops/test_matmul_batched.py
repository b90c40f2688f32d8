"""gemm.h's batched and few-row paths, through MatMul and com.microsoft FusedMatMul,
against ONNX Runtime: ``ml_sgemm_batch`` (whole batches per thread, A read in place,
A packed per batch for a transposed ``op(A)``, broadcast batch offsets), the few-row
path that reads a run-time B in place (``ml_gemm_small_m``: M below the micro-tile,
with a fused tail, column tails off the vector width), and the transposed-B packing."""

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.testing import ort_run, run_model
from monolib.runtime import set_num_threads

RNG = np.random.default_rng(13)


def _model(node, a_shape, b_shape, out_shape, const_b=None, tail=False):
    nodes, y = [node], node.output[0]
    inits = []
    if tail:  # an elementwise tail fused into the GEMM's epilogue
        nodes += [helper.make_node("Add", [y, "c"], ["s"]), helper.make_node("Relu", ["s"], ["z"])]
        inits.append(numpy_helper.from_array(np.array(0.25, np.float32), "c"))
        y = "z"
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, a_shape)]
    if const_b is None:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, b_shape))
    else:
        inits.append(numpy_helper.from_array(const_b, "B"))
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def _check(model, feeds, threads=1):
    want = ort_run(model, feeds)[0]
    set_num_threads(threads)
    try:
        got = run_model(model, feeds)[0]
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))  # the library's default
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa,sb,threads,tail", [
    ((3, 7, 5), (3, 5, 9), 1, True),             # raw A, M not a multiple of the tile
    ((2, 1, 13, 17), (3, 17, 33), 1, False),      # broadcast batch offsets
    ((4, 64, 70), (4, 70, 130), 2, True),        # whole batches per thread
    ((2, 3, 40), (2, 40, 37), 1, True),           # few rows: B read in place
    ((6, 1, 100), (6, 100, 50), 2, False),        # decode-like GEMVs, batch-parallel
])
def test_matmul_batched(sa, sb, threads, tail):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    out = list(np.matmul(a, b).shape)
    _check(_model(helper.make_node("MatMul", ["A", "B"], ["Y"]), sa, sb, out, tail=tail),
           {"A": a, "B": b}, threads)


@pytest.mark.parametrize("m,tail", [(1, True), (4, False), (5, True)])
def test_matmul_few_rows_runtime_b(m, tail):
    """M < MR against a run-time B: column count off the vector width, K off the
    eight-row unroll."""
    a = RNG.standard_normal((m, 75)).astype(np.float32)
    b = RNG.standard_normal((75, 301)).astype(np.float32)
    _check(_model(helper.make_node("MatMul", ["A", "B"], ["Y"]), [m, 75], [75, 301], [m, 301],
                  tail=tail), {"A": a, "B": b})


@pytest.mark.parametrize("attrs,sa,sb,threads", [
    ({"transB": 1, "alpha": 0.125}, (1, 3, 10, 8), (1, 3, 21, 8), 1),   # Q.K^T
    ({"transA": 1, "transB": 1}, (2, 9, 7), (2, 11, 9), 1),             # A packed per batch
    ({"transA": 1}, (4, 70, 64), (4, 70, 130), 2),                      # ... on two threads
    ({"transBatchA": 1}, (5, 2, 6), (2, 6, 4), 1),                      # strided raw A rows
])
def test_fused_matmul_batched(attrs, sa, sb, threads):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    node = helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain="com.microsoft", **attrs)
    at = a.transpose(1, 0, 2) if attrs.get("transBatchA") else a
    at = np.swapaxes(at, -1, -2) if attrs.get("transA") else at
    bt = np.swapaxes(b, -1, -2) if attrs.get("transB") else b
    out = list(np.matmul(at, bt).shape)
    _check(_model(node, sa, sb, out), {"A": a, "B": b}, threads)


def test_fused_matmul_transposed_b_folded():
    """[M, K] x [N, K]^T: one GEMM, the transposed B packed column by column."""
    a = RNG.standard_normal((20, 50)).astype(np.float32)
    b = RNG.standard_normal((45, 50)).astype(np.float32)
    node = helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain="com.microsoft", transB=1)
    _check(_model(node, [20, 50], [45, 50], [20, 45]), {"A": a, "B": b})
