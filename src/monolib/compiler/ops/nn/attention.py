"""``Attention`` (ONNX 23, 24, 25): scaled dot-product attention with a KV cache.

Follows the ONNX operator spec (``onnx.defs.get_schema("Attention")``). Q is ``[B, Hq,
S, D]`` or 3-D ``[B, S, Hq*D]`` (with ``q_num_heads``/``kv_num_heads``); K and V have
``Hkv`` heads (grouped-query attention when ``Hq`` is a multiple of ``Hkv``: query head
``h`` reads KV head ``h // (Hq / Hkv)``). ``past_key``/``past_value`` are prepended
along the sequence to give ``present_key``/``present_value`` of ``T = P + L`` rows.

Per query row the emitter computes, in one pass over the ``T`` keys:

* the score ``(q * sqrt(scale)) . (k * sqrt(scale))``, soft-capped when ``softcap > 0``;
* the additive bias: ``attn_mask`` (bool: false is ``-inf``; padded with ``-inf`` past
  its last dim), the bottom-right causal frontier ``j <= i + offset``, the sliding
  window (25) and the ``nonpad_kv_seqlen`` padding, where ``offset`` is ``P``, or
  ``nonpad_kv_seqlen[b] - S`` for an external cache, or 0;
* a stable softmax; a row whose bias is ``-inf`` everywhere gives probabilities 0;
* ``Y = P @ V`` and the optional ``qk_matmul_output`` (mode 0/1: the capped scores, 2:
  plus the bias, 3: the probabilities).

float32 and float64. ``softmax_precision`` is accepted for float32/float64 (the
softmax runs in the input type, as the spec allows for those types).

float32 with compile-time sizes runs ``attention.h``: per (batch, head) block of query
rows ``Q K^T`` and ``P V`` on gemm.h's micro-kernel, the row pass vectorized, only the
keys a block's rows may see computed (causal, window, nonpad), heads split over the
thread pool; it differs from the loop above by float32 summation order only. float64
and run-time sizes keep that one-row-at-a-time loop.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from ..math.elementwise import cfn
from ..tensor.loops import broadcast_strides
from ...symbolic import is_dim
from ._gemm import MR, NR, include_gemm

__all__ = ["Attention", "FlexAttention", "attention_dims"]

logger = logging.getLogger(__name__)


def attention_dims(node: Node) -> dict[str, int]:
    """The sizes of an Attention node: ``B, Hq, Hkv, S, L, P, T, D, Dv`` and ``rank``.

    Raises
    ------
    ShapeError
        Inconsistent Q/K/V/past shapes, missing head counts for 3-D inputs, or a
        query head count that is not a multiple of the KV head count.
    """
    q, k, v = node.inputs[0].shape, node.inputs[1].shape, node.inputs[2].shape
    where = f"Attention (node {node.name!r})"
    if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
        raise ShapeError(f"{where}: Q, K, V must all be 3-D or 4-D, got {q}, {k}, {v}")
    if len(q) == 3:
        hq, hkv = node.attrs.get("q_num_heads"), node.attrs.get("kv_num_heads")
        if not hq or not hkv:
            raise ShapeError(f"{where}: 3-D inputs need q_num_heads and kv_num_heads")
        if q[2] % hq or k[2] % hkv or v[2] % hkv:
            raise ShapeError(f"{where}: hidden sizes {q[2]}, {k[2]}, {v[2]} not divisible by heads")
        d, dk, dv = q[2] // hq, k[2] // hkv, v[2] // hkv
        b, s, ln = q[0], q[1], k[1]
        if v[1] != ln:
            raise ShapeError(f"{where}: K and V sequence lengths differ")
    else:
        b, hq, s, d = q
        hkv, ln, dk = k[1], k[2], k[3]
        dv = v[3]
        if v[1] != hkv or v[2] != ln:
            raise ShapeError(f"{where}: K {k} and V {v} disagree")
    if dk != d or k[0] != b or v[0] != b:
        raise ShapeError(f"{where}: Q {q} and K {k} disagree (batch or head size)")
    if hq % hkv:
        raise ShapeError(f"{where}: {hq} query heads is not a multiple of {hkv} KV heads")
    pk, pv = node.input(4), node.input(5)
    if (pk is None) != (pv is None):
        raise ShapeError(f"{where}: past_key and past_value go together")
    p = 0
    if pk is not None:
        p = pk.shape[2]
        if pk.shape != (b, hkv, p, d) or pv.shape != (b, hkv, p, dv):
            raise ShapeError(f"{where}: past_key {pk.shape} / past_value {pv.shape} do not fit")
        if node.input(6) is not None:
            raise ShapeError(f"{where}: nonpad_kv_seqlen cannot be used with past_key")
    return {"B": b, "Hq": hq, "Hkv": hkv, "S": s, "L": ln, "P": p, "T": p + ln, "D": d, "Dv": dv,
            "rank": len(q)}


def _scale(node: Node, d: int) -> float:
    sc = node.attrs.get("scale")
    return float(sc) if sc is not None else 1.0 / math.sqrt(d)


def _fast_path(node: Node, m: dict) -> bool:
    """True when ``attention.h`` runs the node: float32 (a float or bool mask) and
    compile-time sizes."""
    mask = node.input(3)
    dims = list(m.values()) + (list(mask.shape) if mask is not None else [])
    return (node.inputs[0].dtype == np.float32 and not any(is_dim(x) for x in dims)
            and (mask is None or mask.dtype in (np.float32, np.bool_)))


def _row_block(s: int, t: int) -> int:
    """Query rows per block: at most 48 and 16K scores (the block stays in L2 beside
    the packed K and V; a causal block computes only the keys its rows see), a multiple
    of gemm.h's ``MR``, the blocks of a head about equal."""
    cap = max(MR, min(48, 16384 // max(t, 1)) // MR * MR)
    blocks = -(-s // cap)
    rb = -(-s // blocks)
    return s if blocks == 1 else -(-rb // MR) * MR


def _task_floats(rb: int, t: int, d: int, dv: int) -> int:
    """Scratch floats of one task of ``attention.h`` (its layout: scaled Q block,
    packed K, packed V, scores block; each part 16-aligned)."""
    up = lambda n: -(-n // 16) * 16  # noqa: E731
    return up(max(rb, 1) * d) + up(-(-t // NR) * NR * d) + up(-(-dv // NR) * NR * t) + up(rb * t)


@register
class Attention(OpDef):
    """ONNX ``Attention`` 23; 24 adds ``nonpad_kv_seqlen``, 25 the sliding window,
    the offset-aligned causal mask and the fully-masked-row rule, all implemented
    here (see the module docstring).

    Raises
    ------
    UnsupportedOpError
        Element types other than float32/float64.
    ShapeError
        See :func:`attention_dims`; a mask that does not broadcast.
    """

    op_type, since_version = "Attention", 23
    also_versions = (24, 25)
    defaults = {
        "is_causal": 0,
        "left_window_size": -1,
        "qk_matmul_output_mode": 0,
        "right_window_size": -1,
        "softcap": 0.0,
    }

    def infer(self, node: Node) -> list[OutType]:
        q = node.inputs[0]
        if q.dtype not in (np.float32, np.float64):
            raise UnsupportedOpError(
                f"{self.op_type} (node {node.name!r}): {q.dtype} (float32/float64 only)"
            )
        m = attention_dims(node)
        mask = node.input(3)
        if mask is not None:
            ms = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
            if len(mask.shape) > 4 or ms[3] > m["T"] or any(
                a not in (1, want) for a, want in zip(ms[:3], (m["B"], m["Hq"], m["S"]))
            ):
                raise ShapeError(
                    f"Attention (node {node.name!r}): attn_mask {mask.shape} does not fit "
                    f"[{m['B']}, {m['Hq']}, {m['S']}, {m['T']}]"
                )
        dt = q.dtype
        if m["rank"] == 3:
            y = (m["B"], m["S"], m["Hq"] * m["Dv"])
        else:
            y = (m["B"], m["Hq"], m["S"], m["Dv"])
        types = [
            (y, dt),
            ((m["B"], m["Hkv"], m["T"], m["D"]), dt),
            ((m["B"], m["Hkv"], m["T"], m["Dv"]), dt),
            ((m["B"], m["Hq"], m["S"], m["T"]), dt),
        ]
        return types[: len(node.outputs)]

    # -- NumPy reference -------------------------------------------------------------

    def _bias(self, node: Node, m: dict, mask, nonpad) -> np.ndarray:
        """The additive bias ``[B, Hq, S, T]`` (0 or -inf, plus a float mask)."""
        B, Hq, S, T = m["B"], m["Hq"], m["S"], m["T"]
        bias = np.zeros((B, Hq, S, T), np.float64)
        if mask is not None:
            full = np.zeros(mask.shape[:-1] + (T,), np.float64)
            if mask.dtype == np.bool_:
                full[...] = -np.inf
                full[..., : mask.shape[-1]] = np.where(mask, 0.0, -np.inf)
            else:
                full[...] = -np.inf
                full[..., : mask.shape[-1]] = mask
            bias = bias + full
        i = np.arange(S).reshape(1, S, 1)
        j = np.arange(T).reshape(1, 1, T)
        if nonpad is not None:
            off = (nonpad.reshape(-1).astype(np.int64) - S).reshape(B, 1, 1)
        else:
            off = np.full((B, 1, 1), m["P"], np.int64)
        allowed = np.ones((B, S, T), bool)
        if self.attr(node, "is_causal"):
            allowed &= j <= i + off
        left, right = self.attr(node, "left_window_size"), self.attr(node, "right_window_size")
        diff = i + off - j
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        if nonpad is not None:
            allowed &= j < nonpad.reshape(B, 1, 1)
        return np.where(allowed[:, None], bias, -np.inf)

    def reference(self, node: Node, inputs):
        m = attention_dims(node)
        q, k, v = inputs[:3]
        mask, pk, pv, nonpad = (list(inputs) + [None] * 7)[3:7]
        dt = q.dtype
        B, Hq, Hkv, S, D, Dv = m["B"], m["Hq"], m["Hkv"], m["S"], m["D"], m["Dv"]
        if m["rank"] == 3:
            q = q.reshape(B, S, Hq, D).transpose(0, 2, 1, 3)
            k = k.reshape(B, m["L"], Hkv, D).transpose(0, 2, 1, 3)
            v = v.reshape(B, m["L"], Hkv, Dv).transpose(0, 2, 1, 3)
        if pk is not None:
            k, v = np.concatenate([pk, k], axis=2), np.concatenate([pv, v], axis=2)
        present_k, present_v = k.astype(dt), v.astype(dt)
        rep = Hq // Hkv
        kk, vv = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        sc = dt.type(math.sqrt(_scale(node, D)))
        scores = (q * sc).astype(np.float64) @ np.swapaxes(kk * sc, 2, 3).astype(np.float64)
        cap = self.attr(node, "softcap")
        if cap > 0:
            scores = cap * np.tanh(scores / cap)
        bias = self._bias(node, m, mask, nonpad)
        x = scores + bias
        dead = np.isneginf(bias.max(axis=-1, keepdims=True))
        mx = np.where(dead, 0.0, x.max(axis=-1, keepdims=True))
        e = np.where(dead, 0.0, np.exp(x - mx))
        probs = e / np.where(dead, 1.0, e.sum(axis=-1, keepdims=True))
        y = probs @ vv.astype(np.float64)
        if m["rank"] == 3:
            y = y.transpose(0, 2, 1, 3).reshape(B, S, Hq * Dv)
        mode = self.attr(node, "qk_matmul_output_mode")
        qk = {0: scores, 1: scores, 2: x, 3: probs}[mode]
        outs = [y.astype(dt), present_k, present_v, qk.astype(dt)]
        return outs[: len(node.outputs)]

    # -- C ------------------------------------------------------------------------------

    def emit(self, node: Node, ctx: EmitContext) -> str:
        m = attention_dims(node)
        B, Hq, Hkv, S, L, P, T, D, Dv = (m[k] for k in ("B", "Hq", "Hkv", "S", "L", "P", "T", "D", "Dv"))
        if B * Hq * S == 0:
            return ""
        q, k, v = node.inputs[:3]
        dt = q.dtype
        ct = ctype(dt)
        three = m["rank"] == 3
        outs = node.outputs
        fast = _fast_path(node, m)
        if fast and len(outs) < 2 and node.input(4) is None:
            # no present output to fill and no past to prepend: read K/V in place
            return self._emit_fast(node, ctx, m, None, None)
        lines: list[str] = []
        # present K/V: [B, Hkv, T, D|Dv], contiguous; the outputs when requested
        kp = ctx.ptr(outs[1]) if len(outs) > 1 else f"(({ct}*){ctx.scratch(B * Hkv * T * D * dt.itemsize)})"
        vp = ctx.ptr(outs[2]) if len(outs) > 2 else f"(({ct}*){ctx.scratch(B * Hkv * T * Dv * dt.itemsize)})"
        pk, pv = node.input(4), node.input(5)
        if fast:  # attention.h fills present K/V itself
            return self._emit_fast(node, ctx, m, kp, vp)
        for dst, src, past, dd in ((kp, k, pk, D), (vp, v, pv, Dv)):
            if T * dd == 0:
                continue
            # input row (b, h, j) starts at b*sb + h*sh + j*sj
            if three:
                sb, sh, sj = L * Hkv * dd, dd, Hkv * dd
            else:
                sb, sh, sj = Hkv * L * dd, L * dd, dd
            b_, h_, j_ = (ctx.unique(x) for x in "bhj")
            row = f"{dst} + (({b_}*{Hkv} + {h_})*{T} + {j_})*{dd}"
            # whole blocks with memcpy: the past rows of a head are contiguous, so are
            # the new rows in the 4-D layout (3-D: one row of dd per key)
            past_copy = ""
            if past is not None and P:
                past_copy = (
                    f"{{ const int64_t {j_} = 0; memcpy({row}, {ctx.ptr(past)} + ({b_}*{Hkv} + {h_})*{P * dd}, "
                    f"sizeof({ct}) * {P * dd}); }}\n"
                )
            src_row = f"{ctx.ptr(src)} + {b_}*{sb} + {h_}*{sh} + ({j_} - {P})*{sj}"
            if three:
                new = (f"for (int64_t {j_} = {P}; {j_} < {T}; ++{j_}) "
                       f"memcpy({row}, {src_row}, sizeof({ct}) * {dd});")
            else:
                new = (f"{{ const int64_t {j_} = {P}; memcpy({row}, {src_row}, "
                       f"sizeof({ct}) * {L * dd}); }}")
            lines.append(
                f"for (int64_t {b_} = 0; {b_} < {B}; ++{b_}) for (int64_t {h_} = 0; {h_} < {Hkv}; ++{h_}) {{\n"
                + past_copy + new + "\n}"
            )
        b, h, i, j, e = (ctx.unique(x) for x in ("b", "h", "i", "j", "e"))
        if three:
            q_off = f"{b}*{S * Hq * D} + {i}*{Hq * D} + {h}*{D}"
            y_off = f"{b}*{S * Hq * Dv} + {i}*{Hq * Dv} + {h}*{Dv}"
        else:
            q_off = f"(({b}*{Hq} + {h})*{S} + {i})*{D}"
            y_off = f"(({b}*{Hq} + {h})*{S} + {i})*{Dv}"
        hk = f"({h} / {Hq // Hkv})"
        krow = f"{kp} + (({b}*{Hkv} + {hk})*{T} + {j})*{D}"
        vrow = f"{vp} + (({b}*{Hkv} + {hk})*{T} + {j})*{Dv}"
        sc = c_literal(math.sqrt(_scale(node, D)), dt)
        qs, sbuf, bbuf = ctx.unique("qs"), ctx.unique("sc"), ctx.unique("bi")
        lines.append(f"{ct}* {qs} = ({ct}*){ctx.scratch(max(D, 1) * dt.itemsize)};")
        lines.append(f"{ct}* {sbuf} = ({ct}*){ctx.scratch(max(T, 1) * dt.itemsize)};")
        lines.append(f"{ct}* {bbuf} = ({ct}*){ctx.scratch(max(T, 1) * dt.itemsize)};")
        body = [f"for (int64_t {e} = 0; {e} < {D}; ++{e}) {qs}[{e}] = {ctx.ptr(q)}[{q_off} + {e}] * {sc};"]
        body.append(self._emit_bias(node, ctx, m, b, h, i, j, bbuf, dt))
        cap = float(self.attr(node, "softcap"))
        dot, acc = ctx.unique("dot"), ctx.unique("acc")
        score = f"{dot}"
        if cap > 0:
            score = f"{c_literal(cap, dt)} * {cfn('tanh', dt)}({dot} / {c_literal(cap, dt)})"
        body.append(
            f"for (int64_t {j} = 0; {j} < {T}; ++{j}) {{\n"
            f"const {ct}* kr = {krow};\n{ct} {dot} = 0;\n"
            f"for (int64_t {e} = 0; {e} < {D}; ++{e}) {dot} += {qs}[{e}] * (kr[{e}] * {sc});\n"
            f"{sbuf}[{j}] = {score};\n}}"
        )
        mode = self.attr(node, "qk_matmul_output_mode")
        qk_row = f"{ctx.ptr(outs[3])} + (({b}*{Hq} + {h})*{S} + {i})*{T}" if len(outs) > 3 else None
        if qk_row and mode in (0, 1):
            body.append(f"for (int64_t {j} = 0; {j} < {T}; ++{j}) ({qk_row})[{j}] = {sbuf}[{j}];")
        body.append(f"for (int64_t {j} = 0; {j} < {T}; ++{j}) {sbuf}[{j}] += {bbuf}[{j}];")
        if qk_row and mode == 2:
            body.append(f"for (int64_t {j} = 0; {j} < {T}; ++{j}) ({qk_row})[{j}] = {sbuf}[{j}];")
        mx, live, tot = ctx.unique("mx"), ctx.unique("live"), ctx.unique("tot")
        exp = cfn("exp", dt)
        body.append(
            f"int {live} = 0; {ct} {mx} = -INFINITY, {tot} = 0;\n"
            f"for (int64_t {j} = 0; {j} < {T}; ++{j}) {{ if ({bbuf}[{j}] != -INFINITY) {live} = 1;"
            f" if ({sbuf}[{j}] > {mx}) {mx} = {sbuf}[{j}]; }}\n"
            f"if (!{live}) {{ for (int64_t {j} = 0; {j} < {T}; ++{j}) {sbuf}[{j}] = 0; }}\n"
            f"else {{ for (int64_t {j} = 0; {j} < {T}; ++{j}) {{ {sbuf}[{j}] = {exp}({sbuf}[{j}] - {mx});"
            f" {tot} += {sbuf}[{j}]; }}\n"
            f"for (int64_t {j} = 0; {j} < {T}; ++{j}) {sbuf}[{j}] /= {tot}; }}"
        )
        if qk_row and mode == 3:
            body.append(f"for (int64_t {j} = 0; {j} < {T}; ++{j}) ({qk_row})[{j}] = {sbuf}[{j}];")
        yp = ctx.ptr(outs[0])
        body.append(
            f"{ct}* {acc} = {yp} + {y_off};\n"
            f"for (int64_t {e} = 0; {e} < {Dv}; ++{e}) {acc}[{e}] = 0;\n"
            f"for (int64_t {j} = 0; {j} < {T}; ++{j}) {{ const {ct} pj = {sbuf}[{j}]; if (pj == 0) continue;\n"
            f"const {ct}* vr = {vrow};\n"
            f"for (int64_t {e} = 0; {e} < {Dv}; ++{e}) {acc}[{e}] += pj * vr[{e}]; }}"
        )
        lines.append(
            f"for (int64_t {b} = 0; {b} < {B}; ++{b}) for (int64_t {h} = 0; {h} < {Hq}; ++{h})"
            f" for (int64_t {i} = 0; {i} < {S}; ++{i}) {{\n" + "\n".join(body) + "\n}"
        )
        return "\n".join(lines)

    def _emit_fast(self, node: Node, ctx: EmitContext, m: dict, kp: str | None,
                   vp: str | None) -> str:
        """The float32 kernel of ``attention.h`` (GEMMs on gemm.h's micro-kernel, the
        row pass vectorized, (batch, head, row block) tasks on the thread pool).

        ``kp``/``vp`` are the present K/V buffers ``[B, Hkv, T, D|Dv]`` the kernel fills
        from the past and the new rows, then reads, or ``None`` to read K and V from the
        inputs (no past, no present output)."""
        B, Hq, Hkv, S, L, T, D, Dv = (m[x] for x in ("B", "Hq", "Hkv", "S", "L", "T", "D", "Dv"))
        include_gemm(ctx)
        ctx.include("attention.h")
        q, k, v = node.inputs[:3]
        three = m["rank"] == 3
        qs = (S * Hq * D, D, Hq * D) if three else (Hq * S * D, S * D, D)
        ys = (S * Hq * Dv, Dv, Hq * Dv) if three else (Hq * S * Dv, S * Dv, Dv)
        kptr, vptr = ctx.ptr(k), ctx.ptr(v)
        ks = (L * Hkv * D, D, Hkv * D) if three else (Hkv * L * D, L * D, D)
        vs = (L * Hkv * Dv, Dv, Hkv * Dv) if three else (Hkv * L * Dv, L * Dv, Dv)
        rb = _row_block(S, T)
        tf = _task_floats(rb, T, D, Dv)
        f = {"B": B, "Hq": Hq, "Hkv": Hkv, "S": S, "T": T, "D": D, "Dv": Dv, "P": m["P"],
             "q": ctx.ptr(q), "q_sb": qs[0], "q_sh": qs[1], "q_si": qs[2],
             "k": kptr, "k_sb": ks[0], "k_sh": ks[1], "k_sj": ks[2],
             "v": vptr, "v_sb": vs[0], "v_sh": vs[1], "v_sj": vs[2],
             "y": ctx.ptr(node.outputs[0]), "y_sb": ys[0], "y_sh": ys[1], "y_si": ys[2],
             "sc": c_literal(math.sqrt(_scale(node, D)), np.float32),
             "cap": c_literal(float(self.attr(node, "softcap")), np.float32),
             "causal": int(bool(self.attr(node, "is_causal"))),
             "left": int(self.attr(node, "left_window_size")),
             "right": int(self.attr(node, "right_window_size")),
             "rb": rb, "task_floats": tf}
        if kp is not None:
            f.update({"kp": kp, "vp": vp})
            if node.input(4) is not None:
                f.update({"pk": ctx.ptr(node.input(4)), "pv": ctx.ptr(node.input(5))})
        nonpad, mask = node.input(6), node.input(3)
        if nonpad is not None:
            f["nonpad"] = f"(const int64_t*){ctx.ptr(nonpad)}"
        if mask is not None:
            ms = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
            st = broadcast_strides(ms, (B, Hq, S, ms[3]))
            f.update({"mask": f"(const void*){ctx.ptr(mask)}",
                      "mask_bool": int(mask.dtype == np.bool_),
                      "m_sb": st[0], "m_sh": st[1], "m_si": st[2], "m_len": ms[3]})
        if len(node.outputs) > 3:
            f["qk"] = ctx.ptr(node.outputs[3])
            f["qk_mode"] = int(self.attr(node, "qk_matmul_output_mode"))
        init = ", ".join(f".{key} = {val}" for key, val in f.items())
        name = ctx.unique("attn")
        return (f"{{ ml_attn_args {name} = {{{init}}};\n"
                f"ml_attention_f32(&{name}, {ctx.scratch(4 * tf)}); }}")

    def _emit_bias(self, node, ctx, m, b, h, i, j, buf, dt) -> str:
        """C statements filling ``buf[0..T)`` with the bias of query row (b, h, i)."""
        T, S, P = m["T"], m["S"], m["P"]
        ct = ctype(dt)
        conds = []  # C conditions under which key j is allowed
        mask, nonpad = node.input(3), node.input(6)
        off = f"((int64_t){ctx.ptr(nonpad)}[{b}] - {S})" if nonpad is not None else str(P)
        if self.attr(node, "is_causal"):
            conds.append(f"{j} <= {i} + {off}")
        left, right = self.attr(node, "left_window_size"), self.attr(node, "right_window_size")
        if left >= 0:
            conds.append(f"{i} + {off} - {j} <= {left}")
        if right >= 0:
            conds.append(f"{j} - ({i} + {off}) <= {right}")
        if nonpad is not None:
            conds.append(f"{j} < (int64_t){ctx.ptr(nonpad)}[{b}]")
        val = c_literal(0, dt)
        if mask is not None:
            ms = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
            st = broadcast_strides(ms, (m["B"], m["Hq"], S, ms[3]))
            moff = f"{b}*{st[0]} + {h}*{st[1]} + {i}*{st[2]} + {j}*{st[3]}"
            conds.append(f"{j} < {ms[3]}")
            mv = f"{ctx.ptr(mask)}[{moff}]"
            if mask.dtype == np.bool_:
                conds.append(mv)
            else:
                val = f"({ct}){mv}"
        allowed = " && ".join(f"({c})" for c in conds) or "1"
        return f"for (int64_t {j} = 0; {j} < {T}; ++{j}) {buf}[{j}] = ({allowed}) ? {val} : -INFINITY;"


@register
class FlexAttention(Attention):
    """``ai.onnx.preview`` ``FlexAttention`` 1: rank-4 Q, K, V (GQA when ``Hq`` is a
    multiple of ``Hkv``), ``Y = softmax(Q K^T * scale) V`` -- :class:`Attention`
    without mask or cache.

    Raises
    ------
    UnsupportedOpError
        The ``score_mod``/``prob_mod`` subgraphs (monolib does not compile a modifier
        subgraph into the attention loop), or element types other than float32/float64.
    ShapeError
        Inputs that are not rank 4, or see :func:`attention_dims`.
    """

    op_type, domain, since_version = "FlexAttention", "ai.onnx.preview", 1
    also_versions = ()

    def infer(self, node: Node) -> list[OutType]:
        for mod in ("score_mod", "prob_mod"):
            if node.attrs.get(mod) is not None:
                raise UnsupportedOpError(
                    f"FlexAttention (node {node.name!r}): the {mod} subgraph is not supported"
                )
        if any(len(v.shape) != 4 for v in node.inputs[:3]):
            raise ShapeError(f"FlexAttention (node {node.name!r}): Q, K, V must be rank 4")
        return super().infer(node)[:1]
