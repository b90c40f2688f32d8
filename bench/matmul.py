"""MatMul / ``com.microsoft`` FusedMatMul: monolib against ONNX Runtime, side by side.

    python bench/matmul.py [--repeat 50] [--threads 1,2] [--only qk_fused,gemv]

Each case is a one-node model built with ``onnx.helper`` (batched attention products,
a projection with a transposed right operand, a BERT feed-forward layer, a GEMV); for
each thread count it prints the median latency of the monolib library and of an ONNX
Runtime session (wall time; at one thread also the calling thread's CPU time, the
steadier figure on a shared machine), their ratio (monolib / ORT, below 1 is faster)
and the largest difference of monolib's output from ORT's. ``op`` is the run alone,
inputs and outputs left in place (monolib: ``run()`` on inputs already set; ORT: a
run with I/O bound to ``OrtValue``\ s): the MatMul's own time, without the copies of
inputs into the library that the first figure counts. ``const`` in a case's title
means the right operand is an initializer (packed at compile time by both).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import _ms, median_time, parse_threads

import monolib
from monolib.compiler.testing import ort_session
from monolib.runtime import GraphModule, cpu, set_num_threads

__all__ = ["CASES", "bench_case", "main", "matmul_case"]

logger = logging.getLogger(__name__)


def matmul_case(a_shape: tuple, b_shape: tuple, const_b: bool = False, fused: dict | None = None):
    """A one-node ``MatMul`` (or ``FusedMatMul`` with the attributes ``fused``) model
    ``Y = A @ B`` and its feeds; ``const_b`` makes B an initializer."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = (rng.standard_normal(b_shape) / np.sqrt(a_shape[-1])).astype(np.float32)
    if fused is None:
        node = helper.make_node("MatMul", ["A", "B"], ["Y"])
        ref = np.matmul(a, b)
    else:
        node = helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain="com.microsoft", **fused)
        bt = np.swapaxes(b, -1, -2) if fused.get("transB") else b
        ref = np.matmul(a, bt)
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, list(a_shape))]
    inits = []
    if const_b:
        inits.append(numpy_helper.from_array(b, "B"))
    else:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, list(b_shape)))
    graph = helper.make_graph([node], "matmul", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(ref.shape))],
                              inits)
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    feeds = {"A": a} if const_b else {"A": a, "B": b}
    return model, feeds


QK = {"transB": 1, "alpha": 0.125}

#: name -> (description, builder returning (model, feeds))
CASES: dict[str, tuple[str, Callable]] = {
    "qk_fused": ("FusedMatMul Q.K^T [1,12,128,64]x[1,12,128,64]^T",
                 lambda: matmul_case((1, 12, 128, 64), (1, 12, 128, 64), fused=QK)),
    "qk": ("MatMul [1,12,128,64]x[1,12,64,128]",
           lambda: matmul_case((1, 12, 128, 64), (1, 12, 64, 128))),
    "pv": ("MatMul [1,12,128,128]x[1,12,128,64]",
           lambda: matmul_case((1, 12, 128, 128), (1, 12, 128, 64))),
    "proj_fused": ("FusedMatMul [128,768]x[768,768]^T",
                   lambda: matmul_case((128, 768), (768, 768), fused={"transB": 1})),
    "proj_fused_const": ("FusedMatMul [128,768]x[768,768]^T const",
                         lambda: matmul_case((128, 768), (768, 768), True, {"transB": 1})),
    "ffn": ("MatMul [1,128,768]x[768,3072] const",
            lambda: matmul_case((1, 128, 768), (768, 3072), True)),
    "ffn_rt": ("MatMul [1,128,768]x[768,3072]",
               lambda: matmul_case((1, 128, 768), (768, 3072))),
    "small": ("MatMul [8,64,64]x[8,64,64]",
              lambda: matmul_case((8, 64, 64), (8, 64, 64))),
    "square": ("MatMul [1024,1024]x[1024,1024] const",
               lambda: matmul_case((1024, 1024), (1024, 1024), True)),
    "gemv": ("MatMul [1,1,4096]x[4096,4096] const",
             lambda: matmul_case((1, 1, 4096), (4096, 4096), True)),
    "gemv_rt": ("MatMul [1,1,4096]x[4096,4096]",
                lambda: matmul_case((1, 1, 4096), (4096, 4096))),
}


def _bound_run(sess, feeds: dict) -> Callable[[], None]:
    """A call that runs ``sess`` with its inputs and outputs bound to ``OrtValue``\\ s
    made once (no copy of a feed per run)."""
    import onnxruntime as ort

    binding = sess.io_binding()
    for name, arr in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(arr))
    for out in sess.get_outputs():
        binding.bind_output(out.name)
    sess.run_with_iobinding(binding)  # outputs allocated once; later runs reuse them
    for i, out in enumerate(sess.get_outputs()):
        binding.bind_ortvalue_output(out.name, binding.get_outputs()[i])
    return partial(sess.run_with_iobinding, binding)


def bench_case(name: str, threads: tuple[int, ...], repeat: int) -> list[str]:
    """Printed lines of one case: per thread count the monolib and ORT medians, ratio
    and the largest difference."""
    title, build = CASES[name]
    model, feeds = build()
    gm = GraphModule(monolib.compile(model, target="c")["default"](cpu()))

    def run_monolib():
        gm.run(**feeds)
        return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]

    lines = []
    try:
        for t in threads:
            set_num_threads(t)
            sess = ort_session(model, threads=t)
            ml, ml_cpu = median_time(run_monolib, repeat)
            ort, ort_cpu = median_time(partial(sess.run, None, feeds), repeat)
            ml_op, _ = median_time(gm.run, repeat)
            ort_op, _ = median_time(_bound_run(sess, feeds), repeat)
            diff = max(float(np.max(np.abs(a - b)))
                       for a, b in zip(run_monolib(), sess.run(None, feeds)))
            cpu_part = (f"  cpu {_ms(ml_cpu)} vs {_ms(ort_cpu)} ({ml_cpu / ort_cpu:.2f}x)"
                        if t == 1 else "")
            lines.append(f"{title:44s} t={t}  monolib {_ms(ml)} ms  ORT {_ms(ort)} ms  "
                         f"ratio {ml / ort:.2f}x{cpu_part}  op {_ms(ml_op)} vs {_ms(ort_op)} "
                         f"({ml_op / ort_op:.2f}x)  max|diff| {diff:.1e}")
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    return lines


def main() -> None:
    """Parse the command line and print each case's lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    threads = parse_threads(ap, args.threads)
    for name in args.only.split(","):
        for line in bench_case(name, threads, args.repeat):
            print(line, flush=True)


if __name__ == "__main__":
    main()
