"""monolib against ONNX Runtime op by op: typical signatures of real models (issue 14).

    python bench/ops.py [--filter TEXT] [--threads 1,2] [--out bench/OPS.md]

Each case is a one-op (or few-op) model, built here with seeded inputs, compiled by
monolib and run beside an ONNX Runtime session on the same input (``run.paired_time``:
alternating rounds, each side's round after the other's workers are quiet; at 1 thread
the calling thread's CPU time). The cases are the shapes real networks are made of, not
the shapes of any one model: first-layer, strided, dilated, grouped, depthwise and 1x1
convolutions, transposed convolutions, transformer MatMuls, Einsum, Softmax,
normalizations, pools, resizes, pads and elementwise tails. A ratio above 1 is a
signature where monolib is slower than ONNX Runtime on this CPU: where to look next.
Every case's outputs are checked against ONNX Runtime's first (``max diff``).
Prints the table and writes ``bench/OPS.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import machine, paired_time, parse_threads

import monolib
from monolib.compiler.testing import ort_session

F = TensorProto.FLOAT


@dataclass
class Case:
    """One benchmarked model: ``name`` (its signature in words), ``family``, the nodes,
    the graph inputs (name, shape, ONNX type), the output shapes, the initializers and
    the opset."""

    name: str
    family: str
    nodes: list
    inputs: list[tuple[str, list[int], int]]
    outputs: list[tuple[str, list[int], int]]
    inits: dict[str, np.ndarray]
    opset: int = 17

    def model(self):
        """The case as an ``onnx.ModelProto`` (IR 8, the case's opset)."""
        g = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, t, s) for n, s, t in self.inputs],
            [helper.make_tensor_value_info(n, t, s) for n, s, t in self.outputs],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)],
                                 ir_version=8)

    def feeds(self, rng) -> dict[str, np.ndarray]:
        """Seeded inputs: standard normal floats, int64 indices below the last dim."""
        out = {}
        for n, s, t in self.inputs:
            out[n] = (rng.integers(0, s[-1], s) if t == TensorProto.INT64
                      else rng.standard_normal(s).astype(np.float32))
        return out


def _conv(c, m, h, k, s=1, g=1, d=1, act="Relu", w=None) -> Case:
    """A Conv (``c`` -> ``m`` channels, ``k`` x ``k``, stride ``s``, ``g`` groups,
    dilation ``d``, "same" pads) on an ``h`` x ``w`` image, then ``act``."""
    w = w or h
    p = d * (k // 2)
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    rng = np.random.default_rng(c * 1000 + m)
    kind = ("depthwise" if g == c == m else "grouped" if g > 1 else "dilated" if d > 1
            else "1x1" if k == 1 else "first layer" if c <= 3 else "strided" if s > 1 else "3x3"
            if k == 3 else f"{k}x{k}")
    return Case(
        f"Conv {c}->{m} {k}x{k}/{s}" + (f" g{g}" if g > 1 else "") + (f" d{d}" if d > 1 else "")
        + f" {h}x{w} +{act}", f"conv {kind}",
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s],
                          pads=[p] * 4, group=g, dilations=[d, d]),
         helper.make_node(act, ["c"], ["y"])],
        [("x", [1, c, h, w], F)], [("y", [1, m, oh, ow], F)],
        {"w": (rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32),
         "b": (0.1 * rng.standard_normal(m)).astype(np.float32)})


def _node(name, family, op, ins, outs, inits=None, opset=17, **attrs) -> Case:
    """One ``op`` node reading the graph inputs ``ins`` ((name, shape), float32) then the
    initializers ``inits`` in order."""
    ins = [(n, s, F) for n, s in ins]
    return Case(name, family, [helper.make_node(op, [n for n, _, _ in ins] + list(inits or {}),
                                                [n for n, _ in outs], **attrs)],
                ins, [(n, s, F) for n, s in outs], dict(inits or {}), opset)


def cases() -> list[Case]:
    """The benchmarked signatures (see the module doc)."""
    rng = np.random.default_rng(0)
    r = lambda *s, k=0.05: (k * rng.standard_normal(s)).astype(np.float32)
    out = [
        _conv(3, 32, 224, 3, 2), _conv(3, 64, 224, 7, 2), _conv(3, 16, 640, 3, 2, act="Sigmoid"),
        _conv(32, 64, 112, 3, 2), _conv(64, 128, 56, 3, 2), _conv(128, 256, 28, 3, 2),
        _conv(64, 64, 56, 3), _conv(128, 128, 28, 3), _conv(256, 256, 14, 3), _conv(512, 512, 7, 3),
        _conv(16, 64, 55, 3), _conv(48, 48, 80, 3, act="Sigmoid"),
        _conv(64, 64, 80, 3, d=2), _conv(256, 256, 33, 3, d=2), _conv(128, 128, 40, 3, d=4),
        _conv(64, 64, 56, 3, g=4), _conv(256, 256, 14, 3, g=8), _conv(128, 128, 28, 3, g=32),
        _conv(32, 32, 112, 3, g=32), _conv(64, 64, 112, 3, 2, g=64), _conv(256, 256, 28, 3, g=256),
        _conv(480, 480, 14, 5, g=480, act="HardSwish"), _conv(96, 96, 80, 3, g=96, d=2),
        _conv(16, 96, 112, 1), _conv(64, 128, 56, 1), _conv(256, 256, 28, 1),
        _conv(512, 1024, 7, 1), _conv(960, 1280, 1, 1), _conv(144, 24, 56, 1, act="HardSwish"),
        _node("ConvTranspose 128->64 2x2/2 40x40", "conv transpose", "ConvTranspose",
              [("x", [1, 128, 40, 40])], [("y", [1, 64, 80, 80])],
              {"w": r(128, 64, 2, 2), "b": r(64)}, kernel_shape=[2, 2], strides=[2, 2]),
        _node("ConvTranspose 64->32 4x4/2 80x80", "conv transpose", "ConvTranspose",
              [("x", [1, 64, 80, 80])], [("y", [1, 32, 160, 160])],
              {"w": r(64, 32, 4, 4), "b": r(32)}, kernel_shape=[4, 4], strides=[2, 2],
              pads=[1, 1, 1, 1]),
    ]
    for m, k, n in [(128, 768, 768), (128, 768, 3072), (1, 768, 768), (32, 512, 512)]:
        out.append(_node(f"MatMul {m}x{k} by weight {k}x{n}", "matmul", "MatMul",
                         [("x", [1, m, k])], [("y", [1, m, n])], {"w": r(k, n)}))
    out += [
        _node("MatMul 12 heads 128x64 by 64x128", "matmul", "MatMul",
              [("x", [1, 12, 128, 64]), ("z", [1, 12, 64, 128])], [("y", [1, 12, 128, 128])]),
        _node("Einsum bhqd,bhkd->bhqk 8x256x64", "matmul", "Einsum",
              [("x", [1, 8, 256, 64]), ("z", [1, 8, 256, 64])], [("y", [1, 8, 256, 256])],
              equation="bhqd,bhkd->bhqk"),
        _node("Softmax rows 12x128x128", "softmax", "Softmax", [("x", [1, 12, 128, 128])],
              [("y", [1, 12, 128, 128])], axis=-1),
        _node("Softmax over channels 80x8400", "softmax", "Softmax", [("x", [1, 80, 8400])],
              [("y", [1, 80, 8400])], axis=1),
        _node("LayerNormalization 128x768", "normalization", "LayerNormalization",
              [("x", [1, 128, 768])], [("y", [1, 128, 768])], {"g": r(768, k=1), "b": r(768)},
              axis=-1),
        _node("InstanceNormalization 64x128x128", "normalization", "InstanceNormalization",
              [("x", [1, 64, 128, 128])], [("y", [1, 64, 128, 128])], {"g": r(64, k=1), "b": r(64)}),
        _node("GroupNormalization 32 groups 256x40x40", "normalization", "GroupNormalization",
              [("x", [1, 256, 40, 40])], [("y", [1, 256, 40, 40])], {"g": r(256, k=1), "b": r(256)},
              opset=21, num_groups=32),
        _node("MaxPool 3x3/2 64x112x112", "pool", "MaxPool", [("x", [1, 64, 112, 112])],
              [("y", [1, 64, 56, 56])], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        _node("AveragePool 2x2/2 128x56x56", "pool", "AveragePool", [("x", [1, 128, 56, 56])],
              [("y", [1, 128, 28, 28])], kernel_shape=[2, 2], strides=[2, 2]),
        _node("MaxPool 5x5/1 (SPPF) 256x20x20", "pool", "MaxPool", [("x", [1, 256, 20, 20])],
              [("y", [1, 256, 20, 20])], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
        _node("Resize nearest 2x 128x40x40", "resize", "Resize", [("x", [1, 128, 40, 40])],
              [("y", [1, 128, 80, 80])], {"roi": np.zeros(0, np.float32),
                                          "s": np.array([1, 1, 2, 2], np.float32)}, mode="nearest"),
        _node("Resize linear 2x 64x80x80", "resize", "Resize", [("x", [1, 64, 80, 80])],
              [("y", [1, 64, 160, 160])], {"roi": np.zeros(0, np.float32),
                                           "s": np.array([1, 1, 2, 2], np.float32)}, mode="linear"),
        _node("Pad reflect 64x128x128", "pad", "Pad", [("x", [1, 64, 128, 128])],
              [("y", [1, 64, 130, 130])], {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)},
              mode="reflect"),
        _node("PRelu per channel 64x112x112", "elementwise", "PRelu", [("x", [1, 64, 112, 112])],
              [("y", [1, 64, 112, 112])], {"s": (rng.random((64, 1, 1))).astype(np.float32)}),
        _node("ReduceMax rows 64x64x64", "reduce", "ReduceMax", [("x", [64, 64, 64])],
              [("y", [64, 64])], opset=13, axes=[-1], keepdims=0),
    ]
    silu = Case("SiLU (Sigmoid * x) 64x160x160", "elementwise",
                [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
                [("x", [1, 64, 160, 160], F)], [("y", [1, 64, 160, 160], F)], {})
    return out + [silu]


def bench_case(case: Case, threads: list[int], tmp: str) -> dict:
    """``{threads: (monolib s, ORT s)}`` and ``diff``: the case timed side by side."""
    model = case.model()
    rng = np.random.default_rng(1)
    feeds = case.feeds(rng)
    lib = os.path.join(tmp, f"op{abs(hash(case.name))}.so")
    monolib.compile(model, target="c").export_library(lib)
    gm = monolib.GraphModule(monolib.load_module(lib)["default"](monolib.cpu()))
    gm.set_input(**feeds)
    gm.run()
    sess = {t: ort_session(model, threads=t) for t in threads}
    want = sess[threads[0]].run(None, feeds)[0]
    diff = float(np.max(np.abs(gm.get_output(0).numpy() - want)))
    out = {"diff": diff}
    for t in threads:
        monolib.runtime.set_num_threads(t)
        (ml, ml_cpu), (ort, ort_cpu) = paired_time(gm.run, partial(sess[t].run, None, feeds),
                                                   repeat=30, rounds=3, budget_s=1.0)
        out[t] = (ml_cpu, ort_cpu) if t == 1 else (ml, ort)
    return out


def table(rows: list[tuple[Case, dict]], threads: list[int]) -> str:
    """The Markdown table of the measured cases."""
    head = "| family | signature | " + " | ".join(
        f"monolib@{t} ms | ORT@{t} ms | ratio@{t}" for t in threads) + " | max diff |"
    lines = [head, "|" + "---|" * (3 + 3 * len(threads))]
    for case, res in rows:
        cells = []
        for t in threads:
            ml, ort = res[t]
            cells += [f"{ml * 1e3:.3f}", f"{ort * 1e3:.3f}", f"{ml / ort:.2f}x"]
        lines.append(f"| {case.family} | {case.name} | " + " | ".join(cells)
                     + f" | {res['diff']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--filter", default="", help="only signatures containing this text")
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    ap.add_argument("--out", default=str(HERE / "OPS.md"))
    args = ap.parse_args(argv)
    threads = list(parse_threads(ap, args.threads))
    info = machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            if args.filter not in case.name:
                continue
            res = bench_case(case, threads, tmp)
            rows.append((case, res))
            print(f"{case.name:44} " + "  ".join(
                f"@{t} {res[t][0] * 1e3:8.3f} / {res[t][1] * 1e3:8.3f} = {res[t][0] / res[t][1]:5.2f}x"
                for t in threads), flush=True)
    text = table(rows, threads)
    ratios = {t: [r[t][0] / r[t][1] for _, r in rows] for t in threads}
    summary = "\n".join(
        f"- {t} thread{'s' if t > 1 else ''}: geometric mean {np.exp(np.mean(np.log(v))):.2f}x, "
        f"{sum(x > 1 for x in v)} of {len(v)} signatures slower than ORT"
        for t, v in ratios.items())
    if not args.filter:
        Path(args.out).write_text(
            "# Op signatures: monolib vs ONNX Runtime (issue 14)\n\n"
            f"Generated by `python bench/ops.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
            f"{info['cpu']}, {info['cores']} cores; {info['gcc']}; onnxruntime "
            f"{info['onnxruntime']}; 1-minute load average {info['load']:.1f} at the start.\n\n"
            "One-op models of typical shapes, each side timed in alternating rounds "
            "(`run.paired_time`; 1 thread: CPU time of the calling thread, more: wall "
            "time). Ratio = monolib / ORT.\n\n" + summary + "\n\n" + text + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
