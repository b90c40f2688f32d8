"""Where does a compiled model first depart from what the graph means?

    python bench/localize.py det [--rtol 1e-4] [--all]

Compiles one of the benchmarked models (``bench_inputs.MODEL_INPUTS``: det, rec, cls,
silero, silero_seq, magika) with its meaningful inputs, runs it op by op with the
debug executor (``GraphModuleDebug.debug_get_output``) and compares each fused op's
output with the NumPy reference interpreter on the imported graph
(``compiler.reference_eval.evaluate_all``), value by value, by ONNX name. Prints one
row per compared op and the first op whose difference exceeds ``rtol`` times the
reference value's range (or largest magnitude): the place to look when a real-model test fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_inputs import MODEL_INPUTS

import monolib
from monolib.compiler.frontend.onnx import import_model
from monolib.compiler.reference_eval import evaluate_all
from monolib.models import fetch_model
from monolib.runtime.debug_executor import GraphModuleDebug
from monolib.errors import ExecutionError


def reference_by_name(path: Path, shapes: dict, constants: dict, feeds: dict) -> dict:
    """Every value of the imported graph, by ONNX name, from the NumPy references."""
    import onnx

    graph = import_model(onnx.load(str(path)), shapes, constants or None)
    env = evaluate_all(graph, feeds)
    return {v.name: env[v.uid] for v in graph.values() if v.uid in env and v.name}


def compare(gm: GraphModuleDebug, ref: dict, rtol: float, show_all: bool) -> int | None:
    """Print op-by-op differences; return the index of the first op over tolerance."""
    first = None
    print(f"{'#':>4}  {'op':40s} {'shape':>20s} {'max abs diff':>12s} {'range':>10s}")
    for i, node in enumerate(gm.nodes):
        name = (node.get("outputs") or [None])[0]
        want = ref.get(name)
        if want is None or want.dtype.kind not in "fiu":
            continue
        try:
            got = gm.debug_get_output(i).numpy()
        except ExecutionError as exc:  # an in-place op the probe cannot place: skip it
            if show_all:
                print(f"{i:4d}  {node['op']:40s} not compared: {str(exc)[:80]}")
            continue
        if got.shape != want.shape:
            print(f"{i:4d}  {node['op']:40s} shape {got.shape} vs reference {want.shape}")
            first = i if first is None else first
            continue
        diff = float(np.abs(got.astype(np.float64) - want).max()) if got.size else 0.0
        # the range, or the largest magnitude for a value with one element (range 0)
        scale = max(float(np.ptp(want)), float(np.abs(want).max()), 1e-12) if want.size else 1.0
        bad = diff > rtol * scale
        if bad or show_all or i % 10 == 0:
            ops = "+".join([node["op"], *node.get("fused", [])])[:40]
            mark = "  <-- over tolerance" if bad else ""
            print(f"{i:4d}  {ops:40s} {list(got.shape)!s:>20s} {diff:12.3g} "
                  f"{scale:10.3g}{mark}")
        if bad and first is None:
            first = i
            if not show_all:
                break
    return first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODEL_INPUTS))
    ap.add_argument("--rtol", type=float, default=1e-4, help="tolerance, times the range")
    ap.add_argument("--all", action="store_true", help="print every op, go past the first")
    args = ap.parse_args()
    spec = MODEL_INPUTS[args.model]
    path = fetch_model(spec.key)
    feeds, _ = spec.make()
    ref = reference_by_name(path, spec.shapes, spec.constants, feeds)
    factory = monolib.compile(str(path), target="c", shapes=spec.shapes,
                              constants=spec.constants or None)
    gm = GraphModuleDebug(factory["default"](monolib.cpu()))
    gm.set_input(**feeds)
    first = compare(gm, ref, args.rtol, args.all)
    if first is None:
        print(f"\nevery compared op is within {args.rtol:g} x range of the reference")
        return 0
    node = gm.nodes[first]
    print(f"\nfirst departure: op {first} {node.get('name')!r} ({node['op']}, "
          f"inputs {node.get('inputs')})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
