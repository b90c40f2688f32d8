"""``LinearAttention`` (ONNX 27): recurrent linear attention with a matrix state
(linear, gated / GLA, delta / DeltaNet, gated-delta / Gated DeltaNet update rules).

Q ``[B, T, Hq*dk]``, K ``[B, T, Hkv*dk]``, V ``[B, T, Hkv*dv]``; the state of each (b,
KV head) is ``S [dk, dv]`` (``past_state`` ``[B, Hkv, dk, dv]`` or zeros). At each step t:

* gated rules: ``S *= exp(decay_t)`` (``decay`` per head ``[B, T, Hkv]`` or per key
  feature ``[B, T, Hkv*dk]``);
* delta rules: ``v_t = beta_t * (v_t - S^T k_t)`` (``beta`` ``[B, T, Hkv]`` or ``[B, T, 1]``);
* ``S += k_t v_t^T``; each query head ``h`` reads KV head ``h // (Hq / Hkv)``:
  ``y_t = scale * S^T q_t`` (``scale`` 0 means ``1 / sqrt(dk)``).

Outputs Y ``[B, T, Hq*dv]`` and ``present_state`` (the final S). ``chunk_size`` is a
tuning hint with no effect on the result; the emitter runs the recurrence step by step
(O(T * dk * dv) per head). Follows the ONNX spec.
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

__all__ = ["LinearAttention"]

logger = logging.getLogger(__name__)

_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
          "gated_delta": (True, True)}


def _dims(node: Node) -> dict:
    """Sizes and flags of a LinearAttention node; raises ShapeError/UnsupportedOpError."""
    where = f"LinearAttention (node {node.name!r})"
    rule = node.attrs["update_rule"]
    if rule not in _RULES:
        raise UnsupportedOpError(f"{where}: update_rule {rule!r}")
    gated, delta = _RULES[rule]
    hq, hkv = node.attrs["q_num_heads"], node.attrs["kv_num_heads"]
    q, k, v = (node.inputs[i].shape for i in range(3))
    if not hq or not hkv or hq % hkv:
        raise ShapeError(f"{where}: q_num_heads {hq} must be a multiple of kv_num_heads {hkv}")
    if len(q) != 3 or len(k) != 3 or len(v) != 3 or q[2] % hq or v[2] % hkv:
        raise ShapeError(f"{where}: query/key/value must be [B, T, H*D], got {q}, {k}, {v}")
    b, t = q[0], q[1]
    dk, dv = q[2] // hq, v[2] // hkv
    if k != (b, t, hkv * dk) or v[:2] != (b, t):
        raise ShapeError(f"{where}: key {k} / value {v} do not fit query {q}")
    decay, beta, past = node.input(4), node.input(5), node.input(3)
    if (decay is not None) != gated or (beta is not None) != delta:
        raise ShapeError(f"{where}: update_rule {rule!r} takes decay: {gated}, beta: {delta}")
    if decay is not None and decay.shape not in ((b, t, hkv), (b, t, hkv * dk)):
        raise ShapeError(f"{where}: decay {decay.shape} must be [B, T, Hkv] or [B, T, Hkv*dk]")
    if beta is not None and beta.shape not in ((b, t, hkv), (b, t, 1)):
        raise ShapeError(f"{where}: beta {beta.shape} must be [B, T, Hkv] or [B, T, 1]")
    if past is not None and past.shape != (b, hkv, dk, dv):
        raise ShapeError(f"{where}: past_state {past.shape} must be {(b, hkv, dk, dv)}")
    sc = node.attrs["scale"] or 1.0 / math.sqrt(dk)
    return {"B": b, "T": t, "Hq": hq, "Hkv": hkv, "dk": dk, "dv": dv, "scale": sc,
            "decay_per_key": decay is not None and decay.shape[2] == hkv * dk,
            "beta_per_head": beta is not None and beta.shape[2] == hkv}


@register
class LinearAttention(OpDef):
    """ONNX ``LinearAttention`` 27 (float32/float64); see the module docstring."""

    op_type, since_version = "LinearAttention", 27

    def infer(self, node: Node) -> list[OutType]:
        q = node.inputs[0]
        if q.dtype not in (np.float32, np.float64):
            raise UnsupportedOpError(f"LinearAttention (node {node.name!r}): {q.dtype}")
        m = _dims(node)
        past = node.input(3)
        sdt = past.dtype if past is not None else q.dtype
        return [((m["B"], m["T"], m["Hq"] * m["dv"]), q.dtype),
                ((m["B"], m["Hkv"], m["dk"], m["dv"]), sdt)][: len(node.outputs)]

    def reference(self, node: Node, inputs):
        m = _dims(node)
        b, t, hq, hkv, dk, dv = (m[k] for k in ("B", "T", "Hq", "Hkv", "dk", "dv"))
        ins = list(inputs) + [None] * 6
        q = ins[0].reshape(b, t, hq, dk).astype(np.float64)
        k = ins[1].reshape(b, t, hkv, dk).astype(np.float64)
        v = ins[2].reshape(b, t, hkv, dv).astype(np.float64)
        past, decay, beta = ins[3], ins[4], ins[5]
        s = np.zeros((b, hkv, dk, dv)) if past is None else past.astype(np.float64).copy()
        y = np.zeros((b, t, hq, dv))
        g = hq // hkv
        for i in range(t):
            if decay is not None:
                d = decay[:, i].reshape(b, hkv, -1).astype(np.float64)  # [B, Hkv, 1 or dk]
                s = s * np.exp(d)[..., None]
            vt = v[:, i]
            if beta is not None:
                bt = beta[:, i].reshape(b, -1, 1).astype(np.float64)  # [B, Hkv or 1, 1]
                vt = bt * (vt - np.einsum("bhdm,bhd->bhm", s, k[:, i]))
            s = s + k[:, i][..., None] * vt[..., None, :]
            y[:, i] = m["scale"] * np.einsum("bhd,bhdm->bhm", q[:, i], np.repeat(s, g, axis=1))
        sdt = past.dtype if past is not None else ins[0].dtype
        outs = [y.reshape(b, t, hq * dv).astype(ins[0].dtype), s.astype(sdt)]
        return outs[: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        m = _dims(node)
        b_, t_, hq, hkv, dk, dv = (m[k] for k in ("B", "T", "Hq", "Hkv", "dk", "dv"))
        dt = node.inputs[0].dtype
        ct = ctype(dt)
        past, decay, beta = node.input(3), node.input(4), node.input(5)
        grp = hq // hkv
        if len(node.outputs) > 1 and node.outputs[1].dtype == dt:
            st = ctx.ptr(node.outputs[1])
            copy_out = ""
        else:  # no present_state output (or another dtype): a scratch state
            st = f"(({ct}*){ctx.scratch(b_ * hkv * dk * dv * dt.itemsize)})"
            copy_out = (
                f"for (int64_t z = 0; z < {b_ * hkv * dk * dv}; ++z) {ctx.ptr(node.outputs[1])}[z] = {st}[z];"
                if len(node.outputs) > 1 else ""
            )
        vt = ctx.unique("vt")
        b, hk, t, d, mm, g = (ctx.unique(p) for p in ("b", "hk", "t", "d", "m", "g"))
        S = f"{st}[(({b}*{hkv} + {hk})*{dk} + {d})*{dv} + {mm}]"
        bt = f"({b}*{t_} + {t})"
        kr = f"{ctx.ptr(node.inputs[1])} + {bt}*{hkv * dk} + {hk}*{dk}"
        vr = f"{ctx.ptr(node.inputs[2])} + {bt}*{hkv * dv} + {hk}*{dv}"
        init = (f"{ctx.ptr(past)}[(({b}*{hkv} + {hk})*{dk} + {d})*{dv} + {mm}]"
                if past is not None else c_literal(0, dt))
        exp = cfn("exp", dt)
        step = [f"const {ct}* kr = {kr};", f"const {ct}* vr = {vr};"]
        if decay is not None:
            dpos = (f"{bt}*{hkv * dk} + {hk}*{dk} + {d}" if m["decay_per_key"] else f"{bt}*{hkv} + {hk}")
            step.append(
                f"for (int64_t {d} = 0; {d} < {dk}; ++{d}) {{ const {ct} e = {exp}({ctx.ptr(decay)}[{dpos}]);"
                f" for (int64_t {mm} = 0; {mm} < {dv}; ++{mm}) {S} *= e; }}"
            )
        if beta is not None:
            bpos = f"{bt}*{hkv} + {hk}" if m["beta_per_head"] else bt
            step.append(
                f"for (int64_t {mm} = 0; {mm} < {dv}; ++{mm}) {vt}[{mm}] = 0;\n"
                f"for (int64_t {d} = 0; {d} < {dk}; ++{d}) for (int64_t {mm} = 0; {mm} < {dv}; ++{mm})"
                f" {vt}[{mm}] += {S} * kr[{d}];\n"
                f"for (int64_t {mm} = 0; {mm} < {dv}; ++{mm})"
                f" {vt}[{mm}] = {ctx.ptr(beta)}[{bpos}] * (vr[{mm}] - {vt}[{mm}]);"
            )
        else:
            step.append(f"for (int64_t {mm} = 0; {mm} < {dv}; ++{mm}) {vt}[{mm}] = vr[{mm}];")
        step.append(
            f"for (int64_t {d} = 0; {d} < {dk}; ++{d}) for (int64_t {mm} = 0; {mm} < {dv}; ++{mm})"
            f" {S} += kr[{d}] * {vt}[{mm}];"
        )
        qr = f"{ctx.ptr(node.inputs[0])} + {bt}*{hq * dk} + ({hk}*{grp} + {g})*{dk}"
        yr = f"{ctx.ptr(node.outputs[0])} + {bt}*{hq * dv} + ({hk}*{grp} + {g})*{dv}"
        step.append(
            f"for (int64_t {g} = 0; {g} < {grp}; ++{g}) {{\n"
            f"const {ct}* qr = {qr}; {ct}* yr = {yr};\n"
            f"for (int64_t {mm} = 0; {mm} < {dv}; ++{mm}) yr[{mm}] = 0;\n"
            f"for (int64_t {d} = 0; {d} < {dk}; ++{d}) {{ const {ct} qd = {c_literal(m['scale'], dt)} * qr[{d}];"
            f" for (int64_t {mm} = 0; {mm} < {dv}; ++{mm}) yr[{mm}] += qd * {S}; }}\n}}"
        )
        return "\n".join(
            [
                f"{ct}* {vt} = ({ct}*){ctx.scratch(max(dv, 1) * dt.itemsize)};",
                f"for (int64_t {b} = 0; {b} < {b_}; ++{b}) for (int64_t {hk} = 0; {hk} < {hkv}; ++{hk}) {{",
                f"for (int64_t {d} = 0; {d} < {dk}; ++{d}) for (int64_t {mm} = 0; {mm} < {dv}; ++{mm}) {S} = {init};",
                f"for (int64_t {t} = 0; {t} < {t_}; ++{t}) {{",
                "\n".join(step),
                "}",
                "}",
                copy_out,
            ]
        )
