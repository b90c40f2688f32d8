"""Gemm (ONNX opset 1..13): ``Y = alpha * A' @ B' + beta * C``.

``A'`` is ``A`` or ``A^T`` (``transA``), ``B'`` likewise; ``C`` (optional since opset 11)
broadcasts unidirectionally to ``[M, N]``. Lowered to one ``ml_sgemm`` call of
``kernels/gemm.h``: constant operands are packed at compile time, a constant ``C`` that
is a row, column or scalar becomes the kernel's bias vector (``beta`` folded in), any other
``C`` is broadcast into the output first and accumulated onto. Epilogue view ``[1, M, N]``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import weakref

import numpy as np

from ....errors import ShapeError
from ...backends.cstyle import c_literal, ctype
from ...ir import Node, Value, max_shape
from ...symbolic import is_dim, is_one, same
from ..base import EmitContext, OpDef, OutType, register
from ..tensor.loops import broadcast_shape, broadcast_strides
from ._common import epi_call, f32, require_float32
from ._gemm import MR, NR, bbuf_floats, gemm_call, include_gemm, pack_a, pack_b
from ...tuning.select import Candidate, active, choose

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["Gemm", "a_fields", "a_operand", "b_operand", "gemm_candidates"]

logger = logging.getLogger(__name__)


def _mnk(node: Node) -> tuple[int, int, int]:
    a, b = node.inputs[0], node.inputs[1]
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError(
            f"Gemm node {node.name!r}: A and B must be 2-D, got {a and a.shape} and {b and b.shape}"
        )
    m, k = a.shape[::-1] if node.attrs["transA"] else a.shape
    kb, n = b.shape[::-1] if node.attrs["transB"] else b.shape
    if k != kb:
        raise ShapeError(
            f"Gemm node {node.name!r}: inner dims differ ({a.shape} transA="
            f"{node.attrs['transA']}, {b.shape} transB="
            f"{node.attrs['transB']})"
        )
    return m, n, k


def const_matrix(v: Value, offset: int, rows: int, cols: int, ldr: int, ldc: int) -> np.ndarray:
    """The float32 ``[rows, cols]`` matrix ``M[i][j] = v.const.flat[offset + i*ldr + j*ldc]``,
    a strided view of the constant (no copy, no index arrays: a 256 MB weight would
    need a 512 MB index array) when its strides are non-negative, else gathered."""
    flat = np.ascontiguousarray(v.const, dtype=np.float32).reshape(-1)
    last = offset + (rows - 1) * ldr + (cols - 1) * ldc
    if ldr >= 0 and ldc >= 0 and 0 <= offset and last < flat.size:
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[offset:], (rows, cols), (ldr * item, ldc * item), writeable=False)
    idx = offset + np.arange(rows)[:, None] * ldr + np.arange(cols)[None, :] * ldc
    return flat[idx]


#: Packed weights by (id of the constant, layout): the code generator emits every op
#: twice (once to size its scratch, once for real), and packing 512 MB of weights
#: takes seconds. Entries go when their constant is freed.
_PACKED: dict[tuple, np.ndarray] = {}


def packed_const(v: Value, layout: tuple, make) -> np.ndarray:
    """``make()`` (a packed copy of constant ``v`` in ``layout``), computed once per
    constant array and layout."""
    key = (id(v.const),) + layout
    hit = _PACKED.get(key)
    if hit is None:
        hit = _PACKED[key] = make()
        weakref.finalize(v.const, _PACKED.pop, key, None)
    return hit


def a_operand(
    ctx: EmitContext, v: Value, m: int, k: int, ldm: int, ldk: int, offset: int = 0, name: str = "A"
) -> tuple[str, str]:
    """(packed-A pointer, C that packs it at run time or ""): ``A[i][j] = v[offset + i*ldm +
    j*ldk]``; packed at compile time when ``v`` is constant, once per arena when run-once
    ops make it (:func:`_once`)."""
    if v.const is not None:
        packed = packed_const(v, ("A", offset, m, k, ldm, ldk),
                              lambda: pack_a(const_matrix(v, offset, m, k, ldm, ldk)))
        return ctx.param(packed, f"{name}.packed"), ""
    nbytes = 4 * -(-m // MR) * MR * k
    kept = _once(ctx, v, nbytes)
    buf = ctx.scratch(nbytes) if kept is None else kept[0]
    code = f"ml_pack_a_par({m}, {k}, {ctx.ptr(v)} + {offset}, {ldm}, {ldk}, (float*){buf});\n"
    if kept is not None:
        code = f"if (!{kept[1]}) {{ {code}}}\n"
    return f"((const float*){buf})", code


def _once(ctx: EmitContext, v: Value, nbytes: Any) -> tuple[str, str] | None:
    """The C backend's kept region for data derived from ``v`` when run-once ops make
    ``v`` (``CEmitContext.once_buffer``: (pointer, flag expression)), else None. A
    weight built by such ops (a ``ConstantOfShape`` too large to fold) is then packed
    on the first run of an arena, not on every run."""
    once = getattr(ctx, "once_buffer", None)
    if once is None or not all(isinstance(d, (int, np.integer)) for d in v.shape):
        return None
    return once(v, int(nbytes)) if isinstance(nbytes, (int, np.integer)) else None


def a_fields(
    ctx: EmitContext, v: Value, m: int, k: int, ldm: int, ldk: int, name: str = "A"
) -> tuple[dict[str, str], str]:
    """(``ml_gemm_args`` members that give A, C that packs it at run time or ""): for
    ``A[i][j] = v[i*ldm + j*ldk]``. A constant is packed at compile time; a run-time A
    with unit k stride is read in place (gemm.h's ``a_raw``: its micro-kernel
    broadcasts from the rows, so no packing pass copies A first); any other run-time A
    is packed when the op runs (:func:`a_operand`)."""
    if v.const is None and same(ldk, 1):
        return {"a": "0", "a_raw": ctx.ptr(v), "lda": str(ldm)}, ""
    ap, code = a_operand(ctx, v, m, k, ldm, ldk, name=name)
    return {"a": ap}, code


def b_operand(
    ctx: EmitContext,
    v: Value,
    k: int,
    n: int,
    ldk: int,
    ldn: int,
    offset: str = "0",
    const_offset: int = 0,
    name: str = "B",
) -> dict[str, str]:
    """``ml_bsrc`` fields for ``B[i][j] = v[offset + i*ldk + j*ldn]``: prepacked at compile
    time when ``v`` is constant (``const_offset`` then locates the matrix), packed on the
    first run of an arena when run-once ops make ``v`` (:func:`_once`: ``p`` is then a
    call of ``ml_b_once``, which packs while the init flag is 0), else strided."""
    if v.const is not None:
        packed = packed_const(v, ("B", const_offset, k, n, ldk, ldn),
                              lambda: pack_b(const_matrix(v, const_offset, k, n, ldk, ldn)))
        p = ctx.param(packed, f"{name}.packed")
        return {"kind": "ML_B_PACKED", "p": p, "k_total": str(k)}
    kept = None
    if all(isinstance(d, (int, np.integer)) for d in (k, n)):
        kept = _once(ctx, v, 4 * int(k) * -(-int(n) // NR) * NR)
    if kept is not None:
        ctx.helper(_B_ONCE)
        p = (f"ml_b_once({kept[1]}, {ctx.ptr(v)} + {offset}, {ldk}, {ldn}, {k}, {n}, "
             f"(float*){kept[0]})")
        return {"kind": "ML_B_PACKED", "p": p, "k_total": str(k)}
    return {
        "kind": "ML_B_STRIDED",
        "p": f"{ctx.ptr(v)} + {offset}",
        "ldk": str(ldk),
        "ldn": str(ldn),
    }


#: Packs a B made by run-once ops into full-K panels while the init flag is 0; the
#: panels stay in the op's kept region (plan.keep) for the arena's later runs.
_B_ONCE = """
ML_UNUSED static const float* ml_b_once(int32_t done, const float* src, int64_t ldk,
                                        int64_t ldn, int64_t K, int64_t N, float* dst) {
    if (!done) {
        ml_bsrc s;
        memset(&s, 0, sizeof s);
        s.kind = ML_B_STRIDED; s.p = src; s.ldk = ldk; s.ldn = ldn;
        ml_pack_b_full(&s, K, N, dst);
    }
    return dst;
}
"""


@register
class Gemm(OpDef):
    """ONNX ``Gemm``: A ``[M, K]`` (or ``[K, M]``), B ``[K, N]`` (or ``[N, K]``), C
    broadcastable to ``[M, N]`` -> Y ``[M, N]``; float32."""

    op_type = "Gemm"
    since_version = 1

    def infer(self, node: Node) -> list[OutType]:
        m, n, _ = _mnk(node)
        c = node.input(2)
        if c is not None:
            try:
                if len(broadcast_shape(c.shape, (m, n))) != 2:
                    raise ShapeError("rank")
            except ShapeError:
                raise ShapeError(
                    f"Gemm node {node.name!r}: C {c.shape} does not broadcast to ({m}, {n})"
                ) from None
        return [((m, n), node.inputs[0].dtype)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        if node.attrs["transA"]:
            a = a.T
        if node.attrs["transB"]:
            b = b.T
        y = np.float32(node.attrs["alpha"]) * (a @ b)
        c = inputs[2] if len(inputs) > 2 else None
        if c is not None:
            y = y + np.float32(node.attrs["beta"]) * c
        return [np.asarray(y, dtype=a.dtype)]

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        return [[], [0], [1]]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1, 2)
        a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
        m, n, k = _mnk(node)
        include_gemm(ctx)
        ta, tb = node.attrs["transA"], node.attrs["transB"]
        epi = epi_call(ctx.tile_epilogue(self.epilogue_groups(node)))
        pick = _RULE
        if active() is not None:
            sig, cands, pick = gemm_candidates(node, epi != "(ml_epi_fn)0")
            if sig is not None:
                pick = choose(node.name, sig, cands, pick)
        lds = (1, m) if ta else (k, 1)
        if pick.param("pack_a"):  # a run-time A packed when the op runs (a tuned choice)
            ap, code = a_operand(ctx, a, m, k, *lds, name=node.name + ".A")
            afields = {"a": ap}
        else:
            afields, code = a_fields(ctx, a, m, k, *lds, name=node.name + ".A")
        bsrc = b_operand(ctx, b, k, n, *((1, k) if tb else (n, 1)), name=node.name + ".B")
        yp = ctx.ptr(y)
        fields = {
            "M": str(m),
            "N": str(n),
            "K": str(k),
            **afields,
            "c": yp,
            "alpha": f32(node.attrs["alpha"]),
            "epi": epi,
            "epi_out": yp,
        }
        if bsrc["kind"] != "ML_B_PACKED":
            fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(k, n))}"
        code += _c_term(node, ctx, m, n, fields)
        return code + gemm_call(fields, bsrc)

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device Gemm: ``alpha * A' @ B' + beta * C`` (C unidirectionally broadcast to
        ``[M, N]``, A' and B' transposed per ``transA`` / ``transB``); one output element
        per work item."""
        from ...backends.device.lowerings import decompose, element_kernel, flat_of

        a, b, c, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
        M, N = y.shape
        ta, tb = int(node.attrs["transA"]), int(node.attrs["transB"])
        K = a.shape[0] if ta else a.shape[1]
        a_idx = f"k * {M} + i0" if ta else f"i0 * {K} + k"
        b_idx = f"i1 * {K} + k" if tb else f"k * {N} + i1"
        alpha = c_literal(node.attrs["alpha"], y.dtype)
        beta = c_literal(node.attrs["beta"], y.dtype)
        body = [
            *decompose("gid", [M, N], "i"),
            f"{ctx.language.pointer(ctype(a.dtype), True)} A = {ctx.ptr(a)};",
            f"{ctx.language.pointer(ctype(b.dtype), True)} B = {ctx.ptr(b)};",
            f"{ctype(y.dtype)} acc = {c_literal(0, y.dtype)};",
            f"for (idx_t k = 0; k < {K}; ++k) acc += A[{a_idx}] * B[{b_idx}];",
            f"acc = {alpha} * acc;",
        ]
        if c is not None:
            st = broadcast_strides(c.shape, (M, N))
            body.append(f"acc += {beta} * {ctx.ptr(c)}[{flat_of(['i0', 'i1'], st)}];")
        return element_kernel(node, ctx, body)


#: The rule: a run-time A with unit k stride is read in place (:func:`a_fields`).
_RULE = Candidate("gemm", (("pack_a", 0),))


def gemm_candidates(
    node: Node, fused: bool
) -> tuple[dict[str, Any] | None, list[Candidate], Candidate]:
    """The tuning signature of a Gemm, its candidates and the rule's choice
    (``compiler/tuning``).

    The choice is how a run-time A with unit k stride reaches the micro-kernel: read in
    place (``pack_a=0``, the rule: :func:`a_fields`) or packed into MR-row panels when
    the op runs (``pack_a=1``, :func:`a_operand`: contiguous panels, at the cost of a
    copy). Other Gemms have the rule's way only.

    Returns
    -------
    (dict or None, list of Candidate, Candidate)
        The signature (shapes, transposes, alpha, beta, which operands are constant,
        epilogue, dtype; None when a size is a run-time dim or there is no choice), the
        candidates and the default.
    """
    a, b, c = node.inputs[0], node.inputs[1], node.input(2)
    default = _RULE
    ta, tb = int(node.attrs["transA"]), int(node.attrs["transB"])
    m, n, k = _mnk(node)
    shapes = [*a.shape, *b.shape, *(c.shape if c is not None else ())]
    if any(is_dim(v) for v in shapes) or a.const is not None or (ta and m != 1):
        return None, [default], default
    sig = {
        "op": "Gemm",
        "a": [int(v) for v in a.shape],
        "b": [int(v) for v in b.shape],
        "c": None if c is None else [int(v) for v in c.shape],
        "transA": ta,
        "transB": tb,
        "alpha": float(node.attrs["alpha"]),
        "beta": float(node.attrs["beta"]),
        "const_b": b.const is not None,
        "const_c": c is not None and c.const is not None,
        "epilogue": "fused" if fused else "none",
        "dtype": "float32",
        "layout": "row-major",
    }
    return sig, [default, Candidate("gemm", (("pack_a", 1),))], default


def _c_term(node: Node, ctx: EmitContext, m: int, n: int, fields: dict[str, str]) -> str:
    """Set up ``beta * C``: bias vectors when C is a constant row/column/scalar, else C
    broadcast into Y first (returned C code) and ``accumulate``."""
    c = node.input(2)
    beta = float(node.attrs["beta"])
    if c is None or beta == 0.0:
        return ""
    shape = (1,) * (2 - len(c.shape)) + tuple(c.shape)
    if c.const is not None and (shape[0] == 1 or shape[1] == 1):
        cb = (np.float32(beta) * c.const.astype(np.float32)).reshape(shape)
        if shape[0] == 1 and same(shape[1], n) and (is_dim(n) or n > 1):
            fields["bias_n"] = ctx.param(cb.ravel(), f"{node.name}.bias_n")
        else:
            fields["bias_m"] = ctx.param(
                # a run-time M: as many rows as its upper bound (only M are read)
                np.broadcast_to(cb, (max_shape((m,))[0], 1)).ravel().copy(), f"{node.name}.bias_m"
            )
        return ""
    fields["accumulate"] = "1"
    sm = shape[1] if not is_one(shape[0]) else 0  # a run-time dim is never 1
    sn = 1 if not is_one(shape[1]) else 0
    return (
        f"for (int64_t i = 0; i < {m}; ++i) for (int64_t j = 0; j < {n}; ++j)\n"
        f"  {ctx.ptr(node.outputs[0])}[i * {n} + j] = {f32(beta)} * "
        f"{ctx.ptr(c)}[i * {sm} + j * {sn}];\n"
    )
