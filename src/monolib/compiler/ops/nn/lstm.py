"""LSTM (ONNX opset 1..22), forward/reverse/bidirectional.

Follows the ONNX spec: gates in order i, o, f, c; ``W [D, 4H, I]``, ``R [D, 4H, H]``,
``B [D, 8H]`` (Wb then Rb), optional ``initial_h``/``initial_c [D, B, H]`` and peepholes
``P [D, 3H]`` (i, o, f); outputs ``Y [T, D, B, H]``, ``Y_h``, ``Y_c [D, B, H]``. Default
activations (Sigmoid, Tanh, Tanh), ``clip`` and ``sequence_lens`` (ragged lengths: row by
row) run in the fast kernel below; ``layout=1`` and other activations run in the generic
recurrence of ``rnn.py`` (which also gives the NumPy reference); ``input_forget=1`` raises
UnsupportedOpError.

Lowering: per direction one GEMM ``gx[T*B, 4H] = X @ W^T + (Wb + Rb)`` (W^T packed at
compile time), then ``ml_lstm`` of ``kernels/lstm.h`` runs the recurrence of every
direction on R packed in blocks of 16 hidden units (``rnn.pack_recurrent``, at compile
time when R is constant): per step each block streams its ``[H][4][16]`` slice once for
up to 4 batch rows and updates its units' cell at once. Threads: at 2, two directions run
side by side (from ``ML_RNN_DIR_PAR_MIN`` multiply-adds in all), at more both run in
lockstep with each step split by unit blocks; one direction splits each step by unit
blocks when it has at least ``ML_LSTM_PAR_MIN``. A run-time T or B (issue 12) is read
from the symbols when the op runs (the sizes render as their C); scratch is planned at
the bounds and the weights are still packed at compile time.

Measured on a 2-core Zen 4, whole models vs ONNX Runtime in the same run, 1 thread (CPU
time): g2p-id's encoder (T 24, H 256) 0.52 ms = 1.63x ORT with the previous kernel (R^T
rows 4 KB apart, libm tanhf per element), 0.28-0.29 ms = 0.89x now, the step streaming R
at the L2's rate (42 ps per multiply-add at H 128, 192 and 256 alike); ddddocr (H 512,
bidirectional) 0.93-0.99x -> 0.77x; the greedy Loop decoder 0.55x. Recurrence alone at
2 threads when the other core was free: H 256 134 us from 265 (each thread's half of R
stays in its L2), H 512 bidirectional 1.46 ms from 3.35.
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ._common import f32, require_float32
from ._gemm import include_gemm
from .gemm import a_operand
from .rnn import (
    emit_recurrence,
    fast_kernel,
    input_projection,
    packed_recurrent,
    recurrence_reference,
    rnn_dims,
    seq_lens,
)

__all__ = ["LSTM"]

logger = logging.getLogger(__name__)

def _dims(node: Node) -> tuple[int, int, int, int, int]:
    """(T, B, I, H, num_directions), checking every shape (``rnn.rnn_dims``)."""
    return rnn_dims(node)


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
        if not fast_kernel(node):
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
        rp, rcode = packed_recurrent(node, ctx, h, ndir)
        outs = list(node.outputs) + [None] * 3
        state = lambda k: (f"{ctx.ptr(outs[k])}" if outs[k] is not None
                           else f"(float*){ctx.scratch(4 * ndir * b * h)}")
        opt = lambda v: ctx.ptr(v) if v is not None else "0"
        hbuf = ctx.scratch(4 * ndir * 4 * b * h)
        clip = float(node.attrs.get("clip") or 0.0)
        reverse = int(node.attrs["direction"] == "reverse")
        y = ctx.ptr(outs[0]) if outs[0] is not None else "0"
        return code + rcode + (
            f"ml_lstm({ndir}, {t}, {b}, {h}, {reverse}, (const float*){gx}, {rp}, "
            f"{opt(node.input(7))}, {seq_lens(node, ctx)}, {opt(node.input(5))}, {opt(node.input(6))}, {f32(clip)}, "
            f"{y}, {state(1)}, {state(2)}, (float*){hbuf});\n"
        )

