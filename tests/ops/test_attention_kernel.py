"""The float32 Attention kernel (``ops/nn/attention.h``) at sizes that take its block
paths: several query-row blocks per head (the causal / sliding-window key range of each
block), one-row decoder steps (the direct dot-product path), grouped-query heads, the
qk_matmul_output modes, on 1 and 2 threads of the pool, against ``onnx.reference``."""

import numpy as np
import onnx
import pytest
from harness import NodeContext, make_node, run_threads
from onnx import helper
from onnx.reference import ReferenceEvaluator

from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn.attention import _row_block

RNG = np.random.default_rng(11)


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _check(inputs, n_out, opset, **attrs):
    """Attention (``None`` inputs omitted) on 1 and 2 threads vs ``onnx.reference``, the
    two runs bit-identical."""
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    feeds = {n: v for n, v in zip(names, inputs) if v is not None}
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in feeds.items()]
    vout = [helper.make_value_info(o, onnx.TypeProto()) for o in outs]
    model = helper.make_model(
        helper.make_graph([helper.make_node("Attention", names, outs, **attrs)], "g", vin, vout),
        opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    want = ReferenceEvaluator(model).run(None, feeds)
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(
        o, onnx.TensorProto.FLOAT, w.shape) for o, w in zip(outs, want))
    runs = run_threads(model, feeds)
    for run in runs:
        for g, w in zip(run, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    for one, two in zip(*runs):  # the same sums however the rows are grouped
        np.testing.assert_array_equal(one, two)


def test_float32_emits_the_kernel_float64_the_loop():
    for dt, kernel in ((np.float32, True), (np.float64, False)):
        x = np.zeros((1, 2, 4, 8), dt)
        node = make_node("Attention", [x, x, x], {}, opset=23)
        code = op_of(node).emit(node, NodeContext(node))
        assert ("ml_attention_f32(" in code) == kernel


def test_row_blocks():
    assert _row_block(1, 512) == 1
    assert _row_block(40, 40) == 40  # one block
    rb = _row_block(100, 120)
    assert rb % 6 == 0 and rb <= 48 and -(-100 // rb) == 3


@pytest.mark.parametrize("mask", ["none", "float", "bool"])
def test_causal_blocks_with_past(mask):
    # S=100 queries in 3 blocks per head, each computing only the keys it sees
    b, h, s, p, d = 1, 4, 100, 20, 32  # 3.8M multiply-adds: split over the pool
    m = None
    if mask == "float":
        m = _r(s, p + s)
    elif mask == "bool":
        m = RNG.random((b, 1, s, p + s - 3)) > 0.2  # short: the last keys are masked
    _check([_r(b, h, s, d), _r(b, h, s, d), _r(b, h, s, d), m, _r(b, h, p, d),
            _r(b, h, p, d)], 3, 23, is_causal=1)


@pytest.mark.parametrize("mode", [0, 2, 3])
def test_gqa_3d_window_qk_modes(mode):
    # 3-D layout, 4 query heads over 2 KV heads, a sliding window, softcap, qk output
    b, s, hq, hkv, d, dv = 2, 60, 4, 2, 8, 12
    _check([_r(b, s, hq * d), _r(b, s, hkv * d), _r(b, s, hkv * dv), None, None, None],
           4, 25, q_num_heads=hq, kv_num_heads=hkv, left_window_size=9, right_window_size=3,
           softcap=3.0, qk_matmul_output_mode=mode)


def test_nonpad_blocks():
    b, h, s, t, d = 2, 2, 50, 70, 8
    nonpad = np.array([70, 31], np.int64)  # batch 1: the first query rows see no key
    _check([_r(b, h, s, d), _r(b, h, t, d), _r(b, h, t, d), None, None, None, nonpad], 1,
           24, is_causal=1)


@pytest.mark.parametrize("s", [1, 2])
def test_decoder_step(s):
    # one or two query rows against a KV cache: the direct dot-product path
    b, h, p, d = 2, 3, 45, 20
    _check([_r(b, h, s, d), _r(b, h, s, d), _r(b, h, s, d), _r(b, 1, s, p + s), _r(b, h, p, d),
            _r(b, h, p, d)], 4, 23, is_causal=1, qk_matmul_output_mode=3)
