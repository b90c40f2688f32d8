"""The size budget of re-laid-out Conv weights: which Convs may store Winograd's transforms.

Winograd's fastest form stores its weights pre-transformed: ``alpha^2`` floats per 3x3
kernel of 9 (F(4x4, 3x3): 36, 4x the raw weights; F(2x2, 3x3): 16), so a model whose 3x3
convs all take it nearly doubles its library (ResNet-50: 102 MB of weights, 134 MB).
``winograd_raw`` stores the raw taps instead (``winograd.pack_raw``: only the output
channels padded to whole micro-tiles, like every other layout) and transforms them per
pass of output channels, in task scratch, at run time: a few percent slower.

:func:`winograd_budget` runs once per compile, before any Conv is emitted: the extra
bytes of every stored Conv weight (over the raw weights) may total at most ``fraction``
of the model's weight bytes plus :data:`SLACK_BYTES`, so that a library weighs at most
``1 + fraction`` times its weights plus 1 MB (code included). Each Conv first counts its
best layout without stored transforms (direct, GEMM or raw Winograd); the rest of the
budget goes to the stored-transform options (F(2) or F(4)) with the most estimated time
saved per extra byte (``conv_cost``'s times of the stored plan and of that best layout),
one upgrade at a time along each node's convex hull of (extra bytes, time saved). The
answer is a ``select.Restriction``: the rule (``conv._rule``) and a tuned table
(``select.choose``) never pick an excluded stored-transform candidate; raw Winograd stays
open to them.

Measured (``bench/size_budget.py``, ``bench/SIZE.md``; library / weights without -> with
the default budget, then its 1-thread CPU time against no budget, one process,
interleaved, the least of 6 rounds on the loaded 2-core VM): VGG-19 1.97x -> 1.14x,
0.985x; Inception v2 1.33x -> 1.17x, 1.02x; ResNet-50 1.16x -> 1.15x, 0.99x; PP-OCRv4
det 1.34x -> 1.29x (its bound is 1.37x with the 1 MB), 0.99x; PP-OCRv6 det 1.06x either
way, 0.98x (the same library but for one Conv: the noise). Before raw Winograd the
layers left out of the budget ran direct or GEMM: VGG-19 1.43x, Inception v2 1.08x
slower.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

from ....errors import CompileError, MonolibError
from ...ir import Graph, Node
from ...tuning.select import Candidate, Restriction
from ._gemm import MR, NR
from .conv import as_2d, conv_geometry, rule_costs
from .conv_dw_along_w import dw_decidable
from .winograd import VW_MAX, plan_winograd

__all__ = ["DEFAULT_FRACTION", "SLACK_BYTES", "BudgetReport", "plan_budget", "winograd_budget"]

logger = logging.getLogger(__name__)

#: Default share of the model's weight bytes that re-laid-out Conv weights may add.
DEFAULT_FRACTION = 0.15
#: Bytes always allowed on top (small models: a few transformed layers cost little):
#: half of the 1 MB the library may weigh over ``1.15 x`` its weights, the other half
#: left to the code and the container (0.3-0.4 MB for ResNet-50 and Inception v2).
SLACK_BYTES = 500_000


@dataclass
class BudgetReport:
    """What :func:`plan_budget` decided.

    Attributes
    ----------
    weight_bytes : int
        Bytes of the graph's constant tensors (the model's weights after folding).
    budget_bytes : int
        Extra bytes allowed (``fraction * weight_bytes + SLACK_BYTES``).
    base_extra : int
        Extra bytes of every Conv's best non-Winograd layout (padding to micro-tiles).
    extra_bytes : int
        Total extra bytes of the layouts kept: ``base_extra`` + the Winograd upgrades.
    winograd : dict
        Node name -> output tile ``m`` (2 or 4) of the Winograd option kept.
    saved_ns : float
        Estimated nanoseconds a run saves through the kept options.
    restriction : dict
        Node name -> excluded candidate patterns (``select.restricting``).
    """

    weight_bytes: int = 0
    budget_bytes: int = 0
    base_extra: int = 0
    extra_bytes: int = 0
    winograd: dict[str, int] = field(default_factory=dict)
    saved_ns: float = 0.0
    restriction: Restriction = field(default_factory=dict)


def _up(n: int, k: int) -> int:
    return -(-n // k) * k


def _layout_bytes(label: str, m: int, k: int, group: int) -> int:
    """Stored bytes of a layout without transformed weights of ``m`` output channels
    over depth ``k`` per group: ``pack_a`` pads rows to ``MR`` (also per tap of the raw
    Winograd's ``winograd.pack_raw``); ``pixel_rows`` packs ``W^T`` in whole panels of
    ``NR`` columns."""
    mg = m // group
    if label == "pixel_rows":
        return 4 * k * _up(m, NR)
    if label.startswith("winograd_raw"):  # pack_a per tap, VW_MAX floats after the last
        return 4 * (_up(m, MR) * k + VW_MAX)
    return 4 * group * _up(mg, MR) * k


def _options(node: Node) -> tuple[int, int, list[tuple[int, int, float]]] | None:
    """(raw bytes, bytes of the best layout without transformed weights (direct, GEMM,
    or Winograd transforming the raw weights per pass), [(m, Winograd bytes, ns saved)]
    for each stored-transform Winograd plan estimated faster) of a Conv with constant
    weights, or None where it has none or is not a 1-D/2-D float32 convolution."""
    x, w = node.inputs[0], node.inputs[1]
    if w is None or w.const is None or x is None or len(x.shape) not in (3, 4):
        return None
    if w.dtype.kind != "f" or w.dtype.itemsize != 4:
        return None
    group = int(node.attrs.get("group", 1))
    d = as_2d(list(x.shape[2:]), conv_geometry(node))
    m = int(w.shape[0])
    k = int(w.const.size) // m * group
    raw = int(w.const.nbytes)
    if group == x.shape[1] == m and dw_decidable(d):  # the rule's depthwise kernel
        return raw, raw, []
    costs = rule_costs(node, d, group)
    if costs is None:
        return raw, _layout_bytes("gemm_folded", m, k, group), []
    plain = {lab: t for lab, t in costs.items() if not lab.startswith("winograd(")}
    best = min(plain, key=plain.get)
    options = []
    for label, t in costs.items():
        if label.startswith("winograd(") and t < plain[best]:
            mm = int(label[-2])
            plan = plan_winograd(node, d, group, mm)
            xi = plan.th.alpha * plan.tw.alpha
            options.append((mm, 4 * xi * _up(m, MR) * int(x.shape[1]), plain[best] - t))
    return raw, _layout_bytes(best, m, k, group), options


def _hull(base: int, options: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """The upgrades of one node in order: from its plain layout (``base`` bytes, 0 ns
    saved) along the upper convex hull of (bytes, ns saved), each step
    ``(m, extra bytes, extra ns saved)`` with a falling gain per byte."""
    pts = sorted((b, s, mm) for mm, b, s in options if b > base)
    hull: list[tuple[int, float, int]] = [(base, 0.0, 0)]
    for b, s, mm in pts:
        if s <= hull[-1][1]:
            continue  # more bytes, no more time saved
        while len(hull) > 1:
            (b0, s0, _), (b1, s1, _) = hull[-2], hull[-1]
            if (s1 - s0) * (b - b0) <= (s - s0) * (b1 - b0):
                hull.pop()  # the middle point lies under the chord: skip it
            else:
                break
        hull.append((b, s, mm))
    return [(mm, b - pb, s - ps) for (pb, ps, _), (b, s, mm) in itertools.pairwise(hull)]


def plan_budget(graph: Graph, fraction: float | None = DEFAULT_FRACTION) -> BudgetReport:
    """Decide which Conv nodes of ``graph`` may store Winograd-transformed weights.

    Parameters
    ----------
    graph : Graph
        The prepared graph (``pipeline.prepare``).
    fraction : float or None
        Extra bytes allowed per byte of the model's weights (plus :data:`SLACK_BYTES`);
        None: no budget, every node keeps every candidate.

    Returns
    -------
    BudgetReport
        Its ``restriction`` excludes, per Conv node, the Winograd options that did not
        fit (all of them on a node that got none; F(4) where only F(2) fit).
    """
    report = BudgetReport()
    report.weight_bytes = sum(
        int(v.const.nbytes) for v in graph.values()
        if v.const is not None and v.const.dtype != object
    )
    if fraction is None:
        return report
    report.budget_bytes = int(fraction * report.weight_bytes) + SLACK_BYTES
    steps: list[tuple[float, int, str, int, int, float]] = []
    convs: list[str] = []
    for node in graph.nodes:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
            continue
        try:
            found = _options(node)
        except MonolibError as e:  # emit reports it with the node's name
            logger.debug("size budget: Conv %s skipped: %s", node.name, e)
            continue
        if found is None:
            continue
        raw, plain, options = found
        report.base_extra += max(0, plain - raw)
        convs.append(node.name)
        for i, (mm, extra, saved) in enumerate(_hull(plain, options)):
            steps.append((saved / extra, i, node.name, mm, extra, saved))
    left = report.budget_bytes - report.base_extra
    report.extra_bytes = report.base_extra
    blocked: set[str] = set()
    # best gain per byte first; a node's later (costlier) step only after its earlier one
    for _, i, name, mm, extra, saved in sorted(steps, key=lambda s: (-s[0], s[1], s[2])):
        if name in blocked or extra > left:
            blocked.add(name)
            continue
        left -= extra
        report.extra_bytes += extra
        report.saved_ns += saved
        report.winograd[name] = mm
    for name in convs:
        kept = report.winograd.get(name)
        if kept is None:
            report.restriction[name] = (Candidate("winograd"),)
        elif kept == 2:
            report.restriction[name] = (Candidate("winograd", (("m", 4),)),)
    logger.info(
        "size budget: %d of %d Conv nodes transformed (Winograd), %.1f of %.1f MB extra "
        "over %.1f MB of weights", len(report.winograd), len(convs),
        report.extra_bytes / 1e6, report.budget_bytes / 1e6, report.weight_bytes / 1e6)
    return report


def winograd_budget(graph: Graph, fraction: float | None = DEFAULT_FRACTION) -> Restriction | None:
    """The ``select.Restriction`` of :func:`plan_budget` (None when ``fraction`` is
    None: nothing excluded), for ``select.restricting`` around code generation."""
    if fraction is None:
        return None
    if fraction < 0:
        raise CompileError(f"size budget {fraction!r}: a fraction >= 0 or None is needed")
    return plan_budget(graph, fraction).restriction
