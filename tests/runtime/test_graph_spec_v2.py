"""Graph JSON version 2 (run-time dims, issue 12): what the reader accepts and what it
refuses, by message; the writer's version choice; dim expressions."""

from __future__ import annotations

import copy

import pytest
from tinylib import dyn_graph, tiny_graph

from monolib.abi.graph_spec import (
    GRAPH_VERSION,
    GRAPH_VERSION_DYNAMIC,
    check_fields,
    check_graph_json,
    graph_document,
    graph_layout,
)
from monolib.abi.symbols import Symbol, evaluate
from monolib.errors import ContainerError


def test_the_hand_written_graph_reads():
    graph, params = dyn_graph()
    assert graph["version"] == GRAPH_VERSION_DYNAMIC
    assert [t.name for t in check_graph_json(graph, params.nbytes)] == ["w", "b"]
    layout = graph_layout(graph)
    assert layout.symbols == (Symbol("n", 1, 64, 1), Symbol("k", 4, 32, 4))
    assert (layout.sym_offset, layout.shape_offset) == (0, 64)
    assert layout.specializations == ({"n": 8, "k": 16},)
    check_fields(graph)


def _set(path: str, value):
    def edit(g: dict) -> None:
        *keys, last = path.split(".")
        for k in keys:
            g = g[int(k)] if k.isdigit() else g[k]
        if value is DELETE:
            del g[last]
        elif last.isdigit():
            g[int(last)] = value
        else:
            g[last] = value

    return edit


DELETE = object()


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("symbols.0.name", "2n", "symbol name '2n' is not a C identifier"),
        ("symbols.0.name", "min", "symbol name 'min' is not a C identifier"),
        ("symbols.1.name", "n", "symbol 'n' is declared twice"),
        ("symbols.0.lo", 0, r"symbol 'n' has bounds \[0, 64\]"),
        ("symbols.0.hi", 0, r"symbol 'n' has bounds \[1, 0\]"),
        ("symbols.1.step", 0, r"symbol 'k' has bounds \[4, 32\] step 0"),
        ("symbols.1.step", 64, r"a multiple of step in between"),
        ("symbols.0.lo", 1.5, "symbol 'n' lo is 1.5, not an integer"),
        ("symbols", {}, "symbols is not a list"),
        ("inputs.0.shape", ["m"], "input 'x' axis 0 names 'm', which is no declared symbol"),
        ("inputs.0.shape", [1.5], r"input 'x' axis 0 is 1.5, not an int or a string"),
        ("outputs.1.shape", ["2*m"], "output 'z' axis 0: dim expression '2\\*m': unknown name 'm'"),
        ("outputs.1.shape", ["(n"], r"output 'z' axis 0: bad dim expression '\(n'"),
        ("inputs.0.max_nbytes", 128, "input 'x' takes 256 bytes at its upper bounds, more than its max_nbytes 128"),
        ("inputs.0.max_nbytes", DELETE, "malformed input entry"),
        ("outputs.1.offset", 1900, r"output 'z' \[1900, 2412\) lies outside the arena \(1984 bytes\)"),
        ("sym_offset", 4, "sym_offset is 4, not an arena offset aligned to 8"),
        ("sym_offset", DELETE, "sym_offset is None"),
        ("shape_offset", 1984, r"shape_offset \[1984, 2024\) lies outside the arena"),
        ("specializations.0.symbols.n", 65, r"specializations\[0\] sets 'n' to 65, outside its bounds \[1, 64\]"),
        ("specializations.0.symbols.k", 6, r"sets 'k' to 6, outside its bounds \[4, 32\] step 4"),
        ("specializations.0.symbols", {"n": 8}, r"specializations\[0\] must give every symbol \(n, k\)"),
        ("inputs.2.shape", [2, 8], "symbol 'k' is no input's dim: nothing could set it"),
    ],
)  # fmt: skip
def test_malformed_version_2_is_a_container_error(path, value, message):
    graph, params = dyn_graph()
    graph = copy.deepcopy(graph)
    _set(path, value)(graph)
    with pytest.raises(ContainerError, match=message):
        check_graph_json(graph, params.nbytes)


def test_version_1_still_refuses_string_dims():
    graph, params = tiny_graph()
    check_graph_json(graph, params.nbytes)
    graph["inputs"][0]["shape"] = ["n", 3]
    with pytest.raises(ContainerError, match="malformed input entry"):
        check_graph_json(graph, params.nbytes)
    with pytest.raises(ContainerError, match="bad shape"):
        check_fields(graph)


def test_writer_picks_the_version():
    common = dict(arena_bytes=64, params_bytes=0, inputs=[], outputs=[], nodes=[], params=[],
                  aliases={})  # fmt: skip
    assert graph_document("s", **common)["version"] == GRAPH_VERSION == 1
    assert "symbols" not in graph_document("s", **common)
    with pytest.raises(ValueError, match="go together"):
        graph_document("d", **common, symbols=[{"name": "n", "lo": 1, "hi": 2, "step": 1}])
    with pytest.raises(ValueError, match="go together"):
        graph_document("d", **common, sym_offset=0, shape_offset=8)
    graph, _ = dyn_graph()
    assert list(graph)[:8] == ["format", "version", "name", "arena_bytes", "params_bytes",
                               "symbols", "sym_offset", "shape_offset"]  # fmt: skip
    assert graph["specializations"] == [{"symbols": {"n": 8, "k": 16}}]


@pytest.mark.parametrize(
    "expr, value",
    [("n", 7), ("(n / 4)", 1), ("n*k+1", 57), ("min(n, k) - 1", 6), ("max(n, 2*k) % 5", 1),
     ("n - k", -1), ("((n))", 7), (12, 12)],
)  # fmt: skip
def test_dim_expressions_evaluate_with_c_semantics(expr, value):
    assert evaluate(expr, {"n": 7, "k": 8}) == value


@pytest.mark.parametrize("expr", ["n +", "(n", "n)", "m", "", "n k", "min(n)", "n ** 2", "n.5"])
def test_bad_dim_expressions(expr):
    with pytest.raises(ValueError):
        evaluate(expr, {"n": 7})
