"""Architectures no kernel was tuned on, against ONNX Runtime (issue 14's unseen set).

    python bench/zoo.py [--models mobilenet_v2,mnasnet1_0,...] [--threads 1,2] [--calls 30]

Each model is a torchvision architecture at its default 224x224 input, randomly
initialised with a fixed seed (weights do not change the time of a float32 conv; the
outputs are still compared with ORT's, relative to ORT's largest), exported to ONNX at
opset 17 and cached under ``~/.cache/monolib/zoo``. Timing as ``run.py``'s rounds: per
thread count, blocks of ``--calls`` calls of each side in turn (3 blocks), 0.1 s apart
so that ORT's spinning workers are idle when monolib's block starts; the median of each
side (1 thread: CPU time of the calling thread; more: wall time). Prints a Markdown
table with the ratio monolib / ORT per thread count and their geometric mean.

Needs PyTorch and torchvision (``pip install torch torchvision``), which neither the
install nor CI brings: this is a probe for a contributor, not a target table. Families
that matter here: inverted-residual nets (MobileNetV2/V3, MnasNet, EfficientNet), where
ORT keeps a channel-blocked layout from op to op and monolib converts at each depthwise
conv.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DEFAULT = ("mobilenet_v2,mobilenet_v3_small,mobilenet_v3_large,mnasnet1_0,efficientnet_b0,"
           "shufflenet_v2_x1_0,regnet_y_400mf,squeezenet1_1,resnet18,googlenet")
SIZE = 224


def export(name: str, cache: Path) -> Path:
    """``cache/name.onnx``: torchvision's ``name`` (seed 0, eval mode) at 1x3x224x224."""
    path = cache / f"{name}.onnx"
    if path.exists():
        return path
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.onnx.export(model, torch.randn(1, 3, SIZE, SIZE), str(tmp), opset_version=17,
                      input_names=["x"], output_names=["y"], dynamo=False)
    tmp.replace(path)
    return path


def _median(fn, calls: int, clock) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def measure(path: Path, threads: int, calls: int,
            feeds: dict[str, np.ndarray] | None = None) -> tuple[float, float, float]:
    """(monolib ms, ORT ms, largest difference relative to ORT's largest output) on
    ``feeds`` (default: ``x``, a seeded 1x3x224x224 image), compiled at their shapes."""
    import onnxruntime as ort

    import monolib

    if feeds is None:
        feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, SIZE, SIZE))
                 .astype(np.float32)}
    lib = path.with_suffix(".so")
    monolib.compile(str(path), target="c", shapes={k: v.shape for k, v in feeds.items()}
                    ).export_library(str(lib))
    monolib.runtime.set_num_threads(threads)
    gm = monolib.GraphModule(monolib.load_module(str(lib))["default"](monolib.cpu()))
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    gm.set_input(**feeds)
    gm.run()
    diff = float(np.abs(gm.get_output(0).numpy() - want).max() / np.abs(want).max())

    def ml():
        gm.set_input(**feeds)
        gm.run()

    clock = time.thread_time if threads == 1 else time.perf_counter
    a, b = [], []
    for _ in range(3):
        a += _median(ml, calls, clock)
        time.sleep(0.1)
        b += _median(lambda: sess.run(None, feeds), calls, clock)
        time.sleep(0.1)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3, diff


def table(names: list[str], threads: list[int], calls: int,
          export_fn: Callable[[str], Path],
          feeds_fn: Callable[[str], dict[str, np.ndarray] | None] = lambda name: None) -> None:
    """Print the Markdown table (a row per model of ``names``: ``export_fn(name)`` its
    ONNX file, ``feeds_fn(name)`` its inputs) and the geometric means per thread count."""
    print("| model | " + " | ".join(f"monolib@{t} ms | ORT@{t} ms | ratio@{t}" for t in threads)
          + " | max diff (rel) |")
    print("|---|" + "---|---|---|" * len(threads) + "---|")
    logs: dict[int, list[float]] = {t: [] for t in threads}
    for name in names:
        path = export_fn(name)
        cells, diff = [], 0.0
        for t in threads:
            m, o, diff = measure(path, t, calls, feeds_fn(name))
            logs[t].append(math.log(m / o))
            cells.append(f"{m:.3f} | {o:.3f} | {m / o:.2f}x")
        print(f"| {name} | " + " | ".join(cells) + f" | {diff:.1e} |", flush=True)
    for t in threads:
        print(f"\ngeometric mean @{t}: {math.exp(sum(logs[t]) / len(logs[t])):.3f}x ORT")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "monolib" / "zoo"))
    args = ap.parse_args()
    table(args.models.split(","), [int(t) for t in args.threads.split(",")], args.calls,
          lambda name: export(name, Path(args.cache)))


if __name__ == "__main__":
    main()
