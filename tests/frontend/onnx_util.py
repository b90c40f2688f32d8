"""Helpers of the frontend and pass tests: tiny ONNX models, ONNX Runtime runs,
skips for ops that have not landed in the registry (ONNX Runtime runs:
:func:`monolib.compiler.testing.ort_run`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib.compiler.ops  # noqa: F401  (registers every op)
from monolib.compiler.ops.base import lookup
from monolib.errors import UnsupportedOpError

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def tensor_info(name: str, elem_type: int, shape: Sequence | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_model(
    nodes: Iterable[onnx.NodeProto],
    inputs: Sequence[tuple],
    outputs: Sequence[tuple],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    extra_opsets: dict[str, int] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """A model from nodes; ``inputs``/``outputs`` are ``(name, elem_type, shape)``."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [tensor_info(*i) for i in inputs],
        [tensor_info(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    if check:
        onnx.checker.check_model(model)
    return model


def missing_ops(ops: Iterable[str], opset: int = 17) -> list[str]:
    out = []
    for op in ops:
        try:
            lookup(op, opset)
        except UnsupportedOpError:
            out.append(op)
    return out


def requires_ops(*ops: str, opset: int = 17):
    """Skip the test while one of ``ops`` is not registered (ops land in parallel)."""
    miss = missing_ops(ops, opset)
    return pytest.mark.skipif(bool(miss), reason=f"ops not registered yet: {miss}")
