"""gemm.h reads a row-major B in place (``ML_B_INPLACE``: a 1x1 conv's input, a MatMul's
run-time right operand) for its whole tiles and packs only the rest: the same sums in the
same order as the packed path, so the same bits, at 1 and 2 threads, with the fused
epilogue applied once over both parts."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.runtime import set_num_threads

RNG = np.random.default_rng(7)


def _library(model, inplace: int, tmp_path):
    """``model`` exported with ``ML_B_INPLACE`` defined to ``inplace``, loaded."""
    factory = monolib.compile(model)
    (src,) = [m for m in factory.imported_modules if hasattr(m, "source")]
    src.source = f"#define ML_B_INPLACE {inplace}\n" + src.source
    path = tmp_path / f"lib{inplace}.so"
    factory.export_library(str(path))
    return monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))


def _conv_model(c: int, m: int, h: int, w: int):
    """1x1 conv (bias) + Relu: B is the NCHW input, rows h*w floats apart."""
    wt = numpy_helper.from_array(RNG.standard_normal((m, c, 1, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, h, w])],
                          [wt, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _matmul_model(m: int, k: int, n: int):
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture
def threads():
    yield set_num_threads
    set_num_threads(1)


# (C, M, H, W): whole tiles only (56x56 = 3136 columns = 98 tiles of 32), whole tiles and a
# packed rest (13x13 = 169: 5 tiles + 9 columns), fewer columns than a tile (5x5), odd
# channel counts; 64x64's rows are 16 KiB apart (aliasing: the packed path stays); more
# than one KC block of 256 input channels where B fits in L2 (ML_B_INPLACE_L2): 576 -> 96
# at 14x14 (3 blocks, 6 tiles + 4 columns), 300 channels at 7x9 (1 tile + 31 columns)
CONVS = [(16, 32, 56, 56), (24, 40, 13, 13), (7, 5, 5, 5), (64, 48, 20, 23), (32, 16, 64, 64),
         (576, 96, 14, 14), (300, 24, 7, 9)]


@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "x".join(map(str, s)))
def test_pointwise_conv_in_place_is_the_packed_bits(shape, tmp_path, threads):
    c, m, h, w = shape
    model = _conv_model(c, m, h, w)
    x = RNG.standard_normal((1, c, h, w)).astype(np.float32)
    packed, inplace = _library(model, 0, tmp_path), _library(model, 1, tmp_path)
    wt = numpy_helper.to_array(model.graph.initializer[0]).reshape(m, c)
    bias = numpy_helper.to_array(model.graph.initializer[1])
    want = np.maximum(np.einsum("mc,chw->mhw", wt, x[0]) + bias[:, None, None], 0)
    for n in (1, 2):
        threads(n)
        got = []
        for gm in (packed, inplace):
            gm.run(x=x)
            got.append(gm.get_output(0).numpy().copy())
        np.testing.assert_array_equal(got[1], got[0], err_msg=f"{shape} at {n} threads")
        np.testing.assert_allclose(got[1][0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mkn", [(37, 200, 333), (6, 64, 96), (200, 256, 1000), (5, 3, 40),
                                 (37, 600, 333)])
def test_matmul_run_time_b_in_place_is_the_packed_bits(mkn, tmp_path, threads):
    m, k, n = mkn
    model = _matmul_model(m, k, n)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    packed, inplace = _library(model, 0, tmp_path), _library(model, 1, tmp_path)
    for t in (1, 2):
        threads(t)
        got = []
        for gm in (packed, inplace):
            gm.run(a=a, b=b)
            got.append(gm.get_output(0).numpy().copy())
        np.testing.assert_array_equal(got[1], got[0], err_msg=f"{mkn} at {t} threads")
        np.testing.assert_allclose(got[1], a @ b, rtol=1e-4, atol=1e-3)
