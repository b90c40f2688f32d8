"""``com.microsoft`` ``SkipLayerNormalization`` and ``SkipSimplifiedLayerNormalization``.

ONNX Runtime's transformer optimizer fuses a residual ``Add`` (and the bias ``Add`` of
the preceding MatMul) with the LayerNormalization that follows into one op (contrib op
schema, ``docs/ContribOperators.md``):

* ``s = input + skip (+ bias)``, rows of the last dim ``H``;
* ``SkipLayerNormalization``: ``output = (s - mean) / sqrt(var + epsilon) * gamma (+ beta)``
  (biased variance over the row);
* ``SkipSimplifiedLayerNormalization`` (RMS): ``output = s / sqrt(mean(s^2) + epsilon) * gamma``;
* optional outputs ``mean`` and ``inv_std_var`` (float32, ``input.shape[:-1] + [1]``;
  the simplified op writes ``mean`` as 0, as ONNX Runtime does) and
  ``input_skip_bias_sum`` (``s``).

``input`` is ``[B, S, H]`` or ``[T, H]``; ``skip`` has input's shape or a suffix of it
(``[1, S, H]``, ``[S, H]``): its rows repeat over the leading dims. ``epsilon`` defaults
to 1e-12 (the schema's). A float16 model is computed in float32 between Casts
(``frontend/storage.py``); its ``mean``/``inv_std_var`` then come back as float16, where
ONNX Runtime keeps them float32 (training outputs its optimizer never wires). The row
statistics are monolib's LayerNormalization code
(``math/norm.py``: ``emit_row_stats``); output 0 takes a fused epilogue (flat view).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...backends.cstyle import c_literal, ctype
from ...ir import Node, Value, shape_size
from ...symbolic import is_one, same, same_shape
from ..base import EmitContext, OutType, register
from ..math.elementwise import is_float
from ..math.norm import emit_row_stats
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import flat_index_exprs

__all__ = [
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "emit_normalized_rows",
    "normalize_rows",
]

logger = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"
#: ONNX Runtime's schema default of ``epsilon`` (kDefaultSkipLayerNormEpsilon)
DEFAULT_EPSILON = 1e-12


def check_vector(node: Node, v: Value | None, h, what: str) -> None:
    """Raise :class:`ShapeError` unless ``v`` (if present) is a 1-D ``[h]`` tensor."""
    if v is not None and not same_shape(v.shape, (h,)):
        raise ShapeError(
            f"{node.op_type} (node {node.name!r}): {what} must be [{h}], got {list(v.shape)}"
        )


def normalize_rows(s: np.ndarray, gamma, beta, eps: float, simplified: bool):
    """NumPy reference of the row normalization of ``s`` over its last axis.

    Returns
    -------
    (y, mean, inv_std_var)
        ``y`` in ``s``'s dtype; ``mean`` and ``inv_std_var`` float32 with a last dim of 1
        (``mean`` zero when ``simplified``: RMS normalization has no mean).
    """
    s64 = s.astype(np.float64)
    if simplified:
        mean = np.zeros(s.shape[:-1] + (1,))
        inv = 1 / np.sqrt((s64 * s64).mean(axis=-1, keepdims=True) + eps)
        y = s64 * inv * gamma
    else:
        mean = s64.mean(axis=-1, keepdims=True)
        inv = 1 / np.sqrt(((s64 - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
        y = (s64 - mean) * inv * gamma
    if beta is not None:
        y = y + beta
    return y.astype(s.dtype), mean.astype(np.float32), inv.astype(np.float32)


def emit_normalized_rows(
    ctx: EmitContext,
    node: Node,
    rows,
    h,
    fill: str,
    sum_out: Value | None,
    gamma: Value,
    beta: Value | None,
    stat_outs: tuple[Value | None, Value | None],
    eps: float,
    simplified: bool,
    source: Value | None = None,
) -> str:
    """C loop over ``rows`` rows of ``h`` elements: build each row in a buffer (or read
    it from ``source``), then normalize it into output 0 (through its epilogue).

    Parameters
    ----------
    fill : str
        C statements that write the row's ``h`` values to ``ct* r`` given the row index
        ``int64_t o`` (e.g. ``input + skip + bias``, or the embedding sum); ignored with
        ``source``.
    source : Value or None
        A tensor whose row ``o`` is the row itself (nothing to build).
    sum_out : Value or None
        An output that keeps the built rows (the row buffer is then that output's row
        ``o``); ``None``: one row of scratch.
    stat_outs : (Value or None, Value or None)
        Outputs for each row's mean and inverse standard deviation (float32).
    simplified : bool
        RMS normalization (no mean, no beta) instead of LayerNormalization.
    """
    y = node.outputs[0]
    ct = ctype(y.dtype)
    if source is not None:
        decl, fill = f"const {ct}* r = {ctx.ptr(source)} + o*{h};", ""
    elif sum_out is not None:
        decl = f"{ct}* r = {ctx.ptr(sum_out)} + o*{h};"
    else:
        decl = f"{ct}* r = ({ct}*){ctx.scratch(y.dtype.itemsize * _hi(h))};"
    if simplified:
        stats = (
            f"{ct} mean = 0, inv = 0;\n"
            f"for (int64_t j = 0; j < {h}; ++j) inv += r[j] * r[j];\n"
            f"inv = ({ct})1 / sqrt{'f' if ct == 'float' else ''}(inv / ({ct})({h}) + {c_literal(eps, y.dtype)});"
        )
        val = f"r[j] * inv * {ctx.ptr(gamma)}[j]"
    else:
        stats = emit_row_stats(ctx, "r", h, y.dtype, eps, "mean", "inv")
        val = f"(r[j] - mean) * inv * {ctx.ptr(gamma)}[j]"
    if beta is not None:
        val += f" + {ctx.ptr(beta)}[j]"
    flat = f"o*{h} + j"
    after = [f"{ctx.ptr(v)}[o] = (float){n};" for v, n in zip(stat_outs, ("mean", "inv")) if v is not None]
    return "\n".join(
        [
            f"for (int64_t o = 0; o < {rows}; ++o) {{",
            decl,
            fill,
            stats,
            f"for (int64_t j = 0; j < {h}; ++j) "
            f"{ctx.ptr(y)}[{flat}] = {ctx.output_expr(f'({val})', flat_index_exprs(flat, y.shape))};",
            *after,
            "}",
        ]
    )


def _hi(d) -> int:
    """A dim's upper bound (scratch is planned at it)."""
    return d if isinstance(d, int) else d.hi


@register
class SkipLayerNormalization(FlatEpilogueOp):
    """``com.microsoft.SkipLayerNormalization`` (1): inputs ``input, skip, gamma, beta?,
    bias?``; outputs ``output, mean?, inv_std_var?, input_skip_bias_sum?``. float32 or
    float64.

    Raises
    ------
    ShapeError
        An input that is not 2-D/3-D, a skip that is not a suffix of input's shape, or
        gamma/beta/bias not ``[H]``.
    UnsupportedOpError
        Non-float input.
    """

    op_type, domain, since_version = "SkipLayerNormalization", MS_DOMAIN, 1
    defaults = {"epsilon": DEFAULT_EPSILON}
    simplified = False

    def _parts(self, node: Node) -> tuple[Value | None, Value | None]:
        """(beta, bias) inputs: SkipSimplifiedLayerNormalization has no beta."""
        if self.simplified:
            return None, node.input(3)
        return node.input(3), node.input(4)

    def infer(self, node: Node) -> list[OutType]:
        x, skip, gamma = node.inputs[:3]
        where = f"{self.op_type} (node {node.name!r})"
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"{where} takes floats, got {x.dtype}")
        if len(x.shape) not in (2, 3):
            raise ShapeError(f"{where}: input must be 2-D or 3-D, got {list(x.shape)}")
        core = tuple(skip.shape)
        while len(core) > 1 and is_one(core[0]):  # leading 1s broadcast
            core = core[1:]
        if len(skip.shape) > len(x.shape) or not same_shape(core, x.shape[len(x.shape) - len(core):]):
            raise ShapeError(f"{where}: skip {list(skip.shape)} does not fit input {list(x.shape)}")
        h = x.shape[-1]
        beta, bias = self._parts(node)
        for v, what in ((gamma, "gamma"), (beta, "beta"), (bias, "bias")):
            check_vector(node, v, h, what)
        stat = tuple(x.shape[:-1]) + (1,)
        f32 = np.dtype(np.float32)
        types = [(x.shape, x.dtype), (stat, f32), (stat, f32), (x.shape, x.dtype)]
        return types[: max(len(node.outputs), 1)]

    def reference(self, node: Node, inputs):
        x, skip, gamma = inputs[:3]
        idx_beta, idx_bias = (None, 3) if self.simplified else (3, 4)
        beta = inputs[idx_beta] if idx_beta is not None and len(inputs) > idx_beta else None
        bias = inputs[idx_bias] if len(inputs) > idx_bias else None
        s = x + skip
        if bias is not None:
            s = s + bias
        s = s.astype(x.dtype)
        y, mean, inv = normalize_rows(s, gamma, beta, float(self.attr(node, "epsilon")), self.simplified)
        return [y, mean, inv, s][: max(len(node.outputs), 1)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, skip, gamma = node.inputs[:3]
        if x.size == 0:
            return ""
        beta, bias = self._parts(node)
        h = x.shape[-1]
        rows = shape_size(x.shape[:-1])
        skip_rows = shape_size(skip.shape[:-1])
        srow = "o" if same(skip_rows, rows) else f"(o % {skip_rows})"
        add_bias = f" + {ctx.ptr(bias)}[j]" if bias is not None else ""
        fill = (
            f"for (int64_t j = 0; j < {h}; ++j) r[j] = {ctx.ptr(x)}[o*{h} + j] + "
            f"{ctx.ptr(skip)}[{srow}*{h} + j]{add_bias};"
        )
        outs = list(node.outputs) + [None] * (4 - len(node.outputs))
        return emit_normalized_rows(
            ctx, node, rows, h, fill, outs[3], gamma, beta, (outs[1], outs[2]),
            float(self.attr(node, "epsilon")), self.simplified,
        )


@register
class SkipSimplifiedLayerNormalization(SkipLayerNormalization):
    """``com.microsoft.SkipSimplifiedLayerNormalization`` (1): RMS normalization of
    ``input + skip (+ bias)``; inputs ``input, skip, gamma, bias?``; outputs as
    :class:`SkipLayerNormalization` (``mean`` written as 0).

    Raises
    ------
    ShapeError, UnsupportedOpError
        As :class:`SkipLayerNormalization`.
    """

    op_type = "SkipSimplifiedLayerNormalization"
    simplified = True
