"""Find every operator of a model monolib cannot compile, before any other work.

A user converting a model wants the whole list at once, not one error per attempt:
:func:`check_supported` walks every node, ``If``/``Loop`` subgraphs included, and
raises ONE :class:`~monolib.errors.UnsupportedOpError` naming each unsupported
op type with its opset and the nodes that use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import onnx

from ...errors import UnsupportedOpError
from ..ops.base import lookup, registered_ops

__all__ = ["DEFAULT_OPSETS", "FRONTEND_OPS", "check_supported", "walk_nodes"]

logger = logging.getLogger(__name__)

#: Default-domain ops the frontend resolves itself (they never reach the op registry):
#: ``Constant`` and ``Shape``/``Size`` (static shapes) fold, ``If`` with a constant
#: condition is inlined (on a run-time one it becomes ``ops/control/if_.py``'s node,
#: ``Loop``/``Scan`` always do), ``Identity``/``Dropout`` (inference) alias their input,
#: ``SequenceMap`` is unrolled (``sequence_map.py``).
FRONTEND_OPS = frozenset({"Constant", "If", "Identity", "Dropout", "Shape", "Size",
                          "SequenceMap"})

#: Opsets of the default domain the frontend accepts: 11 to the newest the installed
#: ``onnx`` defines. Per operator, :func:`~monolib.compiler.ops.base.lookup` refuses a
#: version whose semantics changed after the implementing class was written.
DEFAULT_OPSETS = range(11, onnx.defs.onnx_opset_version() + 1)


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` are the same (default) domain; monolib uses ``""``."""
    return "" if domain == "ai.onnx" else domain


def walk_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and, recursively, of its subgraph attributes."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from walk_nodes(g)


def _schema_since(op_type: str, opset: int, domain: str) -> int | None:
    """The ``since_version`` of ``op_type``'s ONNX schema at ``opset`` (``None``
    when ONNX has none)."""
    try:
        return int(onnx.defs.get_schema(op_type, opset, domain).since_version)
    except onnx.defs.SchemaError:
        return None


def _is_supported(op_type: str, domain: str, opset: int, name: str) -> bool:
    if domain == "" and op_type in FRONTEND_OPS:
        return True
    try:
        lookup(op_type, opset, domain, name)
    except UnsupportedOpError:
        return False
    return True


def check_supported(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> None:
    """Raise ONE error listing every unsupported operator of ``graph``.

    Parameters
    ----------
    graph : onnx.GraphProto
    opsets : mapping
        Domain (``""`` for the default one) -> the model's opset version.

    Raises
    ------
    UnsupportedOpError
        Message: ``"N unsupported operator(s): Foo (opset 13): nodes 'a', 'b'; ..."``.
    """
    missing: dict[tuple[str, str, int], list[str]] = {}
    for node in walk_nodes(graph):
        domain = normalize_domain(node.domain)
        opset = int(opsets.get(domain, 0))
        key = (domain, node.op_type, opset)
        label = node.name or f"<unnamed, output {next(iter(node.output), '')!r}>"
        if key in missing:
            missing[key].append(label)
        elif not _is_supported(node.op_type, domain, opset, node.name):
            missing[key] = [label]
    if not missing:
        return
    parts = []
    have = registered_ops()
    for (domain, op_type, opset), names in sorted(missing.items()):
        qual = f"{domain}::{op_type}" if domain else op_type
        versions = have.get((domain, op_type))
        hint = f"; monolib has versions {', '.join(map(str, versions))}" if versions else ""
        since = _schema_since(op_type, opset, domain)
        if versions and since is not None and since not in versions:
            # served by an older class that does not cover the changes of `since`
            hint = f"; ONNX version {since}{hint}, which do not cover it"
        shown = ", ".join(n if n.startswith("<") else repr(n) for n in names[:5])
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        parts.append(f"{qual} (opset {opset}{hint}): node(s) {shown}{more}")
    raise UnsupportedOpError(
        f"{len(missing)} unsupported operator(s) in the model: " + "; ".join(parts)
    )
