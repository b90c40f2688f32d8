"""Run an exported monolib library on a device in THIS (fresh) process.

    python fresh_device_run.py LIB.so INPUTS.npz OUTPUTS.npz KIND

Saves ``out0``, ``out1``... and prints one JSON line: how the device module got its
program (``"last_build"``) and the modules the run imported that a deployed model must
not need (``"heavy"``: the compiler, onnx, onnxruntime).
"""

import json
import sys

import numpy as np

import monolib


def main() -> None:
    lib, inputs, outputs, kind = sys.argv[1:5]
    mod = monolib.load_module(lib)
    gm = monolib.GraphModule(mod["default"](getattr(monolib, kind)()))
    for name, arr in np.load(inputs).items():
        gm.set_input(name, arr)
    gm.run()
    outs = {f"out{i}": gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())}
    np.savez(outputs, **outs)
    heavy = sorted(m for m in sys.modules
                   if m.split(".")[0] in ("onnx", "onnxruntime") or m.startswith("monolib.compiler"))
    print(json.dumps({"last_build": getattr(gm.executor.module, "last_build", ""), "heavy": heavy}))


if __name__ == "__main__":
    main()
