"""LinearAttention (27) against ``onnx.reference``: the four update rules, per-head and
per-key decay, per-head and shared beta, grouped-query heads, a past state, an explicit
scale, the state output."""

import numpy as np
import pytest
from onnx import helper
from refnode import check_node

RNG = np.random.default_rng(13)
B, T, HQ, HKV, DK, DV = 2, 5, 4, 2, 3, 4


def _qkv():
    return {"q": RNG.standard_normal((B, T, HQ * DK)).astype(np.float32),
            "k": (RNG.standard_normal((B, T, HKV * DK)) * 0.5).astype(np.float32),
            "v": RNG.standard_normal((B, T, HKV * DV)).astype(np.float32)}


@pytest.mark.parametrize("rule,decay_last,beta_last", [
    ("linear", None, None), ("gated", HKV * DK, None), ("delta", None, 1),
    ("gated_delta", HKV, HKV)])
def test_update_rules_with_past(rule, decay_last, beta_last):
    ins = _qkv()
    ins["past"] = RNG.standard_normal((B, HKV, DK, DV)).astype(np.float32)
    if decay_last:
        ins["decay"] = -RNG.random((B, T, decay_last)).astype(np.float32)
    elif beta_last:
        ins["decay"] = None
    if beta_last:
        ins["beta"] = RNG.random((B, T, beta_last)).astype(np.float32)
    # omitted optional inputs in the middle need empty names: build the node by hand
    names = [k if v is not None else "" for k, v in ins.items()]
    feeds = {k: v for k, v in ins.items() if v is not None}
    _check(names, feeds, rule)


def _check(names, feeds, rule):
    import onnx
    from onnx.reference import ReferenceEvaluator

    from monolib.onnx_backend import MonolibBackend

    node = helper.make_node("LinearAttention", names, ["y", "state"], update_rule=rule,
                            q_num_heads=HQ, kv_num_heads=HKV)
    vin = [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape)
           for k, v in feeds.items()]
    vout = [helper.make_value_info(o, onnx.TypeProto()) for o in ("y", "state")]
    model = helper.make_model(helper.make_graph([node], "g", vin, vout),
                              opset_imports=[helper.make_opsetid("", 27)])
    model = onnx.shape_inference.infer_shapes(model)
    got = MonolibBackend.prepare(model, "CPU").run(list(feeds.values()))
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_linear_no_past_explicit_scale():
    check_node("LinearAttention", _qkv(), ["y", "state"], opset=27, update_rule="linear",
               q_num_heads=HQ, kv_num_heads=HKV, scale=0.25, rtol=1e-4, atol=1e-5)
