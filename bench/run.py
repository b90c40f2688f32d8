"""monolib against ONNX Runtime on real models, side by side in one run.

    python bench/run.py [--models det,rec,cls,silero,silero_seq,magika] [--repeat 20]
                        [--threads 1,2]

For each model: compile and export time, library size; median latency of monolib
(``monolib.runtime.set_num_threads``) and of ONNX Runtime (``intra_op_num_threads``,
``inter_op_num_threads=1``) at 1 and 2 threads (``--threads``) with the ratio
monolib / ORT; cold start (load + first output) in a fresh process for both; the
largest difference from ORT's outputs. Prints a table and writes ``bench/RESULTS.md``.
A latency counts what a caller waits for: inputs in, run, every output out as NumPy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_inputs import MODEL_INPUTS

import monolib
from monolib.compiler.testing import ort_session
from monolib.models import fetch_model


@dataclass
class Result:
    """One model's measurements (seconds, bytes); ``error`` when monolib failed."""

    name: str
    build: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)
    cold: dict = field(default_factory=dict)
    max_diff: float | None = None
    error: str = ""


def median_time(fn: Callable[[], object], repeat: int,
                warmup: int = 2) -> tuple[float, float]:
    """Median wall time and median CPU time of the calling thread (``thread_time``)
    of ``fn()`` over ``repeat`` calls after ``warmup`` calls. For single-threaded work
    the CPU time does not count the time other processes held the core, so it is the
    steadier figure on a shared machine."""
    for _ in range(warmup):
        fn()
    walls, cpus = [], []
    for _ in range(repeat):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.thread_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def cold_start(args: list[str], runs: int, threads: int = 1) -> dict:
    """Median ``import_s``/``cold_s`` of ``bench/cold_start.py ARGS`` over fresh
    processes; monolib with ``MONOLIB_NUM_THREADS=threads`` (ORT gets the same count in
    ``ARGS``)."""
    rows = []
    env = {**os.environ, "MONOLIB_NUM_THREADS": str(threads)}
    for _ in range(runs):
        out = subprocess.run([sys.executable, str(HERE / "cold_start.py"), *args],
                             capture_output=True, text=True, timeout=600, check=True, env=env)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    # every run, not only the median: this VM has bursts that slow a whole process
    print(f"  cold {args[0]} @{threads if args[0] == 'monolib' else args[-1]}: "
          f"{[round(r['cold_s'] * 1e3, 1) for r in rows]} ms", flush=True)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def bench_model(name: str, repeat: int, cold_runs: int, work: Path,
                verbose: bool = False, threads: tuple[int, ...] = (1, 2)) -> Result:
    """Every measurement of one model (see the module docstring)."""
    spec = MODEL_INPUTS[name]
    res = Result(name)
    path = fetch_model(spec.key)
    feeds_ml, feeds_ort = spec.make()
    for t in sorted({1, 2, *threads}):
        sess = ort_session(path, threads=t)
        wall, cpu = median_time(partial(sess.run, None, feeds_ort), repeat)
        res.latency[f"ort{t}"] = wall
        if t == 1:
            res.latency["ort1_cpu"] = cpu
    want = sess.run(None, feeds_ort)
    np.savez(work / f"{name}_ort.npz", **feeds_ort)
    for t in sorted({1, *threads}):
        res.cold[f"ort{t}"] = cold_start(
            ["ort", str(path), str(work / f"{name}_ort.npz"), str(t)], cold_runs)
    try:
        t0 = time.perf_counter()
        factory = monolib.compile(str(path), target="c", shapes=spec.shapes,
                                  constants=spec.constants or None)
        t1 = time.perf_counter()
        lib = work / f"{name}.so"
        factory.export_library(str(lib))
        res.build = {"compile_s": t1 - t0, "export_s": time.perf_counter() - t1,
                     "size": lib.stat().st_size}
        gm = monolib.GraphModule(monolib.load_module(str(lib))["default"](monolib.cpu()))

        def run_monolib():
            gm.set_input(**feeds_ml)
            gm.run()
            return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]

        got = run_monolib()
        res.max_diff = max(float(np.abs(g.astype(np.float64) - w).max())
                           for g, w in zip(got, want))
        for t in sorted({1, *threads}):
            monolib.runtime.set_num_threads(t)
            wall, cpu = median_time(run_monolib, repeat)
            res.latency["monolib" if t == 1 else f"monolib{t}"] = wall
            if t == 1:
                res.latency["monolib_cpu"] = cpu
        np.savez(work / f"{name}_ml.npz", **feeds_ml)
        for t in sorted({1, *threads}):
            res.cold["monolib" if t == 1 else f"monolib{t}"] = cold_start(
                ["monolib", str(lib), str(work / f"{name}_ml.npz")], cold_runs, t)
    except Exception as exc:  # noqa: BLE001 -- a failed model is reported, not fatal
        res.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if verbose:
            traceback.print_exc()
    return res


def machine() -> dict:
    """CPU model, core count, compiler, library versions, load average."""
    import onnxruntime

    cpu = "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        gcc = subprocess.run(["gcc", "--version"], capture_output=True,
                             text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        gcc = "not found"
    return {"cpu": cpu, "cores": os.cpu_count(), "gcc": gcc, "python": platform.python_version(),
            "load": os.getloadavg()[0],
            "onnxruntime": onnxruntime.__version__, "monolib": monolib.__version__,
            "numpy": np.__version__}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}" if x < 1e-2 else f"{x * 1e3:.2f}"


def thread_cells(r: Result, threads: tuple[int, ...]) -> list[str]:
    """monolib at each thread count > 1 and its ratio to ORT at as many threads."""
    cells = []
    for t in threads:
        if t > 1:
            ml, ort = r.latency.get(f"monolib{t}"), r.latency.get(f"ort{t}")
            cells += [_ms(ml), f"{ml / ort:.2f}x" if ml and ort else "-"]
    return cells


def rows(results: list[Result], threads: tuple[int, ...] = (1, 2)) -> list[list[str]]:
    """The table's rows (one per model)."""
    out = []
    for r in results:
        lat, ml = r.latency, r.latency.get("monolib")

        def ratio(k, ml=ml, lat=lat):
            return f"{ml / lat[k]:.2f}x" if ml else "-"
        cold_ml = r.cold.get("monolib", {}).get("cold_s")
        ml_cpu, ort_cpu = lat.get("monolib_cpu"), lat.get("ort1_cpu")
        out.append([
            r.name, _ms(ml), _ms(lat.get("ort1")), ratio("ort1"), _ms(lat.get("ort2")),
            ratio("ort2"), *thread_cells(r, threads), f"{_ms(ml_cpu)} / {_ms(ort_cpu)}",
            f"{ml_cpu / ort_cpu:.2f}x" if ml_cpu and ort_cpu else "-",
            _ms(cold_ml), _ms(r.cold["ort1"]["cold_s"]),
            f"{r.build['compile_s']:.1f} + {r.build['export_s']:.1f}" if r.build else "-",
            f"{r.build['size'] / 1e6:.2f}" if r.build else "-",
            "-" if r.max_diff is None else f"{r.max_diff:.1e}",
            "FAILED" if r.error else "ok"])
    return out


HEADER = ["model", "monolib@1 ms", "ORT@1 ms", "ratio@1", "ORT@2 ms", "monolib@1 / ORT@2",
          "CPU ms monolib@1 / ORT@1", "CPU ratio@1", "cold monolib ms", "cold ORT ms",
          "compile+export s", "lib MB", "max abs diff", "status"]


def header(threads: tuple[int, ...]) -> list[str]:
    """HEADER with monolib@N / ORT@N columns for each thread count N > 1 after ORT@2
    ("monolib@1 / ORT@2" compares monolib at 1 thread with ORT at 2)."""
    extra = [h for t in threads if t > 1 for h in (f"monolib@{t} ms", f"ratio@{t} (both {t})")]
    return HEADER[:6] + extra + HEADER[6:]


def print_table(results: list[Result], info: dict, threads: tuple[int, ...] = (1, 2)) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"monolib vs ONNX Runtime {info['onnxruntime']} - {info['cpu']}, "
                        f"{info['cores']} cores (monolib ms: 1 thread)")
    for h in header(threads):
        table.add_column(h, justify="left" if h in ("model", "status") else "right")
    for row in rows(results, threads):
        table.add_row(*row)
    console = Console(width=180)
    console.print(table)
    for r in results:
        if r.error:
            console.print(f"[red]{r.name}[/red]: {r.error}", markup=True, highlight=False)


def targets(results: list[Result], threads: tuple[int, ...]) -> list[tuple[bool, str]]:
    """Issue 3's latency and load targets as (met, line): every model's ratio <= 1.0 and
    the geometric mean <= 0.85 at each thread count; load + first output <= 0.25 x
    ORT's session creation + first run, at each thread count (both sides the same)."""
    out = []
    ok = [r for r in results if not r.error]
    for t in threads:
        key = "monolib" if t == 1 else f"monolib{t}"
        ratios = {r.name: r.latency[key] / r.latency[f"ort{t}"] for r in ok
                  if key in r.latency and f"ort{t}" in r.latency}
        for name, x in ratios.items():
            out.append((x <= 1.0, f"latency {name} @{t}: {x:.2f}x ORT (target <= 1.0)"))
        if ratios:
            gm = float(np.exp(np.mean(np.log(list(ratios.values())))))
            out.append((gm <= 0.85 and len(ratios) == len(results),
                        f"latency geometric mean @{t}: {gm:.3f}x ORT over {len(ratios)} models "
                        "(target <= 0.85)"))
        for r in ok:
            ml, ort = r.cold.get(key, {}).get("cold_s"), r.cold.get(f"ort{t}", {}).get("cold_s")
            if ml and ort:
                out.append((ml / ort <= 0.25, f"load+first output {r.name} @{t}: {ml * 1e3:.1f} ms "
                            f"vs ORT {ort * 1e3:.1f} ms = {ml / ort:.2f}x (target <= 0.25)"))
    for r in results:
        if r.error:
            out.append((False, f"{r.name}: failed ({r.error[:200]})"))
    return out


def write_markdown(results: list[Result], info: dict, args, path: Path,
                   threads: tuple[int, ...] = (1, 2)) -> None:
    imports = [(r.cold.get("monolib", {}).get("import_s"), r.cold["ort1"]["import_s"])
               for r in results]
    ml_imp = [a for a, _ in imports if a is not None]
    lines = [
        "# Benchmarks: monolib vs ONNX Runtime", "",
        (f"Generated by `python bench/run.py --repeat {args.repeat} --threads "
         f"{','.join(map(str, threads))}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."), "",
        (f"- CPU: {info['cpu']}, {info['cores']} cores; {info['gcc']}; 1-minute load average "
         f"{info['load']:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
         + (f" (above {info['cores']}: other processes competed for the cores, wall times "
            "are inflated; the CPU-time columns are the steadier comparison)"
            if max(info["load"], os.getloadavg()[0]) > info["cores"] else "")),
        (f"- Python {info['python']}, NumPy {info['numpy']}, onnxruntime {info['onnxruntime']}, "
        f"monolib {info['monolib']}"),
        ("- monolib at 1 thread (`monolib@1 ms`) and at "
         f"{', '.join(str(t) for t in threads if t > 1) or 'no other count'} threads "
         "(`monolib.runtime.set_num_threads`; `ratio@N (both N)`: monolib@N / ORT@N); ORT "
         "with `intra_op_num_threads` 1 and 2, `inter_op_num_threads=1`."),
        ("- Latency: median wall time of the repeats, inputs set + run + outputs as NumPy. "
         "Ratio = monolib / ORT (below 1: monolib is faster). CPU ms: median CPU time of "
         "the calling thread in the single-threaded runs (monolib, ORT@1); it leaves out "
         "the time other processes held the core: the steadier figure on a shared machine."),
        ("- Cold: a fresh process at 1 thread (the targets below also at each other "
         "thread count, both sides alike), from before `load_module` / "
         "`InferenceSession` to the first "
        "output (interpreter start and `import numpy` excluded); median of "
        f"{args.cold_runs} processes. Importing the runtime: monolib "
        f"{_ms(statistics.median(ml_imp)) if ml_imp else '-'} ms, onnxruntime "
        f"{_ms(statistics.median(b for _, b in imports))} ms (medians)."),
        "- max abs diff: largest absolute difference from ORT's outputs.", "",
        "| " + " | ".join(header(threads)) + " |", "|" + "---|" * len(header(threads))]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results, threads)]
    lines += ["", "## Targets (issue 3)", ""]
    lines += [f"- {'MET ' if met else '**MISS**'} {line}" for met, line in targets(results, threads)]
    errors = [r for r in results if r.error]
    if errors:
        lines += ["", "## Failures", ""] + [f"- {r.name}: `{r.error[:600]}`" for r in errors]
    path.write_text("\n".join(lines) + "\n")


def parse_threads(ap: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    """``--threads 1,2`` -> (1, 2): sorted, 1 always included; a bad list is
    ``ap.error`` (exits)."""
    try:
        threads = tuple(sorted({1, *(int(t) for t in text.split(",") if t)}))
    except ValueError:
        ap.error(f"--threads: comma-separated integers, got {text!r}")
    if threads[0] < 1:
        ap.error(f"--threads: counts must be >= 1, got {text!r}")
    return threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODEL_INPUTS))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cold-runs", type=int, default=7)
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
    ap.add_argument("--threads", default="1,2",
                    help="monolib (and ORT) thread counts, e.g. 1,2 (1 is always run)")
    args = ap.parse_args()
    threads = parse_threads(ap, args.threads)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODEL_INPUTS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODEL_INPUTS)}")
    info = machine()
    results = []
    with tempfile.TemporaryDirectory(prefix="monolib-bench-") as tmp:
        for name in names:
            print(f"== {name}", flush=True)
            results.append(bench_model(name, args.repeat, args.cold_runs, Path(tmp),
                                       args.verbose, threads))
    print_table(results, info, threads)
    for met, line in targets(results, threads):
        print(f"  {'MET ' if met else 'MISS'} {line}")
    write_markdown(results, info, args, Path(args.out), threads)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
