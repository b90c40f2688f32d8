"""Opsets up to onnx's newest: the frontend's range, and the registry refusing an
operator version whose semantics changed after the implementing class was written
(``ops.base.lookup``, ``also_versions``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import helper

from monolib.compiler.frontend.support import DEFAULT_OPSETS
from monolib.compiler.ops import base as ops_base
from monolib.compiler.ops import registered_ops
from monolib.onnx_backend import MonolibBackend
from monolib.errors import UnsupportedOpError

NEWEST = onnx.defs.onnx_opset_version()


def _unary(op: str, opset: int, x: np.ndarray, **attrs) -> onnx.ModelProto:
    t = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="n0", **attrs)], "g",
        [helper.make_tensor_value_info("x", t, x.shape)],
        [helper.make_tensor_value_info("y", t, x.shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_range_reaches_the_newest_opset():
    assert DEFAULT_OPSETS.start == 11 and DEFAULT_OPSETS.stop - 1 == NEWEST


def test_type_only_version_runs():
    # Selu 22 only added bfloat16: the version-6 class serves it
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    (y,) = MonolibBackend.run_model(_unary("Selu", 22, x), [x])
    a, g = 1.67326319217681884765625, 1.05070102214813232421875
    np.testing.assert_allclose(y, np.where(x > 0, g * x, g * a * (np.exp(x) - 1)), rtol=1e-6)


def test_undeclared_newer_version_is_refused(monkeypatch):
    cls = type(ops_base.lookup("Selu", 21))
    monkeypatch.setattr(cls, "also_versions", ())
    x = np.zeros(3, np.float32)
    with pytest.raises(UnsupportedOpError, match=r"Selu \(node 'n0'\) at opset 22 is version 22.*"
                                                 r"implements versions 6"):
        ops_base.lookup("Selu", 22, node_name="n0")
    with pytest.raises(UnsupportedOpError, match=r"Selu \(opset 22; ONNX version 22; monolib has "
                                                 r"versions 6, which do not cover it\): node\(s\) 'n0'"):
        MonolibBackend.prepare(_unary("Selu", 22, x), "CPU")
    ops_base.lookup("Selu", 21)  # the older opset is still served


def test_every_served_version_is_declared():
    """For every registered default-domain op and opset, lookup either refuses or
    returns a class whose declared versions cover the schema in effect (versions
    before ``CHECKED_FROM`` predate the check)."""
    for domain, op in registered_ops():
        if domain or not onnx.defs.has(op):
            continue
        for opset in range(ops_base.CHECKED_FROM, NEWEST + 1):
            try:
                inst = ops_base.lookup(op, opset)
            except UnsupportedOpError:
                continue
            since = onnx.defs.get_schema(op, opset).since_version
            cls = type(inst)
            assert (since <= cls.since_version or since < ops_base.CHECKED_FROM
                    or since in cls.also_versions), (
                op, opset, since)


def test_mod_float_fmod0_refused_before_28():
    graph = helper.make_graph(
        [helper.make_node("Mod", ["a", "b"], ["y"], name="m", fmod=0)], "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in "ab"],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(UnsupportedOpError, match="fmod=0 is not defined for floats before opset 28"):
        MonolibBackend.prepare(model, "CPU")
    model.opset_import[0].version = 28
    got = MonolibBackend.prepare(model, "CPU").run([np.array([-5.0, 0.0], np.float32),
                                                    np.array([3.0, -2.0], np.float32)])[0]
    np.testing.assert_array_equal(got, [1.0, -0.0])
    assert np.signbit(got[1])
