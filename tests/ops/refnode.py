"""One ONNX node compiled by monolib (through ``MonolibBackend``) against ONNX's
reference evaluator (``onnx.reference``) or ONNX Runtime: the shared check of the op
tests that go beyond ONNX's own node cases (those run in ``tests/test_onnx_backend.py``
and ``bench/conformance.py``; building them takes ~10 s, so these tests do not)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from monolib.compiler.testing import ort_run
from monolib.onnx_backend import MonolibBackend

__all__ = ["check_node"]


def check_node(op: str, inputs: dict[str, np.ndarray], outputs: list[str], *,
               opset: int = 21, domain: str = "", rtol: float = 1e-5, atol: float = 1e-6,
               consts: dict[str, np.ndarray] | None = None, oracle: str = "reference",
               **attrs) -> list[np.ndarray]:
    """Compile the single node ``op(inputs) -> outputs`` and compare every output with
    ``onnx.reference`` (``oracle="ort"``: ONNX Runtime); ``consts`` become
    initializers. Returns monolib's outputs."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    node = helper.make_node(op, names, outputs, domain=domain or None, **attrs)
    vin = [helper.make_tensor_value_info(
        k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()]
    vout = [helper.make_value_info(o, onnx.TypeProto()) for o in outputs]
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    graph = helper.make_graph([node], "g", vin, vout,
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=imports, ir_version=10)
    if oracle == "ort":
        want = ort_run(model, inputs)
    else:
        want = ReferenceEvaluator(model).run(None, inputs)
    # declare the outputs' types from the oracle's results (shape inference may not)
    del model.graph.output[:]
    model.graph.output.extend(
        helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.asarray(w).dtype),
                                      np.asarray(w).shape) for o, w in zip(outputs, want))
    got = MonolibBackend.prepare(model, "CPU").run(list(inputs.values()))
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got
