"""Import and load speed of the runtime beside ONNX Runtime, each in fresh processes.

    python bench/load.py [--models cls,rec,det] [--runs 5] [--no-synthetic]
                         [--ort-threads N] [--workdir DIR]

Prints, as medians of ``--runs`` fresh processes (after one warm-up each, so the
files are in the page cache and bytecode is cached):

1. ``import monolib.runtime`` beside ``import onnxruntime`` (beyond ``import numpy``).
2. Per real model: ``load_module`` + executor creation + first output, beside ORT's
   ``InferenceSession`` creation + first ``run`` (interpreter start, imports and
   reading the input are not counted), the parts of each, and the ratio
   (the target is <= 0.25).
3. Synthetic MatMul chains with 1 MB and 512 MB of weights: ``load_module`` +
   executor creation (no run: a run reads every weight), the difference (target
   <= 10 ms) and the peak RSS after load beside the library size (target <=
   library size + 64 MB).

The libraries are compiled and exported once into ``--workdir`` (default
``~/.cache/monolib/bench_load``; the 512 MB one takes ~30 s and 540 MB of disk).
Child processes run with bytecode caching on (``PYTHONPYCACHEPREFIX`` in the work
directory), as an installed package runs, even where ``PYTHONDONTWRITEBYTECODE`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MODELS = {
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
}
MODEL_DIR = os.path.expanduser("~/.cache/monolib/models")
# name -> (width d, layers n): n MatMuls with [d, d] float32 weights.
SYNTHETIC = {"synth_1mb": (512, 1), "synth_512mb": (8192, 2)}

CHILD = r"""
import json, sys, time
import numpy as np
kind, path, inputs, threads = sys.argv[1:5]
feeds = dict(np.load(inputs)) if inputs != "-" else None
t0 = time.perf_counter()
if kind == "ort":
    import onnxruntime as ort
    t1 = time.perf_counter()
    opts = ort.SessionOptions()
    if int(threads):
        opts.intra_op_num_threads = int(threads)
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    t2 = t3 = time.perf_counter()
    out = sess.run(None, feeds)[0]
else:
    import monolib.runtime as rt
    t1 = time.perf_counter()
    factory = rt.load_module(path)
    t2 = time.perf_counter()
    gm = rt.GraphModule(factory["default"](rt.cpu()))
    t3 = time.perf_counter()
    if feeds is not None:
        gm.run(**feeds)
        out = gm.get_output(0).numpy()
t4 = time.perf_counter()
ms = lambda a, b: (b - a) * 1e3
print(json.dumps({"import": ms(t0, t1), "load": ms(t1, t2), "executor": ms(t2, t3),
                  "first": ms(t3, t4), "total": ms(t1, t4),
                  # VmHWM: ru_maxrss survives exec on Linux (it would be the parent's peak)
                  "maxrss_mb": next(int(l.split()[1]) for l in open("/proc/self/status")
                                    if l.startswith("VmHWM")) / 1024}))
"""

IMPORT = r"""
import json, sys, time
import numpy
t = time.perf_counter()
import {mod}
print(json.dumps({{"ms": (time.perf_counter() - t) * 1e3}}))
"""


def child_env(workdir: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(workdir, "pycache")
    return env


def run_child(args: list[str], env: dict) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", *args],
        check=False,  # the error below shows the child's stderr
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if res.returncode:
        raise RuntimeError(f"child {args[1:]} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def median_of(runs: int, args: list[str], env: dict) -> dict:
    run_child(args, env)  # warm-up: page cache, bytecode
    samples = [run_child(args, env) for _ in range(runs)]
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def build_real(name: str, workdir: str) -> tuple[str, str, str]:
    import numpy as np

    onnx_file, shape = MODELS[name]
    onnx_path = os.path.join(MODEL_DIR, onnx_file)
    lib = os.path.join(workdir, f"{name}.so")
    inputs = os.path.join(workdir, f"{name}_in.npz")
    if not os.path.exists(lib):
        import monolib

        print(f"compiling {name} ...", flush=True)
        monolib.compile(onnx_path, shapes={"x": shape}).export_library(lib)
    if not os.path.exists(inputs):
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        np.savez(inputs, x=x)
    return lib, onnx_path, inputs


def matmul_chain(d: int, n: int, name: str = "chain"):
    """An ONNX model x [1, d] -> n MatMuls with seeded [d, d] float32 weights -> y [1, d]
    (also bench/large.py's model)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((d, d), dtype=np.float32) / np.float32(np.sqrt(d))
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == n - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [out]))
        cur = out
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, d])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def build_synthetic(name: str, workdir: str) -> str:
    """A chain of MatMuls whose weights are ONNX initializers (made with onnx.helper)."""
    lib = os.path.join(workdir, f"{name}.so")
    if os.path.exists(lib):
        return lib
    import onnx

    import monolib

    d, n = SYNTHETIC[name]
    model = matmul_chain(d, n, name)
    print(f"compiling {name} ({d}x{d} x {n}) ...", flush=True)
    onnx_path = os.path.join(workdir, f"{name}.onnx")
    onnx.save(model, onnx_path)
    monolib.compile(onnx_path, shapes={"x": (1, d)}).export_library(lib)
    os.remove(onnx_path)
    return lib


def bench_import(runs: int, env: dict) -> None:
    mono = median_of(runs, [IMPORT.format(mod="monolib.runtime")], env)["ms"]
    ort = median_of(runs, [IMPORT.format(mod="onnxruntime")], env)["ms"]
    print(
        f"\nimport beyond numpy (median of {runs}): monolib.runtime {mono:.1f} ms "
        f"(target <= 60), onnxruntime {ort:.1f} ms"
    )
    verdict(mono <= 60, f"import monolib.runtime {mono:.1f} ms vs onnxruntime {ort:.1f} ms "
            "(target <= 60 ms)")


def bench_models(names: list[str], runs: int, threads: int, workdir: str, env: dict) -> None:
    print(
        f"\ncold load + first output (ms, median of {runs} fresh processes; "
        f"ORT intra-op threads: {threads or 'default'}; monolib's run as built)"
    )
    rows = []
    head = f"{'model':6} {'load':>6} {'exec':>6} {'run1':>7} {'total':>7} | "
    print(head + f"{'ORT sess':>8} {'run1':>7} {'total':>7} | {'ratio':>5} {'load-only':>9}")
    for name in names:
        lib, onnx_path, inputs = build_real(name, workdir)
        m = median_of(runs, [CHILD, "monolib", lib, inputs, "0"], env)
        o = median_of(runs, [CHILD, "ort", onnx_path, inputs, str(threads)], env)
        load_only = (m["load"] + m["executor"]) / o["load"]
        rows.append((name, m["total"], o["total"]))
        print(
            f"{name:6} {m['load']:6.2f} {m['executor']:6.2f} {m['first']:7.1f} {m['total']:7.1f} | "
            f"{o['load']:8.1f} {o['first']:7.1f} {o['total']:7.1f} | "
            f"{m['total'] / o['total']:5.2f} {load_only:9.3f}"
        )
    print(
        "ratio = monolib total / ORT total (target <= 0.25); "
        "load-only = (load + exec) / ORT session creation"
    )
    for name, ml, ort in rows:
        verdict(ml / ort <= 0.25, f"load+first output {name} (ORT threads {threads or 'default'}, "
                f"monolib default): {ml:.1f} ms vs ORT {ort:.1f} ms = {ml / ort:.2f}x (target <= 0.25)")


def bench_synthetic(runs: int, workdir: str, env: dict) -> None:
    print(f"\nweight-size independence (load_module + executor, median of {runs})")
    res = {}
    for name in SYNTHETIC:
        lib = build_synthetic(name, workdir)
        r = median_of(runs, [CHILD, "monolib", lib, "-", "0"], env)
        size_mb = os.path.getsize(lib) / 2**20
        res[name] = r
        print(
            f"{name:12} library {size_mb:7.1f} MB: load {r['load']:.2f} ms + executor "
            f"{r['executor']:.2f} ms; peak RSS {r['maxrss_mb']:.0f} MB "
            f"(target <= {size_mb + 64:.0f})"
        )
    small, big = (res[n]["load"] + res[n]["executor"] for n in SYNTHETIC)
    print(f"512 MB - 1 MB: {big - small:+.2f} ms (target <= 10 ms)")
    verdict(big - small <= 10, f"load + executor, 512 MB vs 1 MB of weights: {big - small:+.2f} ms "
            "(target <= +10 ms)")
    big_lib = os.path.getsize(build_synthetic("synth_512mb", workdir)) / 2**20
    rss = res["synth_512mb"]["maxrss_mb"]
    verdict(rss <= big_lib + 64, f"peak RSS after loading the 512 MB library: {rss:.0f} MB "
            f"(target <= library {big_lib:.0f} MB + 64 MB)")


def verdict(met: bool, line: str) -> None:
    """One target's line, as bench/targets.py collects them."""
    print(f"  {'MET ' if met else 'MISS'} {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cls,rec,det")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ort-threads", type=int, default=0, help="0: ORT's default")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--workdir", default=os.path.expanduser("~/.cache/monolib/bench_load"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    env = child_env(args.workdir)
    bench_import(args.runs, env)
    names = [n for n in args.models.split(",") if n]
    if names:
        bench_models(names, args.runs, args.ort_threads, args.workdir, env)
    if not args.no_synthetic:
        bench_synthetic(args.runs, args.workdir, env)


if __name__ == "__main__":
    main()
