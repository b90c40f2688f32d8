"""The official ONNX node test cases (``onnx.backend.test.case.node``) of the math and
tensor ops, run through each op's ``infer`` and NumPy ``reference`` (the oracle of
constant folding). Cases using types or features monolib declares unsupported (an
``UnsupportedOpError``: float16, strings, cubic resize...) are skipped by that error."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from harness import attr_value

from monolib.compiler.ir import Node, Value
from monolib.compiler.ops import op_of
from monolib.compiler.ops.base import _REGISTRY
from monolib.errors import UnsupportedOpError

# Cases where monolib follows ONNX Runtime and the ONNX reference differs.
ORT_SEMANTICS = {
    # align_corners with a fractional scale: the spec's formula divides by
    # (length_resized - 1), the integer output length, as ORT does; the reference
    # implementation divides by (scale * input length - 1)
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_cubic_align_corners",
}
# Expected values drawn from NumPy's global generator after the inputs' draws, not from
# the node's seed: no reference can reproduce them (ops/math/random.py draws
# RandomState(seed); tests/ops/test_random.py checks it)
GLOBAL_RANDOM = {"test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed"}


def _mine() -> set[str]:
    return {
        op
        for (_, op), classes in _REGISTRY.items()
        if any(
            c.__module__.startswith(("monolib.compiler.ops.math", "monolib.compiler.ops.tensor"))
            for c in classes
        )
    }


@functools.lru_cache(maxsize=1)
def _cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        all_cases = collect_testcases()
    mine = _mine()
    out = []
    for tc in all_cases:
        nodes = tc.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in mine and nodes[0].domain in ("", "ai.onnx"):
            out.append(tc)
    return out


def _node(tc, inputs) -> Node:
    p = tc.model.graph.node[0]
    opset = next(o.version for o in tc.model.opset_import if o.domain in ("", "ai.onnx"))
    schema = onnx.defs.get_schema(p.op_type, opset)
    attrs = {
        n: attr_value(a.default_value)
        for n, a in schema.attributes.items()
        if a.default_value is not None and a.default_value.type
    }
    attrs.update({a.name: attr_value(a) for a in p.attribute})
    ins, data = [], iter(inputs)
    for name in p.input:
        if not name:  # an omitted optional input has no data
            ins.append(None)
            continue
        x = next(data)
        x = onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)
        if x.dtype.kind in "OUS" or x.dtype in (np.float16,) or x.dtype.kind == "V":
            raise UnsupportedOpError(f"dtype {x.dtype}")
        # every input constant: this is how the frontend folds the node with `reference`
        ins.append(Value(name, x.shape, x.dtype, np.asarray(x, order="C")))
    outs = [Value(o, (), np.float32) for o in p.output]
    return Node(p.op_type, p.name or "n", ins, outs, attrs, opset=opset)


def _ids():
    return [tc.name for tc in _cases()]


@pytest.mark.parametrize("name", _ids())
def test_reference_matches_onnx_case(name):
    if name in ORT_SEMANTICS:
        pytest.skip("monolib follows ONNX Runtime here (see ORT_SEMANTICS)")
    if name in GLOBAL_RANDOM:
        pytest.skip("expected values from NumPy's global generator (see GLOBAL_RANDOM)")
    tc = next(t for t in _cases() if t.name == name)
    for inputs, expected in tc.data_sets:
        try:
            node = _node(tc, inputs)
            op = op_of(node)
            types = op.infer(node)
        except UnsupportedOpError as e:
            pytest.skip(f"declared unsupported: {e}")
        got = op.reference(node, [None if v is None else v.const for v in node.inputs])
        for i, (g, w, (shape, dtype)) in enumerate(zip(got, expected, types)):
            # a case may give its expected value as a TensorProto (e.g. int16 data)
            w = onnx.numpy_helper.to_array(w) if isinstance(w, onnx.TensorProto) else np.asarray(w)
            if w.dtype.kind == "V":  # ml_dtypes storage types (float8, bfloat16, int4...)
                pytest.skip("storage-type outputs: checked bit for bit in tests/ops/test_types_*")
            assert g.shape == w.shape == tuple(shape), f"output {i}: {g.shape} {w.shape} {shape}"
            assert g.dtype == w.dtype == dtype, f"output {i}: {g.dtype} {w.dtype} {dtype}"
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
            else:
                np.testing.assert_array_equal(g, w)
