"""``com.microsoft`` ``FusedMatMul``: ``Y = alpha * op(A) @ op(B)`` (NumPy matmul batch
broadcasting), the MatMul that ONNX Runtime's graph optimizer makes by folding a
``Transpose`` and a scalar ``Mul``/``Div`` into it.

Contrib op schema (``docs/ContribOperators.md``), checked against ONNX Runtime's kernel:
``op(X)`` permutes an operand of rank ``n``:

* ``transBatchX`` (rank >= 3): the first dim moves to the matrix rows, the batch dims
  ``1 .. n-2`` come first: perm ``[1, .., n-2, 0, n-1]``;
* ``transX``: then the last two dims swap.

No data moves: each permuted operand is a strided view, read by ``kernels/gemm.h``
(monolib's MatMul/Gemm kernel) in place (an ``op(A)`` with unit k stride) or through
its strided A packing, and its strided B source (a transposed B packed by 16 x 16
register transposes), with ``alpha`` as the GEMM's own scale. Constant operands are
packed at compile time. When ``op(A)``'s batches are contiguous rows and B has no
batch, all of A's batches fold into one GEMM (as MatMul does); otherwise one
``ml_sgemm_batch`` call over every output batch. Epilogue view ``[batch, M, N]`` (M or
N empty for 1-D operands), as MatMul's.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, is_static, shape_size
from ...symbolic import is_one, same
from ..base import EmitContext, OpDef, OutType, register
from ..nn._common import epi_call, f32, require_float32
from ..nn._gemm import batch_call, batch_scratch_floats, bbuf_floats, gemm_call, include_gemm, pack_a, pack_b
from ..nn.gemm import a_fields, b_operand, const_matrix
from ..tensor.loops import broadcast_shape, contiguous_strides

__all__ = ["FusedMatMul", "operand_view"]

logger = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"


def _perm(n: int, trans_batch: int, trans: int) -> list[int]:
    """The axis permutation ``op`` applies to a rank-``n`` operand."""
    perm = list(range(n))
    if trans_batch and n >= 3:
        perm = list(range(1, n - 1)) + [0, n - 1]
    if trans and n >= 2:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return perm


def operand_view(shape: tuple, trans_batch: int, trans: int) -> tuple[tuple, tuple]:
    """(shape, element strides) of ``op(X)`` for an operand of ``shape`` stored
    row-major: the permutation of the module docstring applied to both (1-D operands
    are never permuted, rank 2 ignores ``transBatch``)."""
    perm = _perm(len(shape), trans_batch, trans)
    strides = contiguous_strides(shape)
    return tuple(shape[p] for p in perm), tuple(strides[p] for p in perm)


def _views(node: Node):
    """(A view, B view, batch, M, N, K, output shape); views are (shape, strides) with
    1-D operands promoted as NumPy does (A a row, B a column)."""
    at = {**FusedMatMul.defaults, **node.attrs}  # no ONNX schema fills these in
    sa, ta = operand_view(node.inputs[0].shape, at["transBatchA"], at["transA"])
    sb, tb = operand_view(node.inputs[1].shape, at["transBatchB"], at["transB"])
    where = f"FusedMatMul (node {node.name!r})"
    if not sa or not sb:
        raise ShapeError(f"{where}: scalar operand")
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    if a_vec:
        sa, ta = (1,) + sa, (0,) + ta
    if b_vec:
        sb, tb = sb + (1,), tb + (0,)
    m, k, kb, n = sa[-2], sa[-1], sb[-2], sb[-1]
    if k != kb:
        raise ShapeError(
            f"{where}: inner dims differ: op(A) {list(sa)} @ op(B) {list(sb)} "
            f"(A {list(node.inputs[0].shape)}, B {list(node.inputs[1].shape)})"
        )
    try:
        batch = broadcast_shape(sa[:-2], sb[:-2])
    except ShapeError:
        raise ShapeError(f"{where}: batch dims of {list(sa)} and {list(sb)} do not broadcast") from None
    out = batch + (() if a_vec else (m,)) + (() if b_vec else (n,))
    return (sa, ta), (sb, tb), batch, m, n, k, out, a_vec, b_vec


def _batch_offsets(view: tuple, batch: tuple) -> list[int]:
    """Element offset of each output batch's matrix in an operand view (size-1 or
    missing batch dims broadcast)."""
    shape, strides = view
    nb = len(shape) - 2
    pad = len(batch) - nb
    offs = [0]
    for i, bd in enumerate(batch):
        j = i - pad
        st = strides[j] if j >= 0 and not is_one(shape[j]) else 0
        offs = [o + st * t for o in offs for t in range(bd)]
    return offs


@register
class FusedMatMul(OpDef):
    """``com.microsoft.FusedMatMul`` (1): float32 ``alpha * op(A) @ op(B)``.

    Raises
    ------
    ShapeError
        When the permuted inner dims differ or the batch dims do not broadcast.
    UnsupportedOpError
        Non-float32 operands, or run-time dims where a per-batch loop is needed.
    """

    op_type, domain, since_version = "FusedMatMul", MS_DOMAIN, 1
    defaults = {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0}

    def infer(self, node: Node) -> list[OutType]:
        return [(_views(node)[6], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        a = a.transpose(_perm(a.ndim, self.attr(node, "transBatchA"), self.attr(node, "transA")))
        b = b.transpose(_perm(b.ndim, self.attr(node, "transBatchB"), self.attr(node, "transB")))
        y = np.float32(self.attr(node, "alpha")) * np.matmul(a, b)
        return [np.asarray(y, dtype=inputs[0].dtype)]

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        _, _, batch, _, _, _, _, a_vec, b_vec = _views(node)
        nb = len(batch)
        mdims = [] if a_vec else [nb]
        ndims = [] if b_vec else [nb + len(mdims)]
        return [list(range(nb)), mdims, ndims]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1)
        a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
        (sa, ta), (sb, tb), batch, m, n, k, _, _, _ = _views(node)
        if y.size == 0:
            return ""
        include_gemm(ctx)
        epi = epi_call(ctx.tile_epilogue(self.epilogue_groups(node)))
        yp = ctx.ptr(y)
        fields = {"M": str(m), "N": str(n), "K": str(k), "c": yp, "epi": epi, "epi_out": yp,
                  "alpha": f32(self.attr(node, "alpha"))}
        b_batched = not is_one(shape_size(sb[:-2]))
        # op(A)'s batches lie row after row (no transposes touch them): fold into M
        a_rows = (same(ta[-1], 1) or is_one(k)) and (same(ta[-2], k) or is_one(m)) and all(
            same(t, c) or is_one(d) for t, c, d in zip(ta[:-2], contiguous_strides(sa)[:-2], sa[:-2]))
        if not b_batched and a_rows:
            nbatch = shape_size(batch)
            afields, code = a_fields(ctx, a, nbatch * m, k, k, 1, name=node.name + ".A")
            bsrc = b_operand(ctx, b, k, n, tb[-2], tb[-1], name=node.name + ".B")
            fields.update({"M": str(nbatch * m), **afields, "epi_mrows": str(m)})
            if bsrc["kind"] != "ML_B_PACKED":
                fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(k, n))}"
            return code + gemm_call(fields, bsrc)
        if not (is_static(batch) and is_static((m, n, k))):
            raise UnsupportedOpError(
                f"FusedMatMul (node {node.name!r}): run-time dims need a batch of A folded "
                f"into M (op(A) {list(sa)}, op(B) {list(sb)})"
            )
        return _emit_batched(node, ctx, (sa, ta), (sb, tb), batch, m, n, k, fields)


def _emit_batched(node: Node, ctx: EmitContext, va, vb, batch, m, n, k, fields) -> str:
    """One ``ml_sgemm_batch`` call (threads take whole batches); the operands' batch
    offsets from a static table. A run-time ``op(A)`` with unit k stride is read in
    place (gemm.h's unpacked A), any other run-time ``op(A)`` packed per batch in the
    thread's scratch; constant operands are packed per batch at compile time."""
    a, b = node.inputs[0], node.inputs[1]
    offa, offb = _batch_offsets(va, batch), _batch_offsets(vb, batch)
    nb = len(offa)
    tab = ctx.unique("fmm_off")
    code = (f"static const int64_t {tab}[{2 * nb}] = {{"
            + ", ".join(str(v) for pair in zip(offa, offb) for v in pair) + "};\n")
    lda_m, lda_k = va[1][-2], va[1][-1]
    ldb_k, ldb_n = vb[1][-2], vb[1][-1]
    bfields = {"nb": str(nb), "off": tab, "c_stride": str(m * n)}
    pack_a_rt = False
    if a.const is not None:
        packed = [pack_a(const_matrix(a, o, m, k, lda_m, lda_k)) for o in offa]
        fields["a"] = ctx.param(np.concatenate(packed), node.name + ".A.packed")
        bfields["a_pstride"] = str(packed[0].size)
    elif lda_k == 1 or k == 1:
        fields.update({"a_raw": ctx.ptr(a), "lda": str(lda_m)})
    else:
        pack_a_rt = True
        bfields.update({"a_src": ctx.ptr(a), "a_ldm": str(lda_m), "a_ldk": str(lda_k)})
    if b.const is not None:
        packed = [pack_b(const_matrix(b, o, k, n, ldb_k, ldb_n)) for o in offb]
        bsrc = {"kind": "ML_B_PACKED", "k_total": str(k),
                "p": ctx.param(np.concatenate(packed), node.name + ".B.packed")}
        bfields["b_pstride"] = str(packed[0].size)
    else:
        bsrc = {"kind": "ML_B_STRIDED", "p": ctx.ptr(b), "ldk": str(ldb_k), "ldn": str(ldb_n)}
    floats = batch_scratch_floats(m, n, k, b.const is None, pack_a_rt)
    return code + batch_call(fields, bsrc, bfields, ctx.scratch(4 * max(floats, 16)))
