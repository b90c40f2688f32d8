"""Library size against the model's weights, with the default size budget and without.

    python bench/size_budget.py [--models light_vgg19,light_inception_v2,light_resnet50,det,ppocrv6_det]
                                [--rounds 5] [--runs 5]

Issue 15 ("Size"): a library may weigh at most 1.15x its model's weights + 1 MB, at no
more than 3% of speed. Per model: compile with the default budget
(``conv_budget.DEFAULT_FRACTION``) and with none (``size_budget=None``: every Conv keeps
its fastest layout, stored Winograd transforms included), export both, and print
library / weights (the constants of the prepared graph, what the budget counts: the
light models build theirs with ConstantOfShape), the bound, how many Convs keep stored
Winograd transforms, then the time of both
libraries and of ONNX Runtime, interleaved in one process: at 1 thread CPU time
(``time.thread_time``), at 2 threads wall time, each the least of ``--rounds`` rounds of
``--runs`` runs (on a shared machine the least is the steadiest figure). Writes nothing; the figures go to ``conv_budget``'s docstring and
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import tempfile
import time

import numpy as np

import monolib
from monolib.models import fetch_model
from monolib.runtime import set_num_threads

sys.path.insert(0, os.path.dirname(__file__))
from bench_inputs import MODEL_INPUTS
from light_models import LIGHT_MODELS

__all__ = ["main"]

logger = logging.getLogger(__name__)

DEFAULT_MODELS = "light_vgg19,light_inception_v2,light_resnet50,det,ppocrv6_det"


def _model_and_feeds(key: str):
    """(ONNX model, shapes, monolib feeds, ORT feeds) of a bench key."""
    import onnx

    if key in LIGHT_MODELS:
        spec = LIGHT_MODELS[key]
        feeds, ort_feeds = spec.make()
        return spec.load(), spec.shapes, feeds, ort_feeds, {}
    spec = MODEL_INPUTS[key]
    feeds, ort_feeds = spec.make()
    return onnx.load(str(fetch_model(spec.key))), spec.shapes, feeds, ort_feeds, spec.constants


def _budget(model, shapes, constants):
    """The default budget's report on the prepared graph (weight bytes, transformed)."""
    from monolib.compiler.ops.nn.conv_budget import DEFAULT_FRACTION, plan_budget
    from monolib.compiler.pipeline import prepare

    return plan_budget(prepare(model, shapes, constants or None)[0], DEFAULT_FRACTION)


def _least(fn, runs: int, clock) -> float:
    ts = []
    for _ in range(runs):
        t = clock()
        fn()
        ts.append(clock() - t)
    return min(ts)


def main() -> None:
    """Measure the models of ``--models`` (light model names or ``bench_inputs`` keys)."""
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="monolib-size-") as work:
        for key in args.models.split(","):
            model, shapes, feeds, ort_feeds, constants = _model_and_feeds(key)
            report = _budget(model, shapes, constants)
            weights = report.weight_bytes
            libs, sizes = {}, {}
            for name, budget in (("budget", "default"), ("none", None)):
                kw = {} if budget == "default" else {"size_budget": None}
                fac = monolib.compile(model, shapes=shapes, constants=constants or None, **kw)
                path = os.path.join(work, f"{key}-{name}.so")
                fac.export_library(path)
                sizes[name] = os.path.getsize(path)
                gm = monolib.GraphModule(monolib.load_module(path)["default"](monolib.cpu()))
                gm.set_input(**feeds)
                libs[name] = gm
            bound = 1.15 * weights + 1e6
            met = "met" if sizes["budget"] <= bound else "MISSED"
            head = (f"{key}: weights {weights / 1e6:.1f} MB, bound {bound / 1e6:.1f} MB; "
                    f"budget {sizes['budget'] / 1e6:.1f} MB "
                    f"({sizes['budget'] / weights:.3f}x, {met}; {len(report.winograd)} Convs "
                    f"keep stored transforms), none {sizes['none'] / 1e6:.1f} MB "
                    f"({sizes['none'] / weights:.3f}x)")
            row = [head]
            for threads, clock in ((1, time.thread_time), (2, time.perf_counter)):
                set_num_threads(threads)
                opts = ort.SessionOptions()
                opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
                sess = ort.InferenceSession(model.SerializeToString(), opts,
                                            providers=["CPUExecutionProvider"])
                fns = {name: gm.run for name, gm in libs.items()}
                fns["ort"] = functools.partial(sess.run, None, ort_feeds)
                for fn in fns.values():
                    fn()
                best = {name: float("inf") for name in fns}
                for _ in range(args.rounds):  # interleaved: load changes hit all alike
                    for name, fn in fns.items():
                        best[name] = min(best[name], _least(fn, args.runs, clock))
                ms = {k: 1e3 * v for k, v in best.items()}
                row.append(f"@{threads}: budget {ms['budget']:.2f} ms, none {ms['none']:.2f}"
                           f" ms ({ms['budget'] / ms['none']:.3f}x), ORT {ms['ort']:.2f} ms "
                           f"({ms['budget'] / ms['ort']:.2f}x / {ms['none'] / ms['ort']:.2f}x)")
            outs = [[gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
                    for gm in libs.values()]
            diff = max(float(np.abs(a - b).max()) for a, b in zip(*outs))
            print(" | ".join(row) + f" | budget vs none max diff {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
