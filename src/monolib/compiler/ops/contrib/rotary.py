"""``com.microsoft`` ``RotaryEmbedding``: rotary position embedding (RoPE) as ONNX
Runtime's transformer models carry it (before ONNX 23 had its own).

Contrib op schema (``docs/ContribOperators.md``), checked against ONNX Runtime's CPU
kernel. Inputs ``input`` (``[B, S, N*D]``, or ``[B, N, S, D]``), ``position_ids``
(``[B, S]``: the position of each token; or ``[1]``: an offset, token ``s`` at
``offset + s``), ``cos_cache``/``sin_cache`` (``[max_positions, R/2]``). Attributes
``interleaved``, ``num_heads`` (3-D input; 0: ``N = hidden / (2 * cache width)``),
``rotary_embedding_dim`` (``R``, 0: the head size; with ``num_heads``), ``scale`` (not
read by ONNX Runtime's CPU kernel, nor here), ``is_packed_batching`` (refused).

The rotation itself is ONNX ``RotaryEmbedding``'s (``nn/rotary.py``: ``rotate`` and
``emit_rotary``); only the operand order and the ``[1]`` position offset differ. A
position outside the caches is clamped into them (no out-of-bounds read).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...symbolic import is_one, same_shape
from ..base import EmitContext, OpDef, OutType, register
from ..nn.rotary import emit_rotary, rotate

__all__ = ["MsRotaryEmbedding"]

logger = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"
X, IDS, COS, SIN = range(4)


@register
class MsRotaryEmbedding(OpDef):
    """``com.microsoft.RotaryEmbedding`` (1), float32/float64; see the module docstring.

    Raises
    ------
    ShapeError
        An input of rank other than 3 or 4, a hidden size ``num_heads`` does not divide,
        caches not ``[*, R/2]``, a rotary dim above the head size or odd, position ids
        neither ``[1]`` nor ``[B, S]``.
    UnsupportedOpError
        ``is_packed_batching=1``, or a non-float input.
    """

    op_type, domain, since_version = "RotaryEmbedding", MS_DOMAIN, 1
    defaults = {"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0, "scale": 1.0,
                "is_packed_batching": 0}

    def _dims(self, node: Node) -> tuple:
        """(B, N, S, D, R) of the node."""
        x, ids, cos = node.inputs[X], node.inputs[IDS], node.inputs[COS]
        where = f"com.microsoft.RotaryEmbedding (node {node.name!r})"
        if self.attr(node, "is_packed_batching"):
            raise UnsupportedOpError(f"{where}: is_packed_batching=1 is not supported")
        if len(cos.shape) != 2 or not same_shape(cos.shape, node.inputs[SIN].shape):
            raise ShapeError(f"{where}: cos/sin caches must be one [positions, R/2] shape, got "
                             f"{list(cos.shape)} and {list(node.inputs[SIN].shape)}")
        heads, rdim = int(self.attr(node, "num_heads")), int(self.attr(node, "rotary_embedding_dim"))
        if len(x.shape) == 4:
            b, n, s, d = x.shape
        elif len(x.shape) == 3:
            b, s, hidden = x.shape
            n = heads or hidden // (2 * cos.shape[1])
            if n <= 0 or hidden % n:
                raise ShapeError(f"{where}: {n} heads do not divide hidden size {hidden}")
            d = hidden // n
        else:
            raise ShapeError(f"{where}: input must be 3-D or 4-D, got {list(x.shape)}")
        r = rdim or d
        if r > d or r % 2 or cos.shape[1] != r // 2:
            raise ShapeError(f"{where}: rotary dim {r} (head size {d}) does not fit caches {list(cos.shape)}")
        if not (same_shape(ids.shape, (1,)) or same_shape(ids.shape, (b, s))):
            raise ShapeError(f"{where}: position_ids {list(ids.shape)} must be [1] or [{b}, {s}]")
        return b, n, s, d, r

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[X]
        if x.dtype not in (np.float32, np.float64):
            raise UnsupportedOpError(f"com.microsoft.RotaryEmbedding (node {node.name!r}): {x.dtype}")
        self._dims(node)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x, ids, cos, sin = inputs[:4]
        dims = self._dims(node)
        b, _, s, _, _ = dims
        pos = ids[0] + np.arange(s)[None, :] if ids.ndim == 1 else ids  # [1]: an offset
        pos = np.clip(np.broadcast_to(pos, (b, s)).astype(np.int64), 0, cos.shape[0] - 1)
        return [rotate(x, cos[pos], sin[pos], dims, self.attr(node, "interleaved"))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        dims = self._dims(node)
        ids = node.inputs[IDS]
        npos = node.inputs[COS].shape[0]
        offset = is_one(ids.shape[0]) and len(ids.shape) == 1

        def position(b: str, s: str) -> str:
            read = f"{ctx.ptr(ids)}[0] + {s}" if offset else f"{ctx.ptr(ids)}[{b}*{dims[2]} + {s}]"
            return (f"int64_t pos = (int64_t)({read});\n"
                    f"pos = pos < 0 ? 0 : (pos >= {npos} ? {npos - 1} : pos);")

        return emit_rotary(ctx, node.inputs[X], node.outputs[0], node.inputs[COS], node.inputs[SIN],
                           dims, self.attr(node, "interleaved"), position)
