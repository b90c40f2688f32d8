"""Build time of each model's library (issue 15): one C file against the split build.

    python bench/build_time.py [--models g2p_encoder,silero,magika,cls,det,rec,ppocrv6_det]
    python bench/build_time.py --table [--models all|real|light|names] [--write]
    python bench/build_time.py --functions unit.c

Per model: ``export_library`` as one file (``MONOLIB_BUILD_JOBS=1``, no object cache),
split with an empty cache (cold), split with a cache that the models before it filled
(shared: their kernel units), and split again (warm: the same model rebuilt); the
compiler's CPU time (children's user + sys), the wall time, the library size, and
whether every output is bit-identical to the one-file library's. Then gcc's CPU time of
each unit run alone, and the wall time two idle cores would take (the units placed
largest first), cold and with the kernel units cached: on a shared machine the wall
clock of a build counts other processes' time. Writes nothing; paste into BUILD.md.

``--functions``: gcc's time per function of one C file (:func:`function_times`), to
find what a unit spends its time on.

``--table``: one cold build per model (an empty object cache, the build's own parallel
jobs), each compiler run's own CPU time (``os.wait4``), the wall time two idle cores
would take (:func:`_two_cores`), and the library's size against the model's weights
(the constants of the prepared graph, what the size budget counts; bound 1.15x + 1 MB);
``--models all`` is bench/run.py's set (the real models of ``bench_inputs`` and ONNX's
light models at their declared shapes). With ``--write`` the table replaces the part of
bench/RESULTS.md between :data:`TABLE_BEGIN` and :data:`TABLE_END` (bench/run.py keeps
that part when it rewrites the file).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import monolib
from monolib.export.csource import CSourceModule, split_source
from monolib.export.library import collect_modules
from monolib.export.targets import Target
from monolib.models import fetch_model

sys.path.insert(0, os.path.dirname(__file__))
from bench_inputs import MODEL_INPUTS
from light_models import LIGHT_MODELS

__all__ = ["TABLE_BEGIN", "TABLE_END", "build_table", "function_times", "main"]

logger = logging.getLogger(__name__)

MODES = {
    "one": {"MONOLIB_BUILD_JOBS": "1", "MONOLIB_OBJECT_CACHE": "off"},
    "cold": {"MONOLIB_OBJECT_CACHE": "{model_cache}"},
    "shared": {"MONOLIB_OBJECT_CACHE": "{shared_cache}"},
    "warm": {"MONOLIB_OBJECT_CACHE": "{model_cache}"},
}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _export(fac, path: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall s, compiler CPU s) of one export under ``env``."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    c0, t0 = _children_cpu(), time.perf_counter()
    try:
        fac.export_library(path)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return time.perf_counter() - t0, _children_cpu() - c0


def _outputs(path: str, feeds) -> list[np.ndarray]:
    gm = monolib.GraphModule(monolib.load_module(path)["default"](monolib.cpu()))
    gm.run(**feeds)
    return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]


def _two_cores(times: list[float]) -> float:
    """Finish time of ``times`` on two cores, largest first on the least loaded."""
    cores = [0.0, 0.0]
    for t in sorted(times, reverse=True):
        cores[cores.index(min(cores))] += t
    return max(cores)


def _unit_cpu(source: str, work: str) -> tuple[float, list[tuple[str, float]]]:
    """gcc CPU of the one file and of each unit of its split, one at a time."""
    flags = [*Target("c").cflags(), "-fPIC", "-c", "-w"]

    def cc(text: str, name: str) -> float:
        path = os.path.join(work, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        c0 = _children_cpu()
        subprocess.run(["gcc", *flags, "-o", path + ".o", path], check=True)
        return _children_cpu() - c0

    units = split_source(source, 2)
    kinds = [u.split(" of a build")[0].rpartition(" ")[0].split("monolib: ")[-1] or "one"
             for u in units]
    return cc(source, "one.c"), [(k, cc(u, f"u{i}.c")) for i, (k, u) in enumerate(zip(kinds, units))]


#: Markers of the build table in bench/RESULTS.md (bench/run.py keeps what is between).
TABLE_BEGIN, TABLE_END = "<!-- build-table -->", "<!-- /build-table -->"
#: ``--models`` groups, as bench/run.py's.
GROUPS = {"real": list(MODEL_INPUTS), "light": list(LIGHT_MODELS),
          "all": [*MODEL_INPUTS, *LIGHT_MODELS]}


class _ToolTimes:
    """While active, every toolchain command runs through :func:`os.wait4`, which gives
    that process's own CPU time (parallel compiler runs do not mix): ``runs`` collects
    ``(kind, seconds)``, kind ``"link"`` for the link and ``"cc"`` for a unit."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, float]] = []

    def __enter__(self) -> _ToolTimes:
        from monolib.export import toolchain

        self._mod, self._orig = toolchain, toolchain.run_tool

        def run_tool(cmd, cwd=None):
            with tempfile.TemporaryFile() as err:
                proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=err, stderr=err)
                _, status, use = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                kind = "cc" if "-c" in cmd else "link"
                self.runs.append((kind, use.ru_utime + use.ru_stime))
                if proc.returncode != 0:
                    err.seek(0)
                    raise toolchain.ToolchainError(
                        f"{cmd[0]} failed (exit {proc.returncode}): "
                        f"{err.read().decode(errors='replace')[-4000:]}")

        toolchain.run_tool = run_tool
        return self

    def __exit__(self, *exc) -> None:
        self._mod.run_tool = self._orig


def _weight_bytes(model, spec) -> int:
    """Bytes of the prepared graph's constants (what the size budget counts)."""
    from monolib.compiler.ops.nn.conv_budget import plan_budget
    from monolib.compiler.pipeline import prepare

    return plan_budget(prepare(model, spec.shapes, spec.constants or None)[0]).weight_bytes


def build_table(models: list[str], work: str) -> list[str]:
    """Markdown rows (header first) of one cold build per model of ``models``."""
    rows = ["| model | weights MB | library MB | library / weights | bound 1.15x + 1 MB "
            "| gcc CPU s (cold) | two idle cores s | units | export wall s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for key in models:
        spec = LIGHT_MODELS.get(key) or MODEL_INPUTS[key]
        model = spec.load() if hasattr(spec, "load") else str(fetch_model(spec.key))
        try:
            weights = _weight_bytes(model, spec)
            fac = monolib.compile(model, target="c", shapes=spec.shapes,
                                  constants=spec.constants or None)
            path = os.path.join(work, key + ".so")
            cache = tempfile.mkdtemp(prefix="cache-", dir=work)
            with _ToolTimes() as tt:
                wall, _ = _export(fac, path, {"MONOLIB_OBJECT_CACHE": cache})
            shutil.rmtree(cache, ignore_errors=True)
        except Exception as exc:  # a model that fails is a row saying so
            rows.append(f"| {key} | failed: {type(exc).__name__}: {str(exc)[:120]} |")
            print(rows[-1], flush=True)
            continue
        units = [s for k, s in tt.runs if k == "cc"]
        link = sum(s for k, s in tt.runs if k == "link")
        size = os.path.getsize(path)
        bound = 1.15 * weights + 1e6
        rows.append(
            f"| {key} | {weights / 1e6:.2f} | {size / 1e6:.2f} | "
            f"{size / max(weights, 1):.3f} | {'met' if size <= bound else 'missed'} | "
            f"{sum(units) + link:.2f} | {_two_cores(units) + link:.2f} | {len(units)} | "
            f"{wall:.2f} |")
        print(rows[-1], flush=True)
        os.unlink(path)
    return rows


def _write_table(rows: list[str], path: str) -> None:
    """Replace the marked build section of ``path`` (appended when it has none)."""
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    load = os.getloadavg()[0]
    section = "\n".join([
        TABLE_BEGIN, "", "## Build time and library size (issue 15)", "",
        (f"`python bench/build_time.py --table --models all --write`, "
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 1-minute load {load:.1f} "
         f"on {os.cpu_count()} cores. One cold build per model (empty object cache, "
         "`-O3 -march=native`, the build's parallel jobs). gcc CPU: every compiler and "
         "link run's own CPU time; two idle cores: the units placed largest first on two "
         "cores, plus the link (what a quiet 2-core machine would wait; the export wall "
         "time here counts other processes' load and Python's own work). Weights: the "
         "prepared graph's constants (the size budget's count); bound: issue 15's 1.15x "
         "weights + 1 MB. bench/BUILD.md explains the split build and the cache."), "",
        *rows, "", TABLE_END])
    a, b = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if a >= 0 and b > a:
        text = text[:a] + section + text[b + len(TABLE_END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def function_times(path: str, flags: list[str] | None = None) -> list[tuple[str, float]]:
    """gcc's time per function of the C file ``path`` (slowest first): ``-Q`` prints each
    function's name as its code generation starts, so the time from one name to the next
    is that function's (all of its optimisation and code generation: the bulk of a
    kernel unit's time). Wall-clock shares: on a loaded machine read the proportions."""
    flags = flags or [*Target("c").cflags(), "-fPIC", "-w"]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(["gcc", *flags, "-Q", "-c", "-o", os.path.join(tmp, "x.o"),
                                 path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0, words, cur, at = time.perf_counter(), [], "", 0.0
        while chunk := os.read(proc.stderr.fileno(), 4096):
            now = time.perf_counter() - t0
            for ch in chunk.decode(errors="replace"):
                if ch.isspace():
                    if cur:
                        words.append((at, cur))
                    cur = ""
                elif not cur:
                    cur, at = ch, now
                else:
                    cur += ch
        proc.wait()
        end = time.perf_counter() - t0
    # the names after the last IPA pass (<...>) and before the time report
    start = max((i for i, (_, w) in enumerate(words) if w.startswith("<")), default=-1) + 1
    names = []
    for at, w in words[start:]:
        if not w.replace("_", "a").replace(".", "a").isalnum() or w == "Time":
            if w == "Time":
                break
            continue
        names.append((at, w))
    out: dict[str, float] = {}
    for k, (at, w) in enumerate(names):
        out[w] = out.get(w, 0.0) + (names[k + 1][0] if k + 1 < len(names) else end) - at
    return sorted(out.items(), key=lambda x: -x[1])


def main() -> None:
    """Measure the models of ``--models`` (keys of ``bench_inputs.MODEL_INPUTS``; with
    ``--table`` also light model names and the groups ``all``, ``real``, ``light``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=None)
    ap.add_argument("--table", action="store_true", help="one cold build per model, a table")
    ap.add_argument("--write", action="store_true", help="--table into bench/RESULTS.md")
    ap.add_argument("--functions", metavar="FILE.c", help="gcc's time per function of a file")
    args = ap.parse_args()
    if args.functions:
        times = function_times(args.functions)
        total = sum(s for _, s in times) or 1.0
        for name, s in times[:30]:
            print(f"{s:7.3f} s {100 * s / total:5.1f}%  {name}")
        return
    if args.table:
        names = [n for m in (args.models or "all").split(",") if m for n in GROUPS.get(m, [m])]
        with tempfile.TemporaryDirectory(prefix="monolib-buildtable-") as work:
            rows = build_table(list(dict.fromkeys(names)), work)
        if args.write:
            _write_table(rows, os.path.join(os.path.dirname(__file__), "RESULTS.md"))
        return
    args.models = args.models or "g2p_encoder,silero,magika,cls,det,rec,ppocrv6_det"
    with tempfile.TemporaryDirectory(prefix="monolib-buildtime-") as work:
        shared = os.path.join(work, "shared-cache")
        for key in args.models.split(","):
            spec = MODEL_INPUTS[key]
            fac = monolib.compile(str(fetch_model(spec.key)), target="c", shapes=spec.shapes,
                                  constants=spec.constants or None)
            feeds = spec.make()[0]
            model_cache = os.path.join(work, key + "-cache")
            row, outs = [], {}
            for mode, env in MODES.items():
                env = {k: v.format(model_cache=model_cache, shared_cache=shared)
                       for k, v in env.items()}
                path = os.path.join(work, f"{key}-{mode}.so")
                wall, cpu = _export(fac, path, env)
                outs[mode] = _outputs(path, feeds)
                row.append(f"{mode} {cpu:.2f} s CPU / {wall:.2f} s wall, "
                           f"{os.path.getsize(path) / 1e6:.2f} MB")
            same = all(all(np.array_equal(a, b) for a, b in zip(outs["one"], o))
                       for o in outs.values())
            shutil.rmtree(model_cache, ignore_errors=True)
            lib = next(m for m in collect_modules(fac)[0] if isinstance(m, CSourceModule))
            one, units = _unit_cpu(lib.source, work)
            ops = [t for k, t in units if k != "kernel"]
            print(f"{key}: " + " | ".join(row) + (" | bit-identical" if same else " | DIFFERENT"))
            print(f"  gcc alone: one file {one:.2f} s; {len(units)} units "
                  f"{sum(t for _, t in units):.2f} s, two idle cores {_two_cores([t for _, t in units]):.2f} s; "
                  f"kernel units cached {sum(ops):.2f} s, two idle cores {_two_cores(ops):.2f} s "
                  f"({', '.join(f'{k} {t:.2f}' for k, t in units)})", flush=True)


if __name__ == "__main__":
    main()
