"""The thread pool's spin between requests (``monolib.set_spin``): 300 us against 0.

    python bench/spin.py [--models ppocr_cls,matmul,shufflenet] [--period-ms 10]
                         [--block 25] [--rounds 8]

Each model is compiled once and run on 2 threads as a server would: one request every
``--period-ms``, in blocks of ``--block`` requests, the two settings alternating for
``--rounds`` rounds (so a change in the machine's load hits both alike). Per request it
prints the median over blocks of the process's CPU time, the pool worker's CPU time
(``/proc/self/task/<tid>/schedstat``), the calling thread's CPU time and the wall
latency (median of the block). ``matmul`` is a 256x256 MatMul + Relu (one op that
splits); ``ppocr_cls`` is fetched with ``monolib.models.fetch_model``; other names are
ONNX's light models (``light_<name>.onnx`` in the onnx wheel). README ("Threads and
speed") quotes a run.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.runtime import GraphModule, cpu, set_num_threads, set_spin

__all__ = ["SETTINGS", "load_case", "main", "serve_like"]

logger = logging.getLogger(__name__)

#: the spins compared, in microseconds (the default and "sleep at once")
SETTINGS = (300, 0)


def _matmul() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [x], [y], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def load_case(name: str) -> tuple[GraphModule, dict[str, np.ndarray]]:
    """Compile the model ``name`` for its input shapes; its GraphModule and inputs.

    Parameters
    ----------
    name : str
        ``"matmul"``, ``"ppocr_cls"`` or the name of an ONNX light model.
    """
    if name == "matmul":
        model = _matmul()
    elif name == "ppocr_cls":
        from monolib.models import fetch_model

        model = onnx.load(str(fetch_model("ppocr_cls")))
    else:
        light = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
        model = onnx.load(os.path.join(light, f"light_{name}.onnx"))
        if model.opset_import[0].version < 11:
            model = onnx.version_converter.convert_version(model, 13)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = tuple(d.dim_value or 1 for d in inp.type.tensor_type.shape.dim)
        if name == "ppocr_cls":
            dims = (1, 3, 48, 192)
        feeds[inp.name] = np.random.default_rng(0).random(dims).astype(np.float32)
    factory = monolib.compile(model, shapes={k: v.shape for k, v in feeds.items()})
    return GraphModule(factory["default"](cpu())), feeds


def _worker_cpu_ms(tids: set[str]) -> float:
    total = 0
    for tid in tids:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e6


def serve_like(
    gm: GraphModule, feeds: dict, period: float, block: int, rounds: int
) -> dict[int, list[float]]:
    """Run ``gm`` as a server (one request per ``period`` s) under each spin.

    Returns
    -------
    dict
        ``{spin: [process CPU, worker CPU, caller CPU, latency]}``, milliseconds per
        request, medians over the blocks.
    """
    set_num_threads(2)
    before = set(os.listdir("/proc/self/task"))

    def request() -> None:
        gm.run(**feeds)
        gm.get_output(0).numpy()

    for _ in range(5):
        request()
    workers = set(os.listdir("/proc/self/task")) - before
    rows: dict[int, list[tuple]] = {s: [] for s in SETTINGS}
    for r in range(rounds):
        for spin in SETTINGS if r % 2 == 0 else SETTINGS[::-1]:
            set_spin(spin)
            request()
            lat: list[float] = []
            p0, c0, w0 = time.process_time(), time.thread_time(), _worker_cpu_ms(workers)
            due = time.perf_counter()
            for _ in range(block):
                t = time.perf_counter()
                request()
                lat.append(time.perf_counter() - t)
                due += period
                time.sleep(max(0.0, due - time.perf_counter()))
            rows[spin].append((
                (time.process_time() - p0) * 1e3 / block,
                (_worker_cpu_ms(workers) - w0) / block,
                (time.thread_time() - c0) * 1e3 / block,
                statistics.median(lat) * 1e3,
            ))
    set_spin(SETTINGS[0])
    return {s: [statistics.median(r[i] for r in v) for i in range(4)] for s, v in rows.items()}


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="ppocr_cls,matmul,shufflenet")
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("--block", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        gm, feeds = load_case(name)
        res = serve_like(gm, feeds, args.period_ms / 1e3, args.block, args.rounds)
        print(f"{name}: 2 threads, 1 request / {args.period_ms:g} ms, "
              f"{args.rounds}x{args.block} requests per setting, load {os.getloadavg()[0]:.1f}")
        for spin, (proc, worker, caller, latency) in res.items():
            print(f"  spin {spin:3d} us: CPU {proc:.3f} ms/request (worker {worker:.3f}, "
                  f"caller {caller:.3f}), latency p50 {latency:.3f} ms")


if __name__ == "__main__":
    main()
