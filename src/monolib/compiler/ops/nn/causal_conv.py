"""``CausalConvWithState`` (ONNX 27): stateful causal depthwise 1-D convolution
(Mamba, Gated DeltaNet).

Input ``[B, C, L]``, weight ``[C, 1, k]``, optional bias ``[C]`` and ``past_state`` ``[B,
C, k-1]`` (zeros when absent). With ``padded = concat(past_state, input)`` along the
sequence: ``output[b, c, t] = bias[c] + sum_i weight[c, 0, i] * padded[b, c, t + i]``,
optionally followed by SiLU (``activation`` "silu"/"swish"); ``present_state`` is the
last ``k - 1`` positions of ``padded``. Follows the ONNX spec.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from ..math.swish import swish_expr

__all__ = ["CausalConvWithState"]

logger = logging.getLogger(__name__)


@register
class CausalConvWithState(OpDef):
    """ONNX ``CausalConvWithState`` 27 (float32/float64).

    Raises
    ------
    ShapeError
        Shapes that do not fit ``[B, C, L]`` / ``[C, 1, k]`` / ``[C]`` / ``[B, C, k-1]``.
    UnsupportedOpError
        Another element type or activation.
    """

    op_type, since_version = "CausalConvWithState", 27

    def _dims(self, node: Node) -> tuple[int, int, int, int]:
        x, w = node.inputs[0], node.inputs[1]
        where = f"CausalConvWithState (node {node.name!r})"
        if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
            raise ShapeError(f"{where}: input {list(x.shape)} / weight {list(w.shape)} do not fit")
        b, c, ln = x.shape
        k = w.shape[2]
        bias, past = node.input(2), node.input(3)
        if bias is not None and tuple(bias.shape) != (c,):
            raise ShapeError(f"{where}: bias {list(bias.shape)} must be [{c}]")
        if past is not None and tuple(past.shape) != (b, c, k - 1):
            raise ShapeError(f"{where}: past_state {list(past.shape)} must be [{b}, {c}, {k - 1}]")
        return b, c, ln, k

    def _act(self, node: Node) -> bool:
        act = node.attrs["activation"]
        if act not in ("none", "silu", "swish"):
            raise UnsupportedOpError(f"CausalConvWithState (node {node.name!r}): activation {act!r}")
        return act != "none"

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x.dtype not in (np.float32, np.float64):
            raise UnsupportedOpError(f"CausalConvWithState (node {node.name!r}): {x.dtype}")
        self._act(node)
        b, c, _, k = self._dims(node)
        return [(x.shape, x.dtype), ((b, c, k - 1), x.dtype)][: len(node.outputs)]

    def reference(self, node: Node, inputs):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        past = inputs[3] if len(inputs) > 3 else None
        b, c, ln, k = self._dims(node)
        if past is None:
            past = np.zeros((b, c, k - 1), x.dtype)
        padded = np.concatenate([past, x], axis=2).astype(np.float64)
        out = sum(w[None, :, 0, i : i + 1] * padded[:, :, i : i + ln] for i in range(k))
        if bias is not None:
            out = out + bias[None, :, None]
        if self._act(node):
            out = out / (1 + np.exp(-out))
        present = padded[:, :, ln:]
        return [out.astype(x.dtype), present.astype(x.dtype)][: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        b_, c_, ln, k = self._dims(node)
        x = node.inputs[0]
        dt = x.dtype
        ct = ctype(dt)
        bias, past = node.input(2), node.input(3)
        bc, t, i = ctx.unique("bc"), ctx.unique("t"), ctx.unique("i")
        xp, wp = ctx.ptr(x), ctx.ptr(node.inputs[1])
        pp = ctx.ptr(past) if past is not None else None

        def padded(p: str) -> str:
            """C expression of padded[p] of the (b, c) row ``bc``."""
            inp = f"{xp}[{bc}*{ln} + ({p}) - {k - 1}]"
            if k == 1:
                return inp
            old = f"{pp}[{bc}*{k - 1} + ({p})]" if pp else c_literal(0, dt)
            return f"(({p}) < {k - 1} ? {old} : {inp})"

        acc = ctx.unique("acc")
        init = f"{ctx.ptr(bias)}[{bc} % {c_}]" if bias is not None else c_literal(0, dt)
        val = swish_expr(acc, 1.0, dt) if self._act(node) else acc
        lines = [
            f"for (int64_t {bc} = 0; {bc} < {b_ * c_}; ++{bc}) {{",
            f"const {ct}* w = {wp} + ({bc} % {c_})*{k};",
            f"for (int64_t {t} = 0; {t} < {ln}; ++{t}) {{",
            f"  {ct} {acc} = {init};",
            f"  for (int64_t {i} = 0; {i} < {k}; ++{i}) {acc} += w[{i}] * {padded(f'{t} + {i}')};",
            f"  {ctx.ptr(node.outputs[0])}[{bc}*{ln} + {t}] = {val};",
            "}",
        ]
        if len(node.outputs) > 1 and k > 1:
            lines.append(
                f"for (int64_t {t} = 0; {t} < {k - 1}; ++{t}) "
                f"{ctx.ptr(node.outputs[1])}[{bc}*{k - 1} + {t}] = {padded(f'{ln} + {t}')};"
            )
        lines.append("}")
        return "\n".join(lines)
