"""MatMul (ONNX opset 1..13): ``numpy.matmul`` semantics, N-D with broadcast batch dims.

A 1-D ``A`` is a row ``[1, K]`` (that dim removed from the result), a 1-D ``B`` a column
``[K, 1]`` (likewise). Lowering to ``kernels/gemm.h``: when ``B`` has no batch (the common
``X @ W``), all of A's batch folds into the GEMM's M (one call); otherwise a static batch
is one ``ml_sgemm_batch`` call over a table of batch offsets (threads take whole
batches), a run-time batch one GEMM per batch. Constant operands are packed at compile
time; a run-time A is read in place (no packing pass). Epilogue view: ``[batch, M, N]``
(M or N empty for 1-D operands).
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...backends.cstyle import c_literal, ctype
from ...ir import Node, Value, shape_size
from ...symbolic import is_one
from ..base import EmitContext, OpDef, OutType, register
from ..tensor.loops import broadcast_shape, broadcast_strides
from ._common import epi_call, require_float32
from ._gemm import (
    MR, NR, batch_call, batch_scratch_floats, bbuf_floats, gemm_call, include_gemm, pack_a, pack_b,
)
from .gemm import a_fields, b_operand

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["MatMul", "matmul_shapes"]

logger = logging.getLogger(__name__)


def matmul_shapes(node: Node) -> tuple[tuple[int, ...], int, int, int, tuple[int, ...]]:
    """(batch shape, M, N, K, output shape) of a MatMul node.

    Raises
    ------
    ShapeError
        When the inner dims differ or the batch dims do not broadcast.
    """
    a, b = node.inputs[0].shape, node.inputs[1].shape
    if len(a) == 0 or len(b) == 0:
        raise ShapeError(f"MatMul node {node.name!r}: scalar operand {a} @ {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"MatMul node {node.name!r}: inner dims differ, {a} @ {b}")
    try:  # broadcast_shape takes run-time dims (never broadcast themselves)
        batch = broadcast_shape(a2[:-2], b2[:-2])
    except ShapeError:
        raise ShapeError(
            f"MatMul node {node.name!r}: batch dims of {a} and {b} do not broadcast"
        ) from None
    m, k, n = a2[-2], a2[-1], b2[-1]
    out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    return batch, m, n, k, out


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...], mat: int) -> list:
    """Element stride of each output batch axis in an operand of ``shape`` (its last two
    dims the matrix of ``mat`` elements): 0 along a broadcast size-1 batch dim."""
    bshape = (1,) * (len(batch) - len(shape[:-2])) + tuple(shape[:-2])
    strides = [0] * len(batch)
    acc = mat
    for i in range(len(batch) - 1, -1, -1):
        strides[i] = acc if not is_one(bshape[i]) else 0
        acc = acc * bshape[i]
    return strides


def _batch_offsets(shape: tuple[int, ...], batch: tuple[int, ...], mat: int) -> list[int]:
    """Element offset of each output batch's matrix in an operand of ``shape`` (its last
    two dims the matrix of ``mat`` elements), broadcasting size-1 batch dims. A run-time
    matrix size gives Dim offsets (the batch dims themselves must be static)."""
    strides = _batch_strides(shape, batch, mat)
    if not batch:
        return [0]
    return [sum((s * j for s, j in zip(strides, idx)), 0)
            for idx in itertools.product(*(range(b) for b in batch))]


def _operand_batch(v: Value, k: int, is_a: bool) -> tuple[tuple[int, ...], int]:
    """(batch shape, matrix rows) of a MatMul operand, 1-D vectors promoted (NumPy)."""
    if len(v.shape) == 1:
        return (), 1 if is_a else k
    return tuple(v.shape[:-2]), v.shape[-2]


@register
class MatMul(OpDef):
    """ONNX ``MatMul``: ``Y = A @ B`` with NumPy broadcasting; float32 (gemm.h), and
    float64 by a plain loop."""

    op_type = "MatMul"
    since_version = 1

    def infer(self, node: Node) -> list[OutType]:
        return [(matmul_shapes(node)[4], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        return [np.asarray(np.matmul(inputs[0], inputs[1]), dtype=inputs[0].dtype)]

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        a, b = node.inputs[0].shape, node.inputs[1].shape
        batch, *_ = matmul_shapes(node)
        nb = len(batch)
        mdims = [nb] if len(a) > 1 else []
        ndims = [nb + len(mdims)] if len(b) > 1 else []
        return [list(range(nb)), mdims, ndims]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if node.inputs[0].dtype == np.float64 and node.inputs[1].dtype == np.float64:
            return _emit_float64(node, ctx)
        require_float32(node, 0, 1)
        a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
        batch, m, n, k, _ = matmul_shapes(node)
        include_gemm(ctx)
        epi = epi_call(ctx.tile_epilogue(self.epilogue_groups(node)))
        yp = ctx.ptr(y)
        nbatch = shape_size(batch)  # a run-time batch folds into M too
        b_batched = len(b.shape) > 2 and not is_one(shape_size(b.shape[:-2]))
        if not b_batched:
            # X @ W: fold every batch of A into M
            afields, code = a_fields(ctx, a, nbatch * m, k, k, 1, name=node.name + ".A")
            bsrc = b_operand(ctx, b, k, n, n, 1, name=node.name + ".B")
            fields = {
                "M": str(nbatch * m),
                "N": str(n),
                "K": str(k),
                **afields,
                "c": yp,
                "epi": epi,
                "epi_out": yp,
                "epi_mrows": str(m),
            }
            if bsrc["kind"] != "ML_B_PACKED":
                fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(k, n))}"
            return code + gemm_call(fields, bsrc)
        return _emit_batched(node, ctx, batch, m, n, k, epi)

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device MatMul (NumPy semantics: batch broadcast, 1-D operands): one output
        element per work item, a dot product over K."""
        from ...backends.device.lowerings import decompose, element_kernel, flat_of

        a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
        K = a.shape[-1]
        N = b.shape[-1] if len(b.shape) > 1 else 1
        ab, M = _operand_batch(a, K, True)
        bb, _ = _operand_batch(b, K, False)
        batch = tuple(np.broadcast_shapes(ab, bb))
        full = [*batch, M, N]
        a_st = broadcast_strides(ab, batch) if batch else ()
        b_st = broadcast_strides(bb, batch) if batch else ()
        a_off = flat_of([f"i{d}" for d in range(len(batch))], [s * M * K for s in a_st])
        b_off = flat_of([f"i{d}" for d in range(len(batch))], [s * K * N for s in b_st])
        body = [
            *decompose("gid", full, "i"),
            f"{ctx.language.pointer(ctype(a.dtype), True)} A = {ctx.ptr(a)} + {a_off} + i{len(batch)} * {K};",
            f"{ctx.language.pointer(ctype(b.dtype), True)} B = {ctx.ptr(b)} + {b_off} + i{len(batch) + 1};",
            f"{ctype(y.dtype)} acc = {c_literal(0, y.dtype)};",
            f"for (idx_t k = 0; k < {K}; ++k) acc += A[k] * B[k * {N}];",
        ]
        return element_kernel(node, ctx, body)


def _emit_float64(node: Node, ctx: EmitContext) -> str:
    """float64 MatMul: a plain dot-product loop per output element (double accumulator),
    batches located by a static offset table; the fused epilogue applied per element.

    Raises
    ------
    UnsupportedOpError
        A run-time dim (the float32 GEMM path takes those).
    """
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    batch, m, n, k, out = matmul_shapes(node)
    if not all(type(d) is int for d in (*batch, m, n, k)):
        raise UnsupportedOpError(f"MatMul node {node.name!r}: float64 with run-time dims")
    a2 = (1,) + a.shape if len(a.shape) == 1 else a.shape
    b2 = b.shape + (1,) if len(b.shape) == 1 else b.shape
    offa, offb = _batch_offsets(a2, batch, m * k), _batch_offsets(b2, batch, k * n)
    table = ctx.unique("mm_off")
    bi, i, j, kk = ctx.unique("bi"), ctx.unique("i"), ctx.unique("j"), ctx.unique("k")
    index, inner = [], 1
    for d in reversed(batch):
        index.insert(0, f"({bi} / {inner}) % {d}")
        inner *= d
    index += ([i] if len(a.shape) > 1 else []) + ([j] if len(b.shape) > 1 else [])
    ap, bp, yp = ctx.ptr(a), ctx.ptr(b), ctx.ptr(y)
    return (
        f"static const int64_t {table}[{2 * len(offa)}] = {{"
        + ", ".join(str(v) for pair in zip(offa, offb) for v in pair) + "};\n"
        f"for (int64_t {bi} = 0; {bi} < {len(offa)}; ++{bi})"
        f" for (int64_t {i} = 0; {i} < {m}; ++{i}) for (int64_t {j} = 0; {j} < {n}; ++{j}) {{\n"
        f"  double acc = 0.0;\n"
        f"  for (int64_t {kk} = 0; {kk} < {k}; ++{kk}) acc += {ap}[{table}[2 * {bi}] + {i} * {k}"
        f" + {kk}] * {bp}[{table}[2 * {bi} + 1] + {kk} * {n} + {j}];\n"
        f"  {yp}[({bi} * {m} + {i}) * {n} + {j}] = {ctx.output_expr('acc', index)};\n}}"
    )


def _batch_offset_c(shape: tuple, batch: tuple, mat) -> str:
    """C expression of the element offset of output batch ``bi``'s matrix in an operand
    of ``shape``, for a run-time ``batch`` (decomposed when the op runs)."""
    terms, inner = [], 1
    for bd, st in reversed(list(zip(batch, _batch_strides(shape, batch, mat)))):
        if not (type(st) is int and st == 0):
            terms.append(f"(bi / ({inner})) % ({bd}) * ({st})")
        inner = inner * bd
    return " + ".join(terms) or "0"


def _emit_batched(
    node: Node, ctx: EmitContext, batch: tuple[int, ...], m: int, n: int, k: int, epi: str
) -> str:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    a2 = (1,) + a.shape if len(a.shape) == 1 else a.shape
    b2 = b.shape + (1,) if len(b.shape) == 1 else b.shape
    yp = ctx.ptr(y)
    if all(type(d) is int for d in batch):
        return _emit_static_batch(node, ctx, a2, b2, batch, m, n, k, epi)
    # a run-time batch: each batch's offsets decomposed from bi when the op runs; a
    # constant operand (static shape) is packed per matrix of its own
    nb = shape_size(batch)
    offa = _batch_offsets(a2, a2[:-2], m * k) if a.const is not None else []
    offb = _batch_offsets(b2, b2[:-2], k * n) if b.const is not None else []
    off_a = _batch_offset_c(a2, batch, m * k)
    off_b = _batch_offset_c(b2, batch, k * n)
    lines = ["/* a run-time batch of matrices */"]
    a_mat, b_mat = f"({off_a}) / {m * k}", f"({off_b}) / {k * n}"
    if a.const is not None:
        packed = [pack_a(a.const.ravel()[o : o + m * k].reshape(m, k)) for o in offa]
        ap = ctx.param(np.concatenate(packed), f"{node.name}.A.packed")
        a_ptr = f"{ap} + {a_mat} * {packed[0].size}"
    else:
        buf = ctx.scratch(4 * -(-m // MR) * MR * k)
        lines.append(
            f"  ml_pack_a({m}, {k}, {ctx.ptr(a)} + {off_a}, {k}, 1, (float*){buf});"
        )
        a_ptr = f"(const float*){buf}"
    if b.const is not None:
        per = -(-n // NR) * NR * k
        bsrc = {
            "kind": "ML_B_PACKED",
            "k_total": str(k),
            "p": _packed_b_batches(node, ctx, offb, k, n) + f" + {b_mat} * {per}",
        }
    else:
        bsrc = {
            "kind": "ML_B_STRIDED",
            "p": f"{ctx.ptr(b)} + {off_b}",
            "ldk": str(n),
            "ldn": "1",
        }
    fields = {
        "M": str(m),
        "N": str(n),
        "K": str(k),
        "a": a_ptr,
        "c": f"{yp} + bi * {m * n}",
        "epi": epi,
        "epi_out": yp,
        "epi_b": "bi",
    }
    if bsrc["kind"] != "ML_B_PACKED":
        fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(k, n))}"
    body = "\n".join(lines[1:]) + "\n" + gemm_call(fields, bsrc)
    return lines[0] + f"\nfor (int64_t bi = 0; bi < {nb}; ++bi) {{\n{body}\n}}"


def _emit_static_batch(
    node: Node, ctx: EmitContext, a2: tuple, b2: tuple, batch: tuple, m, n, k, epi: str
) -> str:
    """A static batch: one ``ml_sgemm_batch`` call over a table of the operands' batch
    offsets (threads take whole batches). A run-time A is read in place (gemm.h's
    unpacked A: no packing pass per batch), a constant one packed per batch at compile
    time; B likewise prepacked or strided."""
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    offa = _batch_offsets(a2, batch, m * k)
    offb = _batch_offsets(b2, batch, k * n)
    nb = len(offa)
    table = ctx.unique("mm_off")
    # offsets of run-time matrix sizes are computed when the op runs
    storage = "static const" if all(isinstance(v, int) for v in offa + offb) else "const"
    code = (f"{storage} int64_t {table}[{2 * nb}] = {{"
            + ", ".join(str(v) for pair in zip(offa, offb) for v in pair) + "};\n")
    yp = ctx.ptr(y)
    fields = {"M": str(m), "N": str(n), "K": str(k), "c": yp, "epi": epi, "epi_out": yp}
    bfields = {"nb": str(nb), "off": table, "c_stride": str(m * n)}
    if a.const is not None:
        packed = [pack_a(a.const.ravel()[o : o + m * k].reshape(m, k)) for o in offa]
        fields["a"] = ctx.param(np.concatenate(packed), f"{node.name}.A.packed")
        bfields["a_pstride"] = str(packed[0].size)
    else:
        fields.update({"a_raw": ctx.ptr(a), "lda": str(k)})
    if b.const is not None:
        bsrc = {"kind": "ML_B_PACKED", "k_total": str(k),
                "p": _packed_b_batches(node, ctx, offb, k, n)}
        bfields["b_pstride"] = str(-(-n // NR) * NR * k)
    else:
        bsrc = {"kind": "ML_B_STRIDED", "p": ctx.ptr(b), "ldk": str(n), "ldn": "1"}
    floats = batch_scratch_floats(m, n, k, b.const is None, False)
    return code + batch_call(fields, bsrc, bfields, ctx.scratch(4 * max(floats, 16)))


def _packed_b_batches(node: Node, ctx: EmitContext, offb: list[int], k: int, n: int) -> str:
    flat = node.inputs[1].const.ravel()
    packed = [pack_b(flat[o : o + k * n].reshape(k, n).astype(np.float32)) for o in offb]
    return ctx.param(np.concatenate(packed), f"{node.name}.B.packed")
