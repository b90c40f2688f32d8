"""Run-time shapes (issue 12): ONE monolib library with run-time dims against today's
static library of each exact size and ONNX Runtime, side by side in one run.

    python bench/dynamic.py [--models det,rec,cls,magika,silero_seq] [--repeat 20]
                            [--threads 1,2] [--opt] [--out bench/DYNAMIC.md]

For each model of ``bench_inputs.MODEL_INPUTS`` that declares run-time dims
(``BenchModel.dynamic``), at each of its three ``sizes``: the median latency (inputs in,
run, every output out as NumPy, as ``bench/run.py`` counts it) of

* monolib DYNAMIC: one library compiled once with the run-time dims of ``dynamic``,
* monolib STATIC: today's library compiled for exactly that size,
* ONNX Runtime (``monolib.compiler.testing.ort_session``),

at 1 and 2 threads, called in turn per size and thread count; the ratios
dynamic / ORT and dynamic / static with their geometric means; compile times (dynamic
vs the mean static); the largest difference of the dynamic library from ORT. With
``--opt`` the dynamic library is compiled a second time with ``opt_shapes`` at each
model's middle size and timed there against the static library (target: within 5%).
A library that does not compile prints its error in its row. Writes
``bench/DYNAMIC.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_inputs import MODEL_INPUTS, BenchModel
from run import _ms, machine, median_time, parse_threads

import monolib
from monolib.compiler.testing import ort_session
from monolib.models import fetch_model

__all__ = ["ModelResult", "bench_model", "main"]

logger = logging.getLogger(__name__)

#: The variants of monolib timed at each size ("opt" only with --opt, middle size only).
VARIANTS = ("dynamic", "static", "opt")


@dataclass
class ModelResult:
    """One model's measurements: ``latency[(variant, size, threads)]`` (seconds; variant
    "ort", "dynamic", "static" or "opt"), ``compile_s[variant]`` (seconds; "static" is the
    mean over the sizes), ``errors[variant or (variant, size)]`` (first line of the
    error), ``max_diff[size]`` (dynamic vs ORT)."""

    name: str
    sizes: tuple
    opt_size: object = None
    latency: dict = field(default_factory=dict)
    compile_s: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    max_diff: dict = field(default_factory=dict)
    cpu: dict = field(default_factory=dict)


def _error(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def _build(path: Path, lib: Path, constants: dict, **kwargs) -> tuple[object, float]:
    """Compile ``path`` with ``kwargs``, export to ``lib`` and load it: (GraphModule,
    compile + export seconds)."""
    t0 = time.perf_counter()
    monolib.compile(str(path), target="c", constants=constants or None,
                    **kwargs).export_library(str(lib))
    seconds = time.perf_counter() - t0
    return monolib.GraphModule(monolib.load_module(str(lib))["default"](monolib.cpu())), seconds


def _runner(gm, feeds: dict):
    """A call that sets ``feeds``, runs ``gm`` and returns every output as NumPy."""
    def run():
        gm.set_input(**feeds)
        gm.run()
        return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
    return run


def side_by_side(calls: dict, repeat: int, warmup: int = 2, blocks: bool = False) -> dict:
    """``{name: (median wall s, median CPU s of the calling thread)}`` of each call.

    At 1 thread the calls are timed round-robin (one call of each per round,
    ``run.median_time`` of one call) so that a burst of load on this shared machine hits
    every contender alike. With ``blocks`` (more than one thread) each contender runs its
    ``repeat`` calls in a block after its own warm-up: ONNX Runtime's worker threads
    spin for a while after each run, and in a round-robin they take the second core from
    whichever call comes next (monolib's dynamic library at 2 threads read up to 2.2x its
    own standalone time that way)."""
    if blocks:
        return {name: median_time(fn, repeat, warmup=warmup) for name, fn in calls.items()}
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    samples: dict = {name: [] for name in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            samples[name].append(median_time(fn, 1, warmup=0))
    return {name: (float(np.median([w for w, _ in xs])), float(np.median([c for _, c in xs])))
            for name, xs in samples.items()}


def _size_label(size) -> str:
    return "x".join(map(str, size)) if isinstance(size, tuple) else str(size)


def bench_model(name: str, repeat: int, threads: tuple[int, ...], work: Path,
                opt: bool) -> ModelResult:
    """Build the dynamic, static (and opt) libraries of ``name``, then time them and ORT
    side by side at each size and thread count (see the module docstring)."""
    spec: BenchModel = MODEL_INPUTS[name]
    res = ModelResult(name, spec.sizes, spec.sizes[len(spec.sizes) // 2] if opt else None)
    path = fetch_model(spec.key)
    feeds = {s: spec.make_at(s) for s in spec.sizes}
    gms: dict = {}
    try:
        gms["dynamic"], res.compile_s["dynamic"] = _build(
            path, work / f"{name}_dyn.so", spec.constants, **spec.dynamic)
    except Exception as exc:  # noqa: BLE001 -- reported in the row, not fatal
        res.errors["dynamic"] = _error(exc)
    static_s = []
    for s in spec.sizes:
        try:
            gms[("static", s)], sec = _build(path, work / f"{name}_{_size_label(s)}.so",
                                             spec.constants, shapes=spec.shapes_at(s))
            static_s.append(sec)
        except Exception as exc:  # noqa: BLE001
            res.errors[("static", s)] = _error(exc)
    if static_s:
        res.compile_s["static"] = float(np.mean(static_s))
    if opt:
        shapes = spec.shapes_at(res.opt_size)
        try:
            gms["opt"], res.compile_s["opt"] = _build(
                path, work / f"{name}_opt.so", spec.constants, **spec.dynamic,
                opt_shapes={k: [v] for k, v in shapes.items()})
        except Exception as exc:  # noqa: BLE001
            res.errors["opt"] = _error(exc)
    for s in spec.sizes:
        feeds_ml, feeds_ort = feeds[s]
        for t in threads:
            sess = ort_session(path, threads=t)
            calls = {"ort": partial(sess.run, None, feeds_ort)}
            want = sess.run(None, feeds_ort)
            monolib.runtime.set_num_threads(t)
            for variant in VARIANTS:
                gm = gms.get(variant if variant != "static" else ("static", s))
                if gm is None or (variant == "opt" and s != res.opt_size):
                    continue
                run = _runner(gm, feeds_ml)
                try:
                    got = run()
                except Exception as exc:  # noqa: BLE001
                    res.errors[(variant, s)] = _error(exc)
                    continue
                if variant == "dynamic" and t == threads[0]:
                    res.max_diff[s] = max(float(np.abs(g.astype(np.float64) - w).max())
                                          for g, w in zip(got, want))
                calls[variant] = run
            for variant, (wall, cpu) in side_by_side(calls, repeat, blocks=t > 1).items():
                res.latency[(variant, s, t)] = wall
                if t == 1:
                    res.cpu[(variant, s)] = cpu
        print(f"  {name} {_size_label(s)}: " + ", ".join(
            f"{k[0]}@{k[2]} {_ms(v)} ms" for k, v in res.latency.items() if k[1] == s),
              flush=True)
    monolib.runtime.set_num_threads(threads[0])
    return res


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _status(r: ModelResult, s) -> str:
    errs = [f"{k if isinstance(k, str) else k[0]}: {v}" for k, v in r.errors.items()
            if isinstance(k, str) and k != "opt" or not isinstance(k, str) and k[1] == s]
    return "ok" if not errs else "; ".join(e[:160] for e in errs)


def header(threads: tuple[int, ...]) -> list[str]:
    """The columns of the latency table."""
    cols = ["model", "size"]
    for t in threads:
        cols += [f"dynamic@{t} ms", f"static@{t} ms", f"ORT@{t} ms", f"dyn/ORT@{t}",
                 f"dyn/static@{t}"]
    if 1 in threads:
        cols += ["CPU dyn/ORT@1", "CPU dyn/static@1"]
    return cols + ["max abs diff", "status"]


def rows(results: list[ModelResult], threads: tuple[int, ...]) -> list[list[str]]:
    """One row per model and size."""
    out = []
    for r in results:
        for s in r.sizes:
            lat = r.latency
            row = [r.name, _size_label(s)]
            for t in threads:
                d, st, o = (lat.get((v, s, t)) for v in ("dynamic", "static", "ort"))
                row += [_ms(d), _ms(st), _ms(o), _x(_ratio(d, o)), _x(_ratio(d, st))]
            if 1 in threads:
                d, st, o = (r.cpu.get((v, s)) for v in ("dynamic", "static", "ort"))
                row += [_x(_ratio(d, o)), _x(_ratio(d, st))]
            diff = r.max_diff.get(s)
            row += ["-" if diff is None else f"{diff:.1e}", _status(r, s)]
            out.append(row)
    return out


def _geomean(xs: list[float]) -> float | None:
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def targets(results: list[ModelResult], threads: tuple[int, ...]) -> list[tuple[bool, str]]:
    """Issue 12's speed targets as (met, line): dynamic <= 1.0x ORT at every size, the
    geometric mean <= 0.8x, at each thread count; at an opt_shapes size within 5% of
    static; dynamic compile <= 1.5x static (the opt library: plus one static build)."""
    out = []
    cells = sum(len(r.sizes) for r in results)
    for t in threads:
        ratios, vs_static = [], []
        for r in results:
            for s in r.sizes:
                x = _ratio(r.latency.get(("dynamic", s, t)), r.latency.get(("ort", s, t)))
                if x is not None:
                    ratios.append(x)
                    out.append((x <= 1.0, f"dynamic {r.name} {_size_label(s)} @{t}: "
                                f"{x:.2f}x ORT (target <= 1.0)"))
                y = _ratio(r.latency.get(("dynamic", s, t)), r.latency.get(("static", s, t)))
                if y is not None:
                    vs_static.append(y)
        g = _geomean(ratios)
        if g is not None:
            out.append((g <= 0.8 and len(ratios) == cells,
                        f"dynamic geometric mean @{t}: {g:.3f}x ORT over {len(ratios)} of "
                        f"{cells} model sizes (target <= 0.8)"))
        g = _geomean(vs_static)
        if g is not None:
            out.append((True, f"dynamic / static geometric mean @{t}: {g:.3f}x over "
                        f"{len(vs_static)} model sizes (no target; the price of run-time dims)"))
        for r in results:
            x = _ratio(r.latency.get(("opt", r.opt_size, t)),
                       r.latency.get(("static", r.opt_size, t)))
            if x is not None:
                out.append((x <= 1.05, f"opt_shapes {r.name} {_size_label(r.opt_size)} @{t}: "
                            f"{x:.3f}x static (target <= 1.05)"))
            c = _ratio(r.cpu.get(("opt", r.opt_size)), r.cpu.get(("static", r.opt_size)))
            if t == 1 and c is not None:
                out.append((c <= 1.05, f"opt_shapes {r.name} {_size_label(r.opt_size)} @1, CPU "
                            f"time: {c:.3f}x static (target <= 1.05)"))
    for r in results:
        d, st = r.compile_s.get("dynamic"), r.compile_s.get("static")
        if d and st:
            out.append((d <= 1.5 * st, f"compile {r.name}: dynamic {d:.1f} s vs static "
                        f"{st:.1f} s = {d / st:.2f}x (target <= 1.5)"))
        o = r.compile_s.get("opt")
        if o and st:
            out.append((o <= 2.5 * st, f"compile {r.name} with one opt_shapes entry: {o:.1f} s "
                        f"= {o / st:.2f}x static (target <= 1.5 + 1)"))
        for k, v in r.errors.items():
            what = k if isinstance(k, str) else f"{k[0]} {_size_label(k[1])}"
            out.append((False, f"{r.name} {what}: failed ({v[:300]})"))
    return out


def print_table(results: list[ModelResult], info: dict, threads: tuple[int, ...]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"monolib dynamic vs static vs ONNX Runtime {info['onnxruntime']} - "
                        f"{info['cpu']}, {info['cores']} cores")
    for h in header(threads):
        table.add_column(h, justify="left" if h in ("model", "status") else "right",
                         overflow="fold")
    for row in rows(results, threads):
        table.add_row(*row)
    Console(width=220).print(table)


def write_markdown(results: list[ModelResult], info: dict, args, threads: tuple[int, ...],
                   path: Path) -> None:
    """``bench/DYNAMIC.md``: the machine, the latency table, compile times, targets."""
    cols = header(threads)
    lines = [
        "# Run-time shapes: monolib dynamic vs static vs ONNX Runtime", "",
        (f"Generated by `python bench/dynamic.py --repeat {args.repeat} --threads "
         f"{','.join(map(str, threads))}{' --opt' if args.opt else ''}` on "
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."), "",
        (f"- CPU: {info['cpu']}, {info['cores']} cores; {info['gcc']}; 1-minute load average "
         f"{info['load']:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
         + (f" (above {info['cores']}: other processes competed for the cores, wall times, "
            "the 2-thread ones most, are inflated)"
            if max(info["load"], os.getloadavg()[0]) > info["cores"] else "")),
        (f"- Python {info['python']}, NumPy {info['numpy']}, onnxruntime "
         f"{info['onnxruntime']}, monolib {info['monolib']}"),
        ("- dynamic: ONE library per model with run-time dims (det "
         "`(1, 3, 32..1280:32, 32..1280:32)`, rec width `32..1280`, cls and Magika batch "
         "`1..8`, Silero sequence `sequence_length` `1..256`); static: today's library "
         "compiled for exactly that size; ORT with `intra_op_num_threads` N, "
         "`inter_op_num_threads=1`. The three are timed side by side at each size and "
         "thread count."),
        ("- Latency: median wall time of the repeats, inputs set + run + outputs as NumPy, "
         "the contenders called in turn (one call each per round) at 1 thread, in blocks of "
         "`--repeat` calls each at 2 threads (ORT's spinning workers would take the next "
         "call's core in a round-robin). Ratios below 1: the "
         "dynamic library is faster. CPU ratios: median CPU time of the calling thread at "
         "1 thread; they leave out the time other processes held the core, the steadier "
         "figure on a shared machine. max abs diff: dynamic vs ORT."),
        "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |"
              for row in rows(results, threads)]
    lines += ["", "## Compile + export time", "",
              "| model | dynamic s | static s (mean of the sizes) | dynamic / static | "
              "with one opt_shapes entry s |", "|---|---|---|---|---|"]
    for r in results:
        d, st, o = (r.compile_s.get(k) for k in ("dynamic", "static", "opt"))
        lines.append(f"| {r.name} | {'-' if d is None else f'{d:.1f}'} | "
                     f"{'-' if st is None else f'{st:.1f}'} | {_x(_ratio(d, st))} | "
                     f"{'-' if o is None else f'{o:.1f}'} |")
    lines += ["", "## Targets (issue 12)", ""]
    lines += [f"- {'MET ' if met else '**MISS**'} {line}"
              for met, line in targets(results, threads)]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    dynamic = [k for k, m in MODEL_INPUTS.items() if m.dynamic]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(dynamic))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", default="1,2",
                    help="thread counts, e.g. 1,2 (1 is always run)")
    ap.add_argument("--opt", action="store_true",
                    help="also a dynamic library with opt_shapes at each model's middle size")
    ap.add_argument("--out", default=str(HERE / "DYNAMIC.md"))
    args = ap.parse_args()
    threads = parse_threads(ap, args.threads)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in dynamic]
    if unknown:
        ap.error(f"no run-time dims declared for {unknown}; known: {', '.join(dynamic)}")
    info = machine()
    results = []
    with tempfile.TemporaryDirectory(prefix="monolib-dynamic-") as tmp:
        for name in names:
            print(f"== {name}", flush=True)
            results.append(bench_model(name, args.repeat, threads, Path(tmp), args.opt))
    print_table(results, info, threads)
    for met, line in targets(results, threads):
        print(f"  {'MET ' if met else 'MISS'} {line}")
    write_markdown(results, info, args, threads, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
