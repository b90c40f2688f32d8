"""Compile-time packing for ``kernels/gemm.h`` and the C text of one GEMM call.

The layouts match ``gemm.h`` (see its header comment):

* packed A, "full-K": panels of ``MR`` rows; panel ``p`` is a ``[K, MR]`` block, rows
  past ``M`` zero. Conv/Gemm weights are packed this way at compile time.
* packed B: panels of ``NR`` columns; panel ``q`` is a ``[K, NR]`` block, columns past
  ``N`` zero.

The constants here are the ``ML_*`` macros of ``gemm.h``: :func:`include_gemm` pastes the
header and has the C compiler check that they agree.
"""

from __future__ import annotations

import logging

import numpy as np

from ...symbolic import is_dim
from .._constants import include_checked
from ..base import EmitContext

__all__ = [
    "GEMV_NMAX",
    "KC",
    "MR",
    "NC",
    "NR",
    "batch_call",
    "batch_scratch_floats",
    "bbuf_floats",
    "dot_shaped",
    "gemm_call",
    "gemv_shaped",
    "include_gemm",
    "pack_a",
    "pack_b",
]

logger = logging.getLogger(__name__)

MR = 6
NR = 16
KC = 256
NC = 1024
#: Most columns of a run-time B that ``ml_sgemv_pa`` takes against a packed A.
GEMV_NMAX = 4


def include_gemm(ctx: EmitContext) -> None:
    """Paste ``gemm.h``, checked against :data:`MR`, :data:`NR`, :data:`KC`, :data:`NC`."""
    include_checked(ctx, "gemm.h", {"ML_MR": MR, "ML_NR": NR, "ML_KC": KC, "ML_NC": NC,
                                    "ML_GEMV_NMAX": GEMV_NMAX}, __name__)


def pack_a(a: np.ndarray) -> np.ndarray:
    """Pack a ``[M, K]`` float32 matrix into gemm.h's full-K A layout.

    Returns a 1-D float32 array of ``ceil(M/MR) * MR * K`` elements.
    """
    m, k = a.shape
    mp = -(-m // MR) * MR
    padded = np.zeros((mp, k), np.float32)
    padded[:m] = a
    # [panel, r, k] -> [panel, k, r]
    return np.ascontiguousarray(padded.reshape(mp // MR, MR, k).transpose(0, 2, 1)).ravel()


def pack_b(b: np.ndarray) -> np.ndarray:
    """Pack a ``[K, N]`` float32 matrix into gemm.h's full-K B layout (``ML_B_PACKED``).

    Returns a 1-D float32 array of ``K * ceil(N/NR) * NR`` elements.
    """
    k, n = b.shape
    panels, full = -(-n // NR), n // NR
    out = np.zeros((panels, k, NR), np.float32)
    # a few rows of B at a time: the transposing copy then reads rows still in cache
    # (one pass over a 256 MB matrix: 0.3 s instead of 0.8 s)
    for k0 in range(0, k, 16):
        k1 = min(k, k0 + 16)
        out[:full, k0:k1] = b[k0:k1, : full * NR].reshape(k1 - k0, full, NR).transpose(1, 0, 2)
    if full < panels:
        out[full, :, : n - full * NR] = b[:, full * NR :]
    return out.ravel()


def bbuf_floats(k: int, n: int) -> int:
    """Floats of the B block buffer ``ml_sgemm`` needs (mirrors ``ml_gemm_bbuf_floats``);
    a run-time ``k`` or ``n`` at its upper bound (the buffer is planned once)."""
    k, n = (d.hi if is_dim(d) else d for d in (k, n))
    f = min(k, KC) * min(-(-n // 32) * 32, NC)
    gv = -(-k * MR // 16) * 16 * n  # ml_sgemv_pa's expanded x
    return gv if n <= GEMV_NMAX and gv > f else f


def _int_literal(text: str) -> int | None:
    """The int value of a C expression that is a plain decimal literal, else None."""
    return int(text) if text.strip().isdigit() else None


def gemv_shaped(fields: dict[str, str], bsrc: dict[str, str]) -> bool:
    """Whether a call takes ``ml_sgemv_pa`` (gemm.h): a packed A (compile-time weights)
    against at most :data:`GEMV_NMAX` static columns of a run-time B, with at least
    ``2 * MR`` rows (the micro-kernel would compute 16 columns to keep so few, one
    A element per broadcast; ``ml_sgemv_pa`` streams A's panels as whole vectors)."""
    n, m, k = (_int_literal(fields[key]) for key in ("N", "M", "K"))
    return (n is not None and m is not None and k and 0 < n <= GEMV_NMAX and m >= 2 * MR
            and "a_raw" not in fields and fields.get("a", "0") != "0"
            and "bbuf" in fields and bsrc.get("kind") != "ML_B_PACKED"
            and fields.get("n_begin", "0") == "0" and "n_end" not in fields)


def dot_shaped(fields: dict[str, str], bsrc: dict[str, str]) -> bool:
    """Whether a call takes ``ml_sgemm_t_par`` (gemm.h): fewer than :data:`MR` static rows
    of an unpacked A against a run-time B with unit k stride (``B^T`` row-major: a Gemm
    with ``transB`` and a run-time weight), each output a dot product of contiguous rows;
    no column range (``n_begin``/``n_end``) of its own."""
    m = _int_literal(fields["M"])
    return (m is not None and 0 < m < MR and "a_raw" in fields
            and bsrc.get("kind") == "ML_B_STRIDED" and bsrc.get("ldk", "").strip() == "1"
            and "n_begin" not in fields and "n_end" not in fields)


def gemm_call(fields: dict[str, str], bsrc: dict[str, str]) -> str:
    """C block that fills an ``ml_gemm_args`` (named ``ga_``) and calls ``ml_sgemm_par``
    (``ml_sgemm`` split over column ranges and row blocks on the library's thread pool
    when large), or ``ml_sgemv_pa`` for a GEMV-shaped call (:func:`gemv_shaped`), or
    ``ml_sgemm_t_par`` for few rows against a run-time ``B^T`` (:func:`dot_shaped`).

    Parameters
    ----------
    fields : dict
        ``ml_gemm_args`` members (``M``, ``N``, ``K``, ``a``, ``c`` required) as C
        expressions; omitted members keep ``ml_gemm_defaults``.
    bsrc : dict
        ``ml_bsrc`` members (``kind`` and ``p`` at least) as C expressions.
    """
    lines = [
        "{",
        (
            f"  ml_gemm_args ga_ = ml_gemm_defaults({fields['M']}, {fields['N']}, {fields['K']}, "
            f"{fields['a']}, {fields['c']});"
        ),
    ]
    for key, val in fields.items():
        if key not in ("M", "N", "K", "a", "c"):
            lines.append(f"  ga_.{key} = {val};")
    for key, val in bsrc.items():
        lines.append(f"  ga_.b.{key} = {val};")
    n = _int_literal(fields["N"])
    # only libraries with such a tail compile it; never for a run-time N (a batch folded
    # into the columns): its sums run in another order than the micro-kernel's, so a
    # column's bits would change with the batch size that makes it part of the tail
    if "a_raw" not in fields and fields.get("a", "0") != "0" and n is not None and 0 < n % NR <= GEMV_NMAX:
        lines.append("  ga_.tail = ml_gemm_tail_cols;")
    if _int_literal(fields["M"]) is None and bsrc.get("kind") != "ML_B_PACKED":
        lines.append("  ga_.fixed_order = 1;")  # rows are a batch: one order for any count
    # ml_sgemm_par: on the library's thread pool when the GEMM is large (gemm.h);
    # ml_sgemv_pa for a GEMV-shaped product, instantiated only where one occurs
    if gemv_shaped(fields, bsrc):
        lines += [f"  ml_sgemv_pa(&ga_, ml_gemv_pa_task_{int(fields['N'])});", "}"]
    elif dot_shaped(fields, bsrc):
        lines += ["  ml_sgemm_t_par(&ga_);", "}"]
    else:
        lines += ["  ml_sgemm_par(&ga_);", "}"]
    return "\n".join(lines)


def batch_scratch_floats(m: int, n: int, k: int, strided_b: bool, pack_a: bool) -> int:
    """Floats of per-thread scratch ``ml_sgemm_batch`` needs (mirrors
    ``ml_gemm_batch_floats``): the B block buffer for a strided B, then room for one
    packed A when A is packed per batch. Static ``m``, ``n``, ``k``."""
    m, k = (d.hi if is_dim(d) else d for d in (m, k))
    f = -(-bbuf_floats(k, n) // 16) * 16 if strided_b else 0
    return f + (-(-m // MR) * MR * k if pack_a else 0)


def batch_call(fields: dict[str, str], bsrc: dict[str, str], batch: dict[str, str],
               scratch: str) -> str:
    """C block that runs a batch of equal GEMMs through ``ml_sgemm_batch`` (gemm.h).

    Parameters
    ----------
    fields : dict
        Batch 0's ``ml_gemm_args`` members as C expressions (``M``, ``N``, ``K``, ``c``
        required; ``a`` may be ``0`` when ``a_raw`` or ``a_src`` gives A).
    bsrc : dict
        Batch 0's ``ml_bsrc`` members.
    batch : dict
        ``ml_gemm_batch`` members (``nb`` and ``off`` at least; ``a_pstride``,
        ``b_pstride``, ``c_stride``, ``a_src``, ``a_ldm``, ``a_ldk``).
    scratch : str
        C expression of the calling thread's scratch, :func:`batch_scratch_floats`
        floats, 64-aligned.

    Notes
    -----
    With at least as many batches as threads, each thread takes whole batches;
    otherwise each batch is split like one ``ml_sgemm_par`` call.
    """
    a = fields.get("a", "0")
    lines = [
        "{",
        "  ml_gemm_batch gb_;",
        "  memset(&gb_, 0, sizeof gb_);",
        f"  gb_.g = ml_gemm_defaults({fields['M']}, {fields['N']}, {fields['K']}, {a}, {fields['c']});",
    ]
    for key, val in fields.items():
        if key not in ("M", "N", "K", "a", "c"):
            lines.append(f"  gb_.g.{key} = {val};")
    for key, val in bsrc.items():
        lines.append(f"  gb_.g.b.{key} = {val};")
    for key, val in batch.items():
        lines.append(f"  gb_.{key} = {val};")
    n = _int_literal(fields["N"])
    if a != "0" and "a_raw" not in fields and n is not None and 0 < n % NR <= GEMV_NMAX:
        lines.append("  gb_.g.tail = ml_gemm_tail_cols;")  # as in gemm_call
    if _int_literal(fields["M"]) is None and bsrc.get("kind") != "ML_B_PACKED":
        lines.append("  gb_.g.fixed_order = 1;")  # as in gemm_call
    lines += [f"  ml_sgemm_batch(&gb_, (float*){scratch});", "}"]
    return "\n".join(lines)
