"""Math and tensor ops through the whole compiler (frontend, fusion, memory plan, C
code generator) with :mod:`monolib.compiler.testing`, against ONNX Runtime: single
nodes, and small graphs whose elementwise chains fuse into the epilogues of these ops
(Softmax, ReduceMean, Transpose, Resize, Concat, BatchNormalization...)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from monolib.compiler.testing import make_node_model, ort_run, run_model

R = np.random.default_rng(11)
I64 = lambda *v: np.array(v, np.int64)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


# (op, inputs {name: array}, attrs, opset, constant input names)
NODES = [
    ("Add", {"a": f32(2, 3, 4), "b": f32(4)}, {}, 14, ()),
    ("Div", {"a": np.array([7, -7, 9], np.int32), "b": np.array([2, 2, -4], np.int32)}, {}, 14, ()),
    ("Pow", {"a": np.abs(f32(3, 5)), "b": np.array(2.0, np.float32)}, {}, 12, ("b",)),
    (
        "Clip",
        {"x": f32(3, 5), "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)},
        {},
        11,
        ("lo", "hi"),
    ),
    ("HardSigmoid", {"x": f32(3, 5)}, {"alpha": 0.2, "beta": 0.5}, 12, ()),
    (
        "Where",
        {"c": R.integers(0, 2, (3, 4)).astype(bool), "a": f32(3, 4), "b": f32(4)},
        {},
        16,
        (),
    ),
    ("Cast", {"x": f32(3, 4) * 10}, {"to": 7}, 13, ()),
    ("Equal", {"a": I64(1, 2, 3), "b": I64(1, 0, 3)}, {}, 13, ()),
    (
        "Not",
        {
            "x": np.array([True, False]),
        },
        {},
        13,
        (),
    ),
    ("ReduceMean", {"x": f32(2, 40, 96)}, {"axes": [-1]}, 12, ()),
    ("ReduceSum", {"x": f32(2, 5, 7), "axes": I64(1)}, {"keepdims": 0}, 13, ("axes",)),
    ("ReduceMax", {"x": f32(2, 5, 7)}, {"axes": [0, 2]}, 13, ()),
    ("Softmax", {"x": f32(1, 40, 300)}, {"axis": -1}, 12, ()),
    ("Softmax", {"x": f32(2, 3, 4)}, {"axis": 1}, 13, ()),
    ("ArgMax", {"x": f32(3, 7)}, {"axis": 1}, 13, ()),
    (
        "LayerNormalization",
        {"x": f32(2, 8, 16), "s": f32(16), "b": f32(16)},
        {"axis": -1},
        17,
        ("s", "b"),
    ),
    ("Transpose", {"x": f32(1, 40, 1, 96)}, {"perm": [0, 2, 3, 1]}, 13, ()),
    ("Transpose", {"x": f32(33, 65)}, {}, 13, ()),
    ("Concat", {"a": f32(1, 3, 4, 4), "b": f32(1, 5, 4, 4)}, {"axis": 1}, 13, ()),
    ("Split", {"x": f32(4, 6)}, {"axis": 1}, 13, ()),
    (
        "Slice",
        {"x": f32(4, 6), "s": I64(1, -1), "e": I64(3, -7), "ax": I64(0, 1), "st": I64(1, -2)},
        {},
        13,
        ("s", "e", "ax", "st"),
    ),
    ("Gather", {"x": f32(5, 3), "i": I64(4, 0, -1)}, {"axis": 0}, 13, ()),
    ("Expand", {"x": f32(3, 1), "s": I64(2, 3, 4)}, {}, 13, ("s",)),
    ("Tile", {"x": f32(2, 3), "r": I64(2, 2)}, {}, 13, ("r",)),
    ("Pad", {"x": f32(1, 1, 12), "p": I64(0, 0, 4, 0, 0, 4)}, {"mode": "reflect"}, 13, ("p",)),
    (
        "Pad",
        {"x": f32(2, 3), "p": I64(1, 1, 1, 1), "v": np.array(0.5, np.float32)},
        {},
        13,
        ("p", "v"),
    ),
    (
        "Resize",
        {
            "x": f32(1, 2, 5, 6),
            "roi": np.zeros(0, np.float32),
            "sc": np.array([1, 1, 2, 2], np.float32),
        },
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
        12,
        ("roi", "sc"),
    ),
    (
        "Resize",
        {"x": f32(1, 2, 5, 6), "roi": None, "sc": None, "sz": I64(1, 2, 9, 11)},
        {"mode": "linear"},
        13,
        ("sz",),
    ),
    (
        "BatchNormalization",
        {"x": f32(1, 3, 4, 4), "s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3)) + 0.5},
        {},
        11,
        ("s", "b", "m", "v"),
    ),
    ("DepthToSpace", {"x": f32(1, 8, 2, 3)}, {"blocksize": 2}, 13, ()),
]


def _nid(c):
    return f"{c[0]}{c[3]}-" + "_".join(str(v.shape) for v in c[1].values() if v is not None)


@pytest.mark.parametrize("case", NODES, ids=[_nid(c) for c in NODES])
def test_node_through_compiler(case):
    op, inputs, attrs, opset, consts = case
    nout = 2 if op == "Split" else 1
    model = make_node_model(op, inputs, attrs, opset=opset, constant_inputs=consts, outputs=nout)
    feeds = {k: v for k, v in inputs.items() if v is not None and k not in consts}
    got = run_model(model, feeds)
    want = ort_run(model, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _model(nodes, inputs, outputs, inits=(), opset=13):
    graph = oh.make_graph(
        nodes,
        "g",
        [
            oh.make_tensor_value_info(k, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in inputs.items()
        ],
        [oh.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
        [onh.from_array(v, k) for k, v in inits],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)
    inferred = onnx.shape_inference.infer_shapes(model)
    model.graph.ClearField("output")
    model.graph.output.extend(inferred.graph.output)
    return model


CHAINS = {
    # decomposed LayerNorm of PP-OCR rec: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div
    "layernorm_decomposed": (
        [
            oh.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
            oh.make_node("Sub", ["x", "m"], ["d"]),
            oh.make_node("Pow", ["d", "two"], ["p"]),
            oh.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
            oh.make_node("Add", ["v", "eps"], ["ve"]),
            oh.make_node("Sqrt", ["ve"], ["sd"]),
            oh.make_node("Div", ["d", "sd"], ["y"]),
        ],
        {"x": f32(1, 40, 96)},
        [("two", np.array(2.0, np.float32)), ("eps", np.array(1e-5, np.float32))],
        12,
    ),
    "softmax_then_scale": (
        [oh.make_node("Softmax", ["x"], ["s"], axis=-1), oh.make_node("Mul", ["s", "k"], ["y"])],
        {"x": f32(2, 8, 8)},
        [("k", f32(8))],
        13,
    ),
    "transpose_add_relu": (
        [
            oh.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
            oh.make_node("Add", ["t", "b"], ["a"]),
            oh.make_node("Relu", ["a"], ["y"]),
        ],
        {"x": f32(2, 5, 7)},
        [("b", f32(5))],
        13,
    ),
    "resize_add_fpn": (
        [
            oh.make_node(
                "Resize",
                ["x", "roi", "sc"],
                ["r"],
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            ),
            oh.make_node("Add", ["r", "z"], ["y"]),
        ],
        {"x": f32(1, 4, 5, 6), "z": f32(1, 4, 10, 12)},
        [("roi", np.zeros(0, np.float32)), ("sc", np.array([1, 1, 2, 2], np.float32))],
        12,
    ),
    "concat_sigmoid": (
        [oh.make_node("Concat", ["a", "b"], ["c"], axis=1), oh.make_node("Sigmoid", ["c"], ["y"])],
        {"a": f32(1, 2, 3, 3), "b": f32(1, 3, 3, 3)},
        [],
        13,
    ),
    "bn_clip_hardswish": (
        [
            oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
            oh.make_node("HardSigmoid", ["n"], ["h"], alpha=0.1666667, beta=0.5),
            oh.make_node("Mul", ["n", "h"], ["y"]),
        ],
        {"x": f32(1, 3, 4, 4)},
        [("s", f32(3)), ("b", f32(3)), ("m", f32(3)), ("v", np.abs(f32(3)) + 0.5)],
        11,
    ),
    "reduce_sum_max_tanh": (
        [
            oh.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=1),
            oh.make_node("Tanh", ["s"], ["t"]),
            oh.make_node("ReduceMax", ["t"], ["y"], axes=[0], keepdims=0),
        ],
        {"x": f32(3, 6, 5)},
        [("ax", I64(1))],
        13,
    ),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fused_chain_through_compiler(name):
    nodes, inputs, inits, opset = CHAINS[name]
    model = _model(nodes, inputs, ["y"], inits, opset)
    got = run_model(model, inputs)
    want = ort_run(model, inputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
