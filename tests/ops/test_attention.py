"""Attention (23-25) against ``onnx.reference``: 4-D and 3-D layouts, grouped-query
heads, KV cache (past/present), float and bool masks (short masks padded), causal
offsets, softcap, every ``qk_matmul_output_mode``, ``nonpad_kv_seqlen`` and the
sliding window, fully masked rows."""

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from refnode import check_node

from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(7)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_4d_plain_float64():
    check_node("Attention", {"q": _r(2, 3, 4, 8, dtype=np.float64),
                             "k": _r(2, 3, 6, 8, dtype=np.float64),
                             "v": _r(2, 3, 6, 5, dtype=np.float64)}, ["y"], opset=23)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_3d_gqa_past_mask_softcap(mode):
    # 4 query heads over 2 KV heads; a [S, T-1] float mask is padded with -inf
    b, s, l, p, hq, hkv, d, dv = 2, 3, 4, 5, 4, 2, 6, 7
    mask = _r(s, p + l - 1)
    check_node(
        "Attention",
        {"q": _r(b, s, hq * d), "k": _r(b, l, hkv * d), "v": _r(b, l, hkv * dv), "m": mask,
         "pk": _r(b, hkv, p, d), "pv": _r(b, hkv, p, dv)},
        ["y", "present_k", "present_v", "qk"], opset=23, rtol=1e-4, atol=1e-5,
        q_num_heads=hq, kv_num_heads=hkv, softcap=2.5, qk_matmul_output_mode=mode, scale=0.3)


def test_causal_with_past_and_bool_mask():
    b, h, s, l, p, d = 1, 2, 3, 3, 2, 4
    mask = RNG.random((h, s, p + l)) > 0.3
    mask[0, 1, :] = False  # a fully masked row gives zeros
    check_node("Attention", {"q": _r(b, h, s, d), "k": _r(b, h, l, d), "v": _r(b, h, l, d),
                             "m": mask, "pk": _r(b, h, p, d), "pv": _r(b, h, p, d)},
               ["y", "pk2", "pv2", "qk"], opset=23, rtol=1e-4, atol=1e-5, is_causal=1,
               qk_matmul_output_mode=3)


def _check_positional(inputs, n_out, opset, **attrs):
    """Attention with omitted optional inputs (``None`` in ``inputs``): monolib vs
    ``onnx.reference``."""
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node("Attention", names, outs, **attrs)
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs) if v is not None]
    vout = [helper.make_value_info(o, onnx.TypeProto()) for o in outs]
    model = helper.make_model(helper.make_graph([node], "g", vin, vout),
                              opset_imports=[helper.make_opsetid("", opset)])
    model = onnx.shape_inference.infer_shapes(model)
    feeds = {n: v for n, v in zip(names, inputs) if v is not None}
    got = MonolibBackend.prepare(model, "CPU").run(list(feeds.values()))
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_nonpad_causal_external_cache():
    b, h, s, t, d = 3, 2, 2, 6, 4
    nonpad = np.array([6, 3, 1], np.int64)  # batch 2: offset -1 masks query row 0 fully
    _check_positional([_r(b, h, s, d), _r(b, h, t, d), _r(b, h, t, d), _r(b, 1, s, t),
                       None, None, nonpad], 1, 24, is_causal=1)


@pytest.mark.parametrize("left,right,causal", [(1, -1, 1), (2, 1, 0), (0, 0, 0)])
def test_sliding_window_25(left, right, causal):
    b, h, s, l, p, d = 2, 2, 4, 4, 3, 4
    _check_positional([_r(b, h, s, d), _r(b, h, l, d), _r(b, h, l, d), None,
                       _r(b, h, p, d), _r(b, h, p, d)], 3, 25,
                      left_window_size=left, right_window_size=right, is_causal=causal)


def test_gqa_head_count_must_divide():
    from monolib.errors import ShapeError

    with pytest.raises(ShapeError, match="3 query heads is not a multiple of 2 KV heads"):
        _check_positional([_r(1, 3, 2, 4), _r(1, 2, 2, 4), _r(1, 2, 2, 4)], 1, 23)


@pytest.mark.parametrize("hq,hkv", [(2, 2), (4, 2)])
def test_flex_attention(hq, hkv):
    check_node("FlexAttention", {"q": _r(2, hq, 3, 8), "k": _r(2, hkv, 5, 8), "v": _r(2, hkv, 5, 6)},
               ["y"], opset=26, domain="ai.onnx.preview", rtol=1e-4, atol=1e-5, scale=0.2)
