"""LSTM (ONNX opset 1..22), forward/reverse/bidirectional.

Follows the ONNX spec: gates in order i, o, f, c; ``W [D, 4H, I]``, ``R [D, 4H, H]``,
``B [D, 8H]`` (Wb then Rb), optional ``initial_h``/``initial_c [D, B, H]`` and peepholes
``P [D, 3H]`` (i, o, f); outputs ``Y [T, D, B, H]``, ``Y_h``, ``Y_c [D, B, H]``. Default
activations (Sigmoid, Tanh, Tanh) and ``clip`` run in the fast kernel below; ``layout=1``,
other activations and ``sequence_lens`` not known to be all T run in the generic
recurrence of ``rnn.py`` (which also gives the NumPy reference); ``input_forget=1`` raises
UnsupportedOpError.

Lowering: per direction one GEMM ``gx[T*B, 4H] = X @ W^T + (Wb + Rb)`` (W^T packed at
compile time), then ``ml_lstm`` of ``kernels/lstm.h`` runs the recurrence of every
direction on R packed in blocks of 16 hidden units (:func:`pack_recurrent`, at compile
time when R is constant): per step each block streams its ``[H][4][16]`` slice once for
up to 4 batch rows and updates its units' cell at once. Threads: two directions run side
by side; one direction splits each step by unit blocks when it has at least
``ML_LSTM_PAR_MIN`` multiply-adds. A run-time T or B (issue 12) is read from the symbols
when the op runs (the sizes render as their C); scratch is planned at the bounds and the
weights are still packed at compile time.

Measured on a 2-core Zen 4 (g2p-id's encoder: T 24, H 256, 1 thread, whole model, vs
ONNX Runtime 1.x in the same run): the previous kernel (R^T rows 4 KB apart, libm tanhf
per element) 0.52 ms = 1.63x ORT; packed blocks with a vectorised tanh 0.29-0.31 ms.
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ...symbolic import is_dim
from ..base import EmitContext, OpDef, OutType, op_of, register
from ._common import f32, require_float32
from ._gemm import include_gemm
from .gemm import a_operand
from .rnn import (
    emit_recurrence,
    input_projection,
    recurrence_reference,
    rnn_dims,
)

__all__ = ["LSTM", "pack_recurrent"]

logger = logging.getLogger(__name__)

_DEFAULT_ACTS = ["sigmoid", "tanh", "tanh"]
#: hidden units per packed block of R: ``kernels/lstm.h``'s ML_LSTM_U
_UNITS = 16


def _dims(node: Node) -> tuple[int, int, int, int, int]:
    """(T, B, I, H, num_directions), checking every shape (``rnn.rnn_dims``)."""
    return rnn_dims(node)


def _fast(node: Node) -> bool:
    """True when ``kernels/lstm.h`` computes the node: layout 0, default activations,
    no ragged ``sequence_lens`` (absent, or constant and all T; with a run-time T a
    constant ``sequence_lens`` is read at run time by the generic recurrence)."""
    t, _, _, _, ndir = rnn_dims(node)
    acts = [a.lower() for a in node.attrs.get("activations") or []]
    seq = node.input(4)
    return (
        not op_of(node).attr(node, "layout")
        and (not acts or acts == _DEFAULT_ACTS * ndir)
        and (seq is None or (seq.const is not None and not is_dim(t)
                             and bool(np.all(seq.const == t))))
    )


@register
class LSTM(OpDef):
    """ONNX ``LSTM``: X ``[T, B, I]`` -> Y ``[T, D, B, H]``, Y_h, Y_c ``[D, B, H]``;
    float32."""

    op_type = "LSTM"
    since_version = 1
    also_versions = (22,)  # 22 adds bfloat16 only
    defaults = {"layout": 0}

    def infer(self, node: Node) -> list[OutType]:
        t, b, _, h, ndir = _dims(node)
        dt = node.inputs[0].dtype
        layout = int(self.attr(node, "layout"))
        y = (b, t, ndir, h) if layout else (t, ndir, b, h)
        state = (b, ndir, h) if layout else (ndir, b, h)
        types = [(y, dt), (state, dt), (state, dt)]
        return types[: len(node.outputs)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        return recurrence_reference(node, inputs)

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if not _fast(node):
            return emit_recurrence(node, ctx)
        require_float32(node, 0, 1, 2, 3, 5, 6, 7)
        t, b, i, h, ndir = _dims(node)
        include_gemm(ctx)
        ctx.include("lstm.h")
        g4 = 4 * h
        ap, code = a_operand(ctx, node.inputs[0], t * b, i, i, 1, name=node.name + ".X")
        gx = ctx.scratch(4 * ndir * t * b * g4)
        bias = node.input(3)
        for d in range(ndir):
            bias_c = bias_e = None
            if bias is not None and bias.const is not None:
                bias_c = bias.const[d, :g4] + bias.const[d, g4:]
            elif bias is not None:
                bp = ctx.ptr(bias)
                bias_e = f"{bp}[{d * 2 * g4} + j] + {bp}[{d * 2 * g4 + g4} + j]"
            gxd = f"((float*){gx} + (int64_t){d} * ({t}) * ({b}) * {g4})"
            code += input_projection(node, ctx, d, ap, gxd, t * b, i, g4, bias_c, bias_e)
        rp, rcode = _packed_r(node, ctx, h, ndir)
        outs = list(node.outputs) + [None] * 3
        state = lambda k: (f"{ctx.ptr(outs[k])}" if outs[k] is not None
                           else f"(float*){ctx.scratch(4 * ndir * b * h)}")
        opt = lambda v: ctx.ptr(v) if v is not None else "0"
        hbuf = ctx.scratch(4 * ndir * 2 * b * h)
        clip = float(node.attrs.get("clip") or 0.0)
        reverse = int(node.attrs["direction"] == "reverse")
        y = ctx.ptr(outs[0]) if outs[0] is not None else "0"
        return code + rcode + (
            f"ml_lstm({ndir}, {t}, {b}, {h}, {reverse}, (const float*){gx}, {rp}, "
            f"{opt(node.input(7))}, {opt(node.input(5))}, {opt(node.input(6))}, {f32(clip)}, "
            f"{y}, {state(1)}, {state(2)}, (float*){hbuf});\n"
        )


def pack_recurrent(r: np.ndarray) -> np.ndarray:
    """R of one direction (``[4H, H]``, ONNX layout) packed as ``kernels/lstm.h`` reads
    it: per block of ``_UNITS`` hidden units ``u0..u0+w``, ``[H][4][w]`` (the block's 4
    gate columns, row k after row k-1), the blocks one after another.

    Parameters
    ----------
    r : numpy.ndarray
        ``[4H, H]`` float32.

    Returns
    -------
    numpy.ndarray
        ``[4H * H]`` float32.
    """
    h = r.shape[1]
    r4 = np.asarray(r, np.float32).reshape(4, h, h)  # [gate][unit][k]
    return np.concatenate([r4[:, u0:u0 + _UNITS, :].transpose(2, 0, 1).ravel()
                           for u0 in range(0, h, _UNITS)])


def _packed_r(node: Node, ctx: EmitContext, h: int, ndir: int) -> tuple[str, str]:
    """(pointer to every direction's packed R, C that packs it at run time or "")."""
    r = node.inputs[2]
    if r.const is not None:
        packed = np.concatenate([pack_recurrent(r.const[d]) for d in range(ndir)])
        return ctx.param(packed, f"{node.name}.RP"), ""
    buf = ctx.scratch(4 * ndir * 4 * h * h)
    code = "".join(f"ml_lstm_pack_r({h}, {ctx.ptr(r)} + {d * 4 * h * h}, (float*){buf} + "
                   f"{d * 4 * h * h});\n" for d in range(ndir))
    return f"(const float*){buf}", code
