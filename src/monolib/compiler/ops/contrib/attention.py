"""``com.microsoft`` ``Attention`` 1 and ``MultiHeadAttention`` 1 (BERT/GPT-2 style).

Semantics of ONNX Runtime's contrib operator spec (``docs/ContribOperators.md``) and of
its CPU kernels (``AttentionCPUBase``), checked against them in the tests:

* ``Attention``: ``input [B, S, D_in] @ weights [D_in, D + D + D_v] + bias`` gives Q, K,
  V (``qkv_hidden_sizes`` = ``[D, D, D_v]``, default three equal thirds), ``num_heads``
  heads of ``D / N`` (V: ``D_v / N``). ``past [2, B, N, P, H]`` is prepended to K/V and
  ``present [2, B, N, P + S, H]`` returned.
* ``MultiHeadAttention``: Q ``[B, S, D]``, K ``[B, L, D]``, V ``[B, L, D_v]`` (or K/V
  already per head ``[B, N, L, H]``, or packed QKV ``[B, S, N, 3, H]``, or packed KV
  ``[B, L, N, 2, H]``), ``bias [D + D + D_v]`` added to the projections, ``past_key``/
  ``past_value [B, N, P, H]`` -> ``present_key``/``present_value [B, N, P + L, H]``.
* score = ``scale * Q K^T`` (``scale`` 0: ``1 / sqrt(H)``) ``+ attention_bias [B|1,
  N|1, S, T]`` ``+ mask``, softmax over the ``T = P + L`` keys, times V. The mask is ONNX
  Runtime's: 0 where a key is kept, ``mask_filter_value`` (default -10000, not -inf:
  a fully masked row is a plain softmax) where ``mask_index`` / ``key_padding_mask``
  (int32) drops it -- ``[B]`` keys ``>= end[b]``, ``[2B]`` also keys ``< start[b]``,
  ``[B, T]`` or ``[B, S, T]`` where the raw mask is 0. With ``unidirectional`` and
  ``S > 1`` the keys ``t > P + s`` get no weight at all (ONNX Runtime's kernels drop
  them outright: a row whose other keys are all padding attends to those alone).

The attention itself is monolib's ONNX ``Attention`` kernel (``ops/nn/attention.py``):
this module computes the projections with gemm.h, lays Q/K/V out as its 3-D inputs,
builds the float mask ``[B, N|1, S, T]`` above (the causal part is that op's
``is_causal``), and emits that op's loop on views of these buffers (past/present map onto its ``past_key``/``present_key`` directly).
float32 only.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...backends.cstyle import c_literal
from ...ir import Node, Value
from ..base import EmitContext, OpDef, OutType, register
from ..nn._gemm import bbuf_floats, gemm_call, include_gemm
from ..nn.attention import Attention as OnnxAttention
from ..nn.gemm import a_operand, b_operand

__all__ = ["ContribAttention", "MultiHeadAttention", "contrib_mask", "mha_dims"]

logger = logging.getLogger(__name__)


class _Views:
    """An :class:`EmitContext` whose ``ptr`` also knows stand-in Values (views into
    scratch or into a real tensor); everything else goes to the wrapped context."""

    def __init__(self, ctx: EmitContext) -> None:
        self._ctx = ctx
        self._ptrs: dict[int, str] = {}

    def view(self, name: str, shape: tuple, expr: str) -> Value:
        """A float32 stand-in Value whose data is at the C pointer ``expr``."""
        v = Value(name, shape, np.float32)
        self._ptrs[v.uid] = f"(({expr}))"
        return v

    def ptr(self, value: Value) -> str:
        return self._ptrs.get(value.uid) or self._ctx.ptr(value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _require_f32(node: Node, idx) -> None:
    for i in idx:
        v = node.input(i)
        if v is not None and v.dtype != np.float32:
            raise UnsupportedOpError(
                f"{node.op_type} (node {node.name!r}): input {i} is {v.dtype}; float32 only")


def _check_mask(node: Node, mask: Value | None, b: int, s: int, t: int) -> None:
    if mask is None:
        return
    shape = tuple(mask.shape)
    if mask.dtype != np.int32 or shape not in ((b,), (2 * b,), (b, t), (b, s, t)):
        raise UnsupportedOpError(
            f"{node.op_type} (node {node.name!r}): mask {mask.dtype}{list(shape)}; monolib "
            f"implements int32 [B], [2B], [B, T] and [B, S, T] masks (B={b}, S={s}, T={t})")


def _check_bias(node: Node, ab: Value | None, b: int, n: int, s: int, t: int) -> None:
    if ab is not None and (len(ab.shape) != 4 or ab.shape[0] not in (1, b)
                           or ab.shape[1] not in (1, n) or tuple(ab.shape[2:]) != (s, t)):
        raise ShapeError(f"{node.op_type} (node {node.name!r}): attention_bias {ab.shape} "
                         f"is not [B|1, N|1, S, T] = [{b}|1, {n}|1, {s}, {t}]")


def contrib_mask(mask, bias, causal: bool, b: int, n: int, s: int, p: int, t: int,
                 filt: float) -> np.ndarray:
    """ONNX Runtime's additive mask ``[B, N, S, T]`` (float64) from ``mask`` (int32 or
    ``None``), ``attention_bias`` (or ``None``) and the causal flag (see the module
    docstring)."""
    keep = np.ones((b, s, t), bool)
    if mask is not None:
        mask = np.asarray(mask)
        j = np.arange(t)
        if mask.ndim == 1:
            keep &= (j[None, :] < mask[:b, None])[:, None, :]
            if mask.shape[0] == 2 * b:
                keep &= (j[None, :] >= np.minimum(mask[b:, None], t))[:, None, :]
        elif mask.ndim == 2:
            keep &= (mask > 0)[:, None, :]
        else:
            keep &= mask > 0
    out = np.where(keep, 0.0, filt)[:, None]
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    if causal and s > 1:
        out = np.where(np.arange(t)[None, :] <= p + np.arange(s)[:, None], out, -np.inf)
    return np.broadcast_to(out, (b, n, s, t))


def _reference_core(q, k, v, pk, pv, add, scale: float):
    """Attention on ``[B, N, S|L, H]`` arrays: (output ``[B, S, N*Hv]``, present K, V)."""
    if pk is not None:
        k, v = np.concatenate([pk, k], axis=2), np.concatenate([pv, v], axis=2)
    x = scale * (q.astype(np.float64) @ np.swapaxes(k, 2, 3).astype(np.float64)) + add
    # scores rounded to float32 as the kernels (and ORT) hold them: a fully masked row sits
    # near the -10000 filter, where float32's spacing (~1e-3) is the answer's error
    x = x.astype(np.float32).astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)
    b, n, s, hv = y.shape
    return y.transpose(0, 2, 1, 3).reshape(b, s, n * hv).astype(np.float32), k, v


def _emit_mask(ctx: EmitContext, node: Node, mask: Value | None, ab: Value | None,
               d: dict, filt: float) -> tuple[str, tuple | None]:
    """C filling a scratch ``[B, Nm, S, T]`` float mask (``Nm`` = N when the attention
    bias has heads, else 1) from the padding mask and the attention bias: (C line,
    (pointer expression, shape)), or ``("", None)`` when the node has neither."""
    B, N, S, T = d["B"], d["N"], d["S"], d["T"]
    if mask is None and ab is None:
        return "", None
    nm = N if ab is not None and ab.shape[1] == N else 1
    buf = f"((float*){ctx.scratch(4 * B * nm * S * T)})"
    b, h, i, j = (ctx.unique(x) for x in "bhij")
    conds = []
    if mask is not None:
        mp = ctx.ptr(mask)
        if len(mask.shape) == 1:
            conds.append(f"{j} < {mp}[{b}]")
            if mask.shape[0] == 2 * B:
                conds.append(f"{j} >= ({mp}[{B} + {b}] < {T} ? {mp}[{B} + {b}] : {T})")
        elif len(mask.shape) == 2:
            conds.append(f"{mp}[{b}*{T} + {j}] > 0")
        else:
            conds.append(f"{mp}[({b}*{S} + {i})*{T} + {j}] > 0")
    keep = " && ".join(f"({c})" for c in conds) or "1"
    val = f"(({keep}) ? 0.0f : {c_literal(filt, np.float32)})"
    if ab is not None:
        sb = N * S * T if ab.shape[0] != 1 else 0
        sh = S * T if ab.shape[1] != 1 else 0
        val += f" + {ctx.ptr(ab)}[{b}*{sb} + {h}*{sh} + {i}*{T} + {j}]"
    code = (f"for (int64_t {b} = 0; {b} < {B}; ++{b}) for (int64_t {h} = 0; {h} < {nm}; ++{h})"
            f" for (int64_t {i} = 0; {i} < {S}; ++{i}) for (int64_t {j} = 0; {j} < {T}; ++{j})"
            f" {buf}[(({b}*{nm} + {h})*{S} + {i})*{T} + {j}] = {val};\n")
    return code, (buf, (B, nm, S, T))


def _emit_core(node: Node, views: _Views, d: dict, q: str, k: str, v: str,
               mask: tuple | None, past: tuple | None, y: str, present: tuple | None,
               scale: float, causal: bool) -> str:
    """monolib's ONNX ``Attention`` (3-D form, ``N`` heads) on contiguous ``q [B, S,
    N*H]``, ``k [B, L, N*H]``, ``v [B, L, N*Hv]`` buffers (C pointer expressions); its
    ``is_causal`` (keys ``j <= i + P``) when ``causal`` and ``S > 1``."""
    B, N, S, L, P, T, H, Hv = (d[x] for x in ("B", "N", "S", "L", "P", "T", "H", "Hv"))
    nm = node.name
    ins: list[Value | None] = [views.view(f"{nm}.q", (B, S, N * H), q),
                               views.view(f"{nm}.k", (B, L, N * H), k),
                               views.view(f"{nm}.v", (B, L, N * Hv), v), None, None, None]
    if mask is not None:
        ins[3] = views.view(f"{nm}.mask", mask[1], mask[0])
    if past is not None:
        ins[4] = views.view(f"{nm}.past_k", (B, N, P, H), past[0])
        ins[5] = views.view(f"{nm}.past_v", (B, N, P, Hv), past[1])
    outs = [views.view(f"{nm}.y", (B, S, N * Hv), y)]
    if present is not None:
        outs += [views.view(f"{nm}.present_k", (B, N, T, H), present[0]),
                 views.view(f"{nm}.present_v", (B, N, T, Hv), present[1])]
    while ins and ins[-1] is None:
        ins.pop()
    core = Node("Attention", nm, ins, outs, {"q_num_heads": N, "kv_num_heads": N,
                                             "scale": scale,
                                             "is_causal": int(causal and S > 1)}, "", 23)
    return OnnxAttention().emit(core, views)


def _scale(node: Node, h: int) -> float:
    sc = float(node.attrs.get("scale", 0.0) or 0.0)
    return sc if sc != 0.0 else 1.0 / math.sqrt(h)


# -- Attention ----------------------------------------------------------------------------


def _attention_dims(node: Node) -> dict:
    """Sizes of a contrib Attention node: ``B, S, Din, N, D, Dv, H, Hv, L, P, T``.

    Raises
    ------
    ShapeError
        Shapes of input/weights/bias/past that disagree with ``num_heads`` and
        ``qkv_hidden_sizes``.
    UnsupportedOpError
        Rotary embedding, a shared past/present buffer, a 4-D (Megatron) mask.
    """
    where = f"Attention (node {node.name!r})"
    x, w = node.inputs[0].shape, node.inputs[1].shape
    n = int(node.attrs["num_heads"])
    if len(x) != 3 or len(w) != 2 or w[0] != x[2]:
        raise ShapeError(f"{where}: input {x} and weights {w} are not [B, S, D_in], [D_in, *]")
    sizes = [int(v) for v in node.attrs.get("qkv_hidden_sizes") or []]
    if not sizes:
        if w[1] % 3:
            raise ShapeError(f"{where}: weights {w} do not split in three")
        sizes = [w[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != w[1] or sizes[0] != sizes[1] or any(
            v % n for v in sizes):
        raise ShapeError(f"{where}: qkv_hidden_sizes {sizes} do not fit weights {w} and "
                         f"{n} heads")
    bias = node.input(2)
    if bias is not None and tuple(bias.shape) != (w[1],):
        raise ShapeError(f"{where}: bias {bias.shape} is not [{w[1]}]")
    for a in ("do_rotary", "past_present_share_buffer"):
        if node.attrs.get(a):
            raise UnsupportedOpError(f"{where}: attribute {a}=1 is not supported")
    b, s = x[0], x[1]
    h, hv = sizes[0] // n, sizes[2] // n
    p = 0
    past = node.input(4)
    if past is not None:
        p = past.shape[3] if len(past.shape) == 5 else -1
        if h != hv or tuple(past.shape) != (2, b, n, p, h):
            raise ShapeError(f"{where}: past {past.shape} is not [2, {b}, {n}, P, {h}]")
    return {"B": b, "S": s, "Din": x[2], "N": n, "D": sizes[0], "Dv": sizes[2], "H": h,
            "Hv": hv, "L": s, "P": p, "T": p + s}


@register
class ContribAttention(OpDef):
    """``com.microsoft`` ``Attention`` 1: projections, mask and attention in one op; see
    the module docstring.

    Raises
    ------
    UnsupportedOpError
        Types other than float32, masks other than int32 ``[B]``/``[2B]``/``[B, T]``/
        ``[B, S, T]``, ``do_rotary``, ``past_present_share_buffer``.
    ShapeError
        See :func:`_attention_dims`; an attention_bias that is not ``[B|1, N|1, S, T]``.
    """

    op_type, domain, since_version = "Attention", "com.microsoft", 1
    defaults = {"unidirectional": 0, "mask_filter_value": -10000.0, "scale": 0.0}

    def infer(self, node: Node) -> list[OutType]:
        _require_f32(node, (0, 1, 2, 4, 5))
        d = _attention_dims(node)
        _check_mask(node, node.input(3), d["B"], d["S"], d["T"])
        _check_bias(node, node.input(5), d["B"], d["N"], d["S"], d["T"])
        f32 = np.dtype(np.float32)
        outs = [((d["B"], d["S"], d["Dv"]), f32), ((2, d["B"], d["N"], d["T"], d["H"]), f32)]
        return outs[: len(node.outputs)]

    def reference(self, node: Node, inputs):
        d = _attention_dims(node)
        x, w, bias, mask, past, ab = (list(inputs) + [None] * 6)[:6]
        B, S, N, D, H, Hv = d["B"], d["S"], d["N"], d["D"], d["H"], d["Hv"]
        qkv = x.astype(np.float64) @ w.astype(np.float64)
        if bias is not None:
            qkv = qkv + bias
        heads = [qkv[..., o: o + N * hh].reshape(B, S, N, hh).transpose(0, 2, 1, 3)
                 for o, hh in ((0, H), (D, H), (2 * D, Hv))]
        add = contrib_mask(mask, ab, bool(self.attr(node, "unidirectional")), B, N, S,
                           d["P"], d["T"], float(self.attr(node, "mask_filter_value")))
        y, pk, pv = _reference_core(*heads, None if past is None else past[0],
                                    None if past is None else past[1], add, _scale(node, H))
        if len(node.outputs) == 1:
            return [y]
        return [y, np.stack([pk, pv]).astype(np.float32)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        d = _attention_dims(node)
        B, S, Din, N, D, Dv, H, P, T = (d[x] for x in ("B", "S", "Din", "N", "D", "Dv", "H",
                                                       "P", "T"))
        if B * S == 0:
            return ""
        include_gemm(ctx)
        x, w, bias = node.inputs[0], node.inputs[1], node.input(2)
        m, wcols = B * S, D + D + Dv
        ap, code = a_operand(ctx, x, m, Din, Din, 1, name=node.name + ".input")
        bufs = []
        for col, width in ((0, D), (D, D), (2 * D, Dv)):
            buf = f"((float*){ctx.scratch(4 * m * width)})"
            bufs.append(buf)
            bsrc = b_operand(ctx, w, Din, width, wcols, 1, offset=str(col), const_offset=col,
                             name=f"{node.name}.W{col}")
            fields = {"M": str(m), "N": str(width), "K": str(Din), "a": ap, "c": buf}
            if bias is not None:
                fields["bias_n"] = f"({ctx.ptr(bias)} + {col})"
            if bsrc["kind"] != "ML_B_PACKED":
                fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(Din, width))}"
            code += gemm_call(fields, bsrc) + "\n"
        views = _Views(ctx)
        made, mask = _emit_mask(ctx, node, node.input(3), node.input(5), d,
                                float(self.attr(node, "mask_filter_value")))
        code += made
        past = node.input(4)
        pasts = None
        if past is not None and P > 0:
            pp = ctx.ptr(past)
            pasts = (pp, f"{pp} + {B * N * P * H}")
        present = None
        if len(node.outputs) > 1:
            pr = ctx.ptr(node.outputs[1])
            present = (pr, f"{pr} + {B * N * T * H}")
        return code + _emit_core(node, views, d, *bufs, mask, pasts, ctx.ptr(node.outputs[0]),
                                 present, _scale(node, H),
                                 bool(self.attr(node, "unidirectional")))


# -- MultiHeadAttention --------------------------------------------------------------------


def mha_dims(node: Node) -> dict:
    """Sizes and layout of a MultiHeadAttention node: ``B, S, N, H, Hv, L, P, T`` and
    ``form`` (``"qkv"`` packed QKV, ``"kv"`` packed KV, ``"bnsh"`` per-head K/V,
    ``"3d"``).

    Raises
    ------
    ShapeError
        Shapes that disagree with ``num_heads`` or with each other.
    UnsupportedOpError
        ``cache_indirection``/``past_sequence_length`` inputs, the ``qk`` output, a bias
        with per-head K/V.
    """
    where = f"MultiHeadAttention (node {node.name!r})"
    n = int(node.attrs["num_heads"])
    q, k, v = node.inputs[0], node.input(1), node.input(2)
    for i, what in ((8, "past_sequence_length"), (9, "cache_indirection")):
        if node.input(i) is not None:
            raise UnsupportedOpError(f"{where}: the {what} input is not supported")
    if len(node.outputs) > 3:
        raise UnsupportedOpError(f"{where}: the qk output is not supported")
    qs = tuple(q.shape)
    if len(qs) == 5:
        if k is not None or v is not None or qs[2:4] != (n, 3):
            raise ShapeError(f"{where}: packed QKV {qs} is not [B, S, {n}, 3, H] alone")
        b, s, h = qs[0], qs[1], qs[4]
        form, ln, hv = "qkv", s, h
    else:
        if len(qs) != 3 or qs[2] % n or k is None:
            raise ShapeError(f"{where}: query {qs} is not [B, S, N*H] with a key")
        b, s, h = qs[0], qs[1], qs[2] // n
        ks = tuple(k.shape)
        if len(ks) == 5:
            if v is not None or ks[0] != b or ks[2:] != (n, 2, h):
                raise ShapeError(f"{where}: packed KV {ks} is not [{b}, L, {n}, 2, {h}] alone")
            form, ln, hv = "kv", ks[1], h
        elif len(ks) == 4:
            vs = tuple(v.shape) if v is not None else ()
            if ks[:2] != (b, n) or ks[3] != h or len(vs) != 4 or vs[:3] != ks[:3]:
                raise ShapeError(f"{where}: key {ks} / value {vs} are not [{b}, {n}, L, H]")
            if node.input(3) is not None:
                raise UnsupportedOpError(f"{where}: a bias with per-head (4-D) key/value")
            form, ln, hv = "bnsh", ks[2], vs[3]
        else:
            vs = tuple(v.shape) if v is not None else ()
            if len(ks) != 3 or ks[0] != b or ks[2] != n * h or len(vs) != 3 or vs[:2] != ks[:2] \
                    or vs[2] % n:
                raise ShapeError(f"{where}: key {ks} / value {vs} are not [{b}, L, {n}*H]")
            form, ln, hv = "3d", ks[1], vs[2] // n
    bias = node.input(3)
    if bias is not None and tuple(bias.shape) != (n * (2 * h + hv),):
        raise ShapeError(f"{where}: bias {bias.shape} is not [{n * (2 * h + hv)}]")
    pk, pv = node.input(6), node.input(7)
    p = 0
    if (pk is None) != (pv is None):
        raise ShapeError(f"{where}: past_key and past_value go together")
    if pk is not None:
        p = pk.shape[2]
        if tuple(pk.shape) != (b, n, p, h) or tuple(pv.shape) != (b, n, p, hv):
            raise ShapeError(f"{where}: past_key {pk.shape} / past_value {pv.shape} are not "
                             f"[{b}, {n}, P, H]")
    return {"B": b, "S": s, "N": n, "H": h, "Hv": hv, "L": ln, "P": p, "T": p + ln,
            "form": form}


def _mha_layout(d: dict) -> list[tuple[int, int, int, int, int]]:
    """Per Q, K, V of a MultiHeadAttention input: ``(input index, offset, stride of b,
    of s, of n)`` of element ``(b, s, n, 0)``."""
    S, N, H, Hv, L = (d[x] for x in ("S", "N", "H", "Hv", "L"))
    form = d["form"]
    if form == "qkv":
        return [(0, w * H, S * N * 3 * H, N * 3 * H, 3 * H) for w in range(3)]
    q = (0, 0, S * N * H, N * H, H)
    if form == "kv":
        return [q] + [(1, w * H, L * N * 2 * H, N * 2 * H, 2 * H) for w in range(2)]
    if form == "bnsh":
        return [q, (1, 0, N * L * H, H, L * H), (2, 0, N * L * Hv, Hv, L * Hv)]
    return [q, (1, 0, L * N * H, N * H, H), (2, 0, L * N * Hv, N * Hv, Hv)]


@register
class MultiHeadAttention(OpDef):
    """``com.microsoft`` ``MultiHeadAttention`` 1; see the module docstring.

    Raises
    ------
    UnsupportedOpError
        Types other than float32, masks other than int32 ``[B]``/``[2B]``/``[B, T]``/
        ``[B, S, T]``, and what :func:`mha_dims` refuses.
    ShapeError
        See :func:`mha_dims`; an attention_bias that is not ``[B|1, N|1, S, T]``.
    """

    op_type, domain, since_version = "MultiHeadAttention", "com.microsoft", 1
    defaults = {"unidirectional": 0, "mask_filter_value": -10000.0, "scale": 0.0}

    def infer(self, node: Node) -> list[OutType]:
        _require_f32(node, (0, 1, 2, 3, 5, 6, 7))
        d = mha_dims(node)
        _check_mask(node, node.input(4), d["B"], d["S"], d["T"])
        _check_bias(node, node.input(5), d["B"], d["N"], d["S"], d["T"])
        f32 = np.dtype(np.float32)
        outs = [((d["B"], d["S"], d["N"] * d["Hv"]), f32),
                ((d["B"], d["N"], d["T"], d["H"]), f32), ((d["B"], d["N"], d["T"], d["Hv"]), f32)]
        return outs[: len(node.outputs)]

    def reference(self, node: Node, inputs):
        d = mha_dims(node)
        ins = list(inputs) + [None] * 10
        B, S, N, H, Hv, L = (d[x] for x in ("B", "S", "N", "H", "Hv", "L"))
        heads = []
        for w, (idx, off, sb, ss, sn) in enumerate(_mha_layout(d)):
            rows, hh = (S, H) if w == 0 else (L, H if w == 1 else Hv)
            flat = np.asarray(ins[idx], np.float64).ravel()
            bi, si, ni, hi = np.ix_(range(B), range(rows), range(N), range(hh))
            t = flat[off + bi * sb + si * ss + ni * sn + hi]
            if ins[3] is not None:
                t = t + ins[3][w * N * H: w * N * H + N * hh].reshape(N, hh)
            heads.append(t.transpose(0, 2, 1, 3))
        add = contrib_mask(ins[4], ins[5], bool(self.attr(node, "unidirectional")), B, N, S,
                           d["P"], d["T"], float(self.attr(node, "mask_filter_value")))
        y, pk, pv = _reference_core(*heads, ins[6], ins[7], add, _scale(node, H))
        return [y, pk.astype(np.float32), pv.astype(np.float32)][: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        d = mha_dims(node)
        B, S, N, H, Hv, L, P, T = (d[x] for x in ("B", "S", "N", "H", "Hv", "L", "P", "T"))
        if B * S == 0:
            return ""
        bias = node.input(3)
        code, bufs = "", []
        for w, (idx, off, sb, ss, sn) in enumerate(_mha_layout(d)):
            rows, hh = (S, H) if w == 0 else (L, H if w == 1 else Hv)
            src = node.inputs[idx]
            if d["form"] == "3d" and bias is None:  # already the core's layout
                bufs.append(ctx.ptr(src))
                continue
            buf = f"((float*){ctx.scratch(4 * max(B * rows * N * hh, 1))})"
            bufs.append(buf)
            b, s, n, e = (ctx.unique(x) for x in "bsne")
            add = f" + {ctx.ptr(bias)}[{w * N * H} + {n}*{hh} + {e}]" if bias is not None else ""
            code += (f"for (int64_t {b} = 0; {b} < {B}; ++{b}) for (int64_t {s} = 0; {s} < "
                     f"{rows}; ++{s}) for (int64_t {n} = 0; {n} < {N}; ++{n}) for (int64_t {e} "
                     f"= 0; {e} < {hh}; ++{e}) {buf}[(({b}*{rows} + {s})*{N} + {n})*{hh} + {e}] "
                     f"= {ctx.ptr(src)}[{off} + {b}*{sb} + {s}*{ss} + {n}*{sn} + {e}]{add};\n")
        made, mask = _emit_mask(ctx, node, node.input(4), node.input(5), d,
                                float(self.attr(node, "mask_filter_value")))
        code += made
        pasts = None
        if node.input(6) is not None and P > 0:
            pasts = (ctx.ptr(node.input(6)), ctx.ptr(node.input(7)))
        present = None
        if len(node.outputs) > 1:
            pk = ctx.ptr(node.outputs[1])
            pv = ctx.ptr(node.outputs[2]) if len(node.outputs) > 2 else \
                f"((float*){ctx.scratch(4 * B * N * T * Hv)})"
            present = (pk, pv)
        return code + _emit_core(node, _Views(ctx), d, *bufs, mask, pasts,
                                 ctx.ptr(node.outputs[0]), present, _scale(node, H),
                                 bool(self.attr(node, "unidirectional")))
