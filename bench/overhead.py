"""Per-op overhead of the native executor beside ONNX Runtime's, in one run.

    python bench/overhead.py [--ops 1000] [--repeat 200]

A chain of ``--ops`` Softmax nodes on a [1, 8] tensor: nothing fuses (a Softmax never
folds into another), each kernel is a few nanoseconds of work, so the time per op of
the chain is the executor's dispatch cost plus that tiny kernel: an upper bound of the
per-op overhead (target < 1 us). Per op = (median run of the N-op chain - median run of
a 1-op chain) / (N - 1), which removes the per-run cost (inputs in, outputs out).
Both at 1 thread.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from onnx import TensorProto, helper


def chain(n: int):
    nodes = [helper.make_node("Softmax", ["x" if i == 0 else f"t{i}"],
                              ["y" if i == n - 1 else f"t{i + 1}"], axis=-1) for i in range(n)]
    graph = helper.make_graph(nodes, f"softmax{n}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def median_run(fn, repeat: int) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def monolib_runner(model):
    import monolib

    monolib.runtime.set_num_threads(1)
    factory = monolib.compile(model)
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    gm.set_input(x=x)
    ex = gm.executor
    return ex.run, (lambda: (gm.set_input(x=x), gm.run(), gm.get_output(0).numpy()))


def ort_runner(model):
    from monolib.compiler.testing import ort_session

    sess = ort_session(model)
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    return lambda: sess.run(None, {"x": x})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    n = args.ops
    small, large = chain(1), chain(n)
    ml_small, ml_small_full = monolib_runner(small)
    ml_large, ml_large_full = monolib_runner(large)
    ort_small, ort_large = ort_runner(small), ort_runner(large)
    per = {}
    per["monolib (native run)"] = (median_run(ml_large, args.repeat)
                                   - median_run(ml_small, args.repeat)) / (n - 1)
    per["monolib (set_input + run + output)"] = (
        median_run(ml_large_full, args.repeat) - median_run(ml_small_full, args.repeat)) / (n - 1)
    per["ONNX Runtime (session.run)"] = (median_run(ort_large, args.repeat)
                                         - median_run(ort_small, args.repeat)) / (n - 1)
    for k, v in per.items():
        print(f"{k:38s} {v * 1e9:8.1f} ns per op")
    ratio = per["monolib (set_input + run + output)"] / per["ONNX Runtime (session.run)"]
    ok = per["monolib (native run)"] < 1e-6
    print(f"ratio monolib / ORT per op: {ratio:.3f}")
    print(f"  {'MET ' if ok else 'MISS'} per-op overhead < 1 us")


if __name__ == "__main__":
    main()
