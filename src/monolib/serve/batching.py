"""Dynamic batching: concurrent requests concatenated along the model's run-time batch
dim, run once, split back.

A model has a batch dim when one run-time dim is axis 0 of every input (and nowhere
else in them) and every output's axis 0 is exactly that dim (and no other output dim
depends on it): then rows are independent and a concatenation's outputs, split at the
requests' row counts, are each request's own. Requests are grouped by their other dims
(a run-time width must match to be concatenated) and packed in arrival order up to the
bound (the dim's upper bound, or ``max_batch`` rows if lower); a request larger than
that runs alone. A model without a batch dim runs requests one by one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .backend import Dim, TensorSpec

__all__ = ["BatchDim", "find_batch_dim", "plan", "run_batched"]

logger = logging.getLogger(__name__)

Feeds = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class BatchDim:
    """The batch dim of a model: its name and the most rows one run takes."""

    name: str
    limit: int


def _mentions(expr: str, name: str) -> bool:
    """Whether dim expression ``expr`` uses symbol ``name`` as a whole word."""
    return re.search(rf"(?<![\w.:]){re.escape(name)}(?![\w.:])", expr) is not None


def find_batch_dim(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                   max_batch: int | None = None) -> BatchDim | None:
    """The model's batch dim (see the module's doc), or None.

    Parameters
    ----------
    inputs, outputs : sequence of TensorSpec
        The model's inputs and outputs.
    max_batch : int, optional
        At most this many rows per run (below the dim's upper bound); 1 turns
        batching off.

    Returns
    -------
    BatchDim or None
    """
    if not inputs or not outputs or (max_batch is not None and max_batch <= 1):
        return None
    first = inputs[0].dims[0] if inputs[0].dims else None
    if not isinstance(first, Dim):
        return None
    for t in inputs:
        if not t.dims or t.dims[0] != first:
            return None
        if any(isinstance(d, Dim) and d.name == first.name for d in t.dims[1:]):
            return None
    for t in outputs:
        if not t.dims or t.dims[0] != first.name:
            return None
        if any(isinstance(d, str) and _mentions(d, first.name) for d in t.dims[1:]):
            return None
    limit = min(first.hi, max_batch) if max_batch else first.hi
    limit -= limit % first.step
    if limit < max(2, first.lo):
        return None
    return BatchDim(first.name, limit)


def _rows(feeds: Feeds) -> int:
    return next(iter(feeds.values())).shape[0]


def plan(requests: Sequence[Feeds], batch: BatchDim | None) -> list[list[int]]:
    """Runs for ``requests``: lists of request indices, each run concatenating its
    requests (same non-batch dims, at most ``batch.limit`` rows unless it is one
    request; first fit in arrival order). Without a batch dim every request runs alone."""
    if batch is None:
        return [[i] for i in range(len(requests))]
    runs: list[list[int]] = []
    by_key: dict[tuple, list[tuple[list[int], list[int]]]] = {}  # other dims -> (run, [rows])
    for i, feeds in enumerate(requests):
        key = tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(feeds.items()))
        n = _rows(feeds)
        for run, rows in by_key.setdefault(key, []):  # first fit, in arrival order
            if rows[0] + n <= batch.limit:
                run.append(i)
                rows[0] += n
                break
        else:
            runs.append([i])
            by_key[key].append((runs[-1], [n]))
    return runs


def run_batched(run: Callable[[Feeds], dict[str, np.ndarray]], requests: Sequence[Feeds],
                batch: BatchDim | None) -> list[dict[str, np.ndarray] | Exception]:
    """Answer ``requests`` with as few ``run`` calls as :func:`plan` allows.

    Returns
    -------
    list
        Per request, in order: its outputs, or the exception its run raised (every
        request of a failed run gets it; the others are unaffected).
    """
    answers: list[dict[str, np.ndarray] | Exception] = [None] * len(requests)  # type: ignore[list-item]
    for idx in plan(requests, batch):
        try:
            if len(idx) == 1:
                answers[idx[0]] = run(requests[idx[0]])
                continue
            names = list(requests[idx[0]])
            feeds = {k: np.concatenate([requests[i][k] for i in idx]) for k in names}
            outs = run(feeds)
            cuts = np.cumsum([_rows(requests[i]) for i in idx])[:-1]
            parts = {k: np.split(v, cuts) for k, v in outs.items()}
            for j, i in enumerate(idx):
                answers[i] = {k: p[j] for k, p in parts.items()}
        except Exception as exc:  # noqa: BLE001 (the callers answer each request with it)
            for i in idx:
                answers[i] = exc
    return answers
