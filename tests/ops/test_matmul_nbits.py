"""``com.microsoft`` ``MatMulNBits`` against ONNX Runtime's CPU kernel.

The 4-bit weights are made from a float ``[K, N]`` MatMul weight by ONNX Runtime's own
block quantizer (``quantize_matmul_4bits``, the C++ routine its
``MatMulNBitsQuantizer`` calls), so the packing, scales and zero points are the real
ones. Configurations cover both kernel paths (a few rows: GEMV; more: blocked GEMM),
block sizes 16..256, K not a multiple of the block, symmetric (no zero points) and
asymmetric (packed uint8 zero points), float zero points, bias, 3-D A, and threads.
"""

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi._pybind_state import quantize_matmul_4bits

import monolib
from monolib.compiler.ops.contrib.matmul_nbits import dequantize_nbits
from monolib.compiler.testing import ort_run
from monolib.onnx_backend import MonolibBackend
from monolib.runtime import GraphModule, cpu, set_num_threads

RNG = np.random.default_rng(13)


def quantize(w: np.ndarray, bs: int, symmetric: bool):
    """ONNX Runtime's 4-bit block quantization of a float ``[K, N]`` weight: packed B
    ``[N, k_blocks, bs/2]``, scales ``[N, k_blocks]``, packed zero points."""
    k, n = w.shape
    nblk = -(-k // bs)
    wp = np.zeros((nblk * bs, n), np.float32)
    wp[:k] = w
    packed = np.zeros((n, nblk, bs // 2), np.uint8)
    scales = np.zeros((n, nblk), np.float32)
    zp = np.zeros((n, (nblk + 1) // 2), np.uint8)
    quantize_matmul_4bits(packed, wp, scales, zp, bs, n, nblk * bs, symmetric)
    return packed, scales, zp


def nbits_model(a_shape, k, n, bs, *, symmetric=False, float_zp=False, bias=False):
    """A one-node MatMulNBits model (weights from ``quantize``) and its input A."""
    w = RNG.standard_normal((k, n)).astype(np.float32)
    packed, scales, zp = quantize(w, bs, symmetric)
    inits = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales")]
    names = ["A", "B", "scales"]
    if float_zp:
        zf = RNG.uniform(4, 12, scales.shape).astype(np.float32)
        inits.append(numpy_helper.from_array(zf, "zp"))
        names.append("zp")
    elif not symmetric:
        inits.append(numpy_helper.from_array(zp, "zp"))
        names.append("zp")
    if bias:
        names += [""] * (5 - len(names)) + ["bias"]
        inits.append(numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "bias"))
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=bs)
    graph = helper.make_graph(
        [node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, a_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, a_shape[:-1] + [n])], inits)
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model, RNG.standard_normal(a_shape).astype(np.float32)


def run_both(model, a):
    want = ort_run(model, {"A": a})[0]
    got = MonolibBackend.prepare(model, "CPU").run([a])[0]
    return got, want


@pytest.mark.parametrize("a_shape,k,n,bs,symmetric", [
    ([1, 64], 64, 48, 32, False),          # GEMV, asymmetric
    ([6, 80], 80, 40, 16, True),           # bs 16, symmetric, two row tiles, N % 16 != 0
    ([2, 5, 100], 100, 33, 64, False),     # 3-D A, 10 rows: GEMM path, K % bs != 0
    ([13, 256], 256, 70, 128, True),       # GEMM, a partial panel of columns
    ([2, 300], 300, 17, 256, False),       # block 256 over K = 300 (2 blocks, padded)
])
def test_vs_ort(a_shape, k, n, bs, symmetric):
    got, want = run_both(*nbits_model(a_shape, k, n, bs, symmetric=symmetric))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [2, 9])
def test_float_zero_points_and_bias(rows):
    got, want = run_both(*nbits_model([rows, 96], 96, 24, 32, float_zp=True, bias=True))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dequantize_matches_the_float_weight():
    # the reference layout reads ORT's packing back to within half a quantization step
    k, n, bs = 64, 8, 32
    w = RNG.standard_normal((k, n)).astype(np.float32)
    packed, scales, zp = quantize(w, bs, False)
    deq = dequantize_nbits(packed, scales, zp, k, n, bs)
    step = np.repeat(scales, bs, axis=1)[:, :k]
    assert np.all(np.abs(deq - w.T) <= step * 0.5 + 1e-6)


@pytest.mark.parametrize("rows", [1, 24])
def test_two_threads_same_bits(rows):
    # N large enough to split over the pool: the split never cuts a sum
    model, a = nbits_model([rows, 512], 512, 512, 32)
    lib = MonolibBackend.prepare(model, "CPU")
    try:
        set_num_threads(1)
        one = lib.run([a])[0]
        set_num_threads(2)
        two = lib.run([a])[0]
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, ort_run(model, {"A": a})[0], rtol=1e-4, atol=2e-4)


def test_weights_stay_4bit():
    # the library's params hold B as 4-bit bytes (plus scales), not a float copy of W
    k, n = 1024, 256
    model, a = nbits_model([1, k], k, n, 32)
    factory = monolib.compile(model, target="c")
    assert factory.head["params_bytes"] < k * n  # float weights: 4*k*n bytes
    gm = GraphModule(factory["default"](cpu()))
    gm.run(A=a)
    np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"A": a})[0],
                               rtol=1e-4, atol=2e-4)


def test_run_time_rows():
    # one library for 1..12 rows (issue 12's run-time dims): both kernel paths
    model, _ = nbits_model([3, 64], 64, 40, 32)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "M"
    gm = GraphModule(monolib.compile(model, target="c", shapes={"A": ((1, 12), 64)})["default"](
        cpu()))
    for m in (1, 5, 12):
        a = RNG.standard_normal((m, 64)).astype(np.float32)
        gm.run(A=a)
        np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"A": a})[0],
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", ["vw16", "vw4"])
@pytest.mark.parametrize("rows", [3, 11])
def test_other_vector_widths(width, rows):
    # the kernel at the vector widths this machine's ISA does not pick (harness flags)
    from harness import VECTOR_WIDTHS, run_c

    from monolib.compiler.ir import Node, Value
    from monolib.compiler.ops import lookup

    k, n, bs = 72, 40, 16
    w = RNG.standard_normal((k, n)).astype(np.float32)
    packed, scales, zp = quantize(w, bs, False)
    a = RNG.standard_normal((rows, k)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    ins = [Value("a", a.shape, np.float32), Value.constant("b", packed),
           Value.constant("s", scales), Value.constant("zp", zp), None,
           Value.constant("bias", bias)]
    node = Node("MatMulNBits", "nb", ins, [], {"K": k, "N": n, "bits": 4, "block_size": bs},
                "com.microsoft", 1)
    op = lookup("MatMulNBits", 1, "com.microsoft")
    node.outputs = [Value("y", shape, dt) for shape, dt in op.infer(node)]
    got = run_c(node, [a, packed, scales, zp, None, bias], options=VECTOR_WIDTHS[width])[0]
    want = op.reference(node, [a, packed, scales, zp, None, bias])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
