"""A picture of an exported library: ONE self-contained HTML page (``monolib view``).

The library is read WITHOUT dlopen, in the one pass of ``monolib inspect``
(:func:`monolib.tools.inspect.read_library`), so none of its code runs. The page
shows the module tree, the params, and each graph: fused ops as nodes (op + fused ONNX
ops, output shape and dtype), edges between them
by tensor name (shape and dtype on the edge), graph inputs and outputs; with a
profile, each op's time and share of the total. A graph with run-time dims shows them
with their bounds (``batch∈[1,8]``), the shapes it is specialized for, and its arena
size at the upper bounds.

The layout is computed here, in Python: longest-path layers (a node sits one layer
below its deepest producer), then a few sweeps of barycentre ordering within layers
(the classic Sugiyama heuristic, without dummy nodes: enough for the mostly chain-like
graphs of CNNs and RNNs). The page's own JS (no CDN, no external file) draws the SVG
from the embedded JSON and adds zoom (wheel), pan (drag), a search box that highlights
and centres the matching nodes, and a details panel for the clicked node.
"""

from __future__ import annotations

import argparse
import html
import itertools
import json
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from ..abi.graph_spec import check_fields, graph_layout
from ..abi.symbols import Symbol, dim_label
from ..errors import ContainerError, LibraryLoadError, VisualizeError
from .inspect import read_library

__all__ = [
    "add_view_parser",
    "cmd_view",
    "layout_graph",
    "read_graphs",
    "render_html",
    "render_page",
]

logger = logging.getLogger(__name__)

NODE_W, NODE_H = 210, 50  # px of a node box
GAP_X, GAP_Y = 36, 46  # px between boxes, between layers
SWEEPS = 6  # barycentre sweeps (down and up each)
DUMMY_W, DUMMY_GAP = 8, 10  # px of the slot a long edge takes in a layer it crosses
MAX_SPAN = 100_000  # layers; a longer edge is one curve (bounds the work on huge graphs)


def read_graphs(path: str) -> tuple[dict, dict[str, dict]]:
    """The inspect report and the full graph JSON of each factory in ``path``.

    Parameters
    ----------
    path : str
        An exported library (read without dlopen).

    Returns
    -------
    (report, graphs)
        ``report`` from :func:`monolib.tools.inspect.inspect_library`; ``graphs``
        maps the factory's module index (str) to its graph JSON (dict).

    Raises
    ------
    LibraryLoadError
        Missing or foreign library, or one exported by Apache TVM (no monolib graph).
    ContainerError
        Corrupt library; graph JSON not UTF-8 JSON or with a field of the wrong type.
    """
    report, graphs = read_library(path)
    if graphs is None:
        raise LibraryLoadError(f"{path}: a library exported by Apache TVM: no monolib graph to draw")
    return report, {str(i): g for i, g in graphs.items()}


def _profile_seconds(profile: Any) -> dict[str, float]:
    """``{node name: seconds}`` from a dict of seconds or ``GraphExecutor.profile()``."""
    if profile is None:
        return {}
    if isinstance(profile, Mapping):
        items = list(profile.items())
    else:  # the list of GraphExecutor.profile(): time_ms per op
        try:
            items = [(o["name"], o["time_ms"] / 1e3) for o in profile]
        except (KeyError, TypeError) as exc:
            raise VisualizeError(f"profile: not a dict or a list of ops ({exc!r})") from None
    out = {}
    for name, sec in items:
        if not isinstance(sec, (int, float)) or isinstance(sec, bool) or not sec >= 0:
            raise VisualizeError(f"profile: time of node {name!r} is {sec!r}, not seconds >= 0")
        if not math.isfinite(sec):
            raise VisualizeError(f"profile: time of node {name!r} is not finite")
        out[str(name)] = float(sec)
    return out


def _tensor(kind: str, t: dict) -> dict:
    return {"kind": kind, "name": t["name"], "shape": t.get("shape"), "dtype": t.get("dtype", "")}


def _vertices(graph: dict) -> tuple[list[dict], dict[str, int]]:
    """Graph inputs, fused ops, graph outputs as vertices; tensor -> producer index."""
    verts = [_tensor("input", t) for t in graph.get("inputs", [])]
    producer = {v["name"]: i for i, v in enumerate(verts)}
    for i, n in enumerate(graph.get("nodes", [])):
        producer.update((t, len(verts)) for t in n.get("outputs", []))
        vert = {**_tensor("op", n), "index": i, "op": n.get("op", "?")}
        vert.update((k, list(n.get(k, []))) for k in ("fused", "inputs", "outputs"))
        verts.append(vert)
    for t in graph.get("outputs", []):
        verts.append({**_tensor("output", t), "inputs": [t["name"]]})
    return verts, producer


def _edges(verts: list[dict], producer: dict[str, int], graph: dict) -> list[dict]:
    """One edge per (producer, consumer, tensor); shape/dtype from the producer.

    A Reshape/Squeeze/Flatten removed as a no-op leaves its consumer reading a
    tensor name nobody produces, and its producer's output read by nobody (the
    graph JSON records no aliases unless it has an ``aliases`` map, which is
    used). Such an unknown tensor read as a node's FIRST input (constants baked into
    the code come later) gets a ``guess`` edge (drawn dashed) from the NEAREST
    earlier unclaimed op whose output nobody reads (checked against the ONNX graphs
    of PP-OCRv4 rec/det and the cls model: 12 of 14 right, where first-come order
    got 5), else, for an op with no producer at all, from the op before it.
    """
    aliases = graph.get("aliases", {})
    params = {p.get("name") for p in graph.get("params", []) if isinstance(p, dict)}
    read = {aliases.get(t, t) for v in verts for t in v.get("inputs", [])}
    dangling = [i for i, v in enumerate(verts) if v["kind"] == "op"
                and not any(t in read for t in v["outputs"])]  # fmt: skip
    edges, claimed = [], set()
    for j, v in enumerate(verts):
        found = False
        for t in dict.fromkeys(v.get("inputs", [])):  # a tensor used twice: one edge
            i = producer.get(aliases.get(t, t))
            if i is None or i >= j:
                continue  # a param or a constant folded into the code
            edges.append(_edge(verts[i], i, j, t, aliases.get(t, t)))
            found = True
        first = (v.get("inputs") or [None])[0]
        if v["kind"] != "op" or first in params or aliases.get(first, first) in producer:
            continue
        free = [i for i in dangling if i < j and i not in claimed]
        if free:
            edges.append({**_edge(verts[free[-1]], free[-1], j, first, None), "guess": True})
            claimed.add(free[-1])
        elif not found and j > 0 and verts[j - 1]["kind"] == "op":
            edges.append({**_edge(verts[j - 1], j - 1, j, first, None), "guess": True})
    return edges


def _edge(p: dict, i: int, j: int, t: str, source: str | None) -> dict:
    """Edge i -> j carrying tensor ``t`` (shape/dtype known when it is output 0)."""
    known = p["kind"] == "input" or (p.get("outputs") or [None])[0] == source
    return {"s": i, "d": j, "t": t, "shape": p["shape"] if known else None,
            "dtype": p["dtype"] if known else ""}  # fmt: skip


def _layers(nverts: int, edges: list[dict]) -> list[int]:
    """Longest-path layer of each vertex (vertices are in topological order)."""
    layer = [0] * nverts
    for e in sorted(edges, key=lambda e: e["d"]):  # producers come first in run order
        layer[e["d"]] = max(layer[e["d"]], layer[e["s"]] + 1)
    return layer


def _chains(layer: list[int], edges: list[dict]) -> tuple[list[int], list[list[int]]]:
    """Dummy vertices on the layers an edge crosses (so long edges get their own
    slots and bends); returns the layers of all vertices and each edge's chain."""
    layers = list(layer)
    chains = []
    for e in edges:
        chain = [e["s"]]
        span = layer[e["d"]] - layer[e["s"]]
        if span <= MAX_SPAN:  # an edge longer than this is drawn as one curve
            for lay in range(layer[e["s"]] + 1, layer[e["d"]]):
                chain.append(len(layers))
                layers.append(lay)
        chain.append(e["d"])
        chains.append(chain)
    return layers, chains


def _order(layers: list[int], chains: list[list[int]]) -> list[list[int]]:
    """Vertices of each layer, ordered by barycentre sweeps down and up."""
    rows: list[list[int]] = [[] for _ in range(max(layers, default=-1) + 1)]
    for v, lay in enumerate(layers):
        rows[lay].append(v)
    preds: list[list[int]] = [[] for _ in layers]
    succs: list[list[int]] = [[] for _ in layers]
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            preds[b].append(a)
            succs[a].append(b)
    pos = [0.0] * len(layers)
    for row in rows:
        for k, v in enumerate(row):
            pos[v] = k - (len(row) - 1) / 2
    for sweep in range(2 * SWEEPS):
        nbrs = preds if sweep % 2 == 0 else succs
        for row in rows if sweep % 2 == 0 else reversed(rows):

            def key(v: int, nbrs: list[list[int]] = nbrs) -> float:
                return sum(pos[u] for u in nbrs[v]) / len(nbrs[v]) if nbrs[v] else pos[v]

            row.sort(key=key)  # stable: ties keep the previous order
            for k, v in enumerate(row):  # centred on 0, one slot apart
                pos[v] = k - (len(row) - 1) / 2
    return rows


def _place(rows: list[list[int]], nreal: int, chains: list[list[int]]) -> list[float]:
    """x centre (px) of every vertex: each one under the mean of its producers,
    pushed right as little as needed to keep the layer's order without overlap."""
    preds: dict[int, list[int]] = {}
    for chain in chains:
        for a, b in itertools.pairwise(chain):
            preds.setdefault(b, []).append(a)
    x = [0.0] * (nreal + sum(len(c) - 2 for c in chains))
    for row in rows:
        right = -math.inf  # right end of the previous box, gap included
        for v in row:
            half = (NODE_W if v < nreal else DUMMY_W) / 2
            ps = preds.get(v, [])
            # Real producers first: a skip edge's slot then bends around the main
            # chain instead of pulling it sideways block after block.
            ps = [u for u in ps if u < nreal] or ps
            left = right + half if right > -math.inf else half
            x[v] = max(sum(x[u] for u in ps) / len(ps), left) if ps else left
            right = x[v] + half + (GAP_X if v < nreal else DUMMY_GAP)
    lo = min((x[v] - (NODE_W if v < nreal else DUMMY_W) / 2 for r in rows for v in r), default=0.0)
    return [xv - lo + GAP_X for xv in x]


def layout_graph(graph: dict, profile: Any = None) -> dict:
    """Lay out one graph JSON for drawing.

    Parameters
    ----------
    graph : dict
        A graph JSON (``docs/ARCHITECTURE.md``: inputs, outputs, nodes, params).
    profile : dict of str -> float, or list of dict, optional
        Seconds per node name, or the list of ``GraphExecutor.profile()``
        (``time_ms`` per op).

    Returns
    -------
    dict
        ``name``, ``vertices`` (kind input/op/output, name, op, fused, shape,
        dtype, inputs, outputs, ``x``/``y`` centre in px, ``params`` (name, shape,
        dtype, bytes of the params the op reads), ``time`` seconds and ``share``
        when profiled), ``edges`` (``s``, ``d`` vertex indices, tensor ``t``, shape,
        dtype, ``pts`` waypoints in px, ``guess`` when the producer is inferred),
        ``width``/``height`` px, ``summary`` (counts and bytes).

    Raises
    ------
    VisualizeError
        Malformed nodes; profile times that are not seconds >= 0.
    """
    try:
        check_fields(graph)
    except ContainerError as exc:  # a dict handed in, not a library read: a drawing error
        raise VisualizeError(str(exc)) from None
    times = _profile_seconds(profile)
    verts, producer = _vertices(graph)
    edges = _edges(verts, producer, graph)
    layer = _layers(len(verts), edges)
    layers, chains = _chains(layer, edges)
    x = _place(_order(layers, chains), len(verts), chains)
    y = [lay * (NODE_H + GAP_Y) + NODE_H / 2 + GAP_Y for lay in layers]
    for v, vert in enumerate(verts):
        vert["x"], vert["y"] = round(x[v], 1), y[v]
    for e, chain in zip(edges, chains):
        pts = [[round(x[v], 1), y[v]] for v in chain]
        # Inner points of a vertical run add nothing to the drawn curve: drop them.
        keep = [
            0,
            *(k for k in range(1, len(pts) - 1) if not pts[k - 1][0] == pts[k][0] == pts[k + 1][0]),
            len(pts) - 1,
        ]
        e["pts"] = [pts[k] for k in keep]
    _attach_params(graph, verts)
    total = sum(times.get(v["name"], 0.0) for v in verts if v["kind"] == "op")
    for v in verts:
        if v["kind"] == "op" and v["name"] in times:
            v["time"] = times[v["name"]]
            v["share"] = v["time"] / total if total else 0.0
    unknown = set(times) - {v["name"] for v in verts if v["kind"] == "op"}
    if unknown:
        logger.warning(
            "profile names %d nodes not in the graph, e.g. %s", len(unknown), sorted(unknown)[:3]
        )
    return {
        "name": str(graph.get("name", "")),
        "vertices": verts,
        "edges": edges,
        "width": max(x, default=0.0) + NODE_W / 2 + GAP_X,
        "height": (max(layers, default=0) + 1) * (NODE_H + GAP_Y) + GAP_Y,
        "summary": _summary(graph, total if times else None),
    }


def _attach_params(graph: dict, verts: list[dict]) -> None:
    """Each op's params: named among its inputs or prefixed ``<node name>.``."""
    params = {p.get("name"): p for p in graph.get("params", []) if isinstance(p, dict)}
    for v in verts:
        if v["kind"] != "op":
            continue
        prefix = v["name"] + "."
        names = [t for t in v["inputs"] if t in params]
        names += [
            n for n in params if isinstance(n, str) and n.startswith(prefix) and n not in names
        ]
        v["params"] = [
            [n, params[n].get("shape"), params[n].get("dtype", ""), int(params[n].get("nbytes", 0))]
            for n in names
        ]


def _run_time_dims(graph: dict) -> dict[str, Symbol]:
    """``{name: Symbol}`` of a version-2 graph's run-time dims; empty for a static
    graph or unreadable fields (running the library reports those)."""
    try:
        layout = graph_layout(graph)
    except ContainerError:
        return {}
    return {} if layout is None else layout.by_name


def _summary(graph: dict, total: float | None) -> dict:
    params = [p for p in graph.get("params", []) if isinstance(p, dict)]
    big = sorted(params, key=lambda p: -int(p.get("nbytes", 0)))[:12]
    symbols = _run_time_dims(graph)

    def tensor(t: dict) -> dict:  # a run-time dim shown with its bounds: batch∈[1,8]
        out = {k: t.get(k) for k in ("name", "shape", "dtype")}
        if symbols and isinstance(out["shape"], list):
            out["shape"] = [d if type(d) is int else dim_label(d, symbols) for d in out["shape"]]
        return out

    specs = []
    if symbols:
        layout = graph_layout(graph)
        specs = [", ".join(f"{k}={v}" for k, v in s.items()) for s in layout.specializations]
    return {
        "inputs": [tensor(t) for t in graph.get("inputs", [])],
        "outputs": [tensor(t) for t in graph.get("outputs", [])],
        "symbols": [s.label() for s in symbols.values()],
        "specializations": specs,
        "fused_ops": len(graph.get("nodes", [])),
        "params_count": len(params),
        "params_bytes": int(
            graph.get("params_bytes", sum(int(p.get("nbytes", 0)) for p in params))
        ),
        "arena_bytes": int(graph.get("arena_bytes", 0)),
        "largest_params": [
            [p.get("name"), p.get("shape"), p.get("dtype"), int(p.get("nbytes", 0))] for p in big
        ],
        "total_time": total,
    }


def render_page(doc: dict) -> str:
    """The HTML page for ``doc`` (``title``, ``library`` (inspect report or None),
    ``graphs``: list of :func:`layout_graph` results). Pure: no file access."""
    data = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    # Inside <script>: no "</script>" or "<!--" can end it; JSON allows \\u escapes.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (
        _PAGE.replace("@@TITLE@@", html.escape(doc.get("title", "monolib view")))
        .replace("@@CSS@@", _CSS)
        .replace("@@JS@@", _JS)
        .replace("@@DATA@@", data)
    )


def render_html(path: str, out_html: str, profile: Any = None) -> str:
    """Write ONE self-contained HTML page picturing the library ``path``.

    Parameters
    ----------
    path : str
        An exported library (``export_library``); read without dlopen.
    out_html : str
        The page to write (atomically: a temp file renamed over it).
    profile : dict of str -> float, or list of dict, optional
        Seconds per fused op (node name), or ``GraphExecutor.profile()``'s list:
        node colour, time and share are shown.

    Returns
    -------
    str
        ``out_html``.

    Raises
    ------
    LibraryLoadError, ContainerError
        The library cannot be read.
    VisualizeError
        A malformed graph or profile.
    """
    report, graphs = read_graphs(path)
    laid = []
    for idx, graph in graphs.items():
        g = layout_graph(graph, profile)
        g["module"] = int(idx)
        laid.append(g)
    doc = {"title": f"monolib view: {os.path.basename(path)}", "library": report, "graphs": laid}
    text = render_page(doc)
    tmp = f"{out_html}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out_html)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    logger.info("wrote %s (%d bytes, %d graphs)", out_html, len(text), len(laid))
    return out_html


def add_view_parser(sub: Any) -> None:
    """Add ``monolib view LIB [-o OUT.html] [--profile] [--repeat N]`` to the CLI's
    subparsers ``sub`` (an ``argparse`` sub-parser action)."""
    p = sub.add_parser("view", help="write an HTML picture of a library (module tree, graph)")
    p.add_argument("library", help="the exported library (.so)")
    p.add_argument("-o", "--output", help="the HTML file (default: LIBRARY.html)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="load and run the library (random inputs) to show op times",
    )
    p.add_argument("--repeat", type=int, default=5, help="profile runs per op (best of)")


def cmd_view(args: argparse.Namespace, console: Any) -> int:
    """Run ``monolib view`` (see :func:`add_view_parser`). With ``--profile`` the
    library IS loaded (dlopen) and run on random inputs; otherwise it is only read."""
    profile = None
    if args.profile:
        import numpy as np

        from ..runtime import GraphModule, cpu, load_module

        gm = GraphModule(load_module(args.library)["default"](cpu()))
        rng = np.random.default_rng(0)
        shapes, dtypes = gm.get_input_info()
        for name, shape in shapes.items():  # integer inputs get small values
            gm.set_input(name, (rng.standard_normal(shape) * 2).astype(dtypes[name]))
        profile = gm.executor.profile(repeat=max(1, args.repeat))
    out = args.output or f"{args.library}.html"
    render_html(args.library, out, profile)
    console.print(f"wrote {out}", markup=False)
    return 0


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>@@TITLE@@</title>
<style>@@CSS@@</style></head>
<body>
<aside id="side"><h1>@@TITLE@@</h1><div id="info"></div></aside>
<main id="main">
<div id="bar"><select id="graphsel"></select>
<input id="search" type="search" placeholder="search ops (conv+relu), names, shapes  [/ focus, Enter next, Esc clear]">
<span id="hits"></span><button id="fit">fit</button><button id="one">1:1</button></div>
<svg id="svg" xmlns="http://www.w3.org/2000/svg"><defs><marker id="arrow" viewBox="0 0 8 8"
 refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z"
 fill="#8a94a6"/></marker></defs><g id="vp"><g id="edges"></g><g id="nodes"></g></g></svg>
<div id="details"></div></main>
<script type="application/json" id="data">@@DATA@@</script>
<script>@@JS@@</script>
</body></html>
"""

_CSS = """
*{box-sizing:border-box}body{margin:0;font:13px/1.35 system-ui,sans-serif;color:#1d2330;
display:flex;height:100vh;overflow:hidden}
#side{width:320px;overflow-y:auto;overflow-x:hidden;overflow-wrap:anywhere;padding:10px 12px;border-right:1px solid #d5dae3;background:#f7f8fa}
#side h1{font-size:15px;margin:0 0 8px;word-break:break-all}#side h2{font-size:13px;margin:12px 0 4px}
#side table{border-collapse:collapse;width:100%;font-size:12px}#side td{padding:1px 4px;
vertical-align:top;word-break:break-all}#side ul{margin:0;padding-left:16px}
#main{flex:1;position:relative;display:flex;flex-direction:column;min-width:0}
#bar{padding:6px;border-bottom:1px solid #d5dae3;display:flex;gap:6px;align-items:center}
#search{flex:1;max-width:420px;padding:4px}#svg{flex:1;width:100%;cursor:grab;background:#fff}
#svg.drag{cursor:grabbing}.node rect{fill:#eef3fb;stroke:#5b7bb5;stroke-width:1.2}
.node.io rect{fill:#fff7e0;stroke:#c49a2c}.node text{font-size:12px;fill:#1d2330;pointer-events:none}
.node .sub{font-size:11px;fill:#55607a}.node .t{font-size:11px;fill:#9a2a1a}
.node.match rect{stroke:#e0115f;stroke-width:3}.node.sel rect{stroke:#111;stroke-width:3}
.dim .node:not(.match) {opacity:.35}.edge{fill:none;stroke:#8a94a6;stroke-width:1.2}
.edge.guess{stroke-dasharray:5 4}.edge.hot{stroke:#e0115f;stroke-width:2.5}.elabel{font-size:10px;fill:#6b7489}
.far .node text,.far .elabel{display:none}.mid .elabel{display:none}
#details{position:absolute;right:10px;bottom:10px;max-width:460px;max-height:45%;overflow:auto;
background:#fffffff0;border:1px solid #c5ccd8;padding:8px;font-size:12px;display:none}
.k{color:#55607a;white-space:nowrap}.mono{font-family:ui-monospace,monospace}a{color:#2552a3;cursor:pointer}
"""

_JS = r"""
"use strict";
const DOC = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg", W = 210, H = 50;
const $ = (id) => document.getElementById(id);
const svg = $("svg"), vp = $("vp");
let G = null, view = {x: 0, y: 0, k: 1}, hits = [], hit = -1, nodeEls = [];

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function h(tag, text, parent) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
  while (n >= 1024 && i < 3) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
const shp = (s) => s ? "[" + s.join("\u00d7") + "]" : "";
const cut = (s, n) => s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
function ms(t) { return (t * 1e3).toFixed(3) + " ms"; }

function apply() {
  vp.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
  svg.classList.toggle("far", view.k < 0.35);
  svg.classList.toggle("mid", view.k >= 0.35 && view.k < 0.7);
}
function fit() {
  const r = svg.getBoundingClientRect();
  view.k = Math.min(1, (r.width - 20) / G.width, (r.height - 20) / G.height);
  view.k = Math.max(view.k, 0.02);
  view.x = (r.width - G.width * view.k) / 2; view.y = 10; apply();
}
function one() {
  const r = svg.getBoundingClientRect();
  const v = G.vertices[0];  // 1:1 at the top, the first vertex centred
  view.k = 1; view.x = v ? r.width / 2 - v.x : 10; view.y = 10; apply();
}
function centre(v) {
  const r = svg.getBoundingClientRect();
  view.k = Math.max(view.k, 0.8);
  view.x = r.width / 2 - v.x * view.k; view.y = r.height / 2 - v.y * view.k; apply();
}

function heat(share) {  // white -> red by share of the total time
  const a = Math.min(1, Math.sqrt(share / G.maxShare));
  return `rgb(${255 - 20 * a},${243 - 170 * a},${240 - 180 * a})`;
}

function edgePath(e) {  // vertical-tangent cubic through the waypoints
  const P = e.pts, n = P.length;
  const y = (k) => P[k][1] + (k === 0 ? H / 2 : k === n - 1 ? -H / 2 : 0);
  let d = `M${P[0][0]},${y(0)}`;
  for (let k = 1; k < n; k++) {
    const y0 = y(k - 1), y1 = y(k), dy = Math.max(12, (y1 - y0) / 2);
    d += `C${P[k - 1][0]},${y0 + dy} ${P[k][0]},${y1 - dy} ${P[k][0]},${y1}`;
  }
  return d;
}

function drawEdges() {
  const eg = $("edges"); eg.textContent = "";
  G.edges.forEach((e, i) => {
    const p = el("path", {class: "edge" + (e.guess ? " guess" : ""), d: edgePath(e),
      "marker-end": "url(#arrow)", "data-e": i}, eg);
    const lab = e.t + (e.shape ? " " + shp(e.shape) + " " + e.dtype : "") +
      (e.guess ? "\n(producer not recorded in the graph JSON: the op before in run order)" : "");
    el("title", {}, p, lab);
    const a = e.pts[0], b = e.pts[1];
    if (e.shape && e.pts.length === 2) el("text", {class: "elabel", x: (a[0] + b[0]) / 2 + 4,
      y: (a[1] + H / 2 + b[1] - (e.pts.length === 2 ? H / 2 : 0)) / 2 + 3}, eg, shp(e.shape) + " " + e.dtype);
  });
}

function drawNodes() {
  const ng = $("nodes"); ng.textContent = ""; nodeEls = [];
  G.vertices.forEach((v, i) => {
    const g = el("g", {class: "node " + (v.kind === "op" ? "op" : "io"), "data-i": i,
      transform: `translate(${v.x - W / 2},${v.y - H / 2})`}, ng);
    const r = el("rect", {width: W, height: H, rx: 6}, g);
    if (v.share !== undefined) r.style.fill = heat(v.share);
    const title = v.kind === "op" ? [v.op, ...v.fused].join("+") : v.kind + " " + v.name;
    el("text", {x: 8, y: 16}, g, cut(title, 28));
    el("text", {class: "sub", x: 8, y: 31}, g, cut((v.kind === "op" ? v.name + "  " : "") +
      shp(v.shape) + " " + v.dtype, 31));
    if (v.time !== undefined)
      el("text", {class: "t", x: 8, y: 45}, g, ms(v.time) + "  " + (100 * v.share).toFixed(1) + "%");
    const pb = (v.params || []).reduce((a, p) => a + p[3], 0);
    el("title", {}, g, title + "\n" + v.name + "\n" + shp(v.shape) + " " + v.dtype +
      (pb ? "\nparams " + bytes(pb) : "") + (v.time !== undefined ? "\n" + ms(v.time) : ""));
    nodeEls.push(g);
  });
}

function details(i) {
  const v = G.vertices[i], d = $("details"); d.textContent = ""; d.style.display = "block";
  nodeEls.forEach((n) => n.classList.remove("sel")); nodeEls[i].classList.add("sel");
  document.querySelectorAll(".edge.hot").forEach((e) => e.classList.remove("hot"));
  G.edges.forEach((e, k) => { if (e.s === i || e.d === i)
    document.querySelector(`.edge[data-e="${k}"]`).classList.add("hot"); });
  h("b", (v.kind === "op" ? `#${v.index} ` : v.kind + " ") + v.name, d);
  const t = h("table", undefined, d);
  const row = (k, val) => { const r = h("tr", undefined, t); h("td", k, r).className = "k";
    h("td", val, r).className = "mono"; };
  if (v.kind === "op") row("ops", [v.op, ...v.fused].join(" + "));
  row("output", shp(v.shape) + " " + v.dtype);
  if (v.time !== undefined) row("time", ms(v.time) + " (" + (100 * v.share).toFixed(2) + "%)");
  (v.inputs || []).forEach((n) => row("input", n));
  (v.outputs || []).forEach((n) => row("output name", n));
  let pb = 0;
  (v.params || []).forEach((p) => { pb += p[3]; row("param", `${p[0]} ${shp(p[1])} ${p[2]} ${bytes(p[3])}`); });
  if (v.params && v.params.length) row("params", bytes(pb));
}

function search(q) {
  q = q.trim().toLowerCase(); hits = []; hit = -1;
  G.vertices.forEach((v, i) => {
    const ops = v.kind === "op" ? [v.op, ...v.fused].join("+") : v.kind;  // "conv+relu" finds fusions
    const s = [v.name, ops, shp(v.shape), v.dtype, ...(v.outputs || [])].join(" ").toLowerCase();
    const m = q !== "" && s.includes(q);
    nodeEls[i].classList.toggle("match", m);
    if (m) hits.push(i);
  });
  svg.classList.toggle("dim", hits.length > 0);
  $("hits").textContent = q ? hits.length + " match" + (hits.length === 1 ? "" : "es") : "";
  if (hits.length) next();
}
function next() {
  if (!hits.length) return;
  hit = (hit + 1) % hits.length; centre(G.vertices[hits[hit]]);
  $("hits").textContent = `${hit + 1}/${hits.length}`;
}

function sideInfo() {
  const s = $("info"); s.textContent = "";
  const L = DOC.library, S = G.summary;
  if (L) {
    h("div", `${L.binary}, ${bytes(L.file_size)}; container v${L.container.format_version} (${L.container.producer})`, s);
    h("h2", "module tree", s);
    const walk = (i, parent, seen) => {
      const m = L.modules[i], li = h("li", `[${i}] ${m.type_key}`, parent);
      const secs = m.sections.map((x) => `${x.name} ${bytes(x.size)}`).join(", ");
      if (secs) h("span", " \u2014 " + secs, li).className = "k";
      if (seen.has(i) || !m.imports.length) return;
      const ul = h("ul", undefined, li);
      m.imports.forEach((c) => walk(c, ul, new Set([...seen, i])));
    };
    const ul = h("ul", undefined, s); walk(L.root, ul, new Set());
  }
  h("h2", `graph ${G.name}`, s);
  const t = h("table", undefined, s);
  const row = (k, v) => { const r = h("tr", undefined, t); h("td", k, r).className = "k"; h("td", v, r); };
  S.inputs.forEach((x) => row("input", `${x.name} ${shp(x.shape)} ${x.dtype}`));
  S.outputs.forEach((x) => row("output", `${x.name} ${shp(x.shape)} ${x.dtype}`));
  row("fused ops", String(S.fused_ops));
  row("params", `${S.params_count} tensors, ${bytes(S.params_bytes)}`);
  if (S.symbols.length) {
    row("run-time dims", S.symbols.join(", "));
    row("specialized for", S.specializations.join("; ") || "none (generic kernels only)");
  }
  row("arena", bytes(S.arena_bytes) + (S.symbols.length ? " (at the upper bounds)" : ""));
  if (S.total_time !== null) row("op time sum", ms(S.total_time));
  const ops = {};
  G.vertices.forEach((v) => { if (v.kind === "op") [v.op, ...v.fused].forEach((o) => ops[o] = (ops[o] || 0) + 1); });
  h("h2", "ONNX ops", s);
  h("div", Object.entries(ops).sort((a, b) => b[1] - a[1]).map((e) => e[0] + " " + e[1]).join(", "), s);
  if (S.total_time !== null) {
    h("h2", "slowest ops", s);
    const tt = h("table", undefined, s);
    G.vertices.map((v, i) => [v, i]).filter((p) => p[0].time !== undefined)
      .sort((a, b) => b[0].time - a[0].time).slice(0, 15).forEach(([v, i]) => {
        const r = h("tr", undefined, tt), a = h("a", v.name, h("td", undefined, r));
        a.onclick = () => { centre(v); details(i); };
        h("td", ms(v.time), r); h("td", (100 * v.share).toFixed(1) + "%", r);
      });
  }
  h("h2", "largest params", s);
  const pt = h("table", undefined, s);
  S.largest_params.forEach((p) => { const r = h("tr", undefined, pt);
    h("td", p[0], r); h("td", shp(p[1]), r); h("td", bytes(p[3]), r); });
}

function show(gi) {
  G = DOC.graphs[gi];
  G.maxShare = Math.max(1e-12, ...G.vertices.map((v) => v.share || 0));
  drawEdges(); drawNodes(); sideInfo(); $("details").style.display = "none";
  $("search").value = ""; search(""); one();
  document.body.setAttribute("data-nodes", String(nodeEls.length));
}

function wire() {
  let drag = null;
  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
    const k = Math.min(4, Math.max(0.02, view.k * Math.exp(-ev.deltaY * 0.0015)));
    view.x = px - (px - view.x) * k / view.k; view.y = py - (py - view.y) * k / view.k;
    view.k = k; apply();
  }, {passive: false});
  svg.addEventListener("mousedown", (ev) => {
    drag = {x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y, moved: false};
    svg.classList.add("drag");
  });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    view.x = drag.vx + dx; view.y = drag.vy + dy; apply();
  });
  window.addEventListener("mouseup", (ev) => {
    if (drag && !drag.moved) {
      const g = ev.target.closest && ev.target.closest(".node");
      if (g) details(+g.getAttribute("data-i"));
    }
    drag = null; svg.classList.remove("drag");
  });
  $("search").addEventListener("input", (ev) => search(ev.target.value));
  $("search").addEventListener("keydown", (ev) => { if (ev.key === "Enter") next(); });
  $("fit").onclick = fit; $("one").onclick = one;
  window.addEventListener("keydown", (ev) => {  // "/" to search, Escape to clear
    if (ev.key === "/" && document.activeElement !== $("search")) {
      ev.preventDefault(); $("search").focus();
    } else if (ev.key === "Escape") {
      $("search").value = ""; search(""); $("details").style.display = "none";
    }
  });
  const sel = $("graphsel");
  DOC.graphs.forEach((g, i) => { const o = h("option", `module ${g.module}: ${g.name}`, sel); o.value = i; });
  sel.style.display = DOC.graphs.length > 1 ? "" : "none";
  sel.onchange = () => show(+sel.value);
}

wire();
if (DOC.graphs.length) {
  show(0);
  const arg = new URLSearchParams(location.hash.slice(1));  // view.html#fit&q=Conv
  if (arg.has("fit")) fit();
  const q = arg.get("q");
  if (q) { $("search").value = q; search(q); }
}
else $("info").textContent = "this library holds no graph executor factory";
"""
