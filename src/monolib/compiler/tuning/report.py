"""Which algorithm each Conv / Gemm of a compile got, and why (issue 14's bench table).

:func:`recording` activates a :class:`~.select.Selection` holding this CPU's cached
choices (what a plain ``compile`` uses) whose ``seen`` map also logs every
:func:`~.select.choose` call, node by node (``seen`` itself keeps only the first node
of each signature). Compiling inside it emits what a plain compile emits; afterwards
the list it yielded holds one :class:`NodeChoice` per node that had a choice: its
candidates, the rule's pick, the choice made, and why (a measurement from the tuning
cache, or the rule's reason: a shape test or the cost model's least time). Nodes that never reach ``choose`` (a Gemm with a
constant A, a MatMul, a size known only at run time) have a single way and are not
listed. Usage::

    with recording() as choices:
        factory = monolib.compile(model)
    for c in choices:
        print(c.node, c.choice, c.why)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .cache import TuningCache
from .select import Seen, Selection, choose, selecting

__all__ = ["NodeChoice", "explain_rule", "recording"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeChoice:
    """The choice made for one node.

    Attributes
    ----------
    node : str
        The node's name (the fused op's name in the graph JSON and the profile).
    op : str
        ``"Conv"`` or ``"Gemm"`` (the signature's op).
    key : str
        The signature key (:func:`~.select.signature_key`).
    candidates : tuple of str
        Labels of the valid candidates.
    rule : str
        The fixed rule's label.
    choice : str
        The label emitted.
    source : str
        ``"forced"``, ``"measured"`` (the tuning cache's choice for this CPU) or ``"rule"``.
    why : str
        One line: the measured times, or the rule's reason.
    """

    node: str
    op: str
    key: str
    candidates: tuple[str, ...]
    rule: str
    choice: str
    source: str
    why: str


class _EveryNode(dict):
    """``Selection.seen`` that also logs every ``setdefault`` (one per ``choose`` call:
    the node name is in the :class:`~.select.Seen` value), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Seen]] = []

    def setdefault(self, key: str, value: Seen) -> Seen:  # type: ignore[override]
        self.calls.append((key, value))
        return super().setdefault(key, value)


def explain_rule(sig: dict[str, Any], label: str) -> str:
    """The rule's reason for ``label`` on signature ``sig``: ``ops/nn/conv.py``'s
    ``_rule`` (depthwise and a folded batch by shape, else the least time of the cost
    model ``ops/nn/conv_cost.py``); ``ops/nn/gemm.py`` for Gemm.

    Parameters
    ----------
    sig : dict
        A Conv or Gemm signature (``conv_candidates`` / ``gemm_candidates``).
    label : str
        A candidate label, e.g. ``"winograd(m=4)"``.
    """
    algo = label.split("(", 1)[0]
    if sig.get("op") == "Gemm":
        return ("run-time A packed into panels per run" if "pack_a=1" in label
                else "A read in place by the micro-kernel")
    attrs = sig.get("attrs", {})
    pointwise = (all(k == 1 for k in attrs.get("kernel_shape", []))
                 and all(s == 1 for s in attrs.get("strides", []))
                 and not any(attrs.get("pads", [])))
    by_shape = {
        "depthwise": "group == C_in == C_out",
        "depthwise_cb": "group == C_in == C_out, vectorised over channels: less modelled "
                        "time than along W (conv_dw_blocked.dw_costs)",
        "gemm_folded": "a batch of small images: one GEMM over every image's columns",
    }
    if algo in by_shape:
        return by_shape[algo]
    what = {
        "direct": "direct kernel (no B packing)",
        "winograd": "Winograd",
        "pixel_rows": "pixels as GEMM rows",
        "gemm": "GEMM on the input itself" if pointwise else "implicit-im2col GEMM",
    }.get(algo, algo)
    return f"{what}, least modelled time (conv_cost)"


def _why(entry: dict[str, Any] | None, seen: Seen, choice: str, source: str) -> str:
    rule = seen.default.label
    if source == "forced":
        return "forced by a benchmark"
    if source == "measured" and entry is not None:
        times = entry.get("times_ms", {})
        others = {k: v for k, v in times.items() if k != choice}
        if choice == rule:
            best = min(others, key=others.__getitem__) if others else None
            tail = f"; best other {best} {others[best]:.3f} ms" if best else ""
            return f"measured: rule kept ({rule} {times.get(rule, float('nan')):.3f} ms{tail})"
        return (f"measured: {choice} {times.get(choice, float('nan')):.3f} ms vs rule {rule} "
                f"{times.get(rule, float('nan')):.3f} ms")
    reason = explain_rule(seen.sig, rule)
    if len(seen.candidates) < 2:
        return f"only way: {reason}"
    return f"rule, not tuned on this CPU: {reason}"


@contextlib.contextmanager
def recording(cache: TuningCache | None = None,
              forced: dict[str, str] | None = None) -> Iterator[list[NodeChoice]]:
    """Log the choices of the compiles run inside the ``with`` block.

    Parameters
    ----------
    cache : TuningCache, optional
        Whose choices are in force (default: this CPU's, as a plain compile reads).
    forced : dict, optional
        Node name -> label (as a benchmark forces).

    Yields
    ------
    list of NodeChoice
        Filled when the block ends: one per node that called ``choose``, in emit order.
    """
    cache = cache if cache is not None else TuningCache()
    log = _EveryNode()
    sel = Selection(table=cache.choices(), forced=dict(forced or {}), seen=log)
    out: list[NodeChoice] = []
    with selecting(sel):
        yield out
    last = {seen.node: (key, seen) for key, seen in log.calls}  # a generator may run twice
    for key, seen in last.values():
        # the choice exactly as choose made it, under a copy without the log
        with selecting(Selection(table=sel.table, forced=sel.forced)):
            picked = choose(seen.node, seen.sig, seen.candidates, seen.default).label
        source = ("forced" if sel.forced.get(seen.node) == picked
                  else "measured" if sel.table.get(key) == picked else "rule")
        out.append(NodeChoice(
            seen.node, str(seen.sig.get("op", "")), key, tuple(c.label for c in seen.candidates),
            seen.default.label, picked, source,
            _why(cache.entries.get(key), seen, picked, source)))
    logger.debug("recorded %d choices", len(out))

