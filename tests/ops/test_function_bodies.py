"""``FlexAttention`` with ``score_mod``/``prob_mod`` subgraphs, imported as its ONNX
function body (``frontend/function_bodies.py``): against ``onnx.reference`` on random
data, a soft-capping score modifier and a probability modifier reading the query and
key positions' shapes."""

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(37)


def _flex(mods, shape=(1, 2, 5, 8)):
    vin = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "QKV"]
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview",
                            **mods)
    graph = helper.make_graph([node], "g", vin,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, ir_version=11, opset_imports=[
        helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    feeds = {n: RNG.standard_normal(shape).astype(np.float32) for n in "QKV"}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = MonolibBackend.prepare(model, "CPU").run(list(feeds.values()))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _subgraph(name, nodes, consts):
    dims = ["B", "H", "L", "S"]
    return helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
        [onnx.numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()])


def test_score_mod_soft_cap():
    g = _subgraph("cap", [helper.make_node("Div", ["x", "c"], ["t"]),
                          helper.make_node("Tanh", ["t"], ["u"]),
                          helper.make_node("Mul", ["u", "c"], ["y"])], {"c": 2.0})
    _flex({"score_mod": g})


def test_prob_mod_and_score_mod():
    sm = _subgraph("sm", [helper.make_node("Add", ["x", "b"], ["y"])], {"b": 0.25})
    pm = _subgraph("pm", [helper.make_node("Mul", ["x", "s"], ["y"])], {"s": 0.5})
    _flex({"score_mod": sm, "prob_mod": pm})
