"""monolib as an ONNX backend: the Backend API itself, and ONNX's own operator
conformance cases for the operators monolib implements.

CI runs a representative subset (the first ``MONOLIB_CONFORMANCE_PER_OP`` in-scope
cases of each implemented operator, default 3); ``MONOLIB_CONFORMANCE_PER_OP=0`` runs
every in-scope case. ``bench/conformance.py`` does the full sweep and writes the pass
count per operator to ``bench/CONFORMANCE.md``.

A case the compiler rejects with ``UnsupportedOpError`` (a feature it declares it does
not implement: 3-D pooling, training-mode BatchNormalization, an operator version
newer than its opsets...) is an expected failure, reported with the compiler's
message; any other error or a numeric mismatch fails.
"""

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from monolib.onnx_backend import MonolibBackend
from monolib.onnx_conformance import check_case, load_cases, supported_ops, unsupported_reason
from monolib.runtime.errors import InputError, MonolibError, UnsupportedOpError

REGISTERED = supported_ops()
PER_OP = int(os.environ.get("MONOLIB_CONFORMANCE_PER_OP", "3"))

#: Cases of implemented operators that fail for a known, documented reason
#: (found by bench/conformance.py): name -> reason.
KNOWN_FAILURES: dict[str, str] = {
    "test_resize_downsample_scales_linear_align_corners":
        "monolib follows ONNX Runtime ([1, 4]); ONNX's expected [1, 3.142857] uses the "
        "unrounded output length (2 * 0.6 = 2.4... per axis) in the align_corners formula",
}


def _selected_cases():
    taken: dict[str, int] = {}
    for case in load_cases():
        if case.op not in REGISTERED or unsupported_reason(case, REGISTERED):
            continue
        if PER_OP and taken.get(case.op, 0) >= PER_OP:
            continue
        taken[case.op] = taken.get(case.op, 0) + 1
        marks = ()
        if case.name in KNOWN_FAILURES:
            marks = pytest.mark.xfail(reason=KNOWN_FAILURES[case.name], strict=False)
        yield pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", list(_selected_cases()))
def test_onnx_node_case(case):
    try:
        check_case(case)
    except UnsupportedOpError as exc:
        pytest.xfail(f"declared unsupported: {exc}")


# ---- the Backend API ----------------------------------------------------------------

def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10)


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_supports_cpu_only():
    assert MonolibBackend.supports_device("CPU")
    assert not MonolibBackend.supports_device("CUDA")
    with pytest.raises(MonolibError, match="CPU only, not 'CUDA'"):
        MonolibBackend.prepare(_model([], [], []), "CUDA")


def test_run_model_matches_numpy():
    model = _model([helper.make_node("Add", ["a", "b"], ["s"]),
                    helper.make_node("Relu", ["s"], ["y"])],
                   [_f32("a", [2, 3]), _f32("b", [3])], [_f32("y", [2, 3])])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    (y,) = MonolibBackend.run_model(model, [a, b])
    np.testing.assert_allclose(y, np.maximum(a + b, 0), rtol=1e-6)
    (y2,) = MonolibBackend.prepare(model).run({"a": a, "b": b})
    np.testing.assert_array_equal(y, y2)


def test_run_node():
    x = np.array([[-1.5, 2.0]], np.float32)
    (y,) = MonolibBackend.run_node(helper.make_node("Abs", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, np.abs(x))


def test_shape_input_is_compiled_in_per_value():
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [_f32("x", [2, 6]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                   [_f32("y", ["a", "b"])])
    rep = MonolibBackend.prepare(model)
    assert rep.shape_inputs == ["shape"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        assert y.shape == tuple(shape)
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(rep._modules) == 2  # one compilation per distinct shape value


def test_bad_inputs_raise_input_error():
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [_f32("x", [4])], [_f32("y", [4])])
    rep = MonolibBackend.prepare(model)
    with pytest.raises(InputError, match="2 inputs given, the model has 1"):
        rep.run([np.zeros(4, np.float32)] * 2)
    with pytest.raises(InputError, match="shape"):
        rep.run([np.zeros(5, np.float32)])


def test_is_compatible():
    ok = _model([helper.make_node("Relu", ["x"], ["y"])], [_f32("x", [2])], [_f32("y", [2])])
    bad = _model([helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.org")],
                 [_f32("x", [2])], [_f32("y", [2])])
    bad.opset_import.append(helper.make_opsetid("example.org", 1))
    assert MonolibBackend.is_compatible(ok)
    assert not MonolibBackend.is_compatible(bad)


def test_dynamic_input_shapes_compile_per_shape():
    model = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [_f32("x", ["n", 3])],
                   [_f32("y", ["n", 3])])
    rep = MonolibBackend.prepare(model)
    for n in (1, 4):
        x = np.linspace(-3, 3, 3 * n, dtype=np.float32).reshape(n, 3)
        (y,) = rep.run([x])
        np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)), rtol=1e-6)
    assert len(rep._modules) == 2


def test_fit_opset_moves_unchanged_ops_into_range():
    from monolib.onnx_backend import fit_opset

    relu = _model([helper.make_node("Relu", ["x"], ["y"])], [_f32("x", [2])],
                  [_f32("y", [2])], opset=7)
    assert fit_opset(relu).opset_import[0].version == 11
    assert relu.opset_import[0].version == 7  # the caller's model is not changed


def test_fit_opset_uses_the_version_converter_for_type_only_changes():
    from monolib.onnx_backend import fit_opset

    # Selu's version 22 only added bfloat16: ONNX's converter takes it back to 21
    selu = _model([helper.make_node("Selu", ["x"], ["y"])], [_f32("x", [3])],
                  [_f32("y", [3])], opset=22)
    fitted = fit_opset(selu)
    assert fitted.opset_import[0].version == 21
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    (y,) = MonolibBackend.run_model(selu, [x])
    alpha, gamma = 1.67326319217681884765625, 1.05070102214813232421875
    np.testing.assert_allclose(y, np.where(x > 0, gamma * x, gamma * alpha * (np.exp(x) - 1)),
                               rtol=1e-6)
