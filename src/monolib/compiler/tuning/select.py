"""Candidates of a kernel signature and the choice among them at emit time.

An emitter (``ops/nn/conv.py``) lists the valid :class:`Candidate` s of a signature and
the one its fixed rule picks, then calls :func:`choose`. With no :class:`Selection`
active (the default) the rule's choice is emitted unchanged; a tuned compile activates a
Selection whose ``table`` maps signature keys to measured choices, and the
micro-benchmark activates one whose ``forced`` maps node names to candidates.
:func:`restricting` rules candidates out per node (the size budget of
``ops/nn/conv_budget.py``: Winograd only where its weights fit): neither the rule nor a
tuned table then picks them; only a forced label (a benchmark) still does.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = [
    "Candidate", "Restriction", "Seen", "Selection", "active", "choose", "excluded",
    "restricting", "selecting", "signature_key",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """One way to run a signature: an algorithm and its tiling parameters.

    Attributes
    ----------
    algo : str
        ``"depthwise"``, ``"direct"``, ``"gemm"``, ``"gemm_folded"``, ``"pixel_rows"``,
        ``"winograd"``.
    params : tuple of (str, int)
        Its tiling parameters, sorted by name (e.g. ``(("m", 4),)`` for F(4x4, 3x3)).
    """

    algo: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def label(self) -> str:
        """Stable text form, e.g. ``"winograd(m=4)"`` (the cache stores labels)."""
        if not self.params:
            return self.algo
        return f"{self.algo}({','.join(f'{k}={v}' for k, v in self.params)})"

    def param(self, name: str, default: Any = None) -> Any:
        """The value of parameter ``name`` (``default`` when absent)."""
        return dict(self.params).get(name, default)


def signature_key(sig: dict[str, Any]) -> str:
    """Canonical text of a signature dict (sorted JSON): the cache key."""
    return json.dumps(sig, sort_keys=True, separators=(",", ":"))


@dataclass
class Seen:
    """A signature met while emitting: its dict, candidates, rule's default and the name
    of the first node that had it."""

    sig: dict[str, Any]
    candidates: list[Candidate]
    default: Candidate
    node: str


@dataclass
class Selection:
    """The choices in force while emitting.

    Attributes
    ----------
    table : dict
        Signature key -> candidate label (measured choices, from the cache).
    forced : dict
        Node name -> candidate label (the micro-benchmark's builds).
    seen : dict
        Filled while emitting: signature key -> :class:`Seen` (what a tuner measures).
    costs : dict
        Algorithm -> {constant: ns}: this CPU's calibrated Conv cost constants (the cache's
        ``conv_costs``), laid over ``ops/nn/conv_cost.COSTS`` for the fixed rule.
    """

    table: dict[str, str] = field(default_factory=dict)
    forced: dict[str, str] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    costs: dict[str, dict[str, float]] = field(default_factory=dict)


_ACTIVE: contextvars.ContextVar[Selection | None] = contextvars.ContextVar(
    "monolib_selection", default=None
)


def active() -> Selection | None:
    """The Selection in force, or None (fixed rules)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def selecting(selection: Selection | None) -> Iterator[Selection | None]:
    """Make ``selection`` active for the ``with`` block (None: fixed rules)."""
    token = _ACTIVE.set(selection)
    try:
        yield selection
    finally:
        _ACTIVE.reset(token)


#: Node name -> patterns of excluded candidates (:func:`excluded`)
Restriction = dict[str, tuple[Candidate, ...]]

_EXCLUDED: contextvars.ContextVar[Restriction | None] = contextvars.ContextVar(
    "monolib_excluded", default=None
)


def excluded(node_name: str, cand: Candidate) -> bool:
    """Whether ``cand`` is ruled out for ``node_name`` by the active restriction: some
    pattern of that node has its ``algo`` and each of the pattern's params equal to
    the candidate's (``Candidate("winograd")`` excludes every Winograd candidate,
    ``Candidate("winograd", (("m", 4),))`` only F(4x4))."""
    table = _EXCLUDED.get()
    if not table:
        return False
    return any(
        p.algo == cand.algo and all(cand.param(k) == v for k, v in p.params)
        for p in table.get(node_name, ())
    )


@contextlib.contextmanager
def restricting(table: Restriction | None) -> Iterator[Restriction | None]:
    """Make ``table`` (node name -> excluded patterns; None: nothing excluded) active
    for the ``with`` block."""
    token = _EXCLUDED.set(table)
    try:
        yield table
    finally:
        _EXCLUDED.reset(token)


def choose(
    node_name: str, sig: dict[str, Any], candidates: list[Candidate], default: Candidate
) -> Candidate:
    """The candidate to emit for one node.

    A forced label for ``node_name`` wins, then the table's label for the signature,
    then ``default`` (also when a label names no valid candidate: a stale entry never
    breaks a build). Candidates :func:`excluded` for the node are dropped first (a
    forced label may still name one). The signature is recorded in the active
    Selection's ``seen``.

    Parameters
    ----------
    node_name : str
    sig : dict
        The signature (JSON-able; :func:`signature_key`).
    candidates : list of Candidate
        The valid ones (``default`` among them).
    default : Candidate
        The fixed rule's choice.
    """
    sel = _ACTIVE.get()
    if sel is None:
        return default
    key = signature_key(sig)
    allowed = [c for c in candidates if not excluded(node_name, c)]
    sel.seen.setdefault(key, Seen(sig, allowed, default, node_name))
    every = {c.label: c for c in candidates}
    by_label = {c.label: c for c in allowed}
    for label, pool in ((sel.forced.get(node_name), every), (sel.table.get(key), by_label)):
        if label is not None:
            if label in pool:
                return pool[label]
            logger.debug("node %s: %s is not a candidate here, rule's %s kept",
                         node_name, label, default.label)
    return default
