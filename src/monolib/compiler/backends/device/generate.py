"""The device code generator: fused ops -> one kernel each, in one C-style language.

:func:`generate` walks the fused ops of :func:`~...passes.fuse_elementwise.fuse_elementwise`
in run order and writes one kernel per op that has code (``alias`` and in-place
``concat`` ops have none), in the target's :class:`~..cstyle.Language`:

* an elementwise chain: one work item per output element, the ops' ``c_expr``
  composed (:func:`~..epilogue.compose`, the same expressions as the C backend);
* an op whose class has ``emit_device`` (compiler/ops): its scalar body, then the fused epilogue
  applied to each value it stores (:meth:`KernelContext.store`);
* a ``copy`` op: one element per work item.

Every kernel takes ``(params, arena)``: two device buffers, laid out as the CPU
library's (the memory plan's arena offsets, a params blob of 64-byte aligned tensors),
so the graph JSON keeps its meaning (docs/ARCHITECTURE.md, "The graph JSON").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ....errors import CompileError, MonolibError, UnsupportedOpError
from ...ir import Graph, Value
from ...ops.base import device_ops, has_device_kernel, op_of
from ..cstyle import Language, ctype, rendering, tensor_pointer
from ...passes.fuse_elementwise import FusedOp, Fusion, broadcast_strides
from ...passes.plan_memory import MemoryPlan
from ..c.generate import ParamsBuilder
from ..graph_json import graph_json_of, node_json
from ..c.epilogue import compose
from .lowerings import Kernel, decompose, flat_of

__all__ = ["KernelContext", "generate", "supported_ops"]

logger = logging.getLogger(__name__)


def supported_ops() -> list[str]:
    """ONNX op types a device target runs as kernels (elementwise ops come on top)."""
    return device_ops()


class KernelContext:
    """What a lowering gets: typed device pointers and the epilogue-applying store."""

    def __init__(self, fused: FusedOp, plan: MemoryPlan, params: ParamsBuilder, language: Language):
        self.fused, self.plan, self.params, self.language = fused, plan, params, language

    def ptr(self, value: Value) -> str:
        """Typed pointer expression of ``value`` in the params blob or the arena."""
        return tensor_pointer(self.language, value, self.plan, self.params)

    def table(self, array: Any, name: str) -> str:
        """Put a compile-time table (a Resize's source indices or weights) in the params
        blob and return a typed const pointer expression to it.

        Parameters
        ----------
        array : numpy.ndarray
            Stored C-contiguous, flattened; its dtype is the element type.
        name : str
            Its name in the blob's entries (made unique there).
        """
        array = np.ascontiguousarray(array).reshape(-1)
        off = self.params.add(array, f"{self.fused.name}.{name}")
        return f"(({self.language.pointer(ctype(array.dtype), True)})(params + {off}))"

    def store(self, flat: str, value: str) -> list[str]:
        """C lines storing ``value`` (anchor output 0's element at flat index ``flat``)
        after the fused chain: side inputs are read at that element's index."""
        f = self.fused
        out = f.out
        T = ctype(out.dtype)
        if not f.steps:
            return [f"{self.ptr(out)}[{flat}] = ({T})({value});"]
        shape = out.shape
        idx = [f"o{d}" for d in range(len(shape))]
        lines = ["{", f"const idx_t e_ = {flat};", *decompose("e_", shape, "o")]
        lines += [f"(void){i};" for i in idx]
        anchor = f.anchor.outputs[0]
        lines.append(f"const {ctype(anchor.dtype)} x_ = {value};")
        body, final = compose(f.steps, (anchor, "x_"), self._leaf(shape, idx), "")
        lines += body
        lines.append(f"{self.ptr(out)}[e_] = {final};")
        lines.append("}")
        return lines

    def _leaf(self, shape: Sequence[int], idx: Sequence[str]):
        def leaf(v: Value) -> str:
            return f"{self.ptr(v)}[{flat_of(idx, broadcast_strides(v.shape, shape))}]"

        return leaf


def _chain_kernel(fused: FusedOp, ctx: KernelContext) -> Kernel:
    """An elementwise chain headed by an elementwise node: one element per work item."""
    out = fused.out
    idx = [f"o{d}" for d in range(len(out.shape))]
    body = [*decompose("gid", out.shape, "o"), *(f"(void){i};" for i in idx)]
    lines, final = compose(fused.steps, None, ctx._leaf(out.shape, idx), "")
    return Kernel(out.size, [*body, *lines, f"{ctx.ptr(out)}[gid] = {final};"])


def _kernel(fused: FusedOp, ctx: KernelContext) -> Kernel:
    if fused.kind == "copy":
        return Kernel(fused.out.size, [f"{ctx.ptr(fused.out)}[gid] = {ctx.ptr(fused.src)}[gid];"])
    if fused.kind == "elementwise":
        return _chain_kernel(fused, ctx)
    node = fused.anchor
    op = op_of(node)
    if not has_device_kernel(op):
        raise UnsupportedOpError(
            f"operator {node.op_type} (node {node.name!r}) has no {ctx.language.name} kernel; "
            f"device kernels exist for {', '.join(supported_ops())} and elementwise ops"
        )
    if any(v is not None and v.name for v in node.outputs[1:]):
        raise UnsupportedOpError(
            f"{node.op_type} (node {node.name!r}): {ctx.language.name} kernels compute output 0 only"
        )
    return op.emit_device(node, ctx)


def _render(name: str, kernel: Kernel, language: Language, comment: str) -> str:
    body = "\n".join("  " + line for line in kernel.body)
    return (
        f"/* {comment} */\n{language.signature(name)} {{\n"
        f"  const idx_t gid = {language.gid};\n"
        f"  if (gid >= {kernel.items}) return;\n"
        f"  (void)params; (void)arena;\n{body}\n}}"
    )


def generate(
    graph: Graph, fusion: Fusion, plan: MemoryPlan, language: Language, *, constants=None
) -> tuple[str, list[dict[str, Any]], dict[str, Any], Any]:
    """Kernel source, function table, graph JSON and params blob of a device target.

    Returns
    -------
    source : str
        Every kernel, in ``language``.
    functions : list of dict
        Per fused op with code, in run order: ``{"name": kernel, "node": index in the
        graph JSON nodes, "items": work items}``.
    graph_json : dict
        As the C backend's (docs/ARCHITECTURE.md), plus ``"device": language.name``.
    params : numpy.ndarray of uint8

    Raises
    ------
    UnsupportedOpError
        An op without a device kernel (the message lists those that have one).
    CompileError
        Another failure; the message names the node.
    """
    params = ParamsBuilder()
    kernels, functions, nodes = [], [], []
    for fused in fusion.ops:
        if not fused.has_code:
            continue
        i = len(nodes)
        name = f"k{i}"
        ctx = KernelContext(fused, plan, params, language)
        try:
            with rendering(language):  # the ops' bound sub-expressions in this language
                kernel = _kernel(fused, ctx)
        except MonolibError:
            raise
        except Exception as e:  # a lowering bug must name the node
            raise CompileError(f"{language.name}: lowering node {fused.name!r} failed: {e}") from e
        chain = " -> ".join([fused.op_type, *fused.fused_types])
        kernels.append(_render(name, kernel, language, f"{chain}: {fused.name}"))
        functions.append({"name": name, "node": i, "items": int(kernel.items)})
        nodes.append(node_json(fused, plan))
    # element indices fit 32 bits unless a tensor has 2^31 elements; 32-bit index math
    # is what device compilers vectorize well (PoCL: rec 30% faster than int64)
    big = max((v.size for v in graph.values() if v is not None), default=0) >= 2**31 - 1
    index = f"typedef {'int64_t' if big else 'int'} idx_t; /* element indices */\n"
    source = language.prelude + index + "\n" + "\n\n".join(kernels) + "\n"
    blob = params.blob()
    graph_json = graph_json_of(graph, fusion, plan, nodes, params, blob, constants,
                               arena_bytes=plan.arena_bytes, device=language.name)
    logger.info("%s: %d kernels, %d bytes of source", language.name, len(kernels), len(source))
    return source, functions, graph_json, blob
