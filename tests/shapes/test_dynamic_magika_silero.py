"""Run-time dims on the path of Magika and the Silero VAD sequence model (issue 12).

Op level: LSTM (fast kernel and generic recurrence), GRU and RNN over a run-time sequence
length and batch; a reduction, a reflect Pad and a Slice over a run-time axis; a
``Shape -> Cast`` chain folded into a Reshape target. Model level (``slow``): Magika at
a run-time batch 1..8 and Silero's sequence model at 1..256 chunks, each ONE library
matched against ONNX Runtime at both bounds and sizes between.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.build import compile as compile_model

F = TensorProto.FLOAT
RNG = np.random.default_rng(1225)


def _graph_model(nodes, inputs, outputs, inits=(), opset=17):
    """A model of ``nodes``; ``inputs``/``outputs`` are ``(name, shape)`` float tensors
    whose shapes may name dims (``dims=`` binds those names)."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _match_ort(model, feeds_at, atol=1e-4, **compile_kwargs):
    """Compile ``model`` once and match ONNX Runtime (values and shapes) on every feed
    dict of ``feeds_at``."""
    pytest.importorskip("onnxruntime")
    from monolib.compiler.testing import ort_run

    gm = monolib.GraphModule(compile_model(model, **compile_kwargs)["default"](monolib.cpu()))
    for feeds in feeds_at:
        for name, a in feeds.items():
            gm.set_input(name, a)
        gm.run()
        for i, want in enumerate(ort_run(model, feeds)):
            got = gm.get_output(i).numpy()
            shapes = {k: a.shape for k, a in feeds.items()}
            assert got.shape == want.shape, (shapes, i)
            np.testing.assert_allclose(got, want, atol=atol, rtol=1e-4, err_msg=str(shapes))
    return gm


def _f32(*shape):
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


# -- recurrences over a run-time sequence length -----------------------------------

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _recurrent(op, direction="forward", hidden=8, features=5, **attrs):
    """One ``op`` node over X ``[T, B, I]`` with T and B named ``T`` and ``B``, initial
    states as inputs and every output."""
    nd, g = (2 if direction == "bidirectional" else 1), _GATES[op]
    inits = [("W", _f32(nd, g * hidden, features)), ("R", _f32(nd, g * hidden, hidden)),
             ("Bias", _f32(nd, 2 * g * hidden))]
    ins = ["x", "W", "R", "Bias", "", "h0"] + (["c0"] if op == "LSTM" else [])
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, hidden_size=hidden, direction=direction, **attrs)
    state = [nd, "B", hidden]
    return _graph_model([node], [("x", ["T", "B", features])] + [(n, state) for n in ins[5:]],
                        [("y", ["T", nd, "B", hidden])] + [(n, state) for n in outs[1:]],
                        inits, opset=14)


def _recurrent_feeds(model, sizes, features=5):
    """Feeds of ``model`` (from :func:`_recurrent`) at each ``(T, B)`` of ``sizes``."""
    nd, hidden = model.graph.initializer[1].dims[0], model.graph.initializer[1].dims[2]
    states = [i.name for i in model.graph.input[1:]]
    return [{"x": _f32(t, b, features), **{n: _f32(nd, b, hidden) for n in states}}
            for t, b in sizes]


_SIZES = [(1, 1), (7, 3), (40, 4)]  # (T, B): both bounds and one between


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_run_time_sequence_and_batch(direction):
    """The fast kernel (lstm.h) with T and B read from the symbols when it runs."""
    m = _recurrent("LSTM", direction)
    _match_ort(m, _recurrent_feeds(m, _SIZES), dims={"T": (1, 40), "B": (1, 4)})


def test_lstm_generic_recurrence_run_time_sequence():
    """Non-default activations take rnn.py's generic recurrence (ONNX Runtime runs no
    layout 1, so that path is not matched here)."""
    m = _recurrent("LSTM", "reverse", activations=["sigmoid", "relu", "tanh"], clip=3.0)
    _match_ort(m, _recurrent_feeds(m, _SIZES), dims={"T": (1, 40), "B": (1, 4)})


def test_lstm_layout_1_run_time_sequence_and_batch():
    """``layout=1`` (X ``[B, T, I]``), matched against ONNX's reference evaluator (ONNX
    Runtime runs no layout 1)."""
    from onnx.reference import ReferenceEvaluator

    hidden, features = 8, 5
    state = ["B", 1, hidden]
    node = helper.make_node("LSTM", ["x", "W", "R", "Bias", "", "h0", "c0"], ["y", "yh", "yc"],
                            hidden_size=hidden, layout=1)
    m = _graph_model(
        [node], [("x", ["B", "T", features]), ("h0", state), ("c0", state)],
        [("y", ["B", "T", 1, hidden]), ("yh", state), ("yc", state)],
        [("W", _f32(1, 4 * hidden, features)), ("R", _f32(1, 4 * hidden, hidden)),
         ("Bias", _f32(1, 8 * hidden))], opset=14)
    gm = monolib.GraphModule(
        compile_model(m, dims={"T": (1, 40), "B": (1, 4)})["default"](monolib.cpu()))
    ref = ReferenceEvaluator(m)
    for t, b in _SIZES:
        feeds = {"x": _f32(b, t, features), "h0": _f32(b, 1, hidden), "c0": _f32(b, 1, hidden)}
        for name, a in feeds.items():
            gm.set_input(name, a)
        gm.run()
        for i, want in enumerate(ref.run(None, feeds)):
            np.testing.assert_allclose(gm.get_output(i).numpy(), want, atol=1e-5, rtol=1e-4)


def test_lstm_constant_sequence_lens_run_time_sequence():
    """A constant ``sequence_lens`` cannot be known to equal a run-time T: the generic
    recurrence reads it when the op runs."""
    nd, hidden, features = 1, 8, 5
    node = helper.make_node("LSTM", ["x", "W", "R", "Bias", "lens"], ["y", "yh", "yc"],
                            hidden_size=hidden)
    m = _graph_model(
        [node], [("x", ["T", 2, features])],
        [("y", ["T", nd, 2, hidden]), ("yh", [nd, 2, hidden]), ("yc", [nd, 2, hidden])],
        [("W", _f32(nd, 4 * hidden, features)), ("R", _f32(nd, 4 * hidden, hidden)),
         ("Bias", _f32(nd, 8 * hidden))],
    )
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 1], np.int32), "lens"))
    feeds = [{"x": _f32(t, 2, features)} for t in (2, 9, 30)]
    _match_ort(m, feeds, dims={"T": (2, 30)})


@pytest.mark.parametrize("op", ["GRU", "RNN"])
def test_gru_rnn_run_time_sequence_and_batch(op):
    m = _recurrent(op, "bidirectional")
    _match_ort(m, _recurrent_feeds(m, _SIZES), dims={"T": (1, 40), "B": (1, 4)})


# -- other ops of the two models over a run-time axis --------------------------------


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_over_run_time_axis(op):
    """Magika's decomposed LayerNorm: sums over the last axis with a run-time batch, and
    a mean over the run-time axis itself (its count read at run time)."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    last = helper.make_tensor("last", TensorProto.INT64, [1], [2])
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1),
             helper.make_node(op, ["x", "last"], ["z"], keepdims=0)]
    m = _graph_model(nodes, [("x", [3, "n", 6])], [("y", [3, 1, 6]), ("z", [3, "n"])])
    m.graph.initializer.extend([axes, last])
    m.opset_import[0].version = 18
    _match_ort(m, [{"x": _f32(3, n, 6)} for n in (1, 4, 16)], dims={"n": (1, 16)})


_NORMS = {
    "LayerNormalization": ({"axis": -1}, 17, 1),
    "LayerNormalization_axis1": ({"axis": 1}, 17, 1),
    "InstanceNormalization": ({}, 17, 4),
    "GroupNormalization": ({"num_groups": 2}, 21, 4),
    "RMSNormalization": ({"axis": -1}, 23, 0),
}


@pytest.mark.parametrize("case", list(_NORMS))
def test_normalizations_run_time_rows_and_length(case):
    """Row normalizations with a run-time batch and a run-time row length (a constant
    Scale/B broadcast along it), both bounds and a size between."""
    attrs, opset, params = _NORMS[case]
    op = case.split("_")[0]
    ins = ["x", "g", "b"][: 3 if params else 2]
    shape = [2, "n", 4] if case.endswith("axis1") else ["n", 4, "w"]
    inits = [(k, _f32(params or 1)) for k in ins[1:]]
    if case.endswith("axis1"):
        inits = [(k, _f32(1, 4)) for k in ins[1:]]
    m = _graph_model([helper.make_node(op, ins, ["y"], **attrs)], [("x", shape)], [("y", shape)],
                     inits, opset=opset)
    at = {"n": (1, 3, 8), "w": (2, 7, 30)}
    feeds = [{"x": _f32(*[at[d][i] if isinstance(d, str) else d for d in shape])}
             for i in range(3)]
    _match_ort(m, feeds, dims={"n": (1, 8), "w": (2, 30)} if "w" in shape else {"n": (1, 8)})


def test_reflect_pad_run_time_axis():
    """Silero's STFT pads its frames by reflection along a run-time axis."""
    pads = helper.make_tensor("pads", TensorProto.INT64, [6], [0, 1, 2, 0, 1, 2])
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
    m = _graph_model([node], [("x", [2, "n", 8])], [("y", [2, "n2", 12])])
    m.graph.initializer.append(pads)
    _match_ort(m, [{"x": _f32(2, n, 8)} for n in (2, 5, 12)], dims={"n": (2, 12)})


def test_slice_along_run_time_axis():
    """Both ends counted from a run-time end, and a reversing step."""
    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [helper.make_node("Slice", ["x", "s0", "e0", "a0"], ["y"]),
             helper.make_node("Slice", ["x", "s1", "e1", "a0", "st1"], ["z"])]
    m = _graph_model(nodes, [("x", ["n", 4])], [("y", ["ny", 4]), ("z", ["nz", 4])])
    m.graph.initializer.extend([ints("s0", [1]), ints("e0", [-1]), ints("a0", [0]),
                                ints("s1", [-1]), ints("e1", [-(2**63)]), ints("st1", [-2])])
    _match_ort(m, [{"x": _f32(n, 4)} for n in (2, 5, 9)], dims={"n": (2, 9)})


def test_gather_and_onehot_run_time_batch():
    """Embedding lookups (run-time index batch), a gather from a run-time batch of data,
    a gather along the run-time axis itself (negative index), and OneHot."""
    ints = TensorProto.INT64
    nodes = [helper.make_node("Gather", ["w", "i"], ["e"], axis=0),
             helper.make_node("Gather", ["x", "k"], ["c"], axis=1),
             helper.make_node("Gather", ["x", "last"], ["r"], axis=0),
             helper.make_node("OneHot", ["i", "depth", "values"], ["h"], axis=-1)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("i", ints, ["n", 3]),
         helper.make_tensor_value_info("x", F, ["n", 10])],
        [helper.make_tensor_value_info("e", F, ["n", 3, 7]),
         helper.make_tensor_value_info("c", F, ["n", 3]),
         helper.make_tensor_value_info("r", F, [2, 10]),
         helper.make_tensor_value_info("h", F, ["n", 3, 10])],
        [numpy_helper.from_array(a, k) for k, a in (
            ("w", _f32(10, 7)), ("k", np.array([0, 4, 9])), ("last", np.array([0, -1])),
            ("depth", np.array(10)), ("values", np.array([0.0, 1.0], np.float32)))],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    feeds = [{"i": RNG.integers(0, 10, (n, 3)), "x": _f32(n, 10)} for n in (1, 3, 8)]
    _match_ort(m, feeds, dims={"n": (1, 8)})


def test_shape_cast_chain_folds_into_reshape():
    """``Shape -> Cast(int32) -> Cast(int64) -> Reshape`` (tf2onnx's pattern in Magika)
    folds at compile time with the run-time batch kept symbolic."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["s32"], ["s64"], to=TensorProto.INT64),
        helper.make_node("Relu", ["x"], ["t"]),
        helper.make_node("Flatten", ["t"], ["y0"], axis=0),
        helper.make_node("Reshape", ["y0", "s64"], ["y"]),
    ]
    m = _graph_model(nodes, [("x", ["b", 3, 4])], [("y", ["b", 3, 4])])
    gm = _match_ort(m, [{"x": _f32(b, 3, 4)} for b in (1, 5, 8)], dims={"b": (1, 8)})
    assert gm.get_output_info()[0]["y"][0] == ("b", 1, 8)


# -- the real models -----------------------------------------------------------------


def _real(name):
    from monolib.models import fetch_model

    try:
        return onnx.load(fetch_model(name))
    except Exception as e:  # no network and no cached copy
        pytest.skip(f"{name}: {e}")


@pytest.mark.slow
def test_magika_run_time_batch():
    """Magika (its one-hot Gather rewrite, decomposed LayerNorms, Dense MatMuls) at a
    run-time batch 1..8: one library, both bounds and a size between."""
    m = _real("magika")
    name = m.graph.input[0].name
    feeds = [{name: RNG.integers(0, 257, (b, 2048)).astype(np.int32)} for b in (1, 3, 8)]
    gm = _match_ort(m, feeds, atol=1e-5, shapes={name: ((1, 8), 2048)})
    shapes, _ = gm.get_output_info()
    assert next(iter(shapes.values()))[0][1:] == (1, 8)


@pytest.mark.slow
def test_magika_opt_shape_specialized_and_generic():
    """With ``opt_shapes`` batch 1 runs the specialized static path, other batches the
    generic one; both match ONNX Runtime."""
    m = _real("magika")
    name = m.graph.input[0].name
    feeds = [{name: RNG.integers(0, 257, (b, 2048)).astype(np.int32)} for b in (1, 2, 8)]
    _match_ort(m, feeds, atol=1e-5, shapes={name: ((1, 8), 2048)},
               opt_shapes={name: [(1, 2048)]})


@pytest.mark.slow
def test_silero_sequence_run_time_chunks():
    """Silero's sequence model (STFT Conv, reflect Pad, encoder Convs, LSTM over the
    chunks) at 1..256 chunks: one library, both bounds and sizes between."""
    m = _real("silero_vad_sequence")
    zeros = np.zeros((1, 1, 128), np.float32)
    feeds = [{"input": (RNG.standard_normal((n, 576)) * 0.1).astype(np.float32),
              "h": zeros, "c": zeros} for n in (1, 8, 32, 200, 256)]
    _match_ort(m, feeds, atol=1e-4,
               shapes={"input": ((1, 256), 576), "h": (1, 1, 128), "c": (1, 1, 128)})
