"""LSTM (ONNX opset 1..22), layout 0, forward/reverse/bidirectional.

Follows the ONNX spec: gates in order i, o, f, c; ``W [D, 4H, I]``, ``R [D, 4H, H]``,
``B [D, 8H]`` (Wb then Rb), optional ``initial_h``/``initial_c [D, B, H]`` and peepholes
``P [D, 3H]`` (i, o, f); outputs ``Y [T, D, B, H]``, ``Y_h``, ``Y_c [D, B, H]``. Default
activations (Sigmoid, Tanh, Tanh) and ``clip`` are supported; ``input_forget=1``, other
activations, ``layout=1`` and ragged ``sequence_lens`` raise UnsupportedOpError.

Lowering: per direction one GEMM ``gx[T*B, 4H] = X @ W^T + (Wb + Rb)`` (W^T packed at
compile time), then ``ml_lstm_dir`` of ``kernels/lstm.h`` runs the recurrence with R^T
(transposed at compile time when constant).
"""

from __future__ import annotations

import logging

import numpy as np

from ....runtime.errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ._common import f32, require_float32
from ._gemm import bbuf_floats, gemm_call
from .gemm import a_operand, b_operand

__all__ = ["LSTM"]

logger = logging.getLogger(__name__)

_DEFAULT_ACTS = ["sigmoid", "tanh", "tanh"]


def _dims(node: Node) -> tuple[int, int, int, int, int]:
    """(T, B, I, H, num_directions), checking every shape and the supported attributes."""
    x, w, r = node.inputs[0], node.input(1), node.input(2)
    where = f"LSTM node {node.name!r}"
    if node.attrs.get("layout", 0):
        raise UnsupportedOpError(f"{where}: layout=1 is not supported")
    if node.attrs.get("input_forget", 0):
        raise UnsupportedOpError(f"{where}: input_forget=1 is not supported")
    if (
        x is None
        or w is None
        or r is None
        or len(x.shape) != 3
        or len(w.shape) != 3
        or len(r.shape) != 3
    ):
        raise ShapeError(f"{where}: needs X [T,B,I], W [D,4H,I], R [D,4H,H]")
    t, b, i = x.shape
    ndir, h = r.shape[0], r.shape[2]
    want_dirs = 2 if node.attrs.get("direction", "forward") == "bidirectional" else 1
    hs = node.attrs.get("hidden_size") or h
    if ndir != want_dirs or hs != h or w.shape != (ndir, 4 * h, i) or r.shape != (ndir, 4 * h, h):
        raise ShapeError(
            f"{where}: W {w.shape}, R {r.shape}, hidden_size {hs}, direction "
            f"{node.attrs.get('direction', 'forward')!r} disagree with X {x.shape}"
        )
    acts = [a.lower() for a in node.attrs.get("activations") or []]
    if acts and acts != _DEFAULT_ACTS * ndir:
        raise UnsupportedOpError(f"{where}: activations {acts}; only Sigmoid/Tanh/Tanh")
    expect = {3: (ndir, 8 * h), 5: (ndir, b, h), 6: (ndir, b, h), 7: (ndir, 3 * h)}
    for idx, shape in expect.items():
        v = node.input(idx)
        if v is not None and v.shape != shape:
            raise ShapeError(f"{where}: input {idx} is {v.shape}, expected {shape}")
    seq = node.input(4)
    if seq is not None and (seq.const is None or np.any(seq.const != t)):
        raise UnsupportedOpError(f"{where}: sequence_lens must be absent or all {t}")
    return t, b, i, h, ndir


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@register
class LSTM(OpDef):
    """ONNX ``LSTM``: X ``[T, B, I]`` -> Y ``[T, D, B, H]``, Y_h, Y_c ``[D, B, H]``;
    float32."""

    op_type = "LSTM"
    since_version = 1
    also_versions = (22,)  # 22 adds bfloat16 only

    def infer(self, node: Node) -> list[OutType]:
        t, b, _, h, ndir = _dims(node)
        dt = node.inputs[0].dtype
        types = [((t, ndir, b, h), dt), ((ndir, b, h), dt), ((ndir, b, h), dt)]
        return types[: len(node.outputs)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        t, b, _, h, ndir = _dims(node)
        x, w, r = (np.asarray(a, np.float64) for a in inputs[:3])
        get = lambda i: inputs[i] if len(inputs) > i and inputs[i] is not None else None
        bias, h0, c0, p = get(3), get(5), get(6), get(7)
        clip = float(node.attrs.get("clip") or 0.0)
        cl = (lambda v: np.clip(v, -clip, clip)) if clip > 0 else (lambda v: v)
        y = np.zeros((t, ndir, b, h))
        hs, cs = np.zeros((ndir, b, h)), np.zeros((ndir, b, h))
        for d in range(ndir):
            hd = np.zeros((b, h)) if h0 is None else h0[d].astype(np.float64)
            cd = np.zeros((b, h)) if c0 is None else c0[d].astype(np.float64)
            bb = np.zeros(8 * h) if bias is None else bias[d].astype(np.float64)
            pp = np.zeros(3 * h) if p is None else p[d].astype(np.float64)
            reverse = node.attrs.get("direction", "forward") == "reverse" or d == 1
            for s in range(t):
                step = t - 1 - s if reverse else s
                g = x[step] @ w[d].T + hd @ r[d].T + bb[: 4 * h] + bb[4 * h :]
                gi, go, gf, gc = np.split(g, 4, axis=1)
                i_ = _sigmoid(cl(gi + pp[:h] * cd))
                f_ = _sigmoid(cl(gf + pp[2 * h :] * cd))
                cd = f_ * cd + i_ * np.tanh(cl(gc))
                o_ = _sigmoid(cl(go + pp[h : 2 * h] * cd))
                hd = o_ * np.tanh(cd)
                y[step, d] = hd
            hs[d], cs[d] = hd, cd
        dt = inputs[0].dtype
        return [a.astype(dt) for a in (y, hs, cs)][: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1, 2, 3, 5, 6, 7)
        t, b, i, h, ndir = _dims(node)
        ctx.include("gemm.h")
        ctx.include("lstm.h")
        x = node.inputs[0]
        ap, code = a_operand(ctx, x, t * b, i, i, 1, name=node.name + ".X")
        gx = ctx.scratch(4 * t * b * 4 * h)
        gates = ctx.scratch(4 * 4 * h)
        outs = [v for v in node.outputs]
        for d in range(ndir):
            code += _emit_direction(node, ctx, d, ap, f"(float*){gx}", f"(float*){gates}", outs)
        return code


def _out_ptr(ctx: EmitContext, outs: list, idx: int, offset: int, nbytes: int) -> str:
    if idx < len(outs) and outs[idx] is not None:
        return f"({ctx.ptr(outs[idx])} + {offset})"
    return f"(float*){ctx.scratch(nbytes)}"


def _emit_direction(
    node: Node, ctx: EmitContext, d: int, ap: str, gx: str, gates: str, outs: list
) -> str:
    t, b, i, h, ndir = _dims(node)
    w, r, bias, p = node.inputs[1], node.inputs[2], node.input(3), node.input(7)
    g4 = 4 * h
    code = ""
    bsrc = b_operand(
        ctx,
        w,
        i,
        g4,
        1,
        i,
        offset=str(d * g4 * i),
        const_offset=d * g4 * i,
        name=f"{node.name}.W{d}",
    )
    fields = {"M": str(t * b), "N": str(g4), "K": str(i), "a": ap, "c": gx}
    if bsrc["kind"] != "ML_B_PACKED":
        fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(i, g4))}"
    if bias is not None and bias.const is not None:
        bsum = (bias.const[d, :g4] + bias.const[d, g4:]).astype(np.float32)
        fields["bias_n"] = ctx.param(bsum, f"{node.name}.bias{d}")
    elif bias is not None:
        buf = ctx.scratch(4 * g4)
        code += (
            f"for (int64_t j = 0; j < {g4}; ++j) ((float*){buf})[j] = "
            f"{ctx.ptr(bias)}[{d * 2 * g4} + j] + {ctx.ptr(bias)}[{d * 2 * g4 + g4} + j];\n"
        )
        fields["bias_n"] = f"(const float*){buf}"
    code += gemm_call(fields, bsrc) + "\n"
    if r.const is not None:
        rt = ctx.param(np.ascontiguousarray(r.const[d].T, np.float32), f"{node.name}.RT{d}")
    else:
        buf = ctx.scratch(4 * h * g4)
        code += (
            f"for (int64_t k = 0; k < {h}; ++k) for (int64_t j = 0; j < {g4}; ++j)\n"
            f"  ((float*){buf})[k * {g4} + j] = {ctx.ptr(r)}[{d * g4 * h} + j * {h} + k];\n"
        )
        rt = f"(const float*){buf}"
    state = b * h
    opt = lambda v, off: f"({ctx.ptr(v)} + {off})" if v is not None else "0"
    reverse = int(node.attrs.get("direction", "forward") == "reverse" or d == 1)
    y = _out_ptr(ctx, outs, 0, d * state, 0) if len(outs) > 0 and outs[0] is not None else "0"
    hout = _out_ptr(ctx, outs, 1, d * state, 4 * state)
    cout = _out_ptr(ctx, outs, 2, d * state, 4 * state)
    clip = float(node.attrs.get("clip") or 0.0)
    code += (
        f"ml_lstm_dir({t}, {b}, {h}, {reverse}, {gx}, {rt}, {opt(p, d * 3 * h)}, "
        f"{opt(node.input(5), d * state)}, {opt(node.input(6), d * state)}, {f32(clip)}, "
        f"{y}, {ndir * state}, {hout}, {cout}, {gates});\n"
    )
    return code
