"""``monolib view``: the layout (layers, order, long-edge slots), the self-contained
HTML page of a real exported library, and the page as a headless browser draws it."""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monolib.errors import LibraryLoadError, MonolibError, VisualizeError
from monolib.tools.inspect import inspect_library
from monolib.tools.visualize import (
    NODE_W,
    layout_graph,
    read_graphs,
    render_html,
    render_page,
)



def t(name, shape=(1, 4), dtype="float32"):
    return {"name": name, "shape": list(shape), "dtype": dtype, "offset": 0}


def node(name, op, inputs, out, shape=(1, 4), fused=()):
    return {
        "name": name,
        "op": op,
        "fused": list(fused),
        "inputs": inputs,
        "outputs": [out],
        "shape": list(shape),
        "dtype": "float32",
    }


def diamond() -> dict:
    """x -> a -> b -> c -> d(a, c, x): one skip edge over two layers, one over four."""
    return {
        "name": "diamond",
        "inputs": [t("x")],
        "outputs": [t("d")],
        "nodes": [
            node("A", "Conv", ["x", "w"], "a", fused=["Relu"]),
            node("B", "Relu", ["a"], "b"),
            node("C", "Sigmoid", ["b"], "c", shape=(1, 2)),
            node("D", "Add", ["a", "c", "x", "a"], "d"),
        ],
        "params": [
            {"name": "w", "shape": [4, 4], "dtype": "float32", "offset": 0, "nbytes": 64},
            {"name": "A.packed", "shape": [16], "dtype": "float32", "offset": 64, "nbytes": 64},
        ],
        "params_bytes": 128,
    }


def vertex(g, name):
    return next(v for v in g["vertices"] if v["name"] == name and v["kind"] == "op")


def test_layers_edges_and_params():
    g = layout_graph(diamond())
    kinds = [v["kind"] for v in g["vertices"]]
    assert kinds == ["input", "op", "op", "op", "op", "output"]
    ys = {v["name"]: v["y"] for v in g["vertices"] if v["kind"] == "op"}
    assert ys["A"] < ys["B"] < ys["C"] < ys["D"]  # longest path: D below C
    pairs = {
        (g["vertices"][e["s"]]["name"], g["vertices"][e["d"]]["name"], e["t"]) for e in g["edges"]
    }
    assert pairs == {
        ("x", "A", "x"),
        ("A", "B", "a"),
        ("B", "C", "b"),
        ("C", "D", "c"),
        ("A", "D", "a"),
        ("x", "D", "x"),
        ("D", "d", "d"),
    }
    assert len(g["edges"]) == 7  # "a" read twice by D: one edge
    c_to_d = next(e for e in g["edges"] if e["t"] == "c")
    assert (c_to_d["shape"], c_to_d["dtype"]) == ([1, 2], "float32")
    assert [p[0] for p in vertex(g, "A")["params"]] == ["w", "A.packed"]
    assert g["summary"]["params_bytes"] == 128 and g["summary"]["fused_ops"] == 4


def test_long_edges_get_their_own_slots():
    g = layout_graph(diamond())
    verts = g["vertices"]
    for e in g["edges"]:
        a, b = verts[e["s"]], verts[e["d"]]
        assert e["pts"][0] == [a["x"], a["y"]] and e["pts"][-1] == [b["x"], b["y"]]
    x_to_d = next(e for e in g["edges"] if e["t"] == "x" and verts[e["d"]]["name"] == "D")
    assert len(x_to_d["pts"]) > 2  # bends around B and C
    for px, py in x_to_d["pts"][1:-1]:
        for v in verts:
            assert not (v["y"] == py and abs(v["x"] - px) < NODE_W / 2), "edge slot crosses a box"


def test_no_boxes_overlap_in_a_layer():
    g = layout_graph(big_graph(300))
    rows: dict[float, list[float]] = {}
    for v in g["vertices"]:
        rows.setdefault(v["y"], []).append(v["x"])
    for xs in rows.values():
        xs.sort()
        assert all(b - a >= NODE_W for a, b in itertools.pairwise(xs))
    assert all(0 < v["x"] < g["width"] and 0 < v["y"] < g["height"] for v in g["vertices"])


def test_producer_of_a_removed_reshape_is_guessed_or_read_from_aliases():
    graph = diamond()
    graph["nodes"][1]["inputs"] = ["a_reshaped"]  # a no-op Reshape was removed
    g = layout_graph(graph)
    guess = [e for e in g["edges"] if e.get("guess")]
    assert [(g["vertices"][e["s"]]["name"], e["t"]) for e in guess] == [("A", "a_reshaped")]
    assert vertex(g, "B")["y"] > vertex(g, "A")["y"]
    graph["aliases"] = {"a_reshaped": "a"}
    g = layout_graph(graph)
    assert not any(e.get("guess") for e in g["edges"])
    e = next(e for e in g["edges"] if e["t"] == "a_reshaped")
    assert g["vertices"][e["s"]]["name"] == "A" and e["shape"] == [1, 4]


def test_profile_times_and_shares():
    g = layout_graph(diamond(), {"A": 0.003, "B": 0.001, "C": 0.0, "D": 0.004})
    assert vertex(g, "A")["share"] == pytest.approx(0.375)
    assert sum(v.get("share", 0) for v in g["vertices"]) == pytest.approx(1.0)
    assert g["summary"]["total_time"] == pytest.approx(0.008)
    ops = [{"name": "A", "time_ms": 2.0}, {"name": "D", "time_ms": 6.0}]  # GraphExecutor.profile()
    g = layout_graph(diamond(), ops)
    assert vertex(g, "D")["time"] == pytest.approx(0.006) and vertex(g, "D")["share"] == 0.75
    assert "time" not in vertex(g, "B")
    assert layout_graph(diamond())["summary"]["total_time"] is None


@pytest.mark.parametrize(
    ("profile", "match"),
    [
        ({"A": -1.0}, "node 'A' is -1.0"),
        ({"A": "fast"}, "node 'A' is 'fast'"),
        ({"A": float("inf")}, "node 'A' is not finite"),
        ({"A": float("nan")}, "node 'A' is nan"),
        ([{"name": "A"}], "not a dict or a list"),
    ],
)
def test_bad_profiles(profile, match):
    with pytest.raises(VisualizeError, match=match) as info:
        layout_graph(diamond(), profile)
    assert isinstance(info.value, MonolibError)


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("nodes", 2), {"op": "Relu"}, r"nodes\[2\] is not an object with a string name"),
        (("nodes", 1, "inputs"), "a", r"nodes\[1\] \('B'\): bad inputs 'a'"),
        (("nodes", 1, "shape"), [1.5], r"nodes\[1\] \('B'\): bad shape"),
        (("inputs",), {"x": 1}, "inputs is not a list"),
        (("params", 0, "nbytes"), -1, r"params\[0\] \('w'\): bad nbytes -1"),
        (("params_bytes",), "12", "params_bytes '12' is not a byte count"),
        (("aliases",), [], "aliases must map"),
    ],
)
def test_malformed_graphs(path, value, match):
    graph = diamond()
    target = graph
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(VisualizeError, match=match):
        layout_graph(graph)
    with pytest.raises(VisualizeError, match="not an object"):
        layout_graph([])


JUNK = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3), st.floats(),
                 st.lists(st.integers(-1, 4), max_size=3), st.dictionaries(st.text(max_size=2),
                 st.integers(), max_size=2))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_corruption_is_a_visualize_error_or_a_picture(data):
    graph = diamond()
    target = graph
    keys = ["inputs", "outputs", "nodes", "params", "params_bytes", "name", "aliases"]
    key = data.draw(st.sampled_from(keys))
    while isinstance(target.get(key) if isinstance(target, dict) else None, (list, dict)):
        inner = target[key]
        if isinstance(inner, list) and inner:
            idx = data.draw(st.integers(0, len(inner) - 1))
            if not isinstance(inner[idx], dict) or data.draw(st.booleans()):
                inner[idx] = data.draw(JUNK)
                break
            target, key = inner[idx], data.draw(st.sampled_from(sorted(inner[idx])))
        else:
            break
    else:
        target[key] = data.draw(JUNK)
    try:
        g = layout_graph(graph)
    except VisualizeError:
        return
    render_page({"title": "fuzz", "library": None, "graphs": [g]})


def test_page_is_self_contained_and_escapes_names():
    graph = diamond()
    graph["nodes"][0]["name"] = "</script><img src=x onerror=alert(1)>"
    page = render_page({"title": "t <b>", "library": None, "graphs": [layout_graph(graph)]})
    assert "</script><img" not in page and "t &lt;b&gt;" in page
    found = re.search(r'id="data">(.*?)</script>', page, re.DOTALL)
    code = page[: found.start(1)] + page[found.end(1) :]  # the page without its data
    assert code.count("<script") == 2 and "<link" not in code and " src=" not in code
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", code)  # no CDN, no fetch
    assert "fetch(" not in code and "XMLHttpRequest" not in code and "import(" not in code
    data = json.loads(found.group(1))
    assert data["graphs"][0]["vertices"][1]["name"].startswith("</script>")


def big_graph(n: int) -> dict:
    """A ResNet-like chain of ``n`` ops: a skip every 4th op, the input read every 50."""
    nodes, prev, skip = [], "x", "x"
    for i in range(n):
        ins = [prev] + ([skip] if i % 4 == 3 else []) + (["x"] if i % 50 == 10 else [])
        skip = f"t{i}" if i % 4 == 3 else skip
        nodes.append(node(f"n{i}", "Add" if len(ins) > 1 else "Conv", ins, f"t{i}"))
        prev = f"t{i}"
    return {"name": "big", "inputs": [t("x")], "outputs": [t(prev)], "nodes": nodes}


def test_a_1500_node_graph_lays_out_fast():
    start = time.perf_counter()
    g = layout_graph(big_graph(1500))
    assert time.perf_counter() - start < 20  # ~1 s unloaded
    assert sum(v["kind"] == "op" for v in g["vertices"]) == 1500
    assert len(render_page({"title": "big", "library": None, "graphs": [g]})) < 3_000_000


def test_missing_library(tmp_path):
    with pytest.raises(LibraryLoadError):
        render_html(str(tmp_path / "none.so"), str(tmp_path / "v.html"))
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ a real library
@pytest.fixture(scope="module")
def cls_lib(tmp_path_factory) -> str:
    import monolib
    from monolib.models import fetch_model

    CLS = fetch_model("ppocr_cls")

    path = tmp_path_factory.mktemp("view") / "cls.so"
    monolib.compile(str(CLS), shapes={"x": (1, 3, 48, 192)}).export_library(str(path))
    return str(path)


@pytest.fixture(scope="module")
def cls_page(cls_lib) -> tuple[str, dict]:
    _, graphs = read_graphs(cls_lib)
    (graph,) = graphs.values()
    profile = {n["name"]: 1e-5 * (i + 1) for i, n in enumerate(graph["nodes"])}
    out = os.path.join(os.path.dirname(cls_lib), "cls.html")
    assert render_html(cls_lib, out, profile) == out
    return out, graph


@pytest.mark.slow
def test_real_library_page(cls_lib, cls_page):
    out, graph = cls_page
    page = Path(out).read_text("utf-8")
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.DOTALL).group(1))
    report = inspect_library(cls_lib)
    (summary,) = report["graphs"].values()
    (g,) = data["graphs"]
    ops = [v for v in g["vertices"] if v["kind"] == "op"]
    assert len(ops) == summary["fused_ops"] == len(graph["nodes"]) == 75
    assert [v["name"] for v in ops] == [n["name"] for n in graph["nodes"]]
    assert [v["name"] for v in g["vertices"] if v["kind"] == "input"] == ["x"]
    assert g["summary"]["params_bytes"] == summary["params_bytes"]
    assert sum(v["share"] for v in ops) == pytest.approx(1.0)
    assert [m["type_key"] for m in data["library"]["modules"]] == [
        m["type_key"] for m in report["modules"]
    ]
    # Every vertex but the input is reached by an edge (no orphan drawn at the top).
    reached = {e["d"] for e in g["edges"]}
    assert reached == {i for i, v in enumerate(g["vertices"]) if v["kind"] != "input"}
    assert ops[0]["y"] < ops[-1]["y"]


# ------------------------------------------------------------------ headless browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (apt-get install -y chromium)"
)


def chromium(tmp_path: Path, url: str, *args: str) -> str:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
        url,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.slow
@needs_chromium
def test_browser_draws_every_fused_op(tmp_path, cls_page):
    out, graph = cls_page
    dom = chromium(tmp_path, f"file://{out}#q=Softmax", "--dump-dom")
    assert len(re.findall(r'class="node op[ "]', dom)) == len(graph["nodes"]) == 75
    assert len(re.findall(r'class="node io[ "]', dom)) == 2  # input x, the output
    assert 'data-nodes="77"' in dom
    assert len(re.findall(r'class="node op match"', dom)) == 1  # the #q= search ran
    assert "1/1" in dom


@pytest.mark.slow
@needs_chromium
def test_browser_screenshot(tmp_path, cls_page):
    out, _ = cls_page
    shot = tmp_path / "view.png"
    chromium(tmp_path, f"file://{out}", f"--screenshot={shot}", "--window-size=1400,900")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = np.frombuffer(data[16:24], ">u4")
    assert (width, height) == (1400, 900) and len(data) > 20_000  # not a blank page


@needs_chromium
def test_browser_draws_1500_nodes(tmp_path):
    page = tmp_path / "big.html"
    page.write_text(
        render_page({"title": "big", "library": None, "graphs": [layout_graph(big_graph(1500))]}),
        "utf-8",
    )
    dom = chromium(tmp_path, f"file://{page}", "--dump-dom")
    assert len(re.findall(r'class="node op[ "]', dom)) == 1500


class _Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, *args, **kwargs) -> None:
        self.lines.append(" ".join(map(str, args)))


@pytest.mark.slow
def test_view_command(tmp_path, cls_lib):
    import argparse

    from monolib.tools.visualize import add_view_parser, cmd_view

    parser = argparse.ArgumentParser()
    add_view_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "v.html"
    args = parser.parse_args(["view", cls_lib, "-o", str(out), "--profile", "--repeat", "2"])
    console = _Console()
    assert cmd_view(args, console) == 0 and console.lines == [f"wrote {out}"]
    page = out.read_text("utf-8")
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.DOTALL).group(1))
    ops = [v for v in data["graphs"][0]["vertices"] if v["kind"] == "op"]
    assert len(ops) == 75 and all(v["time"] > 0 for v in ops)
    assert data["graphs"][0]["summary"]["total_time"] == pytest.approx(sum(v["time"] for v in ops))
    args = parser.parse_args(["view", cls_lib])
    assert cmd_view(args, _Console()) == 0 and os.path.exists(cls_lib + ".html")


INTERACT = """<script>
(() => {
  const svg = document.getElementById("svg"), vp = document.getElementById("vp");
  const tr = () => vp.getAttribute("transform"), log = [tr()];
  const mouse = (el, type, x, y) =>
    el.dispatchEvent(new MouseEvent(type, {clientX: x, clientY: y, bubbles: true}));
  svg.dispatchEvent(new WheelEvent("wheel", {deltaY: -300, clientX: 700, clientY: 400,
                                             bubbles: true, cancelable: true}));
  log.push(tr());
  mouse(svg, "mousedown", 500, 500); mouse(window, "mousemove", 600, 450);
  mouse(window, "mouseup", 600, 450);
  log.push(tr());
  const node = document.querySelector('.node.op[data-i="3"]');
  mouse(node, "mousedown", 10, 10); mouse(node, "mouseup", 10, 10);
  const box = document.getElementById("search");
  box.value = "conv+relu"; box.dispatchEvent(new Event("input"));
  document.getElementById("fit").click();
  log.push(tr(), svg.getAttribute("class"));
  document.body.setAttribute("data-log", JSON.stringify(log));
})();
</script></body>"""


def transform(text: str) -> tuple[float, float, float]:
    x, y, k = re.fullmatch(r"translate\((.+),(.+)\) scale\((.+)\)", text).groups()
    return float(x), float(y), float(k)


@pytest.mark.slow
@needs_chromium
def test_browser_zoom_pan_click_search_fit(tmp_path, cls_page):
    out, graph = cls_page
    page = tmp_path / "interact.html"
    page.write_text(Path(out).read_text("utf-8").replace("</body>", INTERACT), "utf-8")
    dom = chromium(tmp_path, f"file://{page}", "--dump-dom", "--window-size=1400,900")
    log = json.loads(html.unescape(re.search(r'data-log="([^"]*)"', dom).group(1)))
    start, zoomed, panned, fitted, classes = log
    (x0, y0, k0), (x1, y1, k1) = transform(start), transform(zoomed)
    assert k0 == 1 and k1 == pytest.approx(np.exp(0.45))  # wheel: zoom in around the cursor
    assert (x1, y1) != (x0, y0)
    x2, y2, k2 = transform(panned)
    assert (x2 - x1, y2 - y1, k2) == pytest.approx((100, -50, k1))  # drag: pan
    assert transform(fitted)[2] < 0.2 and "far" in classes and "dim" in classes  # fit; search
    assert len(re.findall(r'class="node op[^"]*\bsel\b', dom)) == 1  # the clicked node
    assert f"#2 {graph['nodes'][2]['name']}" in html.unescape(dom)  # vertex 3 = op 2 (after x)
    labels = ["+".join([n["op"], *n["fused"]]).lower() for n in graph["nodes"]]
    conv_relu = sum("conv+relu" in label for label in labels)
    assert len(re.findall(r'class="node op[^"]*\bmatch\b', dom)) == conv_relu > 0


def test_guess_takes_the_nearest_unread_output():
    """Two slices nobody reads (their Squeeze consumers were removed as no-ops): a
    later op reading an unknown tensor first is fed by the nearest one."""
    graph = {
        "name": "slices",
        "inputs": [t("x")],
        "outputs": [t("y")],
        "nodes": [
            node("S1", "Slice", ["x", "c1"], "s1"),
            node("S2", "Slice", ["x", "c2"], "s2"),
            node("T", "Transpose", ["s2_squeezed"], "tt"),
            node("M", "MatMul", ["s1_squeezed", "tt"], "y"),
        ],
    }
    g = layout_graph(graph)
    names = [v["name"] for v in g["vertices"]]
    guess = {(names[e["s"]], names[e["d"]]) for e in g["edges"] if e.get("guess")}
    assert guess == {("S2", "T"), ("S1", "M")}
    assert all(e["shape"] is None for e in g["edges"] if e.get("guess"))


@needs_chromium
def test_browser_switches_between_graphs(tmp_path):
    first, second = layout_graph(diamond()), layout_graph(big_graph(30))
    first["module"], second["module"] = 0, 2
    page = tmp_path / "two.html"
    switch = """<script>
    const sel = document.getElementById("graphsel");
    document.body.setAttribute("data-first", document.querySelectorAll(".node.op").length);
    sel.value = "1"; sel.dispatchEvent(new Event("change"));
    </script></body>"""
    text = render_page({"title": "two", "library": None, "graphs": [first, second]})
    page.write_text(text.replace("</body>", switch), "utf-8")
    dom = chromium(tmp_path, f"file://{page}", "--dump-dom")
    assert 'data-first="4"' in dom and 'data-nodes="32"' in dom
    assert len(re.findall(r'class="node op[ "]', dom)) == 30
    assert "module 0: diamond" in dom and "module 2: big" in dom
