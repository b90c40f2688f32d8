"""``com.microsoft`` ``EmbedLayerNormalization``: BERT's embedding layer in one op.

Contrib op schema (ONNX Runtime ``docs/ContribOperators.md``), checked against its CPU
kernel:

* inputs ``input_ids [B, S]``, ``segment_ids [B, S]?``, ``word_embedding [V, H]``,
  ``position_embedding [P, H]``, ``segment_embedding [G, H]?``, ``gamma [H]``,
  ``beta [H]``, ``mask [B, S]?``, ``position_ids [B, S] | [1, S]?`` (int32);
* ``e[b, s] = word[input_ids[b, s]] + position[pos(b, s)] (+ segment[segment_ids[b, s]])``
  with ``pos(b, s) = position_ids[b, s]`` (a ``[1, S]`` one broadcast over batch), or
  ``s`` without position ids;
* ``output = LayerNormalization(e) * gamma + beta`` over ``H`` (``epsilon``, 1e-12 by
  default);
* ``mask_index [B]`` (int32): the number of ones in each row of ``mask`` (0 without a
  mask); ``embedding_sum [B, S, H]?``: ``e`` before normalization.

An id outside its table is clamped into it (C cannot raise; ONNX Runtime refuses such
an input), so a bad id never reads outside the weights. The normalization is the row
code of ``skip_layer_norm.py`` (LayerNormalization's statistics); output 0 takes a
fused epilogue (flat view).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, Value
from ...symbolic import is_one, same_shape
from ..base import EmitContext, OutType, register
from ..math.elementwise import is_float
from ..tensor.flat import FlatEpilogueOp
from ..tensor.gather import clamped_index
from .skip_layer_norm import DEFAULT_EPSILON, MS_DOMAIN, check_vector, emit_normalized_rows, normalize_rows

__all__ = ["EmbedLayerNormalization"]

logger = logging.getLogger(__name__)

# input indices of the schema
IDS, SEG_IDS, WORD, POS, SEG, GAMMA, BETA, MASK, POS_IDS = range(9)


@register
class EmbedLayerNormalization(FlatEpilogueOp):
    """``com.microsoft.EmbedLayerNormalization`` (1); see the module docstring. Float
    embeddings (float32/float64), int32 ids.

    Raises
    ------
    ShapeError
        Ids or mask that are not ``[B, S]``, position ids neither ``[B, S]`` nor
        ``[1, S]``, embedding tables that are not ``[*, H]``, gamma/beta not ``[H]``, or
        segment ids without a segment table.
    UnsupportedOpError
        Non-float embeddings or non-integer ids.
    """

    op_type, domain, since_version = "EmbedLayerNormalization", MS_DOMAIN, 1
    defaults = {"epsilon": DEFAULT_EPSILON, "mask_index_type": 1}

    def infer(self, node: Node) -> list[OutType]:
        where = f"EmbedLayerNormalization (node {node.name!r})"
        ids, word = node.inputs[IDS], node.inputs[WORD]
        if len(ids.shape) != 2:
            raise ShapeError(f"{where}: input_ids must be [batch, sequence], got {list(ids.shape)}")
        if not is_float(word.dtype):
            raise UnsupportedOpError(f"{where}: embeddings must be float, got {word.dtype}")
        b, s = ids.shape
        h = word.shape[-1]
        for i in (SEG_IDS, MASK, POS_IDS):
            v = node.input(i)
            if v is None:
                continue
            if v.dtype.kind not in "iu":
                raise UnsupportedOpError(f"{where}: input {i} must be integer ids, got {v.dtype}")
            ok = same_shape(v.shape, (b, s)) or (i == POS_IDS and same_shape(v.shape, (1, s)))
            if not ok:
                raise ShapeError(f"{where}: input {i} {list(v.shape)} does not fit input_ids {[b, s]}")
        if (node.input(SEG_IDS) is None) != (node.input(SEG) is None):
            raise ShapeError(f"{where}: segment_ids and segment_embedding go together")
        for i in (WORD, POS, SEG):
            v = node.input(i)
            if v is not None and (len(v.shape) != 2 or not same_shape(v.shape[1:], (h,))):
                raise ShapeError(f"{where}: embedding input {i} must be [*, {h}], got {list(v.shape)}")
        check_vector(node, node.inputs[GAMMA], h, "gamma")
        check_vector(node, node.inputs[BETA], h, "beta")
        types = [((b, s, h), word.dtype), ((b,), np.dtype(np.int32)), ((b, s, h), word.dtype)]
        return types[: max(len(node.outputs), 1)]

    def reference(self, node: Node, inputs):
        inputs = list(inputs) + [None] * (9 - len(inputs))
        ids, word, pos_tab = inputs[IDS], inputs[WORD], inputs[POS]
        b, s = ids.shape

        def rows(table, idx):
            return table[np.clip(idx.astype(np.int64), 0, table.shape[0] - 1)]

        pos_ids = inputs[POS_IDS]
        pos = np.broadcast_to(np.arange(s)[None] if pos_ids is None else pos_ids, (b, s))
        e = rows(word, ids) + rows(pos_tab, pos)
        if inputs[SEG] is not None:
            e = e + rows(inputs[SEG], inputs[SEG_IDS])
        e = e.astype(word.dtype)
        y, _, _ = normalize_rows(e, inputs[GAMMA], inputs[BETA], float(self.attr(node, "epsilon")), False)
        mask = inputs[MASK]
        count = (mask == 1).sum(axis=1) if mask is not None else np.zeros(b)
        return [y, count.astype(np.int32), e][: max(len(node.outputs), 1)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ids, word = node.inputs[IDS], node.inputs[WORD]
        b, s = ids.shape
        h = word.shape[-1]
        if ids.size == 0:
            return ""
        lines = []
        terms = []

        def lookup(i: int, idx_expr: str, name: str) -> None:
            table: Value = node.inputs[i]
            lines.append(clamped_index(name, idx_expr, table.shape[0]))
            terms.append(f"{ctx.ptr(table)}[{name}*{h} + j]")

        lookup(WORD, f"{ctx.ptr(ids)}[o]", "wi")
        pos_ids = node.input(POS_IDS)
        if pos_ids is None:
            lookup(POS, f"o % {s}", "pi")
        else:
            lookup(POS, f"{ctx.ptr(pos_ids)}[{'o % ' + str(s) if is_one(pos_ids.shape[0]) else 'o'}]", "pi")
        if node.input(SEG) is not None:
            lookup(SEG, f"{ctx.ptr(node.inputs[SEG_IDS])}[o]", "si")
        fill = "\n".join(lines) + f"\nfor (int64_t j = 0; j < {h}; ++j) r[j] = {' + '.join(terms)};"
        outs = list(node.outputs) + [None] * (3 - len(node.outputs))
        code = emit_normalized_rows(
            ctx, node, b * s, h, fill, outs[2], node.inputs[GAMMA], node.inputs[BETA],
            (None, None), float(self.attr(node, "epsilon")), False,
        )
        if outs[1] is not None:
            mi, mask = ctx.ptr(outs[1]), node.input(MASK)
            if mask is None:
                code += f"\nfor (int64_t o = 0; o < {b}; ++o) {mi}[o] = 0;"
            else:
                code += (
                    f"\nfor (int64_t o = 0; o < {b}; ++o) {{ int32_t c = 0;"
                    f" for (int64_t j = 0; j < {s}; ++j) c += {ctx.ptr(mask)}[o*{s} + j] == 1;"
                    f" {mi}[o] = c; }}"
                )
        return code
