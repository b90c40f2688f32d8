"""Apache TVM as an optional peer: the same models through TVM, monolib and ONNX
Runtime, in one run.

    python bench/tvm_peer.py --tvm-python /path/to/venv/bin/python [--models cls,rec]
                             [--repeat 10]

TVM is never a dependency of monolib: it runs in its own environment
(``python -m venv tvm && tvm/bin/pip install apache-tvm onnx numpy``), driven here
through child processes of that interpreter (``--tvm-python`` or
``MONOLIB_TVM_PYTHON``). For each model: TVM's Relax frontend (``from_onnx``) with
the default CPU pipeline (fusion, constant folding; untuned) for ``llvm`` with the
host's ``-mcpu`` (gcc's ``-march=native``), ``export_library``, then in fresh
processes at 1 and 2 threads (``TVM_NUM_THREADS``): ``import tvm``,
``load_module`` + VM creation, median latency. monolib and ORT are timed here on the
same inputs. Prints the ratios to ORT and the largest difference of TVM's output
from ORT's (as in /work/shared/PEERS.md: TVM 0.27 has no graph executor; the Relax
VM is its only executor).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_inputs import MODEL_INPUTS  # noqa: E402
from run import median_time  # noqa: E402

import monolib  # noqa: E402
from monolib.compiler.testing import ort_session  # noqa: E402
from monolib.models import fetch_model  # noqa: E402

BUILD = r"""
import json, sys, time
t0 = time.perf_counter()
import onnx, tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
t1 = time.perf_counter()
model_path, shapes, mcpu, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
mod = from_onnx(onnx.load(model_path), shape_dict=shapes)
tgt = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "mtriple": "x86_64-linux-gnu"})
ex = tvm.compile(mod, target=tgt, relax_pipeline=relax.get_default_pipeline(tgt))
t2 = time.perf_counter()
ex.export_library(out)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "compile_s": t2 - t1, "export_s": t3 - t2}))
"""

RUN = r"""
import json, statistics, sys, time
import numpy as np
t0 = time.perf_counter()
import tvm
from tvm import relax
t1 = time.perf_counter()
lib_path, inputs, order, repeat, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
with np.load(inputs) as z:
    feeds = [z[k] for k in order]
t2 = time.perf_counter()
vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())
t3 = time.perf_counter()
args = [tvm.runtime.tensor(x) for x in feeds]
def once():
    r = vm["main"](*args)
    r = r[0] if isinstance(r, (list, tuple)) or type(r).__name__ == "Array" else r
    return r.numpy()
first = once()
t4 = time.perf_counter()
times = []
for _ in range(repeat):
    s = time.perf_counter(); once(); times.append(time.perf_counter() - s)
np.save(out, first)
print(json.dumps({"import_s": t1 - t0, "load_s": t3 - t2, "first_s": t4 - t3,
                  "latency_s": statistics.median(times)}))
"""


def host_mcpu() -> str:
    """gcc's -march=native CPU name (TVM ignores mcpu=native)."""
    out = subprocess.run(["gcc", "-march=native", "-Q", "--help=target"], capture_output=True,
                         text=True, check=False).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "-march=" and len(parts) > 1:
            return parts[1]
    return "generic"


def folded_model(path: Path, feeds: dict, work: Path) -> str:
    """The model with ORT's basic (standard-ops-only) graph optimizations applied and
    its input shapes fixed: constant folding turns the computed Reshape shapes of the
    PP-OCR and Magika models into constants, without which TVM's ``from_onnx`` fails
    ("Reshape requires the input new shape to be Shape")."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    for value in model.graph.input:
        if value.name in feeds:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, np.shape(feeds[value.name])):
                dim.ClearField("dim_param")
                dim.dim_value = size
    fixed = work / f"{path.stem}.fixed.onnx"
    onnx.save(model, str(fixed))
    out = work / f"{path.stem}.folded.onnx"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = str(out)
    ort.InferenceSession(str(fixed), opts, providers=["CPUExecutionProvider"])
    return str(out)


def tvm_child(python: str, code: str, args: list[str], env: dict | None = None,
              timeout: float = 3600) -> dict:
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True,
                         env=env, timeout=timeout, check=False)
    if out.returncode != 0:
        errors = [ln for ln in out.stderr.splitlines() if ln.strip() and "Warning" not in ln]
        raise RuntimeError(errors[-1].strip() if errors else f"exit {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench(name: str, python: str, repeat: int, work: Path, mcpu: str) -> None:
    spec = MODEL_INPUTS[name]
    path = fetch_model(spec.key)
    feeds_ml, feeds_ort = spec.make()
    # TVM takes every graph input in order (no compile-time constants)
    import onnx

    order = [i.name for i in onnx.load(str(path), load_external_data=False).graph.input
             if i.name in feeds_ort]
    shapes = {k: list(np.shape(feeds_ort[k])) for k in order}
    np.savez(work / f"{name}.npz", **{k: feeds_ort[k] for k in order})
    row = {"model": name}
    ort_out = {}
    for t in (1, 2):
        sess = ort_session(path, threads=t)
        row[f"ort{t}"] = median_time(partial(sess.run, None, feeds_ort), repeat)[0]
        ort_out = sess.run(None, feeds_ort)[0]
    factory = monolib.compile(str(path), shapes=spec.shapes, constants=spec.constants or None)
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))

    def run_monolib():
        gm.set_input(**feeds_ml)
        gm.run()
        return gm.get_output(0).numpy()

    for t in (1, 2):
        monolib.runtime.set_num_threads(t)
        row[f"monolib{t}"] = median_time(run_monolib, repeat)[0]
    lib = str(work / f"{name}_tvm.so")
    try:
        b = tvm_child(python, BUILD, [folded_model(path, feeds_ort, work), json.dumps(shapes),
                                      mcpu, lib])
        row.update(tvm_build=b["compile_s"] + b["export_s"], tvm_import=b["import_s"])
        for t in (1, 2):
            env = {**os.environ, "TVM_NUM_THREADS": str(t)}
            r = tvm_child(python, RUN, [lib, str(work / f"{name}.npz"), json.dumps(order),
                                        str(max(3, repeat // 4)), str(work / f"{name}_y.npy")],
                          env)
            row[f"tvm{t}"], row["tvm_load"] = r["latency_s"], r["load_s"]
        y = np.load(work / f"{name}_y.npy")
        row["tvm_diff"] = float(np.abs(y.astype(np.float64) - ort_out).max())
    except Exception as exc:  # noqa: BLE001 -- TVM failing on a model is a result
        row["tvm_error"] = f"{type(exc).__name__}: {exc}"[:300]
    print_row(row)


def print_row(r: dict) -> None:
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    print(f"== {r['model']}")
    for t in (1, 2):
        line = (f"  @{t} thread(s): ORT {ms(r[f'ort{t}'])}; monolib {ms(r[f'monolib{t}'])} "
                f"({r[f'monolib{t}'] / r[f'ort{t}']:.2f}x ORT)")
        if f"tvm{t}" in r:
            line += f"; TVM {ms(r[f'tvm{t}'])} ({r[f'tvm{t}'] / r[f'ort{t}']:.1f}x ORT)"
        print(line)
    if "tvm_error" in r:
        print(f"  TVM failed: {r['tvm_error']}")
    else:
        print(f"  TVM: compile+export {r['tvm_build']:.1f} s, import tvm {r['tvm_import']:.2f} s, "
              f"load_module + VM {r['tvm_load'] * 1e3:.1f} ms, max diff vs ORT {r['tvm_diff']:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tvm-python", default=os.environ.get("MONOLIB_TVM_PYTHON"))
    ap.add_argument("--models", default="cls,rec,magika")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if not args.tvm_python:
        ap.error("give --tvm-python (a Python with apache-tvm installed) or set MONOLIB_TVM_PYTHON")
    mcpu = host_mcpu()
    print(f"TVM peer: {args.tvm_python}, llvm -mcpu={mcpu}")
    with tempfile.TemporaryDirectory(prefix="monolib-tvm-") as tmp:
        for name in [m for m in args.models.split(",") if m]:
            bench(name, args.tvm_python, args.repeat, Path(tmp), mcpu)


if __name__ == "__main__":
    main()
