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

The constants are throughputs measured on an AVX-512 Zen 4 core (``bench/peak.py``'s
machine) by timing every candidate of 36 conv shapes (3x3, 1x3, 3x1, 1x1, strided 3x3,
5x5, 7x7 and 11x11 kernels, 1 to 1024 channels, 2 to 224 pixels a side (``compiler/tuning``'s micro-benchmark), and fitting
each algorithm's terms; the ratios between algorithms are what the rule uses, and the
vector width and tiles follow the host's ISA. ``monolib compile --tune`` measures instead
of estimating.
"""

from __future__ import annotations

import functools
import logging
import platform
from pathlib import Path
from typing import Any

from ...symbolic import size_hint
from ._gemm import GEMV_NMAX, MR, NR

__all__ = ["conv_costs", "direct_cost", "gemm_cost", "host_vector_width", "winograd_cost"]

logger = logging.getLogger(__name__)

# nanoseconds per unit of work, fitted (least squares on log time, plus the cost of a
# wrong pick) to every candidate of 36 conv shapes timed on one Zen 4 core
#: per multiply-add of a full micro-tile (gemm.h's 6 x 32 tile: ~50 GMAC/s)
NS_MAC = 0.0198
#: per multiply-add of the direct kernel (the same tile reading B through a tap table)
NS_MAC_DIRECT = 0.0203
#: per multiply-add of Winograd's per-element GEMMs
NS_MAC_WINO = 0.0243
#: per float of B packed by the implicit im2col (a strided copy)
NS_PACK = 0.200
#: per run of the im2col copy (one tap row of one output row: short rows cost set-up)
NS_RUN = 3.15
#: per float of pixel_rows' output transposed to NCHW (16 x 16 blocks, scalar)
NS_TRANSPOSE = 0.8
#: per float written by image padding (memory-bound copies)
NS_PAD = 0.121
#: per micro-tile call (C tile load/store, loop set-up)
NS_TILE = 0.74
#: per lane, transformed element and channel of Winograd's input and output transforms
NS_WINO_IN = 0.286
NS_WINO_OUT = 0.476
#: per transformed element and (output, input) channel pair of the raw-weight mode's
#: weight transform, once per block of tiles (measured on this 2-core AVX-512 EPYC: raw
#: minus stored time of 3x3 convs of 64-512 channels, 7 to 224 pixels a side, where
#: both use the same blocks: 0.06 with the rule's 16-tile blocks of 56 x 56 images,
#: 0.01-0.04 with blocks of 64 tiles and more, on a loaded machine)
NS_WINO_W = 0.06
#: columns a GEMM's tail of 1 to GEMV_NMAX columns past its panels costs like: the tail
#: kernel streams all of A again for them (0.3-0.7 ns per float of A, timed on the 1x1
#: convs of 7x7 and 14x14 maps of 256-2048 channels, Zen 4: 49 columns ran like 68,
#: 196 like 212, where counting them at their width put the GEMM 10-15% too low)
TAIL_COLS = 20
#: per call of a kernel (set-up, scratch, task dispatch)
NS_CALL = 5040.0


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


def _tile_cols(cols: int) -> int:
    """Columns gemm.h computes for ``cols`` of a packed A (as ``ml_gemm_task_cost``):
    whole micro-tiles, a last group of up to ``NR`` at one panel (a whole tile when it is
    the only one), and a tail of 1 to ``GEMV_NMAX`` columns past the panels
    (``ml_gemm_tail_cols``) as :data:`TAIL_COLS`."""
    rem, tail = cols % NR, 0
    if 0 < rem <= GEMV_NMAX:
        tail, cols = TAIL_COLS, cols - rem
    w = _panel_cols()
    r = cols % w
    if cols < w:  # one panel on every row panel: bound by its loads, as slow as a tile
        return w + tail
    return cols - r + (0 if r == 0 else NR if r <= NR else w) + tail


def gemm_cost(m: int, k: int, cols: int, pad_floats: int = 0, calls: int = 1,
              runs: int = 0, packs_b: bool = True) -> float:
    """Nanoseconds of ``calls`` GEMMs of ``m x k`` packed weights by a ``k x cols``
    implicit im2col of ``runs`` copied runs per call (``pad_floats`` written by padding
    first, over all calls); ``packs_b`` False: B was packed at compile time. Columns
    count as the micro-kernel computes them (:func:`_tile_cols`)."""
    tile = _panel_cols()
    mp, np_ = _up(m, MR), _tile_cols(cols)
    k_blocks = -(-k // 256)
    tiles = -(-mp // MR) * -(-np_ // tile) * k_blocks
    one = mp * k * np_ * NS_MAC + k * np_ * NS_PACK * packs_b + tiles * NS_TILE + runs * NS_RUN
    return calls * (one + NS_CALL) + pad_floats * NS_PAD


def direct_cost(m: int, k: int, d: dict[str, int], plane_floats: int, calls: int = 1) -> float:
    """Nanoseconds of ``calls`` direct convolutions (``ml_conv_direct``) of ``m`` output
    channels, depth ``k``, output ``OH x OW`` of ``d``; ``plane_floats`` padded."""
    tile = _panel_cols()
    oh, ow = d["OH"], d["OW"]
    # per output row: whole tiles of `tile` columns, the last one of NR when it fits
    full, rest = divmod(ow, tile)
    row_cols = full * tile + (_up(rest, NR) if rest <= NR else tile) if rest else full * tile
    row_tiles = full + (1 if rest else 0)
    mp = _up(m, MR)
    k_blocks = -(-k // 128)
    tiles = (mp // MR) * row_tiles * oh * k_blocks
    one = mp * k * oh * row_cols * NS_MAC_DIRECT + tiles * NS_TILE
    return calls * (one + NS_CALL) + plane_floats * NS_PAD


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


def winograd_cost(plan: Any, d: dict[str, int], c_in: int, c_out: int,
                  calls: int = 1) -> float:
    """Nanoseconds of ``calls`` Winograd convolutions (``ml_winograd``) by ``plan`` (a
    ``winograd.WinogradPlan``)."""
    xi = plan.th.alpha * plan.tw.alpha
    lanes = winograd_lanes(plan, d, host_vector_width())
    mp = _up(c_out, MR)
    tiles = xi * (mp // MR) * (lanes // NR)
    gemm = xi * mp * c_in * lanes * NS_MAC_WINO + tiles * NS_TILE
    # one thread runs one channel range a block (winograd.h ml_wino_parts): the input
    # transform once per block; more ranges, where threads need them, repeat it
    trans = xi * lanes * (c_in * NS_WINO_IN + c_out * NS_WINO_OUT)
    if getattr(plan, "raw", False):  # every block transforms all the raw weights again
        big_th, big_tw = plan.tiles(d)
        bh, bw = plan.block
        blocks = -(-big_th // bh) * (1 if plan.pack else -(-big_tw // bw))
        trans += blocks * xi * mp * c_in * NS_WINO_W
    return calls * (gemm + trans + NS_CALL)


def conv_costs(
    d: dict[str, int], n: int, c: int, m: int, group: int, pointwise: bool,
    plans: dict[str, Any] | None = None, pixel_rows: bool = False,
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

    Returns
    -------
    dict
        Label (``"gemm"``, ``"direct"``, ``"pixel_rows"``, the plans' labels) ->
        nanoseconds.
    """
    d = {k: size_hint(v) for k, v in d.items()}
    n = size_hint(n)
    cg, mg = c // group, m // group
    k = cg * d["KH"] * d["KW"]
    ohw = d["OH"] * d["OW"]
    hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
    wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    padded = bool(d["PT"] or d["PL"] or hp > d["H"] or wp > d["W"])
    pad = n * c * hp * wp if padded and not pointwise else 0
    runs = 0 if pointwise else k * d["OH"]
    out = {"gemm": gemm_cost(mg, k, ohw, pad, n * group, runs)}
    if not pointwise:
        wq = -(-wp // d["SW"])
        out["direct"] = direct_cost(mg, k, d, n * c * hp * d["SW"] * wq, n * group)
    if pixel_rows:  # A gathered from the image, the output transposed
        copies = k * ohw * NS_PACK + ohw * mg * NS_TRANSPOSE
        out["pixel_rows"] = gemm_cost(ohw, k, mg, pad, n, 0, False) + n * copies
    for label, plan in (plans or {}).items():
        if plan is not None:
            out[label] = winograd_cost(plan, d, c, m, n)
    return out
