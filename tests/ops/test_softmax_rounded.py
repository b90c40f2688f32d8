"""float16/bfloat16 ``Softmax`` and bfloat16 ``Attention`` round where ONNX's reference
rounds (``frontend/rounding.py``, ``ops/math/softmax_rounded.py``): bit-exact against
``onnx.reference`` on random data, over the last axis and a middle one."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(31)


def _model(nodes, inputs, outputs, opset=23):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), ir_version=10,
                             opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("dtype,elem", [(ml_dtypes.bfloat16, TensorProto.BFLOAT16),
                                        (np.float16, TensorProto.FLOAT16)])
@pytest.mark.parametrize("shape,axis", [((7, 37), -1), ((3, 50, 4), 1)])
def test_softmax_bit_exact(dtype, elem, shape, axis):
    x = (RNG.standard_normal(shape) * 4).astype(dtype)
    x.flat[3] = -np.inf  # a masked entry
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
                   [helper.make_tensor_value_info("x", elem, shape)],
                   [helper.make_tensor_value_info("y", elem, shape)])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = MonolibBackend.prepare(model, "CPU").run([x])[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_bfloat16_attention_matches_reference():
    # the fused op imported as its function body: each step rounds like the reference
    b, h, s, d = 1, 2, 5, 8
    q, k, v = (RNG.standard_normal((b, h, s, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    vin = [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, (b, h, s, d)) for n in "qkv"]
    model = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)], vin,
                   [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, (b, h, s, d))])
    feeds = {"q": q, "k": k, "v": v}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = MonolibBackend.prepare(model, "CPU").run([q, k, v])[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3,
                               atol=1e-7)


def test_float32_softmax_is_the_plain_op():
    # only the 16-bit types take the rounded path
    from monolib.compiler.frontend.onnx import import_model
    model = _model([helper.make_node("Softmax", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3))])
    assert [n.op_type for n in import_model(model).nodes] == ["Softmax"]
    assert onnx is not None
