"""Direct Conv vectorised over output channels (the ``direct_ocv`` candidate of ``conv.py``).

``ml_ocv_conv2d`` of ``conv_ocv.h``: tiles of ``OB`` output-channel vectors x ``P``
output pixels of one row summed in registers, each tap's weights loaded as vectors and
each input pixel broadcast from the NCHW image (no im2col packing, no padded copy, rows
not rounded up to a tile width), then a band of rows transposed into the NCHW planes.
It is the kernel for convs with few input channels or a stride (a first layer's 3
channels, strided 3x3s), where the implicit GEMM spends a fifth of its time packing B and
pads short rows to 32-column tiles.

The weights are packed here at compile time as ``[groups][C][KH][KW][G*16]`` (``G``
blocks of 16 output channels a group, zeros past ``C_out``), which any vector width reads
as consecutive vectors; ``G`` (1 to 4) is chosen per signature by :func:`ocv_cost`, the
channels padded to whole groups against the tiles' pixels per row.

Small maps (rows too short for a whole tile) run flat where the model says so
(:func:`ocv_flat`): a band's input rows copied zero-padded, its output rows one run of
tiles whose pixels between two rows are computed and dropped.
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ...symbolic import is_dim
from .._constants import include_checked
from ..base import EmitContext
from . import conv_cost
from .conv_cost import host_vector_width

__all__ = [
    "OCV_G",
    "RULE_MAX_W",
    "TILE_RATE",
    "emit_ocv",
    "ocv_blocks",
    "ocv_cost",
    "ocv_flat",
    "ocv_in_rule",
    "ocv_scratch_floats",
    "ocv_tile",
    "ocv_valid",
    "pack_ocv_bias",
    "pack_ocv_weights",
]

logger = logging.getLogger(__name__)

#: conv_ocv.h's ML_OCV_G (output channels per packed block) and ML_OCV_STAGE (floats of
#: a band's staged outputs)
OCV_G = 16
OCV_STAGE = 16384
#: conv_ocv.h's ML_OCV_SEG_MIN: fewest columns of a segment of a row wider than the staging
OCV_SEG_MIN = 64
#: conv_ocv.h's ML_OCV_FLAT_PAD: floats of a flat band's zero-padded input rows
OCV_FLAT_PAD = 16384

# Cost model: ``conv_cost.COSTS["direct_ocv"]`` (fitted with the other algorithms' by
# ``bench/calibrate_conv.py``): per multiply-add of an interior tile (24 accumulators, one
# weight load per P FMAs), per multiply-add of an edge pixel or a short interior's
# (one-pixel tiles: as many loads as FMAs), per output float staged, transposed into NCHW
# and passed to the epilogue, and per call.
#: L1 data cache bytes the rows a tile reads are judged against (32 KiB on Zen 4, most
#: x86 and Arm cores)
L1_BYTES = 32768
#: most floats of a group's packed weights where the rule offers the kernel (768 KiB of
#: a 1 MiB L2: 256 -> 256 3x3/2 at 14 x 14, 576 KiB a group, still ran 9% faster)
RULE_MAX_W = 196608
#: most input / output channels (a group's) of a strided 1x1 conv the rule offers the
#: kernel (:func:`ocv_in_rule`)
RULE_1X1_CIN = 32
RULE_1X1_COUT = 128


def ocv_valid(node: Node, d: dict, group: int) -> bool:
    """Whether ``direct_ocv`` applies: one group or groups of whole blocks of 16 output
    channels (RegNet's and ResNeXt's wider groups), constant weights and bias (packed at
    compile time) and every size known at compile time."""
    x, w, b = node.inputs[0], node.inputs[1], node.input(2)
    return (
        (group == 1 or (w.shape[0] // group) % OCV_G == 0)
        and w.const is not None
        and (b is None or b.const is not None)
        and not any(is_dim(v) for v in (*x.shape, *d.values()))
    )


def ocv_in_rule(d: dict[str, int], c: int, m: int, group: int = 1) -> bool:
    """Whether the fixed rule compares ``direct_ocv`` (``--tune`` measures it anyway):
    not for windows one column wide (one tap per input channel and window row: the loops
    dominate; ResNet-50's 1x1/2 convs ran 5-15% slower than GEMM or pixels-as-rows,
    oww_embedding's 24 -> 24 3x1 ones 50% slower than direct) nor where a group's weights exceed
    :data:`RULE_MAX_W` floats (every tile streams them again from L3: ResNet-50's 512 ->
    512 3x3/2 at 7 x 7, 1.18 MB a group, ran 30% slower). ``c``: all input channels,
    ``group`` conv groups.

    Strided 1x1 convs of at most :data:`RULE_1X1_CIN` input channels into at most
    :data:`RULE_1X1_COUT` outputs are compared (a GEMM packs their strided columns for
    few multiply-adds each; its model and ocv's then rank them). Alone, 1 thread, Zen 4,
    ocv against the rule's pick before: 32 -> 32 at 112x112 /2 82 us against direct's
    162 (RegNetX's first shortcut), 16 -> 32 at 112x112 50 / 66 (gemm), 24 -> 48 at
    56x56 24 / 31, 32 -> 64 at 28x28 11 / 16, 32 -> 96 at 56x56 59 / 66; but 32 -> 160
    at 28x28 39 / 30 and 64 -> 160 70 / 53, where ocv's model ranks it first all the
    same, hence the bounds. Not at 8 floats a vector: with AVX2 the GEMM's assembly
    micro-kernel won them all (Zen 3: 32 -> 64 at 56x56 115 us, ocv 147); other widths
    were not measured and keep the AVX-512 choice."""
    kk = d["KH"] * d["KW"]
    per = -(-m // group // OCV_G) * OCV_G
    if d["KW"] == 1 and d["KH"] == 1:
        strided = d["SH"] > 1 or d["SW"] > 1
        return (strided and c // group <= RULE_1X1_CIN and m // group <= RULE_1X1_COUT
                and host_vector_width() != 8)
    return d["KW"] > 1 and c // group * kk * min(4 * OCV_G, per) <= RULE_MAX_W


#: Time per multiply-add of a tile of ``OB`` output-channel vectors, by vector width, as
#: a factor on the fitted ``mac`` rate. With 16 vector registers (AVX2, 12 sums a tile)
#: a tile of 4 vectors x 3 pixels and one of 8 x 1 ran 1.13-1.5x and 1.3-2.3x the time
#: of 2 x 6 on 9 convs of ResNet-50, SqueezeNet, AlexNet and openWakeWord (Zen 3, 1
#: thread: 256 -> 256 3x3/2 at 28x28 4.25 / 6.24 / 8.64 ms; the 3-channel stems alone
#: gained from more vectors, 1.69 / 1.89 / 1.49 ms at 224x224). And 2 x 6 itself ran
#: 1.06-1.28x the direct kernel's or pixels-as-rows' time on 1x3 convs of 24-72
#: channels (oww_embedding's; the fit, on AVX-512, had ranked it first). AVX-512 (24 sums) is not
#: listed: there more blocks measured 2-7% faster at equal modelled time
#: (:func:`ocv_blocks`).
TILE_RATE = {8: {2: 1.15, 4: 1.45, 6: 1.8, 8: 2.2}}


def ocv_tile(g: int, vw: int) -> tuple[int, int]:
    """``(OB, P)``: output-channel vectors and pixels of the tile of ``g`` blocks of 16
    channels at ``vw`` floats a vector (conv_ocv.h's ML_OCV_OB / ML_OCV_P)."""
    acc = 24 if vw == 16 else 12
    ob = g * OCV_G // vw
    return ob, (1 if ob >= acc else acc // ob)


def _span_pixels(n: int, p: int) -> tuple[int, int]:
    """(pixels computed by tiles, pixels run one at a time) of a span of ``n`` columns,
    as ``conv_ocv.h``'s ``ml_ocv_span`` runs them: whole tiles of ``p``; the remainder
    ``r`` as one more tile moved back (``r >= p/2 + 2``), a half tile (and one-pixel tiles
    for what is left of it), a half tile moved back, or ``r`` one-pixel tiles."""
    half = p // 2
    tiles = n // p * p
    r, one = n - tiles, 0
    if r >= half + 2 and n >= p:
        tiles += p
    elif half > 1 and r >= half:
        tiles, one = tiles + half, r - half
    elif half > 1 and r >= 2 and n >= half:
        tiles += half
    else:
        one = r
    return tiles, one


def _row_taps(d: dict[str, int], p: int) -> tuple[int, int]:
    """(window columns summed by tiles, pixels run one at a time) over one output row, as
    ``ml_ocv_row_k`` runs it: spans of columns whose windows have the same columns inside
    the image (the interior, every column inside, and runs of edge columns), each by
    :func:`_span_pixels`, a tiled pixel counting its valid window columns. A one-pixel
    tile is charged the whole window (its loop overhead per window row is as large as its
    FMAs: ``edge`` was fitted so). (Charging every row whole tiles rounded up, 14 pixels a
    row cost 19: 128 -> 256 3x3/2 at 28 x 28 modelled 1.51 ms, ran 1.13.)"""
    def cols(ow: int) -> tuple[int, int]:
        iw = ow * d["SW"] - d["PL"]
        ks = [k for k in range(d["KW"]) if 0 <= iw + k * d["DW"] < d["W"]]
        return (ks[0], ks[-1] + 1) if ks else (0, 0)

    spans: list[list[int]] = []  # [valid columns, pixels]
    last = None
    for ow in range(d["OW"]):
        k = cols(ow)
        if k == last:
            spans[-1][1] += 1
        else:
            spans.append([k[1] - k[0], 1])
        last = k
    tiled = one = 0
    for nkx, n in spans:
        t, o = _span_pixels(n, p)
        tiled, one = tiled + t * nkx, one + o
    return tiled, one


def _padded_width(d: dict[str, int]) -> int:
    """Floats of a padded input row of a flat band: every window of a row inside it."""
    return max(d["PL"] + d["W"], (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1)


def _flat_plane(rows: int, wp: int) -> int:
    """``ml_ocv_flat_plane``: floats between two channels of a flat band's padded rows,
    an odd number of 64-byte lines (the channels a tile reads in different L1 sets)."""
    return (-(-rows * wp // 16) | 1) * 16


def flat_band(d: dict[str, int], c: int, gsz: int) -> int:
    """``ml_ocv_flat_band`` of ``conv_ocv.h``: output rows per band run flat (the staged
    run within ``OCV_STAGE`` floats, the padded input rows of ``c`` channels within
    ``OCV_FLAT_PAD``); 0 where even one row does not fit or the strides differ."""
    if d["SH"] != d["SW"]:
        return 0
    wp = _padded_width(d)
    b = d["OH"]
    while b > 0 and (((b - 1) * wp + d["OW"]) * gsz > OCV_STAGE or c * _flat_plane(
            (b - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1, wp) > OCV_FLAT_PAD):
        b -= 1
    return b


def _flat_terms(d: dict[str, int], c: int, p: int, band: int) -> tuple[int, int, int]:
    """(window columns summed by tiles, pixels run one at a time, floats copied) per
    channel group and window row of ``d`` run flat in bands of ``band`` rows: each band
    one span of ``(rows - 1) * Wp + OW`` pixels (:func:`_span_pixels`), every window
    whole; the floats are the bands' padded input rows."""
    wp = _padded_width(d)
    tiled = one = copied = 0
    for oh0 in range(0, d["OH"], band):
        rows = min(band, d["OH"] - oh0)
        t, o = _span_pixels((rows - 1) * wp + d["OW"], p)
        tiled, one = tiled + t * d["KW"], one + o
        copied += c * ((rows - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1) * wp
    return tiled, one, copied


def _valid_rows(d: dict[str, int]) -> int:
    """Window rows summed over all output rows (rows outside the image are skipped)."""
    total = 0
    for oh in range(d["OH"]):
        ih = oh * d["SH"] - d["PT"]
        total += sum(0 <= ih + ky * d["DH"] < d["H"] for ky in range(d["KH"]))
    return total


def _costs_g(d: dict[str, int], c: int, m: int, g: int, vw: int,
             k: dict[str, float] | None = None) -> tuple[float, float | None]:
    """Modelled time of ``g`` blocks a group by rows and run flat (None where flat does
    not fit, :func:`flat_band`)."""
    k = k or conv_cost.current_costs()["direct_ocv"]
    ob, p = ocv_tile(g, vw)
    groups = -(-m // (g * OCV_G))
    chans = groups * g * OCV_G
    tiled, edge = _row_taps(d, p)
    macs = chans * c * _valid_rows(d)  # per window column of a row
    # the input rows a row of tiles broadcasts from (every channel's window rows): past
    # L1, each broadcast comes from L2 (24 -> 48 3x3/2 at 208 px: 60 KiB, 1.4x slower)
    span = c * ((d["KH"] - 1) * d["DH"] + 1) * d["W"] * 4
    rate = (k["mac"] if span <= L1_BYTES else k["mac_l2"]) * TILE_RATE.get(vw, {}).get(ob, 1.0)
    out = m * d["OH"] * d["OW"] * k["out"]
    rows = macs * (tiled * rate + edge * d["KW"] * k["edge"]) + out
    # flat only where a one-pixel tile has one accumulator (one vector of outputs): there
    # `edge` holds (2.4-3.2x a tiled pixel's time, measured), while with 2 or more it ran
    # near a tiled pixel's rate and flat lost (1024 -> 1024 3x3 in groups of 32 at 14x14,
    # 2 vectors: 1.34 ms flat, 1.12 by rows)
    band = flat_band(d, c, g * OCV_G) if ob == 1 else 0
    if band == 0:
        return rows, None
    tiled, edge, copied = _flat_terms(d, c, p, band)
    # a copied float at `copy` (one load and one store each; 0 on Zen 4, where
    # ocv_flat's margin stands for the copy; a table without it: `out`, as it was
    # charged before staged outputs were transposed in registers on AVX2)
    flat = chans * c * d["KH"] * (tiled * rate + edge * d["KW"] * k["edge"]) + out
    return rows, flat + groups * copied * k.get("copy", k["out"])


def _cost_g(d: dict[str, int], c: int, m: int, g: int, vw: int,
            k: dict[str, float] | None = None) -> float:
    """Modelled time by rows: what the algorithm choice (and the blocks per group) weigh,
    flat or not. Flat's own estimate only decides between the two (:func:`ocv_flat`):
    taken into the choice, it made direct_ocv win where it then ran slower than the
    pick before (oww_embedding 7%, Inception v2 9%, Silero's 1-D first conv 50%)."""
    return _costs_g(d, c, m, g, vw, k)[0]


#: how much less modelled time flat needs than by rows
FLAT_MARGIN = 0.95


def ocv_flat(d: dict[str, int], c: int, m: int, g: int, vw: int | None = None) -> bool:
    """Whether ``g`` blocks a group (``c`` input channels a block reads) run flat: where
    it fits and is modelled faster than by rows (small maps, whose rows are too short
    for a whole tile)."""
    rows, flat = _costs_g(d, c, m, g, vw or host_vector_width())
    # by a margin: near a tie flat measured slower (its copy; 64 -> 64 in groups of 16 at
    # 50x50, modelled 1% faster: 474 us flat, 451 by rows; at 56x56, 10%: 589 and 612)
    return flat is not None and flat < FLAT_MARGIN * rows


def ocv_blocks(d: dict[str, int], c: int, m: int, vw: int | None = None,
               group: int = 1) -> int:
    """Blocks of 16 output channels per group (1 to 4) with the least modelled time: more
    blocks share each broadcast among more vectors but pad ``C_out`` to a larger multiple
    and leave fewer pixels a tile (longer remainders per row). ``c``: the input channels
    a block reads (a conv group's); with ``group`` > 1 only block sizes that divide a
    group's outputs."""
    vw = vw or host_vector_width()
    fits = [g for g in range(1, 5) if group == 1 or (m // group) % (g * OCV_G) == 0]
    cost = {g: _cost_g(d, c, m, g, vw) for g in fits}
    # within 3%, the most blocks: fewer loads per FMA (4 x 6: 10 loads for 24 FMAs, 2 x
    # 12: 14), measured 2-7% faster on 64 -> 64..256 3x3/2 convs (Zen 4); with 12 sums
    # a tile, TILE_RATE prices the wider tiles' loss instead
    near = [g for g in cost if cost[g] <= 1.03 * min(cost.values())]
    return max(near) if vw not in TILE_RATE else min(near, key=lambda g: (cost[g], g))


def ocv_cost(d: dict[str, int], n: int, c: int, m: int, vw: int | None = None,
             k: dict[str, float] | None = None, group: int = 1) -> float:
    """Estimated nanoseconds of ``direct_ocv`` on a batch of ``n`` images, ``c`` -> ``m``
    channels, 2-D view ``d`` (static sizes).

    The interior tiles cost per multiply-add actually computed (channels padded to whole
    groups, each row's interior to whole tiles, window rows outside the image skipped),
    the edge pixels at a one-pixel tile's rate, the transposes of the outputs and a
    per-call term; ``k``: the constants (default ``conv_cost.COSTS["direct_ocv"]``; the
    blocks per group are chosen with the defaults either way); ``group``: conv groups,
    each block reading its group's ``c / group`` channels.
    """
    vw = vw or host_vector_width()
    cg = c // group
    g = ocv_blocks(d, cg, m, vw, group)
    k = k or conv_cost.current_costs()["direct_ocv"]
    big = conv_cost.streamed_floats(d, n, c, m) * k["big"]
    return n * (_cost_g(d, cg, m, g, vw, k) + k["call"]) + big


def pack_ocv_weights(w: np.ndarray, g: int) -> np.ndarray:
    """``[M, C, KH, KW]`` weights as ``[ceil(M/(16g))][C][KH][KW][16g]`` floats (zeros
    past ``M``)."""
    m, c, kh, kw = w.shape
    gsz = g * OCV_G
    groups = -(-m // gsz)
    full = np.zeros((groups * gsz, c, kh, kw), np.float32)
    full[:m] = w
    return np.ascontiguousarray(full.reshape(groups, gsz, c, kh, kw).transpose(0, 2, 3, 4, 1))


def pack_ocv_bias(b: np.ndarray | None, m: int, g: int) -> np.ndarray:
    """The bias padded with zeros to whole groups of ``16g`` (all zero without one)."""
    gsz = g * OCV_G
    out = np.zeros(-(-m // gsz) * gsz, np.float32)
    if b is not None:
        out[:m] = b
    return out


def ocv_scratch_floats(d: dict[str, int], gsz: int, flat: bool = False) -> int:
    """``ml_ocv_scratch_floats`` of ``conv_ocv.h``: one band's staged outputs (a segment
    of ``OCV_SEG_MIN`` columns or more where a row outgrows ``OCV_STAGE``); ``flat``: the
    staging's most and the padded input rows."""
    if flat:
        return OCV_STAGE + OCV_FLAT_PAD
    ow = d["OW"]
    band = max(1, min(OCV_STAGE // (gsz * ow), d["OH"]))
    seg = ow if gsz * ow <= OCV_STAGE else min(ow, max(OCV_SEG_MIN, OCV_STAGE // gsz))
    return band * seg * gsz


def emit_ocv(node: Node, ctx: EmitContext, d: dict[str, int], epi: str) -> str:
    """One ``ml_ocv_conv2d`` over the images, the weights and bias packed at compile
    time."""
    ctx.include("conv.h")
    include_checked(ctx, "conv_ocv.h", {"ML_OCV_G": OCV_G, "ML_OCV_STAGE": OCV_STAGE,
                                         "ML_OCV_SEG_MIN": OCV_SEG_MIN,
                                         "ML_OCV_FLAT_PAD": OCV_FLAT_PAD},
                    __name__)
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    n, c = x.shape[:2]
    m = w.shape[0]
    group = int(node.attrs.get("group", 1))
    cg = c // group
    wc = np.asarray(w.const, np.float32).reshape(m, cg, d["KH"], d["KW"])
    g = ocv_blocks(d, cg, m, group=group)
    bpg = m // group // (g * OCV_G) if group > 1 else -(-m // (g * OCV_G))
    wp = ctx.param(pack_ocv_weights(wc, g), f"{node.name}.ocv_w")
    bias = None if b is None else np.asarray(b.const, np.float32)
    bp = ctx.param(pack_ocv_bias(bias, m, g), f"{node.name}.ocv_b")
    flat = ocv_flat(d, cg, m, g)
    scratch = ctx.scratch(4 * ocv_scratch_floats(d, g * OCV_G, flat))
    s = d["SW"] if d["SW"] in (1, 2) else 0
    yp = ctx.ptr(y)
    ohw = d["OH"] * d["OW"]
    args = ", ".join(str(d[k]) for k in ("KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW"))
    # every image in one call (its units one job; the same sums per image)
    return (
        f"ml_ocv_conv2d({n}, {c * d['H'] * d['W']}, {m * ohw}, "
        f"{cg}, {d['H']}, {d['W']}, {m}, {d['OH']}, {d['OW']}, {args}, "
        f"{g * OCV_G}, {bpg},\n    {ctx.ptr(x)}, {wp}, {bp}, "
        f"{yp}, (float*){scratch}, ml_ocv_row_{g}_{s}, "
        f"{f'ml_ocv_flat_{g}_{s}' if flat else '0'}, {epi}, {yp}, 0);"
    )
