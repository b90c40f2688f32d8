"""``compile(..., tune=True)``: measure each distinct signature, cache the fastest.

:func:`selection_for` is what ``build.compile`` calls around code generation: it returns
the :class:`~.select.Selection` of the cached choices of this CPU (None when there are
none: the fixed rules), after tuning the model's uncached signatures when asked.
:func:`tune` is the loop, :func:`pick` the decision: the fastest candidate, unless the
rule's default is within ``threshold`` of it (timings on a loaded machine are noisy: a
change must pay for itself clearly).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .cache import TuningCache
from .select import Candidate, Seen, Selection, active, selecting

__all__ = ["DEFAULT_BUDGET_S", "THRESHOLD", "TuneReport", "pick", "selection_for", "tune"]

logger = logging.getLogger(__name__)

#: Relative margin by which a candidate must beat the rule's default to replace it.
THRESHOLD = 0.08
#: Seconds of measuring per compile; signatures left over keep the rule's choice (a
#: later ``--tune`` measures them: what was measured is cached).
DEFAULT_BUDGET_S = 120.0

Timer = Callable[[dict[str, Any], list[Candidate]], dict[str, float]]


def pick(times: dict[str, float], default: str, threshold: float = THRESHOLD) -> str:
    """The label to use: the fastest in ``times``, unless ``default``'s time is within
    ``threshold`` (relative) of it.

    Parameters
    ----------
    times : dict
        Label -> seconds (any unit).
    default : str
        The rule's label (kept on a near tie).
    threshold : float
        E.g. 0.05: the best must be more than 5% faster than the default.
    """
    best = min(times, key=times.__getitem__)
    if default in times and times[best] >= times[default] * (1.0 - threshold):
        return default
    return best


@dataclass
class TuneReport:
    """What one :func:`tune` call did: per signature ``(node, default, choice, times)``
    (times None when cached or skipped), and its wall time in seconds."""

    rows: list[tuple[str, str, str, dict[str, float] | None]] = field(default_factory=list)
    measured: int = 0
    cached: int = 0
    skipped: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """One line: counts and time."""
        return (
            f"tuning: {len(self.rows)} signatures, {self.measured} measured, {self.cached} "
            f"cached, {self.skipped} over budget (rule kept), {self.seconds:.1f} s"
        )

    def lines(self) -> list[str]:
        """Per measured signature: its first node, the choice, the rule's, the times."""
        out = []
        for node, default, choice, times in self.rows:
            if times is None:
                continue
            ms = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in sorted(times.items(),
                                                                  key=lambda kv: kv[1]))
            why = "rule kept" if choice == default else f"rule {default}"
            out.append(f"  {node}: {choice} ({why}; ms: {ms})")
        return out


def tune(
    seen: dict[str, Seen],
    cache: TuningCache,
    timer: Timer | None = None,
    threshold: float = THRESHOLD,
    budget_s: float = DEFAULT_BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
) -> TuneReport:
    """Measure every uncached signature of ``seen`` that has a choice; record the picks.

    Parameters
    ----------
    seen : dict
        Signature key -> :class:`~.select.Seen` (filled by a generation pass).
    cache : TuningCache
        Read for cached entries; measured ones are added and the file saved.
    timer : callable, optional
        ``timer(sig, candidates) -> {label: seconds}``; default :func:`.measure.measure`
        (tests inject a deterministic one).
    threshold : float
        See :func:`pick`.
    budget_s : float
        Stop measuring new signatures once this many seconds have passed.
    clock : callable
        Seconds, for the budget.

    Returns
    -------
    TuneReport
    """
    if timer is None:
        from .measure import measure as timer
    report = TuneReport()
    start = clock()
    for key, s in seen.items():
        entry = cache.entries.get(key)
        if entry is not None:
            report.cached += 1
            report.rows.append((s.node, s.default.label, entry["choice"], None))
            continue
        if len(s.candidates) < 2:
            continue
        if clock() - start > budget_s:
            report.skipped += 1
            report.rows.append((s.node, s.default.label, s.default.label, None))
            continue
        times = timer(s.sig, s.candidates)
        choice = pick(times, s.default.label, threshold)
        cache.put(key, choice, s.default.label, {k: v * 1e3 for k, v in times.items()})
        report.measured += 1
        report.rows.append((s.node, s.default.label, choice, times))
        logger.info("tuned %s: %s (rule %s) %s", s.node, choice, s.default.label, times)
    if report.measured:
        cache.save()
    report.seconds = clock() - start
    return report


def selection_for(
    generate: Callable[[], Any],
    kind: str,
    tune_: bool = False,
    budget_s: float = DEFAULT_BUDGET_S,
    cache: TuningCache | None = None,
    timer: Timer | None = None,
) -> Selection | None:
    """The Selection a compile generates its code under.

    Parameters
    ----------
    generate : callable
        Runs the backend's code generation once (a dry pass that records the
        signatures, when tuning).
    kind : str
        The target kind: only ``"c"`` (the host CPU) is tuned.
    tune_ : bool
        Measure the model's uncached signatures first (a summary goes to stderr).
    budget_s, timer
        Of :func:`tune`.
    cache : TuningCache, optional
        Default: this CPU's, under :func:`.cache.default_dir`.

    Returns
    -------
    Selection or None
        None (the fixed rules) for other targets, without cached choices or calibrated
        cost constants, or inside a benchmark's own compile (whose forced Selection is
        already active).
    """
    if kind != "c" or active() is not None:
        return active()
    cache = cache if cache is not None else TuningCache()
    if tune_:
        probe = Selection(table=cache.choices())
        with selecting(probe):
            generate()
        report = tune(probe.seen, cache, timer=timer, budget_s=budget_s)
        print("\n".join([f"monolib {report.summary()} ({cache.path})", *report.lines()]),
              file=sys.stderr)
    table, costs = cache.choices(), cache.conv_costs
    return Selection(table=table, costs=costs) if table or costs else None
