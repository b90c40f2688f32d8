"""Fit the Conv cost model (``conv_cost.COSTS``) to measured times, and score the rule.

The fixed rule (``ops/nn/conv.py`` ``_rule``) picks a Conv's algorithm by the cost model
of ``ops/nn/conv_cost.py``: per algorithm, a sum of work terms (multiply-adds of padded
tiles, floats packed, tiles, output floats, ...) times a constant in nanoseconds. This
script calibrates those constants on this CPU:

1. ``--tune MODEL ...`` first tunes those of ``bench/run.py``'s models (``all``: every
   one): ``compile(tune=True)`` times every candidate of every distinct Conv signature
   into this CPU's tuning cache (``compiler/tuning``).
2. Every one-group Conv signature of the cache with times becomes rows: per candidate the
   model's algorithm, its work terms, read off by evaluating the model with one constant
   at 1 and the rest at 0 (the model is linear in its constants), and the measured time.
3. Non-negative least squares on the relative error, each row weighted by the square root
   of its time (so that the 1-us convs of a 1x1 map do not outvote the milliseconds),
   rows under ``--min-us`` left out of the fit.
4. It prints the rule's regret (time of the model's pick over the best measured, summed
   over signatures) with the shipped constants (``conv_cost.shipped_costs``: this
   vector width's table) and the fitted ones, on ``--folds``
   random halves held out of the fit, and the fitted table to paste into ``COSTS``.
5. ``--write`` stores the fitted table in this CPU's tuning cache (``conv_costs``): from
   then on every compile on this CPU prices candidates with it (``conv_cost.
   current_costs``), and ``monolib tune export`` carries it to machines with the same CPU.

Usage::

    python bench/calibrate_conv.py --tune all --write
    python bench/calibrate_conv.py --tune light_resnet50 cls --folds 3
    python bench/calibrate_conv.py --cache ~/.cache/monolib/tuning/<cpu>.json

Depthwise convs (``conv_dw_blocked.dw_costs``) and batched 1-D convs (folded into one
GEMM without a comparison) are not part of this model.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["fit", "main", "regret", "rows_of", "work_terms"]

logger = logging.getLogger(__name__)


def rows_of(cache: Path) -> list[tuple[dict[str, Any], dict[str, float]]]:
    """``(signature, {label: ms})`` of every one-group 2-D Conv the cache timed."""
    entries = json.loads(cache.read_text())["entries"]
    out = []
    for key, val in entries.items():
        sig = json.loads(key)
        if sig.get("op") == "Conv" and sig.get("group") == 1 and val.get("times_ms"):
            out.append((sig, val["times_ms"]))
    return out


def _node(sig: dict[str, Any]) -> tuple[Any, dict[str, int]]:
    """The monolib IR Conv node of a signature, and its 2-D view."""
    from monolib.compiler.frontend.onnx import import_model
    from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
    from monolib.compiler.tuning.measure import conv_model

    graph = import_model(conv_model(sig, 1))
    node = next(n for n in graph.nodes if n.op_type == "Conv")
    return node, as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))


def _costs(node: Any, d: dict[str, int], table: dict[str, dict[str, float]]) -> dict[str, float]:
    """Every modelled candidate's estimate under ``table`` (direct_ocv wherever valid)."""
    from monolib.compiler.ops.nn import conv as C
    from monolib.compiler.ops.nn.conv_cost import conv_costs
    from monolib.compiler.ops.nn.conv_ocv import ocv_cost, ocv_valid
    from monolib.compiler.ops.nn.winograd import plan_winograd

    x, w = node.inputs[0], node.inputs[1]
    if x.shape[0] > 1 and d["OH"] * d["OW"] < C.FOLD_BATCH_BELOW:
        return {}  # folded into one GEMM, not compared
    plans = {m: plan_winograd(node, d, 1, m) for m in (2, 4)}
    labels = {f"winograd(m={m})": p for m, p in plans.items() if p is not None}
    labels.update({f"winograd_raw(m={m})": plan_winograd(node, d, 1, m, raw=True)
                   for m, p in plans.items() if p is not None})
    out = conv_costs(d, x.shape[0], x.shape[1], w.shape[0], 1, C._pointwise(d), labels,
                     C.pixel_rows_valid(node, d, 1), table=table)
    if ocv_valid(node, d, 1) and not C._pointwise(d):
        out["direct_ocv"] = ocv_cost(d, x.shape[0], x.shape[1], w.shape[0],
                                     k=table["direct_ocv"])
    return out


def _algo(label: str) -> str:
    return "winograd" if label.startswith("winograd") else label


def work_terms(data: list, costs: dict[str, dict[str, float]]) -> list[tuple]:
    """Rows ``(signature index, label, algorithm, {constant: work}, measured ns)``."""
    keys = [(a, k) for a, ks in costs.items() for k in ks]
    out = []
    for i, (sig, times) in enumerate(data):
        node, d = _node(sig)
        per = {}
        for a, k in keys:
            unit = {b: {q: float(b == a and q == k) for q in ks} for b, ks in costs.items()}
            for label, v in _costs(node, d, unit).items():
                if _algo(label) == a:
                    per.setdefault(label, {})[k] = v
        for label, ms in times.items():
            if label in per:
                out.append((i, label, _algo(label), per[label], ms * 1e6))
    return out


def predict(rows: list[tuple], costs: dict[str, dict[str, float]]) -> list[float]:
    """Each row's modelled nanoseconds under ``costs``."""
    return [sum(f[k] * costs[a][k] for k in f) for _, _, a, f, _ in rows]


def regret(rows: list[tuple], pred: list[float]) -> tuple[float, int, int]:
    """(time of the modelled-cheapest candidates / time of the fastest - 1, signatures
    where the pick is over 5% slower than the fastest, signatures)."""
    by: dict[int, list] = {}
    for (i, _, _, _, t), p in zip(rows, pred):
        by.setdefault(i, []).append((p, t))
    picked = sum(min(v)[1] for v in by.values())
    best = sum(min(t for _, t in v) for v in by.values())
    misses = sum(min(v)[1] > 1.05 * min(t for _, t in v) for v in by.values())
    return picked / best - 1.0, misses, len(by)


#: Fewer signatures than this: the fit is printed with a warning.
MIN_SIGNATURES = 100
#: Constants fitted as one value for every algorithm.
SHARED = ("call",)


def fit(rows: list[tuple], costs: dict[str, dict[str, float]],
        min_ns: float = 5000.0) -> dict[str, dict[str, float]]:
    """The constants minimising sum over rows of ``t^0.5 * (model/t - 1)^2`` (>= 0)."""
    from scipy.optimize import nnls

    # one per-call constant for all: an algorithm's own soaked up its misfit on the few
    # shapes of a kind (Winograd's took 43 us from 2-D convs and then lost every 1-D one)
    cols = [(a, k) for a, ks in costs.items() for k in ks if k not in SHARED]
    cols += [("*", k) for k in SHARED]
    use = [r for r in rows if r[4] >= min_ns]
    A = np.zeros((len(use), len(cols)))
    b = np.zeros(len(use))
    for r, (_, _, a, f, t) in enumerate(use):
        wgt = math.sqrt(t)
        for c, (ca, k) in enumerate(cols):
            if ca in (a, "*"):
                A[r, c] = f.get(k, 0.0) / t * wgt
        b[r] = wgt
    x, _ = nnls(A, b)
    out = {a: dict(ks) for a, ks in costs.items()}
    for (a, k), v in zip(cols, x):
        for name in (costs if a == "*" else [a]):
            if k in out[name]:
                out[name][k] = float(v)
    return out


def _tune(models: list[str]) -> None:
    """``compile(tune=True)`` of ``bench/run.py``'s models of these names (``all``: every
    one): their uncached Conv signatures timed into this CPU's tuning cache."""
    sys.path.insert(0, str(Path(__file__).parent))
    from run import MODELS, _source  # type: ignore[import-not-found]

    import monolib

    for name in list(MODELS) if models == ["all"] else models:
        spec = MODELS[name]
        monolib.compile(_source(spec), target="c", shapes=spec.shapes,
                        constants=spec.constants or None, tune=True)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    from monolib.compiler.ops.nn.conv_cost import COSTS, shipped_costs
    from monolib.compiler.tuning.cache import TuningCache

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tune", nargs="*", default=[], help="models to tune first")
    ap.add_argument("--cache", type=Path, help="tuning cache file (default: this CPU's)")
    ap.add_argument("--folds", type=int, default=3, help="random halves held out")
    ap.add_argument("--min-us", type=float, default=5.0, help="shortest time fitted")
    ap.add_argument("--write", action="store_true",
                    help="store the fitted constants in this CPU's tuning cache: later "
                         "compiles here price candidates with them")
    args = ap.parse_args(argv)
    if args.write and args.cache is not None:
        ap.error("--write stores this CPU's fit: leave out --cache")
    if args.tune:
        _tune(args.tune)
    cache = args.cache or TuningCache().path
    data = rows_of(cache)
    rows = work_terms(data, COSTS)
    print(f"{len(data)} signatures, {len(rows)} timed candidates ({cache})")
    if len(data) < MIN_SIGNATURES:  # each algorithm's constants need varied shapes
        print(f"only {len(data)} signatures (fewer than {MIN_SIGNATURES}): the fit follows "
              "them closely and may not generalize; tune more models (--tune all)")
    fitted = fit(rows, COSTS, args.min_us * 1e3)
    shipped = shipped_costs()  # this vector width's table (conv_cost.COSTS_BY_WIDTH)
    for name, table in (("shipped", shipped), ("fitted", fitted)):
        r, m, n = regret(rows, predict(rows, table))
        print(f"{name:8s} constants, all signatures: regret {100 * r:.1f}%, {m} of {n} "
              "picks over 5% slower than the best")
    rng = random.Random(0)
    sigs = sorted({r[0] for r in rows})
    for f in range(args.folds):
        rng.shuffle(sigs)
        half = set(sigs[: len(sigs) // 2])
        train = [r for r in rows if r[0] in half]
        test = [r for r in rows if r[0] not in half]
        held = fit(train, COSTS, args.min_us * 1e3)
        a, b = regret(test, predict(test, shipped)), regret(test, predict(test, held))
        print(f"fold {f}: held-out regret {100 * a[0]:.1f}% shipped, {100 * b[0]:.1f}% fitted "
              f"({a[1]} -> {b[1]} misses of {a[2]})")
    print("COSTS = {")
    for a, ks in fitted.items():
        body = ", ".join(f'"{k}": {v:.4g}' for k, v in ks.items())
        print(f'    "{a}": {{{body}}},')
    print("}")
    if args.write:
        tc = TuningCache()
        tc.conv_costs = fitted
        print(f"stored in {tc.save()}: compiles on this CPU use them")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    raise SystemExit(main())
