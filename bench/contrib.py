"""``com.microsoft`` contrib ops (issue 13): monolib against ONNX Runtime, one op each.

    python bench/contrib.py [--repeat 50] [--threads 1,2] [--only matmul_nbits]

Each case is a one-node model built with ``onnx.helper``; for each thread count it
prints the median latency (input in, run, output out, as ``bench/run.py`` counts it) of
the monolib library and of an ONNX Runtime session, their ratio (monolib / ORT, below 1
is faster) and the largest difference of monolib's output from ORT's.

Cases (:data:`CASES`; add a line there for another op):

* ``matmul_nbits``: MatMulNBits A ``[1, 4096]`` x 4-bit B ``[4096, 4096]`` (block 32,
  asymmetric zero points), the decode step of a small language model's projection;
  weights quantized by ONNX Runtime's own ``quantize_matmul_4bits``.
* ``matmul_nbits_m32``: the same weight against 32 rows (a prompt's prefill: the GEMM
  path, B dequantized block by block into gemm.h's panels).
* ``attention``: ``com.microsoft`` ``Attention``, a BERT-base layer (S=128, 768 wide, 12
  heads) with a padding mask; ``attention_s512``: the same at S=512.
* ``sdpa_s128``, ``sdpa_s512``: the ONNX ``Attention`` op alone (opset 23), Q/K/V
  ``[1, 12, S, 64]``, causal: the attention kernel without the projections;
  ``sdpa_s128_full``: not causal (every score).
* ``sdpa_decode``: a decoder step of that op, one query row against a 511-row
  ``past_key``/``past_value`` (T = 512), ``present_key``/``present_value`` returned.
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

__all__ = ["CASES", "attention_case", "bench_case", "main", "matmul_nbits_case", "sdpa_case"]

logger = logging.getLogger(__name__)


def matmul_nbits_case(m: int = 1, k: int = 4096, n: int = 4096, bs: int = 32):
    """A MatMulNBits model (weights from ORT's 4-bit block quantizer) and its feeds."""
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n)).astype(np.float32)
    nblk = -(-k // bs)
    packed = np.zeros((n, nblk, bs // 2), np.uint8)
    scales = np.zeros((n, nblk), np.float32)
    zp = np.zeros((n, (nblk + 1) // 2), np.uint8)
    quantize_matmul_4bits(packed, w, scales, zp, bs, n, k, False)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp"], ["Y"],
                            domain="com.microsoft", K=k, N=n, bits=4, block_size=bs)
    graph = helper.make_graph(
        [node], "matmul_nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales"),
         numpy_helper.from_array(zp, "zp")])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model, {"A": rng.standard_normal((m, k)).astype(np.float32)}


def attention_case(b: int = 1, s: int = 128, hidden: int = 768, heads: int = 12):
    """A BERT-base self-attention layer as ``com.microsoft`` ``Attention`` (weights
    ``[hidden, 3*hidden]``, bias, a ``[B, S]`` padding mask) and its feeds."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((hidden, 3 * hidden)) / np.sqrt(hidden)).astype(np.float32)
    bias = (rng.standard_normal(3 * hidden) * 0.1).astype(np.float32)
    node = helper.make_node("Attention", ["x", "w", "bias", "mask"], ["y"],
                            domain="com.microsoft", num_heads=heads)
    graph = helper.make_graph(
        [node], "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, hidden]),
         helper.make_tensor_value_info("mask", TensorProto.INT32, [b, s])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    mask = np.ones((b, s), np.int32)
    mask[:, s - s // 8:] = 0
    return model, {"x": rng.standard_normal((b, s, hidden)).astype(np.float32), "mask": mask}


def sdpa_case(s: int = 128, past: int = 0, heads: int = 12, d: int = 64, causal: int = 1):
    """The ONNX ``Attention`` op (opset 23) on ``[1, heads, s, d]`` Q/K/V, causal unless
    ``causal=0``, with a ``past`` rows KV cache when ``past > 0`` (then the present K/V
    are outputs too)."""
    rng = np.random.default_rng(2)
    names = ["q", "k", "v"] + (["", "past_k", "past_v"] if past else [])
    outs = ["y"] + (["present_k", "present_v"] if past else [])
    node = helper.make_node("Attention", names, outs, is_causal=causal)
    shapes = {"q": [1, heads, s, d], "k": [1, heads, s, d], "v": [1, heads, s, d],
              "past_k": [1, heads, past, d], "past_v": [1, heads, past, d]}
    feeds = {n: rng.standard_normal(shapes[n]).astype(np.float32) for n in names if n}
    t = [1, heads, past + s, d]
    graph = helper.make_graph(
        [node], "sdpa", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n])
                         for n in feeds],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes["q"] if n == "y" else t)
         for n in outs])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 23)])
    return model, feeds


#: name -> (description, builder returning (model, feeds))
CASES: dict[str, tuple[str, Callable]] = {
    "matmul_nbits": ("MatMulNBits [1,4096]x[4096,4096] 4-bit bs32", matmul_nbits_case),
    "matmul_nbits_m32": ("MatMulNBits [32,4096]x[4096,4096] 4-bit bs32",
                         lambda: matmul_nbits_case(m=32)),
    "attention": ("Attention BERT-base [1,128,768] 12 heads, mask", attention_case),
    "attention_s512": ("Attention BERT-base [1,512,768] 12 heads, mask",
                       lambda: attention_case(s=512)),
    "sdpa_s128": ("ONNX Attention [1,12,128,64] causal", sdpa_case),
    "sdpa_s128_full": ("ONNX Attention [1,12,128,64] not causal",
                       lambda: sdpa_case(causal=0)),
    "sdpa_s512": ("ONNX Attention [1,12,512,64] causal", lambda: sdpa_case(s=512)),
    "sdpa_decode": ("ONNX Attention [1,12,1,64] past 511, causal",
                    lambda: sdpa_case(s=1, past=511)),
}


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
            ml, _ = median_time(run_monolib, repeat)
            ort, _ = median_time(partial(sess.run, None, feeds), repeat)
            diff = max(float(np.max(np.abs(a - b)))
                       for a, b in zip(run_monolib(), sess.run(None, feeds)))
            lines.append(f"{title:48s} threads={t}  monolib {_ms(ml)} ms  ORT {_ms(ort)} ms  "
                         f"ratio {ml / ort:.2f}x  max|diff| {diff:.2e}")
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
