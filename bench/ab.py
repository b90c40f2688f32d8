"""Two builds of one model, A against B, in one process: which runs faster, and by how much.

    python bench/ab.py A.so B.so [--executors 4] [--rounds 6] [--calls 30] [--threads 1]

For a change to a kernel or to the compiler: export the model with the old code and with
the new one, then compare the two libraries here. Each library gets ``--executors``
executors, each with its own arena. Where an arena lands in memory moves a model's time
by up to 4% on this VM (MnasNet's six executors of one library: 8.78-9.43 ms), so one
executor a side can call a 2% change either way. Rounds run blocks of ``--calls`` runs of
A's and B's i-th executors in turn, the order flipping each round and executor, so that a
burst of load on a shared machine hits both. At 1 thread the time is the calling thread's
CPU time (it leaves out the time other processes held the core); at more, wall time.
Inputs are random (seed 0), of the shapes the library declares (a run-time dim at its
upper bound). Prints each executor's median and the ratio of the means, B / A (below 1:
B is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

import monolib


def random_feeds(gm: monolib.GraphModule) -> dict[str, np.ndarray]:
    """Seeded random inputs of the shapes ``gm`` declares (a run-time dim at its upper
    bound). Raises ``monolib.InputError`` for a sequence or optional input."""
    shapes, dtypes = gm.get_input_info()
    rng = np.random.default_rng(0)
    feeds = {}
    for name, shape in shapes.items():
        if dtypes[name].startswith(("sequence", "optional")):
            raise monolib.InputError(f"ab.py: input {name!r} is a {dtypes[name]}: tensors only")
        dims = [d[2] if isinstance(d, tuple) else d for d in shape]
        feeds[name] = rng.standard_normal(dims).astype(dtypes[name])
    return feeds


def compare(libs: Sequence[str], executors: int = 4, rounds: int = 6, calls: int = 30,
            threads: int = 1) -> tuple[list[list[float]], float]:
    """``(medians, ratio)``: per library, each executor's median time in ms, and the
    mean of B's medians over the mean of A's.

    Raises
    ------
    monolib.InputError
        The two libraries declare different inputs.
    """
    monolib.runtime.set_num_threads(threads)
    clock: Callable[[], float] = time.thread_time if threads == 1 else time.perf_counter
    gms = [[monolib.GraphModule(monolib.load_module(lib)["default"](monolib.cpu()))
            for _ in range(executors)] for lib in libs]
    infos = [side[0].get_input_info() for side in gms]
    if infos[0] != infos[1]:
        raise monolib.InputError(
            f"ab.py: {libs[0]} takes {infos[0][0]}, {libs[1]} takes {infos[1][0]}")
    feeds = random_feeds(gms[0][0])
    for side in gms:
        for gm in side:
            gm.set_input(**feeds)
            gm.run()
    times: list[list[list[float]]] = [[[] for _ in range(executors)] for _ in libs]
    for r in range(rounds):
        for e in range(executors):
            for k in ((0, 1) if (r + e) % 2 == 0 else (1, 0)):
                gm = gms[k][e]
                gm.run()  # untimed: the other side's block just left its traces
                for _ in range(calls):
                    t0 = clock()
                    gm.run()
                    times[k][e].append(clock() - t0)
    medians = [[statistics.median(v) * 1e3 for v in side] for side in times]
    return medians, statistics.mean(medians[1]) / statistics.mean(medians[0])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="library A (the baseline)")
    ap.add_argument("b", help="library B")
    ap.add_argument("--executors", type=int, default=4, help="executors (arenas) per library")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=30, help="timed runs per block")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    medians, ratio = compare([args.a, args.b], args.executors, args.rounds, args.calls,
                             args.threads)
    for name, side in zip(("A", "B"), medians):
        print(f"{name} ms per executor: " + " ".join(f"{m:.3f}" for m in side))
    print(f"B / A = {ratio:.4f}  (A {statistics.mean(medians[0]):.3f} ms, "
          f"B {statistics.mean(medians[1]):.3f} ms, {args.threads} thread(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
