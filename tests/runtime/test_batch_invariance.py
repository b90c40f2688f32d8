"""Batch invariance (issue 16, dynamic batching): in a library compiled with a run-time
batch dim, row i of every output is bit-identical whatever the batch size and whatever
else is in the batch, at 1 and 2 threads, so a server that concatenates requests gives
the answers of unbatched runs.

What used to break it: a conv GEMM whose columns hold the batch (a 1x1 conv on a 1x1
map, N = batch) summed a few columns past the last 16-column panel with the GEMV tail
(``ml_gemm_tail_cols``: 8 partial sums per row) but whole panels with the micro-kernel
(one running sum), so a column changed bits with the batch size that put it in the tail;
and fewer than MR rows against prepacked weights summed K in one block where more rows
sum it in KC blocks, and against a run-time B summed 8 k a pass in two partial sums.
Each test here fails on those paths.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.runtime import set_num_threads
from monolib.runtime import threads as threads_mod

MAX_B = 8


def _synthetic() -> onnx.ModelProto:
    """Conv 3x3 -> Relu -> 1x1 Conv (columns: batch x 36) -> GlobalAveragePool -> 1x1
    Conv on the 1x1 map (columns: the batch) and Flatten -> Gemm (K 864 > KC: rows =
    the batch) -> MatMul -> LayerNormalization -> Softmax; a second output through a
    transB Gemm."""
    rng = np.random.default_rng(7)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    inits = [w("w1", 16, 8, 3, 3), w("b1", 16), w("w2", 24, 16, 1, 1), w("w3", 20, 24, 1, 1),
             w("b3", 20), w("w4", 864, 40), w("b4", 40), w("w5", 40, 36), w("g", 36),
             w("beta", 36), w("w6", 12, 20), w("b6", 12)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["gp"]),
        helper.make_node("Conv", ["gp", "w3", "b3"], ["c3"]),
        helper.make_node("Flatten", ["c3"], ["f3"]),
        helper.make_node("Gemm", ["f3", "w6", "b6"], ["z"], transB=1),
        helper.make_node("Flatten", ["c2"], ["f2"]),
        helper.make_node("Gemm", ["f2", "w4", "b4"], ["h"]),
        helper.make_node("MatMul", ["h", "w5"], ["h2"]),
        helper.make_node("LayerNormalization", ["h2", "g", "beta"], ["ln"], axis=-1),
        helper.make_node("Softmax", ["ln"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "batch_inv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 36]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 12])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _module(model, shape: tuple, tmp_path, name: str) -> monolib.GraphModule:
    lib = monolib.compile(model, target="c", shapes={"x": shape}).export_library(
        str(tmp_path / f"{name}.so"))
    return monolib.GraphModule(monolib.load_module(lib))


def _outputs(gm: monolib.GraphModule, x: np.ndarray, **other) -> list[np.ndarray]:
    gm.run(x=x, **other)
    return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]


def _check_rows(gm: monolib.GraphModule, pool: np.ndarray, seed: int, **other) -> None:
    """Every batch size 1..MAX_B, rows drawn at random from ``pool`` with random
    companions, at 1 and 2 threads: each output row equals that row run alone,
    bit for bit."""
    rng = np.random.default_rng(seed)
    before = threads_mod._num_threads or len(os.sched_getaffinity(0))
    try:
        for threads in (1, 2):
            set_num_threads(threads)
            alone = [_outputs(gm, pool[i : i + 1], **other) for i in range(len(pool))]
            for b in range(1, MAX_B + 1):
                idx = rng.choice(len(pool), size=b, replace=b > len(pool))
                got = _outputs(gm, pool[idx], **other)
                for row, i in enumerate(idx):
                    for o, (g, a) in enumerate(zip(got, alone[i])):
                        assert np.array_equal(g[row], a[0]), (
                            f"threads {threads}, batch {b}, row {row} (sample {i}), output "
                            f"{o}: max diff {np.abs(g[row] - a[0]).max()}")
    finally:
        set_num_threads(before)


def test_synthetic_graph_rows_bit_identical(tmp_path):
    gm = _module(_synthetic(), ((1, MAX_B), 8, 6, 6), tmp_path, "syn")
    pool = np.random.default_rng(3).standard_normal((10, 8, 6, 6)).astype(np.float32)
    _check_rows(gm, pool, seed=1)
    # not vacuous: the batch changes the output, rows differ from each other
    y = _outputs(gm, pool[:4])[0]
    assert not np.array_equal(y[0], y[1])


def test_other_batched_ops_rows_bit_identical(tmp_path):
    """A guard for the other kernels a batch runs through: depthwise Conv,
    ConvTranspose, AveragePool, InstanceNormalization, ReduceMean / ReduceSum over an
    inner axis, LSTM over the batch, a 3x3 Conv of 16 -> 64 channels."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    def ints(name, *v):
        return numpy_helper.from_array(np.array(v, np.int64), name)

    nodes = [
        helper.make_node("Conv", ["x", "wd"], ["dw"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["dw", "wt"], ["ct"], strides=[2, 2]),
        helper.make_node("AveragePool", ["ct"], ["ap"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("InstanceNormalization", ["ap", "s", "bb"], ["inn"]),
        helper.make_node("Reshape", ["inn", "shp"], ["r"]),
        helper.make_node("ReduceMean", ["r", "ax2"], ["rm"], keepdims=0),
        helper.make_node("ReduceSum", ["r", "ax1"], ["rs"], keepdims=0),
        helper.make_node("Transpose", ["r"], ["rt"], perm=[2, 0, 1]),
        helper.make_node("LSTM", ["rt", "W", "R", "B"], ["", "hy"], hidden_size=20),
        helper.make_node("Transpose", ["hy"], ["h"], perm=[1, 0, 2]),
        helper.make_node("Conv", ["x", "w3"], ["c3"], pads=[1, 1, 1, 1]),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "ops",
        [helper.make_tensor_value_info("x", f, ["N", 16, 12, 12])],
        [helper.make_tensor_value_info("rm", f, ["N", 8]),
         helper.make_tensor_value_info("rs", f, ["N", 121]),
         helper.make_tensor_value_info("h", f, ["N", 1, 20]),
         helper.make_tensor_value_info("c3", f, ["N", 64, 12, 12])],
        [w("wd", 16, 1, 3, 3), w("wt", 16, 8, 2, 2), w("s", 8), w("bb", 8),
         ints("shp", 0, 8, -1), ints("ax2", 2), ints("ax1", 1), w("W", 1, 80, 8),
         w("R", 1, 80, 20), w("B", 1, 160), w("w3", 64, 16, 3, 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    gm = _module(model, ((1, MAX_B), 16, 12, 12), tmp_path, "ops")
    _check_rows(gm, rng.standard_normal((9, 16, 12, 12)).astype(np.float32), seed=6)


def test_rows_against_a_run_time_b_bit_identical(tmp_path):
    """x [N, 40] @ w [40, 24], w an input: fewer than MR rows of a run-time B took the
    few-row path (8 k a pass, two partial sums), six and more the micro-kernel."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm_rt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 40]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [40, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 24])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    lib = monolib.compile(model, shapes={"x": ((1, MAX_B), 40), "w": (40, 24)}).export_library(
        str(tmp_path / "mm.so"))
    gm = monolib.GraphModule(monolib.load_module(lib))
    rng = np.random.default_rng(4)
    pool = rng.standard_normal((10, 40)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    _check_rows(gm, pool, seed=3, w=w)
    np.testing.assert_allclose(_outputs(gm, pool[:MAX_B], w=w)[0], pool[:MAX_B] @ w, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("key,shape", [("ppocr_cls", (3, 48, 192)), ("ppocr_rec", (3, 48, 320))])
def test_ppocr_rows_bit_identical(key, shape, tmp_path):
    from monolib.models import fetch_model

    gm = _module(str(fetch_model(key)), ((1, MAX_B), *shape), tmp_path, key)
    pool = np.random.default_rng(5).uniform(-1, 1, (9, *shape)).astype(np.float32)
    _check_rows(gm, pool, seed=2)
