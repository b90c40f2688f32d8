"""Large weights: export time, the generated C, load and RSS, in fresh processes.

    python bench/large.py [--mb 512] [--layers 2] [--workdir DIR] [--keep]

Builds a chain of MatMuls with ``--layers`` square float32 weights totalling ``--mb``
MB (saved with ONNX external data, so models past protobuf's 2 GB limit work too),
then, each step timed:

1. compile + export in a fresh process (target: <= 15 s for 512 MB), with the size of
   the generated C (it must never hold weights);
2. ``load_module`` + executor creation in a fresh process, peak RSS after it (target:
   <= library size + 64 MB: the weights stay in the mapped file), then one run
   checked against NumPy (x @ W0 @ W1 ...), which reads every weight once.

``--mb 2300 --layers 9`` is the past-2 GB case (about 5x the size in free disk and
memory). Prints one line per figure and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

BUILD = r"""
import json, sys, time
t0 = time.perf_counter()
import monolib
t1 = time.perf_counter()
m = monolib.compile(sys.argv[1], shapes={"x": (1, int(sys.argv[3]))})
t2 = time.perf_counter()
m.export_library(sys.argv[2])
t3 = time.perf_counter()
src = m.imported_modules[0].source
print(json.dumps({"import_s": t1 - t0, "compile_s": t2 - t1, "export_s": t3 - t2,
                  "c_bytes": len(src.encode())}))
"""

LOAD = r"""
import json, sys, time
import numpy as np
import monolib.runtime as rt
t0 = time.perf_counter()
lib = rt.load_module(sys.argv[1])
gm = rt.GraphModule(lib["default"](rt.cpu()))
t1 = time.perf_counter()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec (the parent's peak)
rss_load = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
d = int(sys.argv[2])
x = (np.arange(d, dtype=np.float32) % 7 - 3) / 7
t2 = time.perf_counter()
gm.run(x=x[None])
t3 = time.perf_counter()
y = gm.get_output(0).numpy()[0].astype(np.float64)
np.save(sys.argv[3], y)
print(json.dumps({"load_s": t1 - t0, "rss_load": rss_load, "run_s": t3 - t2}))
"""


def build_model(path: str, d: int, layers: int) -> None:
    """Save the MatMul chain with its weights as external data beside ``path``."""
    import onnx
    from load import matmul_chain  # bench/load.py: the same chain of MatMuls

    model = matmul_chain(d, layers, "large")
    onnx.save(model, path, save_as_external_data=True,
              location=os.path.basename(path) + ".weights", size_threshold=1024)


def reference(path: str, d: int) -> np.ndarray:
    """x @ W0 @ W1 ... in float64 from the external weights file (memory-mapped)."""
    import numpy as np
    import onnx
    from onnx.external_data_helper import ExternalDataInfo

    model = onnx.load(path, load_external_data=False)
    x = ((np.arange(d, dtype=np.float32) % 7 - 3) / 7).astype(np.float64)
    base = os.path.dirname(path)
    for t in model.graph.initializer:
        info = ExternalDataInfo(t)
        w = np.memmap(os.path.join(base, info.location), np.float32, "r", info.offset or 0,
                      (d, d))
        x = x @ w
    return x


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the model and library")
    args = ap.parse_args()
    d = int((args.mb * 2**20 / 4 / args.layers) ** 0.5) // 16 * 16
    work = args.workdir or tempfile.mkdtemp(prefix="monolib-large-")
    onnx_path = os.path.join(work, "large.onnx")
    lib = os.path.join(work, "large.so")
    try:
        t0 = time.perf_counter()
        build_model(onnx_path, d, args.layers)
        mb = args.layers * d * d * 4 / 2**20
        print(f"model: {args.layers} x MatMul [{d}, {d}], {mb:.0f} MB of weights "
              f"(made in {time.perf_counter() - t0:.1f} s)", flush=True)
        b = child(BUILD, onnx_path, lib, str(d))
        total = b["compile_s"] + b["export_s"]
        size = os.path.getsize(lib)
        print(f"compile {b['compile_s']:.2f} s + export {b['export_s']:.2f} s = {total:.2f} s "
              f"(import monolib {b['import_s']:.2f} s); generated C {b['c_bytes'] / 1024:.0f} KiB; "
              f"library {size / 2**20:.0f} MB", flush=True)
        ld = child(LOAD, lib, str(d), os.path.join(work, "y.npy"))
        rss = ld["rss_load"]
        print(f"load + executor {ld['load_s'] * 1e3:.2f} ms; peak RSS after load "
              f"{rss / 2**20:.0f} MB (library {size / 2**20:.0f} MB); first run "
              f"{ld['run_s'] * 1e3:.0f} ms", flush=True)
        got = np.load(os.path.join(work, "y.npy"))
        want = reference(onnx_path, d)
        err = float(np.abs(got - want).max() / (np.abs(want).max() or 1))
        print(f"output vs NumPy (float64): max error {err:.1e} of the range")
        verdicts = {
            "export <= 15 s (512 MB target)": total <= 15 * max(1.0, mb / 512),
            "generated C holds no weights (< 1 MiB)": b["c_bytes"] < 2**20,
            "peak RSS after load <= 64 MB (weights not read)": rss <= 64 * 2**20,
            "output matches NumPy (1e-4 of range)": err <= 1e-4,
        }
        for k, ok in verdicts.items():
            print(f"  {'MET ' if ok else 'MISS'} {k}")
    finally:
        if not args.keep and not args.workdir:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
