"""monolib against ONNX Runtime inside one model, conv by conv (issue 14).

    python bench/in_model.py MODEL.onnx [--shape NAME=1,3,224,224] [--repeat 40] [--top 40]

``bench/ops.py`` times one-op models, where ORT pays the reorders into and out of its
channel-blocked (NCHWc) layout around every conv. Inside a model ORT chains its NCHWc convs
with no reorder between them, so a conv can be faster there than any one-op case shows.
This script times both sides where they really run: ORT's own profile
(``SessionOptions.enable_profiling``: each node's kernel time in the graph its optimizer
left, fused BatchNormalization and activations included) and monolib's in-run profile
(``executor.profile(in_run=True)``), both on one thread, on the same random input, in
alternating rounds.

The convs are paired by name where the model names its nodes (ORT names an NCHWc conv
after its output, ``<node>_output_0_nchwc``), the rest in order by output shape (ORT's
NCHWc convs pad the channels up to their block): fusion takes BatchNormalization and
activations into the conv on both sides, never a conv into another, but in a graph with
branches the two may run same-shaped convs of different branches in another order, and
such a pair can then be two different convs. Prints each pair (ORT ms, monolib ms,
ratio, shape, monolib's fused op and ORT's node), the totals by op type on each side,
and the sum of the paired convs. Where ORT runs an activation as a node of its own (SiLU
as ``QuickGelu``), its conv's time leaves it out while monolib's fused conv holds it:
read such pairs with the totals by op type. Times are each op's least median over
rounds of 5 runs, on both sides. A ratio above 1 is a conv where monolib is slower than
ORT inside this model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ConvPair", "main", "monolib_ops", "ort_ops", "pair_convs", "profile_both"]

#: ORT's op names for a conv: as in the model, fused with an activation, in NCHWc
ORT_CONVS = ("Conv", "FusedConv", "NchwcConv")


@dataclass(frozen=True)
class ConvPair:
    """One conv timed on both sides: times in ms, ``shape`` its output shape (NCHW)."""

    ort_ms: float
    monolib_ms: float
    shape: tuple[int, ...]
    monolib_name: str
    ort_name: str

    @property
    def ratio(self) -> float:
        """monolib's time over ORT's (above 1: monolib slower)."""
        return self.monolib_ms / self.ort_ms if self.ort_ms > 0 else float("inf")


def _feeds(session, shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in session.get_inputs():
        shape = shapes.get(i.name) or tuple(d if isinstance(d, int) else 1 for d in i.shape)
        feeds[i.name] = rng.random(shape, dtype=np.float32)
    return feeds


def _ort_session(path: str, tmp: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.log_severity_level = 3
    so.profile_file_prefix = os.path.join(tmp, "ort")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_ops(profile_path: str, skip: int = 1, chunk: int = 5) -> list[dict]:
    """ORT's nodes in execution order from its profile file, each ``{"name", "op",
    "shape", "ms"}``: after ``skip`` runs, the median kernel time of each ``chunk``
    consecutive runs, the least of those (as monolib's in-run profile gives the median of
    its runs: a minimum over single runs would favour ORT on a noisy machine). ``shape``:
    output 0's as the node's output type gives it; None when the profile has none."""
    with open(profile_path) as f:
        events = json.load(f)
    times: dict[str, list[float]] = defaultdict(list)
    info: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        times[name].append(e["dur"] / 1e3)
        if name not in info:
            out = (e["args"].get("output_type_shape") or [{}])[0]
            shape = next(iter(out.values()), None) if out else None
            info[name] = {"name": name, "op": e["args"].get("op_name", "?"),
                          "shape": tuple(shape) if shape else None}

    def least_median(ts: list[float]) -> float:
        ts = ts[skip:] or ts
        return min(float(np.median(ts[i:i + chunk])) for i in range(0, len(ts), chunk))

    return [dict(info[n], ms=least_median(times[n])) for n in info]


def monolib_ops(profiles: Sequence[Sequence[dict]]) -> list[dict]:
    """monolib's fused ops in execution order from in-run profiles
    (``executor.profile(in_run=True)``: each op's median over a few runs), each
    ``{"name", "op", "shape", "ms", "fused"}``: the least of those medians."""
    best: dict[int, dict] = {}
    for profile in profiles:
        for p in profile:
            k = p["index"]
            if k not in best or p["time_ms"] < best[k]["ms"]:
                best[k] = {"name": p["name"], "op": p["op"], "shape": tuple(p["shape"]),
                           "fused": p.get("fused"), "ms": p["time_ms"]}
    return [best[k] for k in sorted(best)]


def profile_both(path: str, feeds: dict[str, np.ndarray], repeat: int,
                 shapes: dict[str, tuple[int, ...]]) -> tuple[list[dict], list[dict]]:
    """ORT's nodes (:func:`ort_ops`) and monolib's ops (:func:`monolib_ops`) of the model
    at ``path`` on one thread, each side run ``repeat`` times in rounds of 5 that
    alternate with the other side's (a machine whose speed drifts moves both alike)."""
    import monolib

    lib = monolib.compile(path, target="c", shapes=shapes or None)
    with tempfile.TemporaryDirectory() as tmp:
        root = monolib.load_module(lib.export_library(os.path.join(tmp, "model.so")))
        try:
            monolib.set_num_threads(1)
            gm = monolib.GraphModule(root["default"]())
            for k, v in feeds.items():
                gm.set_input(k, v)
            gm.run()
            session = _ort_session(path, tmp)
            session.run(None, feeds)
            profiles = []
            for _ in range(max(1, repeat // 5)):
                for _ in range(5):
                    session.run(None, feeds)
                profiles.append(gm.executor.profile(repeat=5, in_run=True))
            ort = ort_ops(session.end_profiling())
        finally:
            root.close()
    return ort, monolib_ops(profiles)


def _same_shape(ort_shape: Sequence[int] | None, shape: Sequence[int]) -> bool:
    """ORT's output shape is monolib's, but for an NCHWc conv's channels, which ORT pads
    up to its block (8 or 16: 4 channels read 8); None (not in the profile): taken as equal."""
    if ort_shape is None:
        return True
    o, m = tuple(ort_shape), tuple(shape)
    if len(o) != len(m) or len(o) < 2:
        return o == m
    return o[:1] + o[2:] == m[:1] + m[2:] and m[1] <= o[1] < m[1] + 16


def _ort_node_name(name: str) -> str:
    """The ONNX node an ORT profile name stands for: an NCHWc conv is named after its
    output tensor (``<node>_output_0_nchwc`` for exporters that name outputs so)."""
    return name.removesuffix("_nchwc").removesuffix("_output_0")


def pair_convs(ort: Sequence[dict], ml: Sequence[dict]) -> list[ConvPair]:
    """The convs of both sides paired: first by name (ORT's node, :func:`_ort_node_name`,
    is monolib's op), then the rest in order, each ORT conv with the first monolib conv
    left after the last one paired whose output shape matches (:func:`_same_shape`).
    Returned in monolib's order."""
    oc = [o for o in ort if o["op"] in ORT_CONVS]
    mc = [m for m in ml if m["op"] == "Conv"]
    by_name = {m["name"]: i for i, m in enumerate(mc)}
    paired: dict[int, dict] = {}
    rest = []
    for o in oc:
        i = by_name.get(_ort_node_name(o["name"]))
        if i is not None and i not in paired and _same_shape(o["shape"], mc[i]["shape"]):
            paired[i] = o
        else:
            rest.append(o)
    j = 0
    for o in rest:
        k = next((i for i in range(j, len(mc))
                  if i not in paired and _same_shape(o["shape"], mc[i]["shape"])), None)
        if k is not None:
            paired[k] = o
            j = k + 1
    return [ConvPair(paired[i]["ms"], mc[i]["ms"], tuple(mc[i]["shape"]), mc[i]["name"],
                     paired[i]["name"]) for i in sorted(paired)]


def _by_op(ops: Sequence[dict]) -> list[tuple[float, str]]:
    total: dict[str, float] = defaultdict(float)
    for o in ops:
        total[o["op"]] += o["ms"]
    return sorted(((t, k) for k, t in total.items()), reverse=True)


def main(argv: Sequence[str] | None = None) -> list[ConvPair]:
    """Run the comparison and print it; returns the conv pairs."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--shape", action="append", default=[],
                    help="NAME=1,3,224,224: an input's shape (dynamic dims default to 1)")
    ap.add_argument("--repeat", type=int, default=40, help="profiled runs a side")
    ap.add_argument("--top", type=int, default=40, help="pairs printed, slowest ratio first")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    shapes = {}
    for s in args.shape:
        name, dims = s.split("=")
        shapes[name] = tuple(int(d) for d in dims.split(","))
    probe = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    feeds = _feeds(probe, shapes, args.seed)
    shapes = {k: v.shape for k, v in feeds.items()}
    o, m = profile_both(args.model, feeds, args.repeat, shapes)
    pairs = pair_convs(o, m)
    n_o = sum(x["op"] in ORT_CONVS for x in o)
    n_m = sum(x["op"] == "Conv" for x in m)
    print(f"{args.model}: ORT {sum(x['ms'] for x in o):.3f} ms in {len(o)} nodes, "
          f"monolib {sum(x['ms'] for x in m):.3f} ms in {len(m)} ops (profiled, 1 thread)")
    print("ORT by op:    ", ", ".join(f"{k} {t:.3f}" for t, k in _by_op(o)[:8]))
    print("monolib by op:", ", ".join(f"{k} {t:.3f}" for t, k in _by_op(m)[:8]))
    print(f"convs paired: {len(pairs)} of ORT's {n_o} / monolib's {n_m}; "
          f"ORT {sum(p.ort_ms for p in pairs):.3f} ms, monolib {sum(p.monolib_ms for p in pairs):.3f}")
    print(f"{'ORT ms':>8} {'monolib':>8} {'ratio':>6}  {'shape':22s} monolib op | ORT node")
    for p in sorted(pairs, key=lambda p: -p.ratio)[: args.top]:
        print(f"{p.ort_ms:8.3f} {p.monolib_ms:8.3f} {p.ratio:6.2f}  {list(p.shape)!s:22s} "
              f"{p.monolib_name} | {p.ort_name}")
    return pairs


if __name__ == "__main__":
    main(sys.argv[1:])
