"""Concurrency and long runs: N threads, each with its own executor from ONE loaded
factory, R runs each on a real model; every output must equal the single-threaded one
bit for bit, and RSS after the last run must be within 5% of RSS after the first
``--checkpoint`` runs (no leak).

    python bench/concurrency.py [--model cls] [--threads 8] [--runs 1000]
                                [--checkpoint 100] [--lib-threads 1]

Each thread feeds its own input (a different image), so a race that mixed two
executors' arenas would show as a wrong output. Prints the figures as one Markdown
table row (see bench/CONCURRENCY.md). Exit status 1 on a mismatch or a leak.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

__all__ = ["hammer", "rss_bytes", "thread_inputs"]


def rss_bytes() -> int:
    """Resident set size of this process in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def thread_inputs(feeds: dict[str, np.ndarray], n: int) -> list[dict[str, np.ndarray]]:
    """``n`` different feeds: thread ``i`` gets ``feeds`` scaled by 1 + i/8 (float inputs)."""
    out = []
    for i in range(n):
        out.append(
            {
                k: (v * np.float32(1 + i / 8)).astype(v.dtype) if v.dtype.kind == "f" else v
                for k, v in feeds.items()
            }
        )
    return out


def _outputs(gm) -> list[bytes]:
    return [gm.get_output(j).numpy().tobytes() for j in range(gm.get_num_outputs())]


def hammer(factory, inputs: list[dict], runs: int, checkpoint: int) -> dict:
    """Run ``len(inputs)`` threads, each ``runs`` times with its own executor.

    Parameters
    ----------
    factory : GraphExecutorFactoryModule
        One loaded factory (``load_module(path)``), shared by every thread.
    inputs : list of dict
        Thread ``i``'s feeds.
    runs, checkpoint : int
        Runs per thread; RSS is taken once every thread has done ``checkpoint`` runs.

    Returns
    -------
    dict
        ``mismatches`` (runs whose outputs differ from the single-threaded ones, bit
        for bit), ``rss_checkpoint`` and ``rss_end`` (bytes), ``seconds`` (wall time of
        the threaded part), ``runs`` (total), ``errors`` (exceptions raised in threads).
    """
    import monolib

    if not 0 < checkpoint < runs:
        raise ValueError(f"checkpoint {checkpoint} must lie in (0, runs={runs})")
    expected = []
    for feeds in inputs:  # single-threaded reference, one fresh executor each
        gm = monolib.GraphModule(factory["default"](monolib.cpu()))
        gm.run(**feeds)
        expected.append(_outputs(gm))
    n = len(inputs)
    barrier = threading.Barrier(n + 1)
    done = threading.Barrier(n + 1)
    mismatches = [0] * n
    errors: list[str] = []

    def work(i: int) -> None:
        try:
            gm = monolib.GraphModule(factory["default"](monolib.cpu()))
            for r in range(runs):
                if r == checkpoint:
                    barrier.wait()  # the main thread reads RSS here
                    barrier.wait()
                gm.run(**inputs[i])
                if _outputs(gm) != expected[i]:
                    mismatches[i] += 1
        except Exception as exc:  # noqa: BLE001  (reported, never lost in a thread)
            errors.append(f"thread {i}: {exc!r}")
            barrier.abort()
        finally:
            try:
                done.wait()
            except threading.BrokenBarrierError:
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    rss_checkpoint = None
    try:
        barrier.wait()
        rss_checkpoint = rss_bytes()
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    try:
        done.wait()
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    return {
        "mismatches": sum(mismatches),
        "rss_checkpoint": rss_checkpoint,
        "rss_end": rss_bytes(),
        "seconds": seconds,
        "runs": n * runs,
        "errors": errors,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="cls")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--checkpoint", type=int, default=100)
    p.add_argument(
        "--lib-threads", type=int, default=1, help="the library's own pool (MONOLIB_NUM_THREADS)"
    )
    args = p.parse_args()
    os.environ["MONOLIB_NUM_THREADS"] = str(args.lib_threads)
    from bench_inputs import MODEL_INPUTS

    import monolib
    from monolib.models import fetch_model

    spec = MODEL_INPUTS[args.model]
    feeds, _ = spec.make()
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, f"{args.model}.so")
        monolib.compile(
            str(fetch_model(spec.key)), shapes=spec.shapes, constants=spec.constants or None
        ).export_library(lib)
        factory = monolib.load_module(lib)
        res = hammer(factory, thread_inputs(feeds, args.threads), args.runs, args.checkpoint)
    growth = res["rss_end"] / res["rss_checkpoint"] - 1 if res["rss_checkpoint"] else float("nan")
    print(
        "| model | threads x runs | mismatches | errors | wall s | runs/s "
        f"| RSS after {args.checkpoint} runs MiB | RSS at end MiB | growth |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.model} | {args.threads} x {args.runs} | {res['mismatches']} "
        f"| {len(res['errors'])} | {res['seconds']:.1f} | {res['runs'] / res['seconds']:.0f} "
        f"| {res['rss_checkpoint'] / 2**20:.1f} | {res['rss_end'] / 2**20:.1f} "
        f"| {growth * 100:+.2f}% |"
    )
    for e in res["errors"][:5]:
        print(e)
    ok = res["mismatches"] == 0 and not res["errors"] and abs(growth) <= 0.05
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
