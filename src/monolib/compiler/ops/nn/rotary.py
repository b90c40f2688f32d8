"""``RotaryEmbedding`` (ONNX 23): rotary position embedding of transformer Q/K.

X is ``[B, H, S, D]`` or 3-D ``[B, S, H*D]`` (``num_heads`` given). The first ``R``
(``rotary_embedding_dim``, default ``D``) features of each head are rotated by the
angle of their position: pairs ``(x1, x2)`` -- the two halves of the ``R`` features, or
adjacent features when ``interleaved=1`` -- become ``(cos*x1 - sin*x2, sin*x1 +
cos*x2)`` with ``cos``/``sin`` the row of the caches ``[.., R/2]`` selected by
``position_ids[b, s]`` (caches ``[max_pos, R/2]``) or, without ids, by ``(b, s)``
(caches ``[B, S, R/2]``). Features from ``R`` on are copied. Follows the ONNX spec.
A position id outside ``[0, max_pos)`` is clamped to the cache (no out-of-bounds read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, Value
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype

__all__ = ["RotaryEmbedding", "emit_rotary", "rotate"]

logger = logging.getLogger(__name__)


def _dims(node: Node) -> tuple[int, int, int, int, int]:
    """(B, H, S, D, R) of a RotaryEmbedding node; raises ShapeError on bad shapes."""
    x, cos = node.inputs[0], node.inputs[1]
    where = f"RotaryEmbedding (node {node.name!r})"
    if len(x.shape) == 4:
        b, h, s, d = x.shape
    elif len(x.shape) == 3:
        h = node.attrs["num_heads"]
        if not h or x.shape[2] % h:
            raise ShapeError(f"{where}: 3-D input needs num_heads dividing {x.shape[2]}")
        b, s, d = x.shape[0], x.shape[1], x.shape[2] // h
    else:
        raise ShapeError(f"{where}: input must be 3-D or 4-D, got {list(x.shape)}")
    r = node.attrs["rotary_embedding_dim"] or d
    if r > d or r % 2:
        raise ShapeError(f"{where}: rotary_embedding_dim {r} must be even and <= head size {d}")
    ids = node.input(3)
    want = (r // 2,) if ids is not None else (b, s, r // 2)
    for v in (cos, node.inputs[2]):
        if tuple(v.shape[-len(want):]) != want or (ids is not None and len(v.shape) != 2):
            raise ShapeError(f"{where}: cos/sin cache {list(v.shape)} does not fit (R/2 = {r // 2})")
    if ids is not None and tuple(ids.shape) != (b, s):
        raise ShapeError(f"{where}: position_ids {list(ids.shape)} must be [{b}, {s}]")
    return b, h, s, d, r


@register
class RotaryEmbedding(OpDef):
    """ONNX ``RotaryEmbedding`` 23 (float32/float64); see the module docstring."""

    op_type, since_version = "RotaryEmbedding", 23

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x.dtype not in (np.float32, np.float64):
            raise UnsupportedOpError(f"RotaryEmbedding (node {node.name!r}): {x.dtype}")
        _dims(node)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x, cos, sin = inputs[:3]
        ids = inputs[3] if len(inputs) > 3 else None
        dims = _dims(node)
        if ids is not None:
            idx = np.clip(ids, 0, cos.shape[0] - 1)
            cos, sin = cos[idx], sin[idx]
        return [rotate(x, cos, sin, dims, node.attrs["interleaved"])]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        dims = _dims(node)
        ids = node.input(3)

        def position(b: str, s: str) -> str:
            if ids is None:
                return f"int64_t pos = {b}*{dims[2]} + {s};"
            npos = node.inputs[1].shape[0]
            return (
                f"int64_t pos = (int64_t){ctx.ptr(ids)}[{b}*{dims[2]} + {s}];\n"
                f"pos = pos < 0 ? 0 : (pos >= {npos} ? {npos - 1} : pos);"
            )

        return emit_rotary(ctx, node.inputs[0], node.outputs[0], node.inputs[1], node.inputs[2],
                           dims, node.attrs["interleaved"], position)


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, dims, interleaved: int) -> np.ndarray:
    """NumPy rotation of ``x`` (``[B, H, S, D]`` or ``[B, S, H*D]``) by the cache rows
    ``cos``/``sin`` ``[B, S, R/2]`` of each (batch, position); ``dims`` is (B, H, S, D, R)."""
    b, h, s, d, r = dims
    v = x.reshape(b, s, h, d) if x.ndim == 3 else x.transpose(0, 2, 1, 3)  # [B, S, H, D]
    c, sn = cos[:, :, None, :], sin[:, :, None, :]
    out = v.copy()
    if interleaved:
        x1, x2 = v[..., 0:r:2], v[..., 1:r:2]
        out[..., 0:r:2], out[..., 1:r:2] = c * x1 - sn * x2, sn * x1 + c * x2
    else:
        x1, x2 = v[..., : r // 2], v[..., r // 2 : r]
        out[..., : r // 2], out[..., r // 2 : r] = c * x1 - sn * x2, sn * x1 + c * x2
    out = out.reshape(x.shape) if x.ndim == 3 else out.transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out).astype(x.dtype)


def emit_rotary(ctx: EmitContext, x: Value, y: Value, cos: Value, sin: Value, dims,
                interleaved: int, position: Callable[[str, str], str]) -> str:
    """C rotating ``x`` into ``y`` (layouts of :func:`rotate`; ``dims`` (B, H, S, D, R))
    with the cache rows ``cos``/``sin`` ``[*, R/2]`` at ``pos``: ``position(b, s)``
    gives C statements declaring ``int64_t pos`` for batch ``b``, sequence index ``s``
    (C names). Features from ``R`` on are copied."""
    b_, h_, s_, d_, r = dims
    if x.size == 0:
        return ""
    ct = ctype(x.dtype)
    r2 = r // 2
    b, h, s, k = (ctx.unique(p) for p in ("b", "h", "s", "k"))
    if len(x.shape) == 3:
        base = f"({b}*{s_} + {s})*{h_ * d_} + {h}*{d_}"
    else:
        base = f"(({b}*{h_} + {h})*{s_} + {s})*{d_}"
    if interleaved:
        i1, i2 = f"2*{k}", f"2*{k} + 1"
    else:
        i1, i2 = k, f"{k} + {r2}"
    return "\n".join(
        [
            f"for (int64_t {b} = 0; {b} < {b_}; ++{b}) for (int64_t {s} = 0; {s} < {s_}; ++{s}) {{",
            position(b, s),
            f"const {ct}* cs = {ctx.ptr(cos)} + pos*{r2};",
            f"const {ct}* sn = {ctx.ptr(sin)} + pos*{r2};",
            f"for (int64_t {h} = 0; {h} < {h_}; ++{h}) {{",
            f"const {ct}* xr = {ctx.ptr(x)} + {base};",
            f"{ct}* yr = {ctx.ptr(y)} + {base};",
            f"for (int64_t {k} = 0; {k} < {r2}; ++{k}) {{",
            f"  const {ct} x1 = xr[{i1}], x2 = xr[{i2}];",
            f"  yr[{i1}] = cs[{k}] * x1 - sn[{k}] * x2;",
            f"  yr[{i2}] = sn[{k}] * x1 + cs[{k}] * x2;",
            "}",
            f"for (int64_t {k} = {r}; {k} < {d_}; ++{k}) yr[{k}] = xr[{k}];",
            "}",
            "}",
        ]
    )
