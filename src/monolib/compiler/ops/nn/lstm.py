"""LSTM (ONNX opset 1..22), forward/reverse/bidirectional.

Follows the ONNX spec: gates in order i, o, f, c; ``W [D, 4H, I]``, ``R [D, 4H, H]``,
``B [D, 8H]`` (Wb then Rb), optional ``initial_h``/``initial_c [D, B, H]`` and peepholes
``P [D, 3H]`` (i, o, f); outputs ``Y [T, D, B, H]``, ``Y_h``, ``Y_c [D, B, H]``. Default
activations (Sigmoid, Tanh, Tanh) and ``clip`` run in the fast kernel below; ``layout=1``,
other activations and ``sequence_lens`` not known to be all T run in the generic
recurrence of ``rnn.py`` (which also gives the NumPy reference); ``input_forget=1`` raises
UnsupportedOpError.

Lowering: per direction one GEMM ``gx[T*B, 4H] = X @ W^T + (Wb + Rb)`` (W^T packed at
compile time), then ``ml_lstm_dir`` of ``kernels/lstm.h`` runs the recurrence with R^T
(transposed at compile time when constant). A run-time T or B (issue 12) is read from
the symbols when the op runs (the sizes render as their C); scratch is planned at the
bounds and the weights are still packed at compile time.
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
    recurrent_weights,
    rnn_dims,
)

__all__ = ["LSTM"]

logger = logging.getLogger(__name__)

_DEFAULT_ACTS = ["sigmoid", "tanh", "tanh"]


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
    bias, p = node.input(3), node.input(7)
    g4 = 4 * h
    bias_c = None
    if bias is not None and bias.const is not None:
        bias_c = bias.const[d, :g4] + bias.const[d, g4:]
    code = input_projection(node, ctx, d, ap, gx, t * b, i, g4, bias_c,
                            f"{ctx.ptr(bias)}[{d * 2 * g4} + j] + {ctx.ptr(bias)}[{d * 2 * g4 + g4} + j]"
                            if bias is not None else None)
    rt, rcode = recurrent_weights(node, ctx, d, h, g4)
    code += rcode
    state = b * h
    opt = lambda v, off: f"({ctx.ptr(v)} + {off})" if v is not None else "0"
    reverse = int(node.attrs["direction"] == "reverse" or d == 1)
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
