"""Cold start of one model in THIS fresh process: load + first output.

    python bench/cold_start.py monolib LIB.so INPUTS.npz
    python bench/cold_start.py ort MODEL.onnx INPUTS.npz THREADS

Prints one JSON line: ``import_s`` (importing the runtime package: monolib or
onnxruntime) and ``cold_s`` (from before ``load_module`` / ``InferenceSession`` to
the first output in hand). The interpreter start and ``import numpy`` are not counted.
"""

import json
import sys
import time

import numpy as np


def main() -> None:
    kind, path, inputs = sys.argv[1:4]
    with np.load(inputs) as z:
        feeds = {k: z[k] for k in z.files}
    t0 = time.perf_counter()
    if kind == "monolib":
        import monolib

        t1 = time.perf_counter()
        mod = monolib.load_module(path)
        gm = monolib.GraphModule(mod["default"](monolib.cpu()))
        gm.set_input(**feeds)
        gm.run()
        out = gm.get_output(0).numpy()
    else:
        import onnxruntime as ort

        t1 = time.perf_counter()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(sys.argv[4])
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        out = sess.run(None, feeds)[0]
    t2 = time.perf_counter()
    assert out.size > 0
    print(json.dumps({"import_s": t1 - t0, "cold_s": t2 - t1}))


if __name__ == "__main__":
    main()
