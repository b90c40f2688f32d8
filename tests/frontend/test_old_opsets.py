"""Models of opsets older than the frontend's (issue 15): converted with
``onnx.version_converter`` on the way in, announced to ``progress``, and matching
ONNX Runtime on the ORIGINAL model; a failed conversion is a clear error."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.frontend import onnx as frontend
from monolib.compiler.testing import ort_run, run_model
from monolib.errors import UnsupportedOpError

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


def _opset7_model() -> onnx.ModelProto:
    """BatchNormalization (opset 7 has no training outputs), Upsample (removed at 10)
    and Relu: ops whose schema the converter must rewrite."""
    rng = np.random.default_rng(0)
    c = 3
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("s", rng.uniform(0.5, 1.5, c)), ("b", rng.normal(size=c)),
        ("m", rng.normal(size=c)), ("v", rng.uniform(0.5, 2.0, c)))]
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Upsample", ["bn"], ["up"], name="up", mode="nearest",
                         scales=[1.0, 1.0, 2.0, 2.0]),
        helper.make_node("Relu", ["up"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=4)


def test_opset7_model_is_converted_announced_and_matches_ort():
    model = _opset7_model()
    x = np.random.default_rng(1).normal(size=(1, 3, 4, 5)).astype(np.float32)
    steps: list[str] = []
    lib = monolib.compile(model, target="c", progress=steps.append)
    assert f"convert opset 7 -> {frontend.UPGRADE_OPSET}" in steps
    assert steps.index(f"convert opset 7 -> {frontend.UPGRADE_OPSET}") > steps.index("import")
    assert lib is not None
    got = run_model(model, {"x": x})[0]
    want = ort_run(model, {"x": x})[0]  # ONNX Runtime runs the opset 7 model itself
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_supported_opsets_are_not_touched(monkeypatch):
    model = _opset7_model()
    converted = frontend.upgrade_opset(model)
    assert converted.opset_import[0].version == frontend.UPGRADE_OPSET
    assert model.opset_import[0].version == 7  # the caller's proto is left as it was

    def fail(*args, **kwargs):
        raise AssertionError("converter called on a supported opset")

    monkeypatch.setattr(onnx.version_converter, "convert_version", fail)
    assert frontend.upgrade_opset(converted) is converted


def test_failed_conversion_is_an_error_naming_opset_and_reason(monkeypatch):
    def fail(model, target):
        raise RuntimeError("convert.h:96: assertInVersionRange: no adapter for Frob")

    monkeypatch.setattr(onnx.version_converter, "convert_version", fail)
    with pytest.raises(UnsupportedOpError) as info:
        monolib.compile(_opset7_model(), target="c")
    msg = str(info.value)
    assert "opset 7" in msg and "could not convert" in msg and "no adapter for Frob" in msg, msg


@pytest.mark.skipif(not os.path.isfile(os.path.join(LIGHT, "light_squeezenet.onnx")),
                    reason="the onnx wheel has no light models")
def test_light_squeezenet_opset9_compiles_directly_and_matches_ort():
    path = os.path.join(LIGHT, "light_squeezenet.onnx")
    assert onnx.load(path, load_external_data=False).opset_import[0].version == 9
    x = np.random.default_rng(2).uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)
    got = run_model(path, {"data_0": x})[0]
    want = ort_run(path, {"data_0": x})[0]
    assert got.shape == want.shape == (1, 1000, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.argmax(got) == np.argmax(want)
