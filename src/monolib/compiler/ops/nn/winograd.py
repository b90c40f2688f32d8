"""Winograd / Cook-Toom minimal filtering for stride-1 convolutions (``kernels/winograd.h``).

F(m, r) computes ``m`` outputs of an ``r``-tap correlation from ``alpha = m + r - 1``
inputs with ``alpha`` multiplications (Lavin & Gray 2016, "Fast Algorithms for
Convolutional Neural Networks", after Winograd 1980 and Toom-Cook):

    y = A^T [(G g) (.) (B^T d)],    y_i = sum_j d_{i+j} g_j.

The matrices come from polynomial evaluation at ``alpha - 1`` finite points and infinity
(:func:`cook_toom`), computed exactly with :class:`fractions.Fraction`: the linear
convolution ``s = g * h`` is ``V^-1 [(V_r g) (.) (V_m h)]`` (evaluate, multiply,
interpolate; at infinity a polynomial "evaluates" to its leading coefficient), and the
correlation is its transpose, so ``A^T = V_m^T``, ``G = V_r``, ``B^T = V^-T``. Rows of
``B^T`` and columns of ``A^T`` are then rescaled to small integers, the factors moving
into ``G`` (applied to the weights at compile time, so its fractions cost nothing).

2-D tiles nest two 1-D transforms (an axis whose kernel is 1 has the identity F(1, 1)).
The convolution becomes, per element ``xi`` of the transformed tile, a GEMM
``M[xi] = U[xi] V[xi]`` over channels, with ``U = G g G^T`` packed at compile time
(:func:`transform_weights`). The generated C holds the two transforms as straight-line
vector code with the matrices as constants (:func:`transform_functions`).

A dilated conv (DeepLab's and U^2-Net's atrous 3x3 convs) runs as the undilated conv of
its phases laid side by side (space-to-batch, as TensorFlow's ``atrous_conv2d``): with
dilation ``d`` output pixel ``(r + i d, s + j d)`` reads only inputs of the same phase
``(r, s)``, so each phase is an ordinary stride-1 conv (``WinogradPlan.phases``,
``winograd.h`` ``ml_winograd_phases``). ONNX Runtime has no fast path for them (its
direct NCHWc kernel); here they get Winograd's 2-4x fewer multiplies.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from ....errors import CompileError
from ...backends.cstyle import c_literal
from ...ir import Node
from ...symbolic import is_dim, size_hint
from ..base import EmitContext
from ._gemm import MR, NR, pack_a
from .conv_cost import host_vector_width, phase_dims, phase_period, winograd_cost

__all__ = [
    "ENABLED",
    "POINTS",
    "Transforms",
    "WinogradPlan",
    "cook_toom",
    "emit_winograd",
    "pack_raw",
    "plan_winograd",
    "transform_functions",
    "transform_weights",
    "weight_function",
]

logger = logging.getLogger(__name__)

#: Interpolation points in order of preference: small integers and their reciprocals,
#: symmetric pairs (the best-conditioned choice for float32; Lavin & Gray 2016, Barabasz
#: et al. 2020). F(m, r) takes the first ``m + r - 2`` of them, plus infinity.
POINTS: tuple[Fraction, ...] = tuple(
    Fraction(p) for p in ("0", "1", "-1", "2", "-2", "1/2", "-1/2", "3", "-3", "1/3", "-1/3")
)

#: Use the Winograd path where it applies; ``MONOLIB_WINOGRAD=0`` in the environment
#: turns it off at compile time too (both paths can then be compared).
ENABLED = True

Matrix = tuple[tuple[Fraction, ...], ...]


@dataclass(frozen=True)
class Transforms:
    """The exact matrices of F(m, r): ``at`` [m, alpha], ``g`` [alpha, r], ``bt``
    [alpha, alpha] (Fractions)."""

    m: int
    r: int
    at: Matrix
    g: Matrix
    bt: Matrix

    @property
    def alpha(self) -> int:
        """Input tile size ``m + r - 1``."""
        return self.m + self.r - 1


def _inverse(a: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact Gauss-Jordan inverse of a square Fraction matrix."""
    n = len(a)
    w = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for c in range(n):
        p = next(r for r in range(c, n) if w[r][c] != 0)
        w[c], w[p] = w[p], w[c]
        piv = w[c][c]
        w[c] = [x / piv for x in w[c]]
        for r in range(n):
            if r != c and w[r][c] != 0:
                f = w[r][c]
                w[r] = [x - f * y for x, y in zip(w[r], w[c])]
    return [row[n:] for row in w]


def _evaluation(points: tuple[Fraction, ...], n: int) -> list[list[Fraction]]:
    """Rows ``[p^0 .. p^(n-1)]`` per finite point, then infinity (the leading
    coefficient: ``e_(n-1)``)."""
    rows = [[p**i for i in range(n)] for p in points]
    return rows + [[Fraction(int(i == n - 1)) for i in range(n)]]


def _integer_scale(values: list[Fraction]) -> Fraction:
    """The positive factor that makes ``values`` coprime integers (1 for all zeros)."""
    nz = [v for v in values if v != 0]
    if not nz:
        return Fraction(1)
    den = math.lcm(*(v.denominator for v in nz))
    num = math.gcd(*(int(v * den) for v in nz))
    return Fraction(den, num)


def cook_toom(m: int, r: int, points: tuple[Fraction, ...] | None = None) -> Transforms:
    """The exact transforms of F(m, r) from ``m + r - 2`` finite points and infinity.

    Parameters
    ----------
    m, r : int
        Outputs per tile and kernel taps (both >= 1).
    points : tuple of Fraction, optional
        The finite interpolation points (distinct); default the first ``m + r - 2`` of
        :data:`POINTS`.

    Returns
    -------
    Transforms
        ``at`` and ``bt`` with integer entries, ``g`` rational; they satisfy
        ``at @ ((g @ w) * (bt @ d)) == correlate(d, w)`` exactly.

    Raises
    ------
    CompileError
        On ``m`` or ``r`` < 1, too few points or repeated points.
    """
    if m < 1 or r < 1:
        raise CompileError(f"F({m}, {r}): m and r must be >= 1")
    alpha = m + r - 1
    pts = tuple(Fraction(p) for p in (POINTS[: alpha - 1] if points is None else points))
    if len(pts) != alpha - 1 or len(set(pts)) != len(pts):
        raise CompileError(f"F({m}, {r}) needs {alpha - 1} distinct finite points, got {pts}")
    vinv = _inverse(_evaluation(pts, alpha))
    bt = [[vinv[j][k] for j in range(alpha)] for k in range(alpha)]  # V^-T
    vm = _evaluation(pts, m)
    at = [[vm[k][i] for k in range(alpha)] for i in range(m)]  # V_m^T
    g = _evaluation(pts, r)
    for k in range(alpha):
        s = _integer_scale(bt[k])
        bt[k] = [x * s for x in bt[k]]
        t = _integer_scale([at[i][k] for i in range(m)])
        for i in range(m):
            at[i][k] *= t
        g[k] = [x / (s * t) for x in g[k]]
    return Transforms(m, r, _frozen(at), _frozen(g), _frozen(bt))


def _frozen(a: list[list[Fraction]]) -> Matrix:
    return tuple(tuple(row) for row in a)


def _f64(a: Matrix) -> np.ndarray:
    return np.array([[float(x) for x in row] for row in a], np.float64)


def transform_weights(w: np.ndarray, th: Transforms, tw: Transforms) -> np.ndarray:
    """``U[xi] = G_h g G_w^T`` for every output/input channel pair.

    Parameters
    ----------
    w : ndarray
        Weights ``[C_out, C_in, r_h, r_w]``.
    th, tw : Transforms
        F(m_h, r_h) and F(m_w, r_w).

    Returns
    -------
    ndarray
        float32 ``[alpha_h * alpha_w, C_out, C_in]`` (xi = k * alpha_w + l), computed in
        float64.
    """
    u = np.einsum("ka,mcab,lb->klmc", _f64(th.g), w.astype(np.float64), _f64(tw.g))
    return u.reshape(th.alpha * tw.alpha, w.shape[0], w.shape[1]).astype(np.float32)


# -- C text of the transforms ---------------------------------------------------------


def _literal(c: Fraction, exact: bool = True) -> str:
    v = float(c)
    if exact and (Fraction(v) != c or Fraction(float(np.float32(v))) != c):
        raise CompileError(f"transform coefficient {c} is not exact in float32")
    return c_literal(float(np.float32(v)), np.float32)


def _combination(coefs: list[Fraction], names: list[str], exact: bool = True) -> str:
    """C expression of ``sum coefs[j] * names[j]`` without the zero terms (``exact``
    False: coefficients rounded to float32, as G's fractions in :func:`weight_function`)."""
    terms = []
    for c, x in zip(coefs, names):
        if c == 0:
            continue
        body = x if abs(c) == 1 else f"{_literal(abs(c), exact)} * {x}"
        terms.append(("-" if c < 0 else "+", body))
    if not terms:
        return "((ml_vf){0})"
    out = terms[0][1] if terms[0][0] == "+" else f"-{terms[0][1]}"
    return out + "".join(f" {s} {b}" for s, b in terms[1:])


def _paired(a: tuple[Fraction, ...], b: tuple[Fraction, ...]) -> bool:
    """``b[j] == (-1)^j a[j]`` with both parities present: a pair of points +-p."""
    return (
        all(y == (x if j % 2 == 0 else -x) for j, (x, y) in enumerate(zip(a, b)))
        and any(x != 0 for x in a[0::2])
        and any(x != 0 for x in a[1::2])
    )


def _apply_1d(
    t: Matrix, ins: list[str], outs: list[str], tmp: str, exact: bool = True
) -> list[str]:
    """C statements ``outs[k] = sum_j t[k][j] * ins[j]``, sharing work between the rows
    of a point pair +-p (even and odd parts, ``E + O`` and ``E - O``) and between the
    columns of such a pair (``x_p + x_-p`` and ``x_p - x_-p``)."""
    rows, cols = len(t), len(t[0])
    lines: list[str] = []
    names = list(ins)
    mat = [list(row) for row in t]
    cols_t = [tuple(t[i][k] for i in range(rows)) for k in range(cols)]
    used: set[int] = set()
    for k1 in range(cols):  # column pairs: the output transform (A^T)
        for k2 in range(k1 + 1, cols):
            if k1 in used or k2 in used or not _paired(cols_t[k1], cols_t[k2]):
                continue
            used |= {k1, k2}
            s, d = f"{tmp}s{k1}", f"{tmp}d{k1}"
            lines.append(f"const ml_vf {s} = {names[k1]} + {names[k2]};")
            lines.append(f"const ml_vf {d} = {names[k1]} - {names[k2]};")
            names += [s, d]
            for i in range(rows):
                c = mat[i][k1]
                mat[i] += [c if i % 2 == 0 else Fraction(0), c if i % 2 else Fraction(0)]
                mat[i][k1] = mat[i][k2] = Fraction(0)
    done: set[int] = set()
    for a in range(rows):  # row pairs: the input transform (B^T)
        for b in range(a + 1, rows):
            if a in done or b in done or not _paired(tuple(mat[a]), tuple(mat[b])):
                continue
            done |= {a, b}
            even = [c if j % 2 == 0 else Fraction(0) for j, c in enumerate(mat[a])]
            odd = [c if j % 2 else Fraction(0) for j, c in enumerate(mat[a])]
            e, o = f"{tmp}e{a}", f"{tmp}o{a}"
            lines.append(f"const ml_vf {e} = {_combination(even, names, exact)};")
            lines.append(f"const ml_vf {o} = {_combination(odd, names, exact)};")
            lines.append(f"{outs[a]} = {e} + {o};")
            lines.append(f"{outs[b]} = {e} - {o};")
    for k in range(rows):
        if k not in done:
            lines.append(f"{outs[k]} = {_combination(mat[k], names, exact)};")
    return lines


def _name(th: Transforms, tw: Transforms) -> str:
    return f"ml_wino_{th.m}x{tw.m}_{th.r}x{tw.r}"


def transform_functions(ctx: EmitContext, th: Transforms, tw: Transforms) -> tuple[str, str]:
    """Add the C input and output transforms of F(m_h x m_w, r_h x r_w) (the
    ``ml_wino_in_fn`` / ``ml_wino_out_fn`` of ``winograd.h``) as helpers.

    Returns
    -------
    tuple of str
        The names of the input and the output transform functions.
    """
    ah, aw, mh, mw = th.alpha, tw.alpha, th.m, tw.m
    name = _name(th, tw)
    body = [
        f"/* F({mh}x{mw}, {th.r}x{tw.r}) input transform: V = BT_h d BT_w^T for ML_VW tiles */",
        f"static void {name}_in(const float* restrict b, int64_t rs, int64_t ps,",
        "                      float* restrict v, int64_t xs) {",
        f"  ml_vf t[{ah}][{aw}];",
        f"  for (int i = 0; i < {ah}; ++i) {{",
        "    const float* r = b + i * rs;",
    ]
    ins = []
    for j in range(aw):
        body.append(f"    const ml_vf d{j} = *(const ml_vf*)(r + {j % mw} * ps + {j // mw});")
        ins.append(f"d{j}")
    body += ["    " + s for s in _apply_1d(tw.bt, ins, [f"t[i][{l}]" for l in range(aw)], "w")]
    body += ["  }", f"  for (int l = 0; l < {aw}; ++l) {{"]
    outs = [f"*(ml_vf*)(v + ({k * aw} + l) * xs)" for k in range(ah)]
    body += ["    " + s for s in _apply_1d(th.bt, [f"t[{i}][l]" for i in range(ah)], outs, "h")]
    body += ["  }", "}"]
    out = [
        f"/* F({mh}x{mw}, {th.r}x{tw.r}) output transform: Y = AT_h M AT_w^T + bias */",
        f"static void {name}_out(const float* restrict m, int64_t xs, float bias,",
        "                       ml_vf* restrict y) {",
        f"  ml_vf s[{mh}][{aw}];",
        f"  for (int l = 0; l < {aw}; ++l) {{",
    ]
    ins = []
    for k in range(ah):
        out.append(f"    const ml_vf m{k} = *(const ml_vf*)(m + ({k * aw} + l) * xs);")
        ins.append(f"m{k}")
    out += ["    " + s for s in _apply_1d(th.at, ins, [f"s[{a}][l]" for a in range(mh)], "h")]
    out += ["  }", f"  for (int a = 0; a < {mh}; ++a) {{"]
    outs = [f"y[a * {mw} + {c}]" for c in range(mw)]
    out += ["    " + s for s in _apply_1d(tw.at, [f"s[a][{l}]" for l in range(aw)], outs, "w")]
    out += [f"    for (int c = 0; c < {mw}; ++c) y[a * {mw} + c] += bias;", "  }", "}"]
    ctx.helper("\n".join(body))
    ctx.helper("\n".join(out))
    return f"{name}_in", f"{name}_out"


def weight_function(ctx: EmitContext, th: Transforms, tw: Transforms) -> str:
    """Add the C weight transform of the raw-weight mode (the ``ml_wino_w_fn`` of
    ``winograd.h``) as a helper: row ``k`` of ``U = G_h g G_w^T`` (elements ``xi = k *
    alpha_w + l``) of ML_VW kernels side by side.

    For ``q < n`` in steps of ML_VW it loads tap ``(i, j)`` of ML_VW kernels as one vector
    at ``g + q + (i*r_w + j)*ts`` (:func:`pack_raw`'s layout; only the taps row ``k`` of
    G_h needs) and stores element ``(k, l)`` of their transforms at ``u + q + l*xs``, the
    loop inside each case of ``k``: a pass holds one row of U at a time
    (``alpha_w`` of ``alpha_h * alpha_w`` matrices), small enough for L2. G's fractions
    are float32 constants (the stored-transform path computes them in float64: the two
    differ by an ulp or so of U).

    Returns
    -------
    str
        The function's name.
    """
    name = f"{_name(th, tw)}_w"
    rh, rw, aw = th.r, tw.r, tw.alpha
    body = [
        f"/* F({th.m}x{tw.m}, {rh}x{rw}) weight transform: row k of U = G_h g G_w^T */",
        f"static void {name}(const float* restrict g, int64_t ts, float* restrict u,",
        "                    int64_t xs, int64_t k, int64_t n) {",
        "  switch (k) {",
    ]
    for k, row in enumerate(th.g):
        body.append(f"  case {k}:")
        body.append("    for (int64_t q = 0; q < n; q += ML_VW) {")
        taps = [i for i in range(rh) if row[i] != 0]
        for i in taps:
            body += [f"      const ml_vf g{i}_{j} = *(const ml_vf*)(g + q + {i * rw + j} * ts);"
                     for j in range(rw)]
        for j in range(rw):  # G_h row k down each column of taps
            names = [f"g{i}_{j}" if i in taps else "0" for i in range(rh)]
            body.append(f"      const ml_vf t{j} = {_combination(list(row), names, False)};")
        outs = [f"*(ml_vf*)(u + q + {l} * xs)" for l in range(aw)]
        body += ["      " + x for x in _apply_1d(tw.g, [f"t{j}" for j in range(rw)], outs, "r",
                                                 exact=False)]
        body += ["    }", "    break;"]
    body += ["  }", "}"]
    ctx.helper("\n".join(body))
    return name


def pack_raw(w: np.ndarray) -> tuple[np.ndarray, int]:
    """The raw weights ``[C_out, C_in, r_h, r_w]`` of the raw-weight mode: per tap, the
    ``C_out x C_in`` matrix in gemm.h's packed-A layout (``_gemm.pack_a``), so that one
    vector of the weight transform reads ML_VW consecutive (channel, row) pairs of a
    panel and writes them where the GEMM reads them; ``VW_MAX`` zeros after the last tap
    (the last vector of a pass may read past it).

    Returns
    -------
    (ndarray, int)
        The float32 array and the floats between taps.
    """
    taps = [pack_a(w[:, :, i, j]) for i in range(w.shape[2]) for j in range(w.shape[3])]
    return np.concatenate([*taps, np.zeros(VW_MAX, np.float32)]), int(taps[0].size)


# -- selection and emission -------------------------------------------------------------

#: Smallest channel counts and output tiles for which the transforms pay off, and the
#: output size below which 2-D ones also need C_in >= 32 and C_in * C_out >= 1024
#: (measured on znver3, AVX2, 3x3 and 1-D convs of 8-256 channels, 8x8 to 64x64 and
#: 32 to 512 long: on smaller ones the GEMMs are too short for their set-up).
MIN_CIN = 8
MIN_COUT = 8
MIN_TILES = 16
SMALL_PIXELS = 1024
#: Target bytes of the transformed input V of one block (L2 is 512 KiB per core).
V_BYTES = 256 * 1024
#: Tiles per 2-D block aimed at (see :func:`_block`).
BLOCK_TILES = 80
#: Output channels per GEMM + output-transform pass (a multiple of MR).
CO_BLOCK = 48
#: Tasks wanted per convolution (two threads, about two tasks each).
MIN_TASKS = 4
#: Widest vector of tiles a build may use (ML_VW of gemm.h: 16 floats with AVX-512).
VW_MAX = 16
#: Most lanes (tiles) of a packed block (``_packed_block``): about BLOCK_TILES.
PACK_LANES = 96
#: Raw-weight mode: each block transforms the raw weights again, so larger blocks than
#: the rule's (``_block``'s 8 or more) serve more GEMM columns per transform; the plan
#: is the cheapest by ``conv_cost`` among the rule's blocks and these many rows of
#: blocks (2-D) or times the packed lanes (packed), the tasks' balance on two threads
#: counted (:func:`_raw_plan`). Measured here, 1 thread: VGG's 256 x 56 x 56 layer in
#: blocks of 16 tiles runs 1.12x slower raw than stored, in blocks of 96-112 tiles
#: 0.88-1.0x; 64 x 224 x 224 in blocks of 144 or 196 tiles 1.07x slower than in 96 (the
#: cost model does not see that: ``RAW_MAX_TILES`` bounds the blocks tried).
RAW_BLOCKS = (2, 4, 6, 8)
RAW_MAX_TILES = 64
#: Input channels from which raw blocks may take twice ``RAW_MAX_TILES``: there the
#: stored path streams a U larger than L2 for every block, and fewer, larger blocks win
#: (256 -> 256 at 56x56 in two blocks of 112 tiles: 0.76-0.92x the stored time).
RAW_WIDE_CIN = 128
RAW_PACK_SCALES = (2, 4)


@dataclass(frozen=True)
class WinogradPlan:
    """How one Conv runs through ``winograd.h``: the transforms per axis, the block of
    tiles (rows x columns, columns a multiple of 8) each task transforms, output channels
    per GEMM pass, tasks per block (ranges of output channels) and whether a vector's
    lanes run across rows of tiles (``pack``: narrow images; blocks are then whole rows
    of tiles); ``raw``: the library stores the raw weights and each task transforms
    those of its ``co_block`` output channels per pass (no stored U: the size budget's
    choice where U does not fit); ``phases``: a dilated conv's phases (rows, columns),
    the plan made for them side by side (``conv_cost.phase_dims``; (1, 1): undilated)."""

    th: Transforms
    tw: Transforms
    block: tuple[int, int]
    co_block: int
    co_split: int
    pack: bool = False
    raw: bool = False
    phases: tuple[int, int] = (1, 1)

    def lane_stride(self, d: dict[str, int]) -> int:
        """Lanes per row of tiles in pack mode: the row's tiles and the columns its last
        tile reads past it (``bwp`` of winograd.h's packed blocks)."""
        return self.tiles(d)[1] + (self.tw.alpha - 1) // self.tw.m

    def tiles(self, d: dict[str, int]) -> tuple[int, int]:
        """The tile grid (TH, TW) of the output."""
        return -(-d["OH"] // self.th.m), -(-d["OW"] // self.tw.m)


def _enabled() -> bool:
    return ENABLED and os.environ.get("MONOLIB_WINOGRAD", "1") != "0"


def _block(grid: tuple[int, int], per_tile: int, rows: int | None = None) -> tuple[int, int]:
    """Tiles per block (rows, columns).

    One row of tiles (1-D): columns while V (``per_tile`` bytes a tile) stays within
    ``V_BYTES``. 2-D: whole tile rows up to 48 columns (a multiple of 8, a vector of
    tiles on AVX2), about ``BLOCK_TILES`` tiles but at least 8 blocks (two threads
    balance), rows times columns a multiple of 16 (one GEMM panel) where possible.
    Measured on PP-OCR det's 3x3 convs: blocks of 16 tiles run 20-30% slower than 80
    (per-block overheads: a V bigger than L2 costs less). ``rows``: that many rows of
    tiles instead (2-D).
    """
    big_th, big_tw = grid
    if big_th == 1:
        cols = max(16, min(V_BYTES // per_tile // 16 * 16, -(-big_tw // 16) * 16))
        # blocks of equal width (multiples of 8): 100 tiles in 80 + 20 left one of two
        # threads idle most of the op (a vocoder's 128-channel 3-tap convs over 400
        # samples ran no faster on 2 threads), in 56 + 44 they share it
        n = -(-big_tw // cols)
        if n > 1:
            per = -(-big_tw // n)
            cols = -(-per // 8) * 8
        return 1, cols
    cols = min(-(-big_tw // 8) * 8, 48)
    if rows is None:
        rows = max(1, min(-(-BLOCK_TILES // cols), big_th // 8))
        if rows * cols % 16:
            rows += 1
    return min(rows, big_th), cols


def _packed_block(grid: tuple[int, int], ls: int, lanes: int = PACK_LANES) -> tuple[int, int]:
    """Rows of tiles per packed block (whole rows; ``ls`` lanes each): the fewest GEMM
    columns (each block rounded up to ``NR``, plus a block's set-up as a few columns)
    with at most ``lanes`` lanes a block and at least two blocks."""
    big_th, big_tw = grid

    def cols(bh: int) -> int:
        full, rest = divmod(big_th, bh)
        lanes = full * _round(bh * ls, NR) + (_round(rest * ls, NR) if rest else 0)
        return lanes + 4 * -(-big_th // bh)

    # at least two blocks: a conv with few output channels has no other split for threads
    most = max(1, -(-big_th // 2))
    fits = [bh for bh in range(1, most + 1) if bh * ls <= lanes] or [1]
    return min(fits, key=lambda bh: (cols(bh), -bh)), big_tw


def _lanes(d: dict[str, int], m: int) -> int:
    """Tile lanes a 2-D F(m x m) output computes: rows of tiles padded to vectors of 8
    (F(2x2) wins on narrow outputs, where F(4x4) would leave lanes idle)."""
    return -(-d["OH"] // m) * _round(-(-d["OW"] // m), 8)


def plan_winograd(
    node: Node, d: dict[str, int], group: int, m: int | None = None,
    co_block: int | None = None, raw: bool = False,
) -> WinogradPlan | None:
    """The Winograd plan of a Conv, or None where the existing paths are used.

    Applies to float32, ``group == 1``, constant weights, stride 1, any dilation whose
    pads top and left are multiples of it (:func:`dilation_phases`; planned for the
    phases side by side), and
    kernels 3x3 (F(4x4, 3x3), or F(2x2, 3x3) on narrow outputs where F(4x4) would leave
    vector lanes idle) or 1 x r with r in {3, 5} along W (1-D convolutions, F(4, r)),
    with enough channels and tiles that the transforms pay off (``MIN_*``,
    ``SMALL_PIXELS``).

    ``m`` (a tuner's candidate, ``compiler/tuning``) forces the output tile: 2 or 4 for
    3x3 (the ``SMALL_PIXELS`` rule is then skipped), 4 for 1-D; None where it cannot.
    ``co_block`` (a multiple of MR; default ``CO_BLOCK``) sets the output channels per
    GEMM + output-transform pass and the smallest range a task takes. ``raw``: the
    raw-weight mode (``WinogradPlan.raw``).
    """
    x, w = node.inputs[0], node.inputs[1]
    if not _enabled() or group != 1 or w.const is None:
        return None
    phases = dilation_phases(d)
    if phases is None:
        return None
    if phases != (1, 1):  # planned for the phases side by side
        d = phase_dims(d, *phases)
    # a run-time image: the plan (a speed choice) is made at the upper bounds; the tile
    # grid itself is computed when the op runs (emit_winograd), any size fits the plan
    d = {k: size_hint(v) for k, v in d.items()}
    if d["SH"] != 1 or d["SW"] != 1 or d["DH"] != 1 or d["DW"] != 1:
        return None
    kernel = (d["KH"], d["KW"])
    c_in, c_out = x.shape[1], w.shape[0]
    if c_in < MIN_CIN or c_out < MIN_COUT:
        return None
    if kernel == (3, 3):
        if m is None:
            if d["OH"] * d["OW"] < SMALL_PIXELS and (c_in < 32 or c_in * c_out < 1024):
                return None
            m = min((4, 2), key=lambda m: _lanes(d, m) * (m + 2) ** 2)
        elif m not in (2, 4):
            return None
        th, tw = cook_toom(m, 3), cook_toom(m, 3)
    elif kernel in ((1, 3), (1, 5)) and m in (None, 4):
        th, tw = cook_toom(1, 1), cook_toom(4, kernel[1])
    else:
        return None
    grid = -(-d["OH"] // th.m), -(-d["OW"] // tw.m)
    if grid[0] * grid[1] < MIN_TILES:
        return None
    cob = CO_BLOCK if co_block is None else co_block
    if cob <= 0 or cob % MR:
        return None
    pack = _pack_wins(grid, tw)
    per_tile = 4 * th.alpha * tw.alpha * c_in
    ls = grid[1] + (tw.alpha - 1) // tw.m

    def plan(arg: int | None) -> WinogradPlan:
        if pack:  # lanes across rows of tiles: fewer GEMM columns than rows padded
            block = _packed_block(grid, ls, PACK_LANES * (arg or 1))
            blocks = -(-grid[0] // block[0])
        else:
            block = _block(grid, per_tile, arg)
            blocks = -(-grid[0] // block[0]) * -(-grid[1] // block[1])
        # few blocks (a short 1-D input): tasks also split the output channels, each part
        # at least CO_BLOCK rows; their input transforms repeat, small beside the GEMMs
        co_split = max(1, min(MIN_TASKS // blocks, c_out // cob))
        return WinogradPlan(th, tw, block, min(cob, -(-c_out // MR) * MR), co_split, pack,
                            raw)

    rule = plan(None)
    if raw and grid[0] > 1:
        rule = _raw_plan(rule, plan, d, c_in, c_out)
    return replace(rule, phases=phases)


def dilation_phases(d: dict[str, int]) -> tuple[int, int] | None:
    """The phases (rows, columns) a stride-1 conv runs as (``winograd.h``
    ``ml_winograd_phases``): (1, 1) undilated; its dilations along each axis whose
    window is wider than one tap; None where phases cannot run it: a stride, a pad top
    or left not a multiple of the dilation, or a size known only at run time."""
    ph = d["DH"] if d["KH"] > 1 else 1
    pw = d["DW"] if d["KW"] > 1 else 1
    if (ph, pw) == (1, 1):
        return 1, 1
    if any(is_dim(v) for v in d.values()) or d["SH"] != 1 or d["SW"] != 1:
        return None
    if d["PT"] % ph or d["PL"] % pw:
        return None
    return ph, pw


def _raw_plan(rule: WinogradPlan, plan, d: dict[str, int], c_in: int,
              c_out: int) -> WinogradPlan:
    """The raw-weight mode's blocks: the rule's, or ``RAW_BLOCKS`` rows of blocks (2-D;
    only larger blocks, up to ``RAW_MAX_TILES`` tiles), or ``RAW_PACK_SCALES`` times the
    packed lanes, whichever has the least ``conv_cost`` time averaged over one thread
    and two, with winograd.h's split (``ml_wino_parts``): one task per block on one
    thread; on two, two output-channel ranges per block where the blocks are fewer than
    8 and odd (each repeating its block's input transform), the tasks taken in order by
    whichever thread is free (a short last block, or an odd count, idles one)."""
    big_th, big_tw = rule.tiles(d)
    if rule.pack:
        args = RAW_PACK_SCALES
    else:
        cols = rule.block[1]
        most = RAW_MAX_TILES * (2 if c_in >= RAW_WIDE_CIN else 1)
        args = tuple(r for r in {-(-big_th // nb) for nb in RAW_BLOCKS}
                     if rule.block[0] < r and r * cols <= most)

    def score(p: WinogradPlan) -> float:
        rows = _sizes(big_th, p.block[0])
        widths = [1] if p.pack else _sizes(big_tw, p.block[1])
        blocks = len(rows) * len(widths)
        parts = 1 if blocks % 2 == 0 or blocks >= 8 else min(2, p.co_split)
        one = winograd_cost(replace(p, co_split=1), d, c_in, c_out)
        two = winograd_cost(replace(p, co_split=parts), d, c_in, c_out)
        tasks = [r * c / parts for r in rows for c in widths for _ in range(parts)]
        return (one + two * _busier_share(tasks)) / 2

    return min([rule, *(plan(a) for a in sorted(args))], key=score)


def _sizes(n: int, step: int) -> list[int]:
    """Lengths of the pieces of ``n`` cut every ``step``."""
    return [min(step, n - i) for i in range(0, n, step)]


def _busier_share(tasks: list[float]) -> float:
    """The busier of two threads' work, taking ``tasks`` in order as each frees, over
    half the total (1.0: balanced)."""
    t = [0.0, 0.0]
    for w in tasks:
        t[t.index(min(t))] += w
    return max(t) / (sum(tasks) / 2)


def _pack_wins(grid: tuple[int, int], tw: Transforms) -> bool:
    """Whether packing rows of tiles into vectors computes fewer lanes than padding each
    row of tiles to the host's vector width (narrow images: 7 tiles a row fill 7 of 16
    AVX-512 lanes unpacked, 14 of 16 packed)."""
    big_th, big_tw = grid
    vw = host_vector_width()
    if big_th < 2 or big_tw >= 3 * vw:
        return False
    ls = big_tw + (tw.alpha - 1) // tw.m
    return big_th * ls < 0.85 * big_th * _round(big_tw, vw)


def emit_winograd(
    node: Node, ctx: EmitContext, d: dict[str, int], epi: str, plan: WinogradPlan
) -> str:
    """C of a Conv through ``ml_winograd`` (one call per image).

    ``U`` (:func:`transform_weights`) is packed per transformed element with
    ``_gemm.pack_a`` into the params, or in the raw-weight mode (``plan.raw``) the raw
    taps (:func:`pack_raw`) and the weight transform (:func:`weight_function`); the
    scratch holds one task's V, M, phase buffer and (raw) U of one pass
    (``winograd.h``), sized for any vector width up to ``VW_MAX``.
    """
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    n, c_in = x.shape[:2]
    c_out = w.shape[0]
    th, tw = plan.th, plan.tw
    ah, aw = th.alpha, tw.alpha
    ph, pw = plan.phases
    pd = phase_dims(d, ph, pw) if ph * pw > 1 else d  # a dilated conv: its largest phase
    big_th, big_tw = plan.tiles(pd)  # Dims for a run-time image
    # scratch at the upper bounds: every size below needs no more (winograd.h takes
    # v/m/p_floats as lower bounds of the buffers it is given)
    top_th, top_tw = size_hint(big_th), size_hint(big_tw)
    w4 = w.const.reshape(c_out, c_in, d["KH"], d["KW"])
    wt, u_floats = "0", 0
    if plan.raw:
        packed, u_stride = pack_raw(w4)
        up = ctx.param(packed, f"{node.name}.winograd_raw")
        wt = weight_function(ctx, th, tw)
        u_floats = aw * _stride(plan.co_block * c_in)
    else:
        u = transform_weights(w4, th, tw)
        packed = np.concatenate([pack_a(u[xi]) for xi in range(ah * aw)])
        u_stride = -(-c_out // MR) * MR * c_in
        up = ctx.param(packed, f"{node.name}.winograd_u")
    fin, fout = transform_functions(ctx, th, tw)
    ctx.include("winograd.h")
    bh, bw = plan.block
    if plan.pack:  # lanes: bh rows of ls (winograd.h ml_wino_packed_row)
        ls = top_tw + (aw - 1) // tw.m
        ntp = _round(min(bh, top_th) * ls, NR)
        p_floats = _round(ah * tw.m * (_round(min(bh, top_th) * ls, VW_MAX) + aw), 16)
    else:
        bwp = _round(min(bw, top_tw), VW_MAX)
        ntp = _round(min(bh, top_th) * bwp, NR)
        p_floats = _round(
            ((min(bh, top_th) - 1) * th.m + ah) * tw.m * (bwp + (aw - 1) // tw.m), 16
        )
    v_floats = ah * aw * _stride(c_in * ntp)
    m_floats = ah * aw * _stride(plan.co_block * ntp)
    floats = v_floats + m_floats + p_floats + u_floats
    if ph * pw > 1:  # then the phases' input and output side by side (64-byte aligned)
        xp_floats = _round(c_in * pd["H"] * pd["W"], 16)
        floats += xp_floats + _round(c_out * pd["OH"] * pd["OW"], 16)
    scratch = ctx.scratch(4 * floats)
    hw, ohw = d["H"] * d["W"], d["OH"] * d["OW"]
    yp = ctx.ptr(y)
    fields = {
        "C": c_in,
        "M": c_out,
        "H": d["H"],
        "W": d["W"],
        "OH": d["OH"],
        "OW": d["OW"],
        "PT": d["PT"],
        "PL": d["PL"],
        "mh": th.m,
        "mw": tw.m,
        "ah": ah,
        "aw": aw,
        "TH": big_th,
        "TW": big_tw,
        "bh": bh,
        "bw": bw,
        "mb": plan.co_block,
        "co_split": plan.co_split,
        "pack": int(plan.pack),
        "v_floats": v_floats,
        "m_floats": m_floats,
        "p_floats": p_floats,
        "u_floats": u_floats,
        "x": f"{ctx.ptr(x)} + n * {c_in * hw}",
        "u": up,
        "u_stride": u_stride,
        "bias": ctx.ptr(b) if b is not None else "0",
        "y": f"{yp} + n * {c_out * ohw}",
        "in": fin,
        "out": fout,
        "wt": wt,
        "epi": epi,
        "epi_out": yp,
        "epi_b": "n",
    }
    call = f"ml_winograd(&wa_, {scratch});"
    if ph * pw > 1:  # the phases' conv (no epilogue), gathered from x, scattered to y
        xs = f"(float*){scratch} + {v_floats + m_floats + p_floats + u_floats}"
        pr, pt = phase_period(d["H"], d["OH"], d["PT"], d["KH"], ph)
        pc, pl = phase_period(d["W"], d["OW"], d["PL"], d["KW"], pw)
        call = (f"ml_winograd_phases(&wa_, {fields['x']}, {fields['y']}, {d['H']}, "
                f"{d['W']}, {d['OH']}, {d['OW']}, {ph}, {pw}, {pr}, {pt}, {pc}, {pl}, "
                f"{epi}, {yp}, n, {scratch});")
        fields.update({k: pd[k] for k in ("H", "W", "OH", "OW", "PT", "PL")})
        fields.update(x=xs, y=f"{xs} + {xp_floats}", epi="(ml_epi_fn)0")
    init = ", ".join(f".{k} = {v}" for k, v in fields.items())
    return (
        f"for (int64_t n = 0; n < {n}; ++n) {{\n"
        f"  const ml_wino_args wa_ = {{{init}}};\n"
        f"  {call}\n}}"
    )


def _stride(n: int) -> int:
    """``ml_wino_stride``: n floats rounded up to an odd number of 64-byte lines."""
    return (-(-n // 16) | 1) * 16


def _round(n: int, k: int) -> int:
    return -(-n // k) * k
