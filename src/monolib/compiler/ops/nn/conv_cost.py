"""Cost model of the Conv algorithms: the fixed rule's choice on shapes never tuned.

Each candidate of ``conv.conv_candidates`` (direct, implicit-GEMM, Winograd) gets an
estimated time in nanoseconds from the work its kernel really does on this CPU's vector
width, not from the ideal multiply-add count:

* ``gemm`` (``gemm.h`` on an implicit im2col): rows padded to ``MR``, columns to whole
  micro-tiles (``MR x NP*NR``); B packed once per column (``K`` floats), the image
  padded first where the convolution pads;
* ``direct`` (``conv.h`` ``ml_conv_direct``): tiles never cross an output row, so each
  row's columns are padded to whole panels of ``NR``; no B packing, the padded
  phase-split planes written once;
* ``winograd`` (``winograd.h``): ``alpha^2`` GEMMs over channels whose columns are the
  block's tile *lanes*: a row of tiles is padded to the vector width ``ML_VW`` (16
  floats with AVX-512), so a narrow image computes mostly padding; plus the input and
  output transforms per lane.

The constants (:data:`COSTS`) are fitted per algorithm by ``bench/calibrate_conv.py`` to
every candidate's measured time on the distinct Conv signatures of the benchmark models
(``compiler/tuning``'s micro-benchmark, one AVX-512 Zen 4 core: :data:`COSTS`; one AVX2
Zen 3 core: :data:`COSTS_AVX2`, picked by the host's vector width); the ratios between
algorithms are what the rule uses, and the vector width and tiles follow the host's ISA.
A user calibrates them on another CPU with that script, or lets ``monolib compile
--tune`` measure instead of estimating.
"""

from __future__ import annotations

import functools
import logging
import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...symbolic import size_hint
from ...tuning.select import active
from ._gemm import GEMV_NMAX, MR, NR

__all__ = ["COSTS", "COSTS_AVX2", "COSTS_BY_WIDTH", "L2_BYTES", "conv_costs", "current_costs", "direct_cost", "folded_cost",
           "gemm_cost", "has_tail", "host_vector_width", "row_window", "phase_dims", "phase_period", "shipped_costs", "streamed_floats", "winograd_cost"]

logger = logging.getLogger(__name__)

#: Nanoseconds per unit of work, per algorithm: ``bench/calibrate_conv.py``'s fit to every
#: candidate's measured time on 302 distinct Conv signatures (the 26 models of
#: ``bench/run.py``, tuned by ``compiler/tuning`` on one Zen 4 core, AVX-512): non-negative
#: least squares on the relative error, weighted by the square root of the time (so that
#: microsecond convs do not outvote millisecond ones), each algorithm its own constants.
#: With them the modelled-cheapest candidate costs 2.0% more than the fastest, summed over
#: the signatures (57 of 302 picks over 5% slower); fitted on random halves, 1.9-2.5% on
#: the halves held out. The rule as a whole (depthwise, folded batches and the exclusions
#: of ``conv.rule_costs`` included) lost 2.6% over 369 signatures, 3.7% with the previous
#: constants (fitted by hand on 36 shapes, shared between algorithms): e.g. DenseNet-121's
#: convs 6.3% -> 0.6%, SqueezeNet's 8.4% -> 2.3%, a PP-OCR detector's 10.5% -> 4.8%.
#:
#: * ``mac``: per multiply-add computed (padded tiles included);
#: * ``pack``: per float of B (or pixel_rows' A) gathered by the implicit im2col;
#: * ``run``: per run of that copy (one tap row of one output row);
#: * ``pad``: per float written by padding the image;
#: * ``tile``: per micro-tile call (C tile load and store, tap table, loop set-up);
#: * ``out``: per output float (stores, the fused epilogue's pass);
#: * ``tail``: per float of packed A (``m x k``, rows padded to ``MR``) where 1 to
#:   ``GEMV_NMAX`` columns are left past the last whole panel: ``ml_gemm_tail_cols``
#:   streams all of A again for them; ``tail_col``: the same per float and tail column.
#:   Zen 4's are :data:`TAIL_COLS` x ``mac`` and 0, how such a tail was priced before it
#:   had terms of its own; a table without them (pixel_rows) still prices it so;
#: * ``transpose``: per float of pixel_rows' output transposed to NCHW; ``block``: per
#:   float copied out instead, into 16-channel blocks (the depthwise conv next to it keeps
#:   that layout, ``backends/c/layout.py``): set by hand, a third of a copy's cost, since
#:   the depthwise conv saves its own transposes of the same floats (256@14x14 1x1 and 5x5
#:   depthwise: 0.244 + 0.043 -> 0.236 + 0.039 ms in PP-LCNet);
#: * ``mac_pw``: pixel_rows' ``mac`` for a 1x1 conv reading its input in place (no
#:   packed A): 1x1 convs of 7x7 and 14x14 maps, 96-512 channels, measured alone after
#:   the in-place change (the fit above predates it and priced them 6-14% high);
#: * ``in`` / ``t_out``: per lane, transformed element and channel of Winograd's input and
#:   output transforms; ``w``: per transformed element and channel pair of the raw-weight
#:   mode's weight transform, once per block of tiles;
#: * ``edge``: per multiply-add of direct_ocv's one-pixel tiles (edges, short rows);
#:   ``mac_l2``: per multiply-add of its tiles where the input rows they read outgrow L1;
#:   ``out`` there: per output float staged, transposed and passed to the epilogue;
#:   ``copy``: per float of the zero-padded input rows a flat band copies (``ocv_flat``);
#: * ``big``: per float of input and output where they outgrow L2 (:func:`streamed_floats`);
#: * ``call``: per call (set-up, scratch, dispatch), one value for all: the fit cannot
#:   tell it from zero (fitted per algorithm, Winograd's took 43 us to mend its 2-D
#:   misfit and then lost every 1-D conv: 48 -> 40 5-tap at 301 ran 33 us, direct 56).
COSTS: dict[str, dict[str, float]] = {
    "gemm": {"mac": 0.0166, "pack": 0.216, "run": 10.1, "pad": 0.226, "tile": 0.0,
             "out": 0.0, "tail": 0.332, "tail_col": 0.0, "big": 0.304, "call": 0.0},
    "pixel_rows": {"mac": 0.0194, "mac_pw": 0.0177, "pack": 0.465, "transpose": 0.139,
                   "block": 0.02, "pad": 0.387, "tile": 0.0, "big": 0.310, "call": 0.0},
    "direct": {"mac": 0.0146, "pad": 0.229, "tile": 127.0, "out": 0.0, "big": 0.0, "call": 0.0},
    "winograd": {"mac": 0.0209, "tile": 0.0, "in": 0.253, "t_out": 0.219, "w": 0.103,
                 "out": 0.436, "block": 5464.0, "big": 0.0, "call": 0.0},
    "direct_ocv": {"mac": 0.0173, "mac_l2": 0.0182, "edge": 0.0469, "out": 0.0,
                   "copy": 0.0, "big": 0.324, "call": 0.0},
}
#: The same fit on one Zen 3 core with AVX2 (8 floats a vector, 16 vector registers;
#: ``bench/calibrate_conv.py --tune all``: 310 signatures, 1031 timed candidates), the
#: constants a CPU of that vector width gets (:data:`COSTS_BY_WIDTH`). With the AVX-512
#: table there the rule lost 6.6% over the fastest candidates (95 of 305 picks over 5%
#: slow; held-out halves 5.3-8.7%), with this one 2.9% (3.2-4.7%): the kernels' rates
#: differ by ISA, not only by the vector width the work terms count (direct_ocv's tiles
#: keep 12 sums instead of 24; the GEMM's k loop is assembly). ``block`` was not fitted
#: (no signature of the set has a blocked output): ``transpose - block`` is the
#: discount, 0.25 ns a float, twice what copying in blocks saves over the register
#: transpose, timed alone (ml_block_pm 0.13-0.19 ns a float, ml_transpose_pm
#: 0.17-0.33: 240 x 384 to 3136 x 64), the other half for the depthwise conv's own
#: transposes. (``transpose`` itself also carries the path's other per-output work.) At
#: a seventh of ``transpose``, as on Zen 4, the discount was 1.77 ns: 6 of PP-OCRv6
#: rec's 1x1 convs went pixels-as-rows, and the model ran 8.6% slower (1% once a
#: blocked input had gemm.h's assembly path, which it lacked then). ``mac_pw`` is
#: pixel_rows' ``mac``: the fit priced reading the input in
#: place 10% above packing it first (0.0319), against what Zen 4 measured, and picked
#: the GEMM for 480 -> 80 at 14x14 (280 us; pixels-as-rows 223); set equal, the regret
#: over the 305 is 2.7% and 84 picks are over 5% slow (101 with the fit's value).
#: ``tail`` and ``tail_col`` came later, by the least regret on a grid (the rest as
#: here) over 305 signatures tuned on this Zen 3: 1 column past the panels costs 0.25 ns
#: per float of A, 4 columns 0.85 (the old pricing, 20 columns at ``mac``, 0.54 for
#: any): regret 1.8% -> 1.4%, 70 -> 62 picks over 5% slow; on random halves held out
#: of the grid 1.8-2.1% -> 1.2-1.7%. It moves ResNet-50's 7x7 1x1 convs (512 -> 2048,
#: 2048 -> 512; pixels-as-rows 2.1-2.5 ms alone, the GEMM with its 1-column tail
#: 1.7-1.8) and the model ran 6% faster. direct_ocv's ``out`` was 0.327 until its
#: staged outputs went to NCHW by 8 x 8 register transposes (a scalar loop before, which
#: gcc made a gather): with its 164 signatures re-timed, the least regret over the 305
#: on a grid of ``out`` and ``mac`` put ``out`` at 0.1 (1.98% -> 1.69%), ``mac`` unchanged;
#: ``copy`` keeps the old value for the flat bands' row copies, which did not change (at
#: 0.1 flat won 64 -> 64 in groups of 16 at 50x50, measured 3% slower than by rows).
#: The GEMM's ``run`` was 26.96 until gemm.h packed an im2col B panel by panel (the
#: pieces of output rows found once per vector, not once per k: the per-run branches
#: were the cost): with its 238 non-pointwise signatures re-timed (and all candidates
#: of the 27 whose pick moved), ``run`` 8 and ``mac`` 5% up, on a grid, lowered the
#: regret on 6 random halves held out in 5 of them (3.9-5.6% -> 3.6-5.6%; mean
#: relative regret 5.5-8.9% -> 5.1-8.0%). The AVX-512 table was not re-fitted.
COSTS_AVX2: dict[str, dict[str, float]] = {
    "gemm": {"mac": 0.02846, "pack": 0.2034, "run": 8.0, "pad": 1.303, "tile": 0.0,
             "out": 0.9556, "tail": 0.05, "tail_col": 0.2, "big": 0.2935,
             "call": 933.0},
    "pixel_rows": {"mac": 0.02908, "mac_pw": 0.02908, "pack": 0.9928, "transpose": 2.055,
                   "block": 1.8, "pad": 0.2933, "tile": 0.0, "big": 0.0, "call": 933.0},
    "direct": {"mac": 0.03513, "pad": 0.9254, "tile": 97.78, "out": 0.0, "big": 0.0,
               "call": 933.0},
    "winograd": {"mac": 0.03271, "tile": 0.0, "in": 0.5207, "t_out": 0.0, "w": 0.1664,
                 "out": 1.181, "block": 16230.0, "big": 0.0, "call": 933.0},
    "direct_ocv": {"mac": 0.02973, "mac_l2": 0.03255, "edge": 0.1473, "out": 0.1,
                   "copy": 0.3273, "big": 0.8007, "call": 933.0},
}
#: Shipped constants by the host's vector width (floats): a width not listed takes
#: :data:`COSTS`. A CPU's own fit (``calibrate_conv.py --write``) goes over either.
COSTS_BY_WIDTH: dict[int, dict[str, dict[str, float]]] = {8: COSTS_AVX2}
#: L2 bytes per core that a Conv's input and output are judged against (``big``; 1 MiB
#: on Zen 4)
L2_BYTES = 1 << 20
#: columns a GEMM's tail of 1 to GEMV_NMAX columns past its panels costs like: the tail
#: kernel streams all of A again for them (0.3-0.7 ns per float of A, timed on the 1x1
#: convs of 7x7 and 14x14 maps of 256-2048 channels, Zen 4: 49 columns ran like 68,
#: 196 like 212, where counting them at their width put the GEMM 10-15% too low). Since
#: gemm.h runs the tail after the panels (A's block then in L2), a GEMM alone runs it
#: like 4.5 (1 column) to 10-12 (4) columns; counted so, MnasNet's 1x1 convs on 14x14
#: and 7x7 maps went from pixels-as-rows to gemm and the model ran 6% slower (the
#: blocked output pixels-as-rows gives the depthwise conv after it is not in this
#: count), so the in-model figure stays.
TAIL_COLS = 20
#: columns the half-width tile (AVX-512: 1 to HALF_TAIL columns past the panels at
#: 256 bits) costs like: 9-10.7 on the same convs alone, 16 for a whole panel
HALF_COLS = 10
HALF_TAIL = 8


def shipped_costs() -> dict[str, dict[str, float]]:
    """The shipped constants for this host's vector width (:data:`COSTS_BY_WIDTH`, else
    :data:`COSTS`)."""
    return COSTS_BY_WIDTH.get(host_vector_width(), COSTS)


def current_costs() -> dict[str, dict[str, float]]:
    """:func:`shipped_costs` with this CPU's calibrated constants over them, where the
    compile's ``tuning.select.Selection`` carries some (the tuning cache's ``conv_costs``,
    written by ``bench/calibrate_conv.py --write``)."""
    base = shipped_costs()
    sel = active()
    if sel is None or not sel.costs:
        return base
    return {a: {**base[a], **sel.costs.get(a, {})} for a in base}


@functools.lru_cache(maxsize=1)
def host_vector_width() -> int:
    """Floats per vector of a ``-march=native`` build here (``ML_VW`` of gemm.h): 16
    with AVX-512F, 8 with AVX, else 4 (SSE, NEON)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        logger.debug("no /proc/cpuinfo: vector width from the machine name")
    if "avx512f" in flags:
        return 16
    if "avx" in flags or (not flags and platform.machine() in ("x86_64", "AMD64")):
        return 8
    return 4


def _panel_cols() -> int:
    """Columns of gemm.h's micro-tile: two 16-column panels with AVX-512, else one."""
    return 2 * NR if host_vector_width() == 16 else NR


def _up(n: int, k: int) -> int:
    return -(-n // k) * k


def _tile_cols(cols: int, tail_cols: int = TAIL_COLS) -> int:
    """Columns gemm.h computes for ``cols`` of a packed A (as ``ml_gemm_task_cost``):
    whole micro-tiles, a last group of up to ``NR`` at one panel (a whole tile when it is
    the only one), a tail of 1 to ``GEMV_NMAX`` columns past the panels
    (``ml_gemm_tail_cols``) as ``tail_cols`` (0: priced apart, :func:`has_tail`), else
    with AVX-512 one of up to :data:`HALF_TAIL` in half-width tiles as
    :data:`HALF_COLS`."""
    rem, tail = cols % NR, 0
    if has_tail(cols):
        tail, cols = tail_cols, cols - rem
    elif 0 < rem <= HALF_TAIL and _panel_cols() > NR:
        tail, cols = HALF_COLS, cols - rem
    w = _panel_cols()
    r = cols % w
    if cols < w:  # one panel on every row panel: bound by its loads, as slow as a tile
        return w + tail
    return cols - r + (0 if r == 0 else NR if r <= NR else w) + tail


def has_tail(cols: int) -> bool:
    """Whether ``cols`` leave 1 to ``GEMV_NMAX`` columns past the last whole panel, which
    gemm.h sums in ``ml_gemm_tail_cols`` (the ``tail`` term)."""
    return 0 < cols % NR <= GEMV_NMAX


def gemm_cost(m: int, k: int, cols: int, pad_floats: int = 0, calls: int = 1,
              runs: int = 0, packs_b: bool = True, c: dict[str, float] | None = None) -> float:
    """Nanoseconds of ``calls`` GEMMs of ``m x k`` packed weights by a ``k x cols``
    implicit im2col of ``runs`` copied runs per call (``pad_floats`` written by padding
    first, over all calls); ``packs_b`` False: B was packed at compile time. Columns
    count as the micro-kernel computes them (:func:`_tile_cols`); ``c``: the constants
    (default ``COSTS["gemm"]``)."""
    c = c or current_costs()["gemm"]
    tile = _panel_cols()
    priced_apart = "tail" in c
    mp, np_ = _up(m, MR), _tile_cols(cols, 0 if priced_apart else TAIL_COLS)
    k_blocks = -(-k // 256)
    tiles = -(-mp // MR) * -(-np_ // tile) * k_blocks
    tail, packed = 0.0, np_
    if priced_apart and has_tail(cols):  # its B columns are packed as they are
        tail = mp * k * (c["tail"] + c.get("tail_col", 0.0) * (cols % NR))
        packed = np_ + cols % NR
    one = (mp * k * np_ * c["mac"] + k * packed * c.get("pack", 0.0) * packs_b + tail
           + tiles * c["tile"] + runs * c.get("run", 0.0) + m * cols * c.get("out", 0.0))
    return calls * (one + c["call"]) + pad_floats * c["pad"]


def direct_cost(m: int, k: int, d: dict[str, int], plane_floats: int, calls: int = 1,
                c: dict[str, float] | None = None) -> float:
    """Nanoseconds of ``calls`` direct convolutions (``ml_conv_direct``) of ``m`` output
    channels, depth ``k``, output ``OH x OW`` of ``d``; ``plane_floats`` padded; ``c``:
    the constants (default ``COSTS["direct"]``)."""
    c = c or current_costs()["direct"]
    tile = _panel_cols()
    oh, ow = d["OH"], d["OW"]
    # per output row: whole tiles of `tile` columns, the last one of NR when it fits
    full, rest = divmod(ow, tile)
    row_cols = full * tile + (_up(rest, NR) if rest <= NR else tile) if rest else full * tile
    row_tiles = full + (1 if rest else 0)
    mp = _up(m, MR)
    k_blocks = -(-k // 128)
    tiles = (mp // MR) * row_tiles * oh * k_blocks
    one = mp * k * oh * row_cols * c["mac"] + tiles * c["tile"] + m * oh * ow * c["out"]
    return calls * (one + c["call"]) + plane_floats * c["pad"]


def winograd_lanes(plan: Any, d: dict[str, int], vw: int) -> int:
    """GEMM columns Winograd computes over the whole image: per block, its rows of tiles
    each padded to ``vw`` lanes (packed: ``lane_stride`` lanes each), the block rounded
    up to ``NR`` (winograd.h's ``ml_wino_block_of``)."""
    big_th, big_tw = plan.tiles(d)
    bh, bw = plan.block
    lanes = 0
    for ty in range(0, big_th, bh):
        nh = min(bh, big_th - ty)
        if plan.pack:  # whole rows of tiles, plan.lane_stride lanes each
            lanes += _up(nh * plan.lane_stride(d), NR)
            continue
        for tx in range(0, big_tw, bw):
            nw = min(bw, big_tw - tx)
            lanes += _up(nh * _up(nw, vw), NR)
    return lanes


def phase_period(size: int, out: int, pad: int, k: int, p: int) -> tuple[int, int]:
    """(period, zeros before the data) of one axis of a dilated stride-1 conv's phases
    laid side by side (``winograd.h`` ``ml_winograd_phases``): ``p`` phases of the
    axis, each the largest phase's ``size`` (input) with the pad before it divided by
    ``p`` (a multiple of it) and after it the zeros its ``out`` outputs' ``k``-tap
    windows read."""
    n, o, before = -(-size // p), -(-out // p), pad // p
    return before + n + max(0, o + k - 1 - before - n), before


def phase_dims(d: dict[str, int], ph: int, pw: int) -> dict[str, int]:
    """The 2-D view of the undilated, unpadded conv a dilated stride-1 conv runs as:
    its ``ph x pw`` phases side by side (:func:`phase_period` rows and columns each,
    their pads within), dilation 1."""
    h = ph * phase_period(d["H"], d["OH"], d["PT"], d["KH"], ph)[0]
    w = pw * phase_period(d["W"], d["OW"], d["PL"], d["KW"], pw)[0]
    return {**d, "H": h, "W": w, "OH": h - d["KH"] + 1, "OW": w - d["KW"] + 1, "PT": 0,
            "PB": 0, "PL": 0, "PR": 0, "DH": 1, "DW": 1}


def winograd_cost(plan: Any, d: dict[str, int], c_in: int, c_out: int,
                  calls: int = 1, c: dict[str, float] | None = None) -> float:
    """Nanoseconds of ``calls`` Winograd convolutions (``ml_winograd``) by ``plan`` (a
    ``winograd.WinogradPlan``); ``c``: the constants (default ``COSTS["winograd"]``).
    A dilated conv's plan (``plan.phases``): the conv of its phases side by side
    (:func:`phase_dims`) plus the gather and scatter (each input and output float
    moved once, priced as an output store)."""
    c = c or current_costs()["winograd"]
    ph, pw = getattr(plan, "phases", (1, 1))
    if ph * pw > 1:
        moved = c_in * d["H"] * d["W"] + c_out * d["OH"] * d["OW"]
        return (winograd_cost(replace(plan, phases=(1, 1)), phase_dims(d, ph, pw), c_in,
                              c_out, calls, c) + calls * moved * c["out"])
    xi = plan.th.alpha * plan.tw.alpha
    lanes = winograd_lanes(plan, d, host_vector_width())
    mp = _up(c_out, MR)
    tiles = xi * (mp // MR) * (lanes // NR)
    gemm = xi * mp * c_in * lanes * c["mac"] + tiles * c["tile"]
    # one thread runs one channel range a block (winograd.h ml_wino_parts): the input
    # transform once per block; more ranges, where threads need them, repeat it
    trans = xi * lanes * (c_in * c["in"] + c_out * c["t_out"])
    big_th, big_tw = plan.tiles(d)
    bh, bw = plan.block
    blocks = -(-big_th // bh) * (1 if plan.pack else -(-big_tw // bw))
    if getattr(plan, "raw", False):  # every block transforms all the raw weights again
        trans += blocks * xi * mp * c_in * c["w"]
    out = c_out * d["OH"] * d["OW"] * c["out"]
    return calls * (gemm + trans + out + blocks * c["block"] + c["call"])


def row_window(d: dict[str, int]) -> bool:
    """A window one tap tall or wide on an image more than one pixel both ways (1x3 and
    3x1 convs on 2-D maps): Winograd ran 1.4-2.3x slower than the best other algorithm on
    all five such shapes measured (24-72 channels, 8-74 pixels wide, Zen 4), twice its
    modelled time, so the rule (``conv.rule_costs``) leaves it to ``--tune``; on a 1-D signal (a 5-tap conv
    over 301 samples, 33 vs 56 us) it stays in the comparison."""
    one_d = (d["KH"] == 1) != (d["KW"] == 1)
    return one_d and size_hint(d["H"]) > 1 and size_hint(d["W"]) > 1


def _im2col(d: dict[str, int], n: int, c: int, group: int,
            pointwise: bool) -> tuple[int, int, int, int, int, int]:
    """(GEMM depth, output pixels, padded rows, padded columns, floats written by padding
    the batch, im2col runs per image) of a Conv's implicit GEMM."""
    k = c // group * d["KH"] * d["KW"]
    hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
    wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    padded = bool(d["PT"] or d["PL"] or hp > d["H"] or wp > d["W"])
    pad = n * c * hp * wp if padded and not pointwise else 0
    return k, d["OH"] * d["OW"], hp, wp, pad, 0 if pointwise else k * d["OH"]


def streamed_floats(d: dict[str, int], n: int, c: int, m: int) -> int:
    """Floats of a Conv's input and output where together they outgrow :data:`L2_BYTES`
    (every pass over them then streams from L3 or memory), else 0."""
    floats = n * (c * d["H"] * d["W"] + m * d["OH"] * d["OW"])
    return floats if 4 * floats > L2_BYTES else 0


def folded_cost(d: dict[str, int], n: int, c: int, m: int, group: int,
                pointwise: bool) -> float:
    """Estimated nanoseconds of ``gemm_folded`` (``conv.py``): the batch of ``n`` small
    images as one GEMM per group whose columns run over every image."""
    d = {k: size_hint(v) for k, v in d.items()}
    n = size_hint(n)
    k, ohw, _, _, pad, runs = _im2col(d, n, c, group, pointwise)
    return gemm_cost(m // group, k, n * ohw, pad, group, n * runs)


def conv_costs(
    d: dict[str, int], n: int, c: int, m: int, group: int, pointwise: bool,
    plans: dict[str, Any] | None = None, pixel_rows: bool = False,
    table: dict[str, dict[str, float]] | None = None, blocked: bool = False,
    blocked_in: bool = False,
) -> dict[str, float]:
    """Estimated nanoseconds of the ``gemm``, ``direct`` and Winograd algorithms of a
    Conv (batch ``n``, ``c`` -> ``m`` channels, ``group`` groups, 2-D view ``d``).

    Parameters
    ----------
    d : dict
        The 2-D view (``conv.as_2d``); run-time sizes are judged at their upper bounds.
    n, c, m, group : int
    pointwise : bool
        A 1x1 stride-1 unpadded convolution (the GEMM reads the input in place).
    plans : dict, optional
        ``"winograd(m=2)"``-style label -> plan (``winograd.plan_winograd``) for each
        Winograd candidate to estimate.
    pixel_rows : bool
        Also estimate the pixels-as-rows GEMM (``conv_pixel_rows``).
    table : dict, optional
        Algorithm -> constants (default :data:`COSTS`; ``bench/calibrate_conv.py`` passes
        unit vectors to read off each constant's work).
    blocked : bool
        A depthwise conv next to it would keep the tensor between them channel-blocked
        if this conv is pixels-as-rows: its output goes out by copies, not a transpose.
    blocked_in : bool
        Its input comes channel-blocked if this conv is pixels-as-rows (pointwise, read
        in place): the conv before it then copies its output out in blocks, not
        transposed, credited here at ``transpose - block`` per input float.

    Returns
    -------
    dict
        Label (``"gemm"``, ``"direct"``, ``"pixel_rows"``, the plans' labels) ->
        nanoseconds.
    """
    d = {k: size_hint(v) for k, v in d.items()}
    n = size_hint(n)
    mg = m // group
    k, ohw, hp, wp, pad, runs = _im2col(d, n, c, group, pointwise)
    t = table or current_costs()
    out = {"gemm": gemm_cost(mg, k, ohw, pad, n * group, runs, c=t["gemm"])}
    if not pointwise:
        wq = -(-wp // d["SW"])
        out["direct"] = direct_cost(mg, k, d, n * c * hp * d["SW"] * wq, n * group,
                                    c=t["direct"])
    if pixel_rows:  # A gathered from the image, the output transposed
        pr = t["pixel_rows"]
        # a pointwise conv's A is the image itself, read in place (from MR pixels up)
        in_place = pointwise and ohw >= MR
        gathered = 0 if in_place else k * ohw
        moved = pr["block"] if blocked else pr["transpose"]
        copies = gathered * pr["pack"] + ohw * mg * moved
        if blocked_in and in_place:
            copies -= ohw * c * (pr["transpose"] - pr["block"])
        if in_place:
            pr = {**pr, "mac": pr["mac_pw"]}
        out["pixel_rows"] = gemm_cost(ohw, k, mg, pad, n, 0, False, c=pr) + n * copies
    for label, plan in (plans or {}).items():
        if plan is not None:
            out[label] = winograd_cost(plan, d, c, m, n, c=t["winograd"])
    big = streamed_floats(d, n, c, m)
    return {k: v + big * t["winograd" if k.startswith("winograd") else k]["big"]
            for k, v in out.items()}
