"""Reshape to a shape read at run time (issue 13): each output dim is a computed dim
(jointly bounded by the element count, so the slot is the input's size), the node
resolves ``0``/``-1`` and copies the data; later ops (elementwise, Shape) read the
dims. Matched with ONNX Runtime; a chain Reshape -> Unsqueeze is not collapsed away."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import monolib
from monolib.compiler.testing import ort_run


def _model(squeeze: bool = False):
    nodes = [h.make_node("Reshape", ["x", "s"], ["y"], name="r"),
             h.make_node("Relu", ["y"], ["z"]),
             h.make_node("Shape", ["z"], ["zs"])]
    outs = [h.make_tensor_value_info("z", T.FLOAT, ["a", "b", "c"]),
            h.make_tensor_value_info("zs", T.INT64, [3])]
    inits = []
    if squeeze:  # Reshape -> Unsqueeze: must not become one Reshape of x
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "ax"))
        nodes.append(h.make_node("Unsqueeze", ["y", "ax"], ["q"]))
        outs.append(h.make_tensor_value_info("q", T.FLOAT, [1, "a", "b", "c"]))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]),
                                  h.make_tensor_value_info("s", T.INT64, [3])], outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def _run(model, shapes):
    lib = monolib.compile(model)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    rng = np.random.default_rng(2)
    for s in shapes:
        feeds = {"x": rng.normal(size=(2, 3, 4)).astype(np.float32),
                 "s": np.array(s, np.int64)}
        gm.run(**feeds)
        for i, want in enumerate(ort_run(model, feeds)):
            got = gm.get_output(i).numpy()
            assert got.shape == want.shape and np.array_equal(got, want), (s, i)
    return lib


def test_reshape_run_time_shape():
    lib = _run(_model(), [[4, 3, 2], [0, -1, 2], [24, 1, 1], [-1, 4, 1], [2, 0, 4]])
    graph = lib.get_graph_json()
    assert [s["computed"] for s in graph["symbols"]] == [True] * 3
    # the slot of y/z holds the 24 elements, not 24**3 (the dims are bounded jointly)
    z = next(o for o in graph["outputs"] if o["name"] == "z")
    assert z["max_nbytes"] == 24 * 4


def test_reshape_run_time_shape_then_unsqueeze():
    _run(_model(squeeze=True), [[1, 6, 4], [1, -1, 2], [1, 24, 1]])


def test_expand_and_tile_with_run_time_sizes_are_refused_naming_the_node():
    """Without a ``max_sizes`` bound the sizes have none: refused with the hint
    (``tests/ops/test_bounded_sizes.py`` runs them with one)."""
    from monolib.compiler.testing import make_node_model
    from monolib.errors import UnsupportedOpError

    x = np.zeros((2, 1), np.float32)
    for op, name in (("Expand", "shape"), ("Tile", "repeats")):
        model = make_node_model(op, {"x": x, name: np.array([2, 3], np.int64)})
        with pytest.raises(UnsupportedOpError, match=rf"{op} \(node '{op}_0'\): input '{name}' is "
                           rf"a run-time value.*no upper bound.*max_sizes=\{{'{op}_0': N\}}"):
            monolib.compile(model)
