"""Attribute defaults are written once: the frontend fills every default an ONNX schema
gives (any domain onnx has schemas for); an op class declares in ``defaults`` only what
no schema gives for every version it serves, and never a value the schema contradicts."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest

import monolib.compiler.ops  # noqa: F401  (registers the op classes)
from monolib.compiler.frontend.attributes import convert_attribute, node_attributes
from monolib.compiler.ir import Node, Value
from monolib.compiler.ops.base import _REGISTRY, lookup
from monolib.errors import CompileError

#: the newest opset whose schemas are consulted
NEWEST = 28


@pytest.mark.parametrize(
    "op,domain,opset,inputs,want",
    [
        ("Gemm", "", 13, ["a", "b"], {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}),
        ("Gemm", "ai.onnx", 13, ["a", "b"], {"alpha": 1.0, "transA": 0}),
        ("Normalizer", "ai.onnx.ml", 1, ["x"], {"norm": "MAX"}),
        ("Adagrad", "ai.onnx.preview.training", 1, ["r", "t", "x", "g", "h"],
         {"decay_factor": 0.0, "norm_coefficient": 0.0}),
    ],
)
def test_frontend_fills_schema_defaults_in_every_domain(op, domain, opset, inputs, want):
    node = onnx.helper.make_node(op, inputs, ["y"], domain=domain)
    attrs = node_attributes(node, opset)
    assert {k: attrs[k] for k in want} == want


def test_no_schema_no_defaults_and_no_error():
    node = onnx.helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft",
                                 alpha=2.0)
    assert node_attributes(node, 1) == {"alpha": 2.0}


def test_the_model_value_wins_over_the_default():
    node = onnx.helper.make_node("Gemm", ["a", "b"], ["y"], alpha=0.5)
    assert node_attributes(node, 13)["alpha"] == 0.5


def _schema_defaults(domain: str, op: str, since: int, name: str) -> dict[int, object]:
    """{schema version: the default of ``name``} from ``since`` on; "MISSING" where the
    version lacks the attribute, "NONE" where it gives no default."""
    out = {}
    for opset in range(since, NEWEST + 1):
        try:
            s = onnx.defs.get_schema(op, opset, domain)
        except onnx.defs.SchemaError:
            continue
        a = s.attributes.get(name)
        if a is None:
            out[s.since_version] = "MISSING"
        elif a.default_value is None or not a.default_value.type:
            out[s.since_version] = "NONE"
        else:
            out[s.since_version] = convert_attribute(a.default_value)
    return out


def _class_defaults():
    classes = {c for cs in _REGISTRY.values() for c in cs}
    for c in sorted(classes, key=lambda c: (c.domain, c.op_type, c.since_version)):
        owner = next(k for k in c.__mro__ if "defaults" in k.__dict__)
        # a dict several op types share (a base class, e.g. Resize and Upsample) serves
        # each of them; it is only redundant when every user's schema gives the value
        users = {(k.domain, k.op_type, k.since_version) for k in classes
                 if next(m for m in k.__mro__ if "defaults" in m.__dict__) is owner}
        for name, value in c.defaults.items():
            yield c, name, value, users


@pytest.mark.parametrize("case", list(_class_defaults()),
                         ids=lambda t: f"{t[0].__name__}.{t[1]}" if isinstance(t, tuple) else "")
def test_class_defaults_agree_with_the_schema_and_are_needed(case):
    cls, name, value, users = case
    by_user = {u: _schema_defaults(u[0], u[1], u[2], name) for u in users}
    for u, versions in by_user.items():
        given = {v: d for v, d in versions.items() if d not in ("MISSING", "NONE")}
        # another value is fine only as the behaviour of versions that lack the attribute
        # (RoiAlign 10 computes output_half_pixel; 16 names it, defaulting to half_pixel)
        assert all(d == value for d in given.values()) or "MISSING" in versions.values(), (
            f"{cls.__name__}.defaults[{name!r}] = {value!r}, schema {u[1]} gives {given}")
    always = all(vs and all(d not in ("MISSING", "NONE") for d in vs.values())
                 for vs in by_user.values())
    assert not always, f"{cls.__name__}.defaults[{name!r}]: the schema always gives it"


def test_attr_reads_the_node_then_the_class_default():
    op = lookup("Shape", 21)
    x = Value("x", (2, 3), np.dtype(np.float32))
    node = Node("Shape", "s", [x], [], {"start": 1}, "", 21)
    assert op.attr(node, "start") == 1
    assert op.attr(node, "end") is None  # declared: an optional attribute, absent
    with pytest.raises(CompileError, match="'nonexistent' is missing"):
        op.attr(node, "nonexistent")
