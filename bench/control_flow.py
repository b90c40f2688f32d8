"""Run-time control flow (issue 13): the greedy ``Loop`` decoder against ONNX Runtime,
and the cost of branching per ``If``.

    python bench/control_flow.py [--repeat 200] [--threads 1,2] [--ifs 64]

* ``decoder``: g2p-id's LSTM decoder step inside a ``Loop`` (``monolib.models.greedy``,
  as ``tests/models/test_loop_decoder.py`` builds it), one word encoded by g2p-id's
  encoder (ORT, outside the timing). Per thread count: the median latency of the whole
  decode (inputs in, run, tokens out) of the monolib library and of an ORT session of
  the same Loop model, their ratio (below 1 is faster), and g2p-id's own Python loop
  of one ORT decoder-step call per token for reference. ``word`` stops at the end
  token; ``full`` never stops (26 iterations, the trip count).
* ``if``: ``--ifs`` chained ``If`` nodes on a run-time bool input, each branch one
  elementwise op on a [16] tensor captured from the previous If, against the same
  model compiled with ``constants={"c": True}`` (every If inlined by the frontend).
  The difference over the count is the cost of one run-time If: calling the taken
  branch's op functions from the If's and the branch test.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import _ms, median_time, parse_threads

import monolib
from monolib.compiler.testing import ort_session
from monolib.models import fetch_model
from monolib.models.greedy import BOS, EOS, MAX_TOKENS, PHONEMES, encode_word, greedy_decoder_loop
from monolib.runtime import GraphModule, cpu, set_num_threads

__all__ = ["bench_decoder", "bench_if", "chained_ifs", "main"]

logger = logging.getLogger(__name__)

WORD = "bermain"


def _module(model, **kw) -> GraphModule:
    return GraphModule(monolib.compile(model, target="c", **kw)["default"](cpu()))


def bench_decoder(threads: tuple[int, ...], repeat: int) -> list[str]:
    """Printed lines: the Loop decoder, monolib vs ORT (and the per-step Python loop)."""
    model = greedy_decoder_loop(fetch_model("g2p_id_decoder"), MAX_TOKENS)
    gm = _module(model)
    h, c = ort_session(fetch_model("g2p_id_encoder")).run(None, {"input_1": encode_word(WORD)})
    start = np.zeros((1, 1, len(PHONEMES)), np.float32)
    start[0, 0, BOS] = 1.0
    lines = []
    try:
        for t in threads:
            set_num_threads(t)
            sess = ort_session(model, threads=t)
            step = ort_session(fetch_model("g2p_id_decoder"), threads=t)
            for case, stop in (("word", EOS), ("full", len(PHONEMES) + 1)):
                feeds = {"start": start, "h0": h, "c0": c, "stop": np.array(stop, np.int64)}

                def run_monolib():
                    gm.run(**feeds)
                    return gm.get_output(0).numpy()

                def run_steps():
                    tok, hh, cc, out = start, h, c, []
                    while len(out) < MAX_TOKENS:
                        p, hh, cc = step.run(None, {"input_2": tok, "input_3": hh,
                                                    "input_4": cc})
                        k = int(np.argmax(p[0, -1]))
                        out.append(k)
                        if k == stop:
                            break
                        tok = np.zeros_like(tok)
                        tok[0, 0, k] = 1.0
                    return out

                tokens = run_monolib()
                assert tokens.tolist() == sess.run(None, feeds)[0].tolist() == run_steps()
                ml, _ = median_time(run_monolib, repeat)
                ort, _ = median_time(lambda: sess.run(None, feeds), repeat)
                py, _ = median_time(run_steps, max(repeat // 4, 5))
                lines.append(
                    f"Loop decoder {case:4s} ({len(tokens):2d} tokens) threads={t}  monolib "
                    f"{_ms(ml)} ms  ORT Loop {_ms(ort)} ms  ratio {ml / ort:.2f}x  "
                    f"(ORT step loop in Python {_ms(py)} ms)")
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    return lines


def chained_ifs(n: int, size: int = 16):
    """``n`` Ifs on input ``c``: ``x_{k+1} = c ? x_k + a_k : x_k * b_k``."""
    f = TensorProto.FLOAT
    nodes, inits = [], []
    prev = "x"
    for k in range(n):
        a = helper.make_tensor(f"a{k}", f, [size], np.full(size, 0.01 * (k + 1), np.float32))
        b = helper.make_tensor(f"b{k}", f, [size], np.full(size, 1.0 - 0.001 * k, np.float32))
        inits += [a, b]
        then_b = helper.make_graph([helper.make_node("Add", [prev, f"a{k}"], [f"t{k}"])],
                                   f"then{k}", [], [helper.make_tensor_value_info(f"t{k}", f, [size])])
        else_b = helper.make_graph([helper.make_node("Mul", [prev, f"b{k}"], [f"e{k}"])],
                                   f"else{k}", [], [helper.make_tensor_value_info(f"e{k}", f, [size])])
        nodes.append(helper.make_node("If", ["c"], [f"x{k + 1}"], then_branch=then_b,
                                      else_branch=else_b, name=f"if{k}"))
        prev = f"x{k + 1}"
    graph = helper.make_graph(
        nodes, "chained_ifs",
        [helper.make_tensor_value_info("x", f, [size]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info(prev, f, [size])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bench_if(n: int, repeat: int) -> list[str]:
    """Printed lines: n run-time Ifs against the same model with each If inlined."""
    model = chained_ifs(n)
    x = np.linspace(-1, 1, 16).astype(np.float32)
    branching = _module(model)
    inlined = _module(model, constants={"c": np.array(True)})
    sess = ort_session(model)
    lines = []
    set_num_threads(1)
    try:
        for cond in (True, False):
            c = np.array(cond)
            want = sess.run(None, {"x": x, "c": c})[0]
            branching.run(x=x, c=c)
            np.testing.assert_allclose(branching.get_output(0).numpy(), want, rtol=1e-5)

            def run_branching():
                branching.run(x=x, c=c)

            bt, _ = median_time(run_branching, repeat)
            ort, _ = median_time(lambda: sess.run(None, {"x": x, "c": c}), repeat)
            lines.append(f"{n} chained Ifs, cond={cond!s:5s}  monolib {_ms(bt)} ms  "
                         f"ORT {_ms(ort)} ms  ratio {bt / ort:.2f}x")
        inlined.run(x=x)
        np.testing.assert_allclose(inlined.get_output(0).numpy(),
                                   sess.run(None, {"x": x, "c": np.array(True)})[0], rtol=1e-5)
        it, _ = median_time(lambda: inlined.run(x=x), repeat)
        bt, _ = median_time(lambda: branching.run(x=x, c=np.array(True)), repeat)
        lines.append(f"{n} Ifs inlined (constants=)  monolib {_ms(it)} ms; run-time If costs "
                     f"{(bt - it) / n * 1e6:.3f} us per If")
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    return lines


def main() -> None:
    """Parse the command line and print both benchmarks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--ifs", type=int, default=64)
    args = ap.parse_args()
    threads = parse_threads(ap, args.threads)
    for line in bench_decoder(threads, args.repeat) + bench_if(args.ifs, args.repeat):
        print(line, flush=True)


if __name__ == "__main__":
    main()
