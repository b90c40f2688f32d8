"""``com.microsoft`` ``Attention`` and ``MultiHeadAttention`` against ONNX Runtime's CPU
kernels: projections with bias, ``qkv_hidden_sizes``, every mask form monolib takes
(key lengths ``[B]``, end/start ``[2B]``, raw ``[B, T]`` and ``[B, S, T]``), a fully
masked row (ORT's -10000 filter, not -inf), ``unidirectional``, ``attention_bias``,
past/present state, ``scale``; MultiHeadAttention's separate, packed-KV and per-head
(BNSH) key/value layouts."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from monolib.compiler.ops.contrib.attention import ContribAttention, MultiHeadAttention
from monolib.compiler.testing import ort_run
from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(29)


def _r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_vs_ort(op, inputs, n_out, rtol=1e-4, atol=1e-5, **attrs):
    """One com.microsoft node on ``inputs`` (``None``: omitted), monolib vs ORT; also
    the NumPy reference of the op class vs ORT. Returns monolib's outputs."""
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, domain="com.microsoft", **attrs)
    feeds = {n: v for n, v in zip(names, inputs) if n}
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in feeds.items()]
    vout = [helper.make_value_info(o, onnx.TypeProto()) for o in outs]
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(helper.make_graph([node], "g", vin, vout),
                              opset_imports=imports, ir_version=10)
    want = ort_run(model, feeds)
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(o, TensorProto.FLOAT, w.shape)
                              for o, w in zip(outs, want))
    got = MonolibBackend.prepare(model, "CPU").run(list(feeds.values()))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    # the NumPy reference (constant folding's oracle) agrees too
    cls = ContribAttention if op == "Attention" else MultiHeadAttention
    ref = cls().reference(_attn_ref(inputs, n_out, **attrs), list(inputs))
    for r, w in zip(ref, want):
        np.testing.assert_allclose(r, w, rtol=rtol, atol=atol)
    return got


def _attn_ref(inputs, n_out, **attrs):
    from monolib.compiler.ir import Node, Value
    vals = [None if v is None else Value(f"i{k}", v.shape, v.dtype) for k, v in enumerate(inputs)]
    outs = [Value(f"o{k}", (), np.float32) for k in range(n_out)]
    return Node("Attention", "n", vals, outs, attrs, "com.microsoft", 1)


def test_attention_plain_with_bias():
    b, s, din, n, hid = 2, 3, 8, 2, 8
    run_vs_ort("Attention", [_r(b, s, din), _r(din, 3 * hid), _r(3 * hid)], 1, num_heads=n)


@pytest.mark.parametrize("mask_kind", ["key_len", "end_start", "raw2d", "raw3d"])
def test_attention_masks_unidirectional(mask_kind):
    b, s, din, n, hid = 2, 4, 6, 2, 8
    if mask_kind == "key_len":
        mask = np.array([4, 2], np.int32)
    elif mask_kind == "end_start":
        mask = np.array([4, 3, 1, 0], np.int32)
    elif mask_kind == "raw2d":
        mask = (RNG.random((b, s)) > 0.3).astype(np.int32)
        mask[:, 0] = 1
    else:
        mask = (RNG.random((b, s, s)) > 0.3).astype(np.int32)
        mask[1, 2, :] = 0  # a fully masked row: ORT's -10000 filter gives a plain softmax
    run_vs_ort("Attention", [_r(b, s, din), _r(din, 3 * hid), _r(3 * hid), mask], 1,
               num_heads=n, unidirectional=1)


def test_attention_past_present_and_scale():
    b, s, p, din, n, hid = 2, 3, 4, 8, 2, 8
    mask = np.ones((b, p + s), np.int32)
    mask[1, :2] = 0
    past = _r(2, b, n, p, hid // n)
    run_vs_ort("Attention", [_r(b, s, din), _r(din, 3 * hid), _r(3 * hid), mask, past], 2,
               num_heads=n, unidirectional=1, scale=0.4)


def test_attention_decode_step_with_past():
    # one new token against a cache: S = 1 (no causal part), present grows by one
    b, p, din, n, hid = 1, 5, 8, 2, 8
    run_vs_ort("Attention", [_r(b, 1, din), _r(din, 3 * hid), _r(3 * hid), None,
                             _r(2, b, n, p, hid // n)], 2, num_heads=n, unidirectional=1)


@pytest.mark.parametrize("bias_batch,bias_heads", [(2, 3), (1, 1), (1, 3)])
def test_attention_qkv_hidden_sizes_attention_bias(bias_batch, bias_heads):
    b, s, din, n = 2, 5, 6, 3
    sizes = [6, 6, 9]
    run_vs_ort("Attention", [_r(b, s, din), _r(din, sum(sizes)), _r(sum(sizes)),
                             np.array([3, 5], np.int32), None, _r(bias_batch, bias_heads, s, s)],
               1, num_heads=n, qkv_hidden_sizes=sizes)


def test_mha_separate_qkv_key_padding():
    b, s, l, n, h = 2, 3, 5, 2, 4
    mask = (RNG.random((b, l)) > 0.4).astype(np.int32)
    mask[:, 0] = 1
    run_vs_ort("MultiHeadAttention", [_r(b, s, n * h), _r(b, l, n * h), _r(b, l, n * 3), None,
                                      mask], 1, num_heads=n)


def test_mha_bias_past_attention_bias_unidirectional():
    b, s, p, n, h = 2, 3, 2, 2, 4
    inputs = [_r(b, s, n * h), _r(b, s, n * h), _r(b, s, n * h), _r(3 * n * h),
              np.array([5, 4], np.int32), _r(b, n, s, p + s), _r(b, n, p, h), _r(b, n, p, h)]
    run_vs_ort("MultiHeadAttention", inputs, 3, num_heads=n, unidirectional=1, scale=0.3)


def test_mha_packed_kv_with_bias():
    # ORT's CPU kernel has no packed KV: checked against the separate form, which it has
    b, s, l, n, h = 1, 2, 4, 2, 4
    q, kv, bias = _r(b, s, n * h), _r(b, l, n, 2, h), _r(3 * n * h)
    k, v = (np.ascontiguousarray(kv[:, :, :, w]).reshape(b, l, n * h) for w in range(2))
    want = run_vs_ort("MultiHeadAttention", [q, k, v, bias], 1, num_heads=n)[0]
    got = MonolibBackend.prepare(_model("MultiHeadAttention", [q, kv, bias], num_heads=n,
                                        names=["i0", "i1", "", "i3"]), "CPU").run([q, kv, bias])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_mha_bnsh_key_value():
    b, s, l, n, h = 2, 3, 4, 2, 4
    run_vs_ort("MultiHeadAttention", [_r(b, s, n * h), _r(b, n, l, h), _r(b, n, l, h), None,
                                      np.array([4, 2], np.int32)], 1, num_heads=n)


def test_mha_packed_qkv_reference_layout():
    # packed QKV [B, S, N, 3, H] reads the same Q/K/V as the separate 3-D form
    b, s, n, h = 1, 3, 2, 4
    qkv = _r(b, s, n, 3, h)
    sep = [np.ascontiguousarray(qkv[:, :, :, w]).reshape(b, s, n * h) for w in range(3)]
    op = MultiHeadAttention()
    packed = op.reference(_attn_ref([qkv], 1, num_heads=n), [qkv])[0]
    plain = op.reference(_attn_ref(sep, 1, num_heads=n), sep)[0]
    np.testing.assert_allclose(packed, plain, rtol=1e-6)
    got = MonolibBackend.prepare(_model("MultiHeadAttention", [qkv], num_heads=n), "CPU").run(
        [qkv])[0]
    np.testing.assert_allclose(got, plain, rtol=1e-4, atol=1e-5)


def _model(op, inputs, names=None, **attrs):
    names = names or [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["o0"], domain="com.microsoft", **attrs)
    vin = [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
           for n, v in zip([n for n in names if n], inputs)]
    full = iter(inputs)
    ins = [next(full) if n else None for n in names]
    ref = (ContribAttention if op == "Attention" else MultiHeadAttention)()
    shape = ref.infer(_attn_ref(ins, 1, **attrs))[0][0]
    out = [helper.make_tensor_value_info("o0", TensorProto.FLOAT, shape)]
    return helper.make_model(helper.make_graph([node], "g", vin, out), ir_version=10,
                             opset_imports=[helper.make_opsetid("", 21),
                                            helper.make_opsetid("com.microsoft", 1)])
