"""Run an exported monolib library in THIS (fresh) process and save its outputs.

Used by the real-model tests through a subprocess, so that a library is always loaded
by a process that never compiled anything::

    python fresh_run.py LIB.so INPUTS.npz OUTPUTS.npz [--steps N] [--carry OUT=IN ...]

``INPUTS.npz`` holds one array per graph input, by name. With ``--steps N`` the run is
repeated N times: each non-carried input holds the N per-step values stacked on a
leading axis; a carried input ``IN`` holds its initial value and takes output ``OUT``
(an index) of the previous step, as a streaming model's state does. ``OUTPUTS.npz``
holds ``out0``, ``out1``, ... (stacked over steps when ``--steps`` is given).

It fails (exit 1) if running the library imported the compiler, ``onnx`` or
``onnxruntime``: a deployed model needs ``monolib.runtime`` and NumPy only.
"""

import argparse
import sys

import numpy as np

import monolib


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("inputs")
    ap.add_argument("outputs")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--carry", action="append", default=[])
    args = ap.parse_args()

    mod = monolib.load_module(args.lib)
    gm = monolib.GraphModule(mod["default"](monolib.cpu()))
    data = dict(np.load(args.inputs))
    carry = {int(o): i for o, i in (c.split("=") for c in args.carry)}
    n_out = gm.get_num_outputs()
    if not args.steps:
        for name, arr in data.items():
            gm.set_input(name, arr)
        gm.run()
        outs = [gm.get_output(i).numpy().copy() for i in range(n_out)]
    else:
        state = {name: data[name] for name in carry.values()}
        per_step = [[] for _ in range(n_out)]
        for s in range(args.steps):
            for name, arr in data.items():
                gm.set_input(name, state[name] if name in state else arr[s])
            gm.run()
            for i in range(n_out):
                per_step[i].append(gm.get_output(i).numpy().copy())
            for o, name in carry.items():
                state[name] = per_step[o][-1]
        outs = [np.stack(p) for p in per_step]
    np.savez(args.outputs, **{f"out{i}": o for i, o in enumerate(outs)})
    heavy = sorted(m for m in sys.modules
                   if m.split(".")[0] in ("onnx", "onnxruntime") or m.startswith("monolib.compiler"))
    if heavy:
        sys.exit(f"running the library imported {heavy[:5]}: the runtime must not need them")


if __name__ == "__main__":
    main()
