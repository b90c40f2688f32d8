"""The graph head section: a loaded factory makes executors from the head alone and
parses the full graph JSON (nodes, params table) on first use; both must agree."""

import json

import numpy as np
import pytest

from monolib.runtime import GraphExecutorFactoryModule, GraphModule, load_module
from monolib.errors import ContainerError
from monolib.abi.graph_spec import graph_head

from tinylib import reference, tiny_factory, tiny_graph


def test_loaded_factory_runs_before_parsing_the_graph(tmp_path):
    path = tiny_factory().export_library(str(tmp_path / "t.so"))
    fac = load_module(path)
    assert fac._graph_json is None  # only the head was parsed
    gm = GraphModule(fac["default"]())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gm.set_input(x=x)
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0).numpy(), reference(x))
    assert fac._graph_json is None
    assert [n["name"] for n in fac.graph_json["nodes"]]  # parsed now, and checked
    assert set(gm.executor.param_infos) == {"w", "b"}


def test_reexport_of_an_unparsed_factory_is_byte_identical(tmp_path):
    first = tiny_factory().export_library(str(tmp_path / "a.so"))
    fac = load_module(first)
    again = GraphExecutorFactoryModule.from_head(
        fac.save_sections()["head"], fac.save_sections()["graph"], fac.params
    )
    assert again.save_sections()["graph"] == fac.save_sections()["graph"]
    assert again.graph_json == tiny_graph()[0]


def test_head_and_graph_that_disagree_are_refused():
    graph, params = tiny_graph()
    head = dict(graph_head(graph), arena_bytes=graph["arena_bytes"] * 2)
    fac = GraphExecutorFactoryModule.from_head(
        json.dumps(head), json.dumps(graph), params
    )
    with pytest.raises(ContainerError, match="disagrees with the graph head"):
        fac.graph_json


def test_head_with_an_input_outside_the_arena_is_refused_at_load():
    graph, params = tiny_graph()
    head = graph_head(graph)
    head["inputs"] = [dict(head["inputs"][0], offset=10**6)]
    with pytest.raises(ContainerError, match="outside the arena"):
        GraphExecutorFactoryModule.from_head(
            json.dumps(head), json.dumps(graph), params
        )
