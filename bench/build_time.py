"""Build time of each model's library (issue 15): one C file against the split build.

    python bench/build_time.py [--models g2p_encoder,silero,magika,cls,det,rec,ppocrv6_det]

Per model: ``export_library`` as one file (``MONOLIB_BUILD_JOBS=1``, no object cache),
split with an empty cache (cold), split with a cache that the models before it filled
(shared: their kernel units), and split again (warm: the same model rebuilt); the
compiler's CPU time (children's user + sys), the wall time, the library size, and
whether every output is bit-identical to the one-file library's. Then gcc's CPU time of
each unit run alone, and the wall time two idle cores would take (the units placed
largest first), cold and with the kernel units cached: on a shared machine the wall
clock of a build counts other processes' time. Writes nothing; paste into BUILD.md.
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

__all__ = ["main"]

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


def main() -> None:
    """Measure the models of ``--models`` (keys of ``bench_inputs.MODEL_INPUTS``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="g2p_encoder,silero,magika,cls,det,rec,ppocrv6_det")
    args = ap.parse_args()
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
