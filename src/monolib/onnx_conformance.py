"""ONNX's operator conformance cases (``onnx.backend.test.case.node``) run through
:class:`~monolib.onnx_backend.MonolibBackend`: case selection, the per-case check,
and the reasons a case is out of scope.

The cases are the ~1,900 node tests ONNX ships as generators (``collect_testcases``,
built in a few seconds); each is a small model with static shapes, input data and the
expected outputs with an rtol/atol. Used by ``tests/test_onnx_backend.py`` (every
case, in CI) and ``bench/conformance.py`` (the full sweep and its report).

The cases monolib does not pass are listed, each with its reason, in ONE file:
:data:`UNSUPPORTED_FILE` (``case_name: reason`` per line), written by
``python bench/conformance.py --write-unsupported`` and curated by hand. CI runs the
listed cases as strict expected failures, so the list can only shrink.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper

__all__ = [
    "SUPPORTED_DTYPES",
    "UNSUPPORTED_FILE",
    "NodeCase",
    "check_case",
    "load_cases",
    "primary_op",
    "read_unsupported",
    "supported_ops",
    "unsupported_reason",
]

logger = logging.getLogger(__name__)

#: Tensor element types monolib has a C type for (``compiler/ops/base.py``): the
#: numeric C types, and the storage types (16/8/4/2-bit floats and ints, NumPy dtypes
#: of ``ml_dtypes``) converted to float or int32 for computing.
SUPPORTED_DTYPES = {"float32", "float64", "int64", "int32", "int16", "int8", "uint64",
                    "uint32", "uint16", "uint8", "bool", "float16", "bfloat16",
                    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                    "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"}

#: The list of node cases CI expects to fail: ``case_name: reason`` per line.
UNSUPPORTED_FILE = Path(__file__).with_name("conformance_unsupported.txt")


def read_unsupported(path: Path | str = UNSUPPORTED_FILE) -> dict[str, str]:
    """The expected-failure list: case name -> reason (``#`` lines and blank lines are
    comments).

    Raises
    ------
    ValueError
        A line without ``": "`` or a case listed twice (the message names the line).
    """
    out: dict[str, str] = {}
    for no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, reason = line.partition(": ")
        if not sep or not name.startswith("test_") or not reason.strip():
            raise ValueError(f"{path}:{no}: expected 'test_case: reason', got {line!r}")
        if name in out:
            raise ValueError(f"{path}:{no}: case {name!r} is listed twice")
        out[name] = reason.strip()
    return out


def supported_ops() -> set[str]:
    """Default-domain op types monolib compiles: the op registry plus the ops the
    frontend resolves itself (Constant, Identity, Dropout, Shape, Size, If)."""
    from .compiler.frontend.support import FRONTEND_OPS
    from .compiler.ops import registered_ops

    return {op for (domain, op) in registered_ops() if domain == ""} | set(FRONTEND_OPS)


@dataclass
class NodeCase:
    """One ONNX node test: name, the operator it tests, the model, the data sets
    ``[(inputs, expected outputs)]`` and the tolerances."""

    name: str
    op: str
    model: onnx.ModelProto
    data_sets: list
    rtol: float
    atol: float


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def primary_op(name: str, model: onnx.ModelProto) -> str:
    """The operator a case tests: its node's op for one node, else the op whose name
    (lower case, no underscores) is the longest prefix of the case name's
    (``test_layer_normalization_...`` -> LayerNormalization)."""
    ops = sorted({n.op_type for n in model.graph.node})
    if len(ops) == 1:
        return ops[0]
    stem = name[len("test_"):].replace("_", "")
    best = max((op for op in ops if stem.startswith(op.lower())), key=len, default=None)
    return best or model.graph.node[0].op_type


def load_cases() -> list[NodeCase]:
    """Every node case of the installed ``onnx`` (1.23: 1,884), sorted by name."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():  # the generators divide by zero on purpose
        warnings.simplefilter("ignore")
        raw = load_model_tests(kind="node")
    ops = {c.name: primary_op(c.name, c.model) for c in raw}
    # an "_expanded" case is the function body of the op the base case tests
    for name in ops:
        base = _EXPANDED.sub("", name)
        if base != name and base in ops:
            ops[name] = ops[base]
    cases = [NodeCase(c.name, ops[c.name], c.model, c.data_sets, c.rtol, c.atol)
             for c in raw]
    return sorted(cases, key=lambda c: c.name)


def _value_dtypes(model: onnx.ModelProto):
    for v in [*model.graph.input, *model.graph.output]:
        kind = v.type.WhichOneof("value")
        if kind != "tensor_type":
            yield v.name, kind.replace("_type", "")
            continue
        et = v.type.tensor_type.elem_type
        try:
            yield v.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(et)).name
        except (KeyError, TypeError, ValueError):
            yield v.name, onnx.TensorProto.DataType.Name(et).lower()


def unsupported_reason(case: NodeCase, registered: set[str]) -> str | None:
    """Why monolib cannot run ``case`` by design (None if it should): an operator
    not implemented, a non-tensor value (sequence, optional), or an element type
    without a C type (strings, complex numbers, float6...)."""
    missing = sorted({n.op_type for n in case.model.graph.node
                      if (n.domain or "") != "" or n.op_type not in registered})
    if missing:
        return f"operator(s) not implemented: {', '.join(missing)}"
    for name, dtype in _value_dtypes(case.model):
        if dtype in ("sequence", "optional"):  # slots of tensors (compiler/ops/sequence)
            continue
        if dtype in ("map", "sparse_tensor"):
            return f"{dtype} value {name!r}: monolib runs tensors only"
        if dtype == "object":
            return f"string tensor {name!r}: monolib has no string type"
        if dtype not in SUPPORTED_DTYPES:
            return f"element type {dtype} ({name!r}) has no C type in monolib"
    return None


def check_case(case: NodeCase) -> None:
    """Run every data set of ``case`` through MonolibBackend and compare.

    Raises
    ------
    AssertionError
        An output differs from ONNX's expected value beyond the case's rtol/atol, or
        has another shape or dtype.
    MonolibError
        The compiler or runtime rejected the case.
    """
    from .onnx_backend import MonolibBackend

    rep = MonolibBackend.prepare(case.model, "CPU")
    for inputs, expected in case.data_sets:
        got = rep.run(list(inputs))
        assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            _compare(case, f"output {i}", g, e)


def _compare(case: NodeCase, where: str, g, e) -> None:
    """One output against ONNX's expected value: an array, a list (a sequence: element
    by element) or None (an empty optional)."""
    if e is None or g is None:
        assert g is None and e is None, f"{where}: {type(g).__name__}, expected {e!r:.60}"
        return
    if isinstance(e, list):
        assert isinstance(g, list) and len(g) == len(e), \
            f"{where}: {g!r:.80}, expected a sequence of {len(e)}"
        for k, (gk, ek) in enumerate(zip(g, e)):
            _compare(case, f"{where} element {k}", gk, ek)
        return
    e = onnx.numpy_helper.to_array(e) if isinstance(e, onnx.TensorProto) else np.asarray(e)
    assert g.dtype == e.dtype, f"{where}: dtype {g.dtype}, expected {e.dtype}"
    assert g.shape == e.shape, f"{where}: shape {g.shape}, expected {e.shape}"
    if e.dtype == object:  # strings: exactly equal
        np.testing.assert_array_equal(g, e, err_msg=f"{case.name} {where}")
        return
    np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol,
                               err_msg=f"{case.name} {where}")
