"""ONNX sequences and optionals (issue 13) compiled end to end, against ONNX Runtime.

Sequence and optional values are arena slots (``abi/sequences.py``) read and written
by C kernels (``compiler/ops/sequence``); ``GraphModule.set_input`` takes a list (None
for an empty optional) and ``get_output`` returns one, as ONNX Runtime does.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.testing import ort_session
from monolib.errors import CompileError, ExecutionError, InputError

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _seq_info(name: str, elem=F, rank: int = 1):
    return helper.make_tensor_sequence_value_info(name, elem, [None] * rank)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17):
    graph = helper.make_graph(nodes, "seq", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def _module(model, **kwargs):
    return monolib.GraphModule(monolib.compile(model, **kwargs)["default"](monolib.cpu()))


def _ort(model, feeds):
    return ort_session(model).run(None, feeds)


def _assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    np.testing.assert_array_equal(got, want)


def test_split_insert_erase_concat_at_length_vs_ort():
    """A tensor split into a sequence, edited, read back and concatenated: one library,
    every kernel in C, equal to ONNX Runtime."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
        helper.make_node("SequenceInsert", ["s", "y", "one"], ["s2"]),
        helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=1),
        helper.make_node("SequenceAt", ["s3", "minus1"], ["last"]),
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0),
        helper.make_node("ConcatFromSequence", ["rows"], ["stack"], axis=-1, new_axis=1),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
    ]
    inits = [helper.make_tensor("split", I64, [3], [1, 2, 3]),
             helper.make_tensor("one", I64, [], [1]),
             helper.make_tensor("zero", I64, [], [0]),
             helper.make_tensor("minus1", I64, [], [-1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 6]),
                           helper.make_tensor_value_info("y", F, [3, 4])],
                   [helper.make_tensor_value_info("cat", F, [3, None]),
                    helper.make_tensor_value_info("last", F, [3, None]),
                    helper.make_tensor_value_info("n", I64, []),
                    helper.make_tensor_value_info("stack", F, [1, 6, 3])], inits)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 6), np.float32),
             "y": rng.standard_normal((3, 4), np.float32)}
    gm = _module(model)
    gm.run(**feeds)
    for i, want in enumerate(_ort(model, feeds)):
        _assert_same(gm.get_output(i).numpy(), want)


def test_sequence_input_and_output_round_trip_vs_ort():
    """A sequence graph input (list in), SequenceInsert at a run-time position, the
    sequence as output (list out), element shapes differing within the sequence."""
    nodes = [helper.make_node("SequenceInsert", ["seq", "t", "pos"], ["out"])]
    model = _model(nodes, [_seq_info("seq", I64), helper.make_tensor_value_info("t", I64, [3]),
                           helper.make_tensor_value_info("pos", I64, [])],
                   [_seq_info("out", I64)])
    seq = [np.arange(4, dtype=np.int64), np.arange(2, dtype=np.int64) + 10]
    gm = _module(model, shapes={"seq": [(4,), (2,)], "t": (3,)})
    for pos in (0, 1, 2, -1):
        feeds = {"seq": seq, "t": np.array([7, 8, 9], np.int64), "pos": np.array(pos, np.int64)}
        gm.run(**feeds)
        _assert_same(gm.get_output(0), _ort(model, feeds)[0])


def test_bounded_sequence_input_computed_dims_vs_ort():
    """``shapes={'seq': {'capacity', 'max_shape'}}``: the count and element shapes are
    read at run time; SequenceAt at a run-time index and ConcatFromSequence give
    outputs whose dims are computed by the library."""
    nodes = [helper.make_node("SequenceAt", ["seq", "i"], ["at"]),
             helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
             helper.make_node("SequenceLength", ["seq"], ["n"])]
    model = _model(nodes, [_seq_info("seq", F, 2), helper.make_tensor_value_info("i", I64, [])],
                   [helper.make_tensor_value_info("at", F, [None, None]),
                    helper.make_tensor_value_info("cat", F, [None, None]),
                    helper.make_tensor_value_info("n", I64, [])])
    gm = _module(model, shapes={"seq": {"capacity": 4, "max_shape": (5, 3)}})
    rng = np.random.default_rng(1)
    for rows, cols in (([2, 5, 1], 3), ([3], 2), ([1, 1, 4, 2], 1)):
        seq = [rng.standard_normal((r, cols), np.float32) for r in rows]
        for i in (0, len(rows) - 1):
            feeds = {"seq": seq, "i": np.array(i, np.int64)}
            gm.run(**feeds)
            for k, want in enumerate(_ort(model, feeds)):
                _assert_same(gm.get_output(k).numpy(), want)


def test_sequence_map_unrolled_vs_ort():
    """SequenceMap's body (Add with an outer tensor, then Shape) unrolled per element."""
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "b"], ["sum"]), helper.make_node("Shape", ["e"], ["shp"])],
        "body", [helper.make_tensor_value_info("e", F, ["N"]),
                 helper.make_tensor_value_info("b", F, ["N"])],
        [helper.make_tensor_value_info("sum", F, ["N"]),
         helper.make_tensor_value_info("shp", I64, [1])])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
             helper.make_node("SequenceMap", ["s", "b"], ["sums", "shapes"], body=body)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 4]),
                           helper.make_tensor_value_info("b", F, [4])],
                   [_seq_info("sums"), _seq_info("shapes", I64)])
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 4), np.float32),
             "b": rng.standard_normal(4).astype(np.float32)}
    gm = _module(model)
    gm.run(**feeds)
    for k, want in enumerate(_ort(model, feeds)):
        _assert_same(gm.get_output(k), want)


def test_optional_tensor_input_has_get_and_wrap():
    """An optional tensor input: None or an array in; OptionalHasElement, Optional of a
    tensor out (an array or None back, as ONNX Runtime returns them)."""
    opt = helper.make_tensor_type_proto(F, [4])
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("Optional", ["x"], ["wrapped"]),
             helper.make_node("Identity", ["o"], ["same"])]
    model = _model(nodes, [helper.make_value_info("o", helper.make_optional_type_proto(opt)),
                           helper.make_tensor_value_info("x", F, [2])],
                   [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                    helper.make_value_info("wrapped", helper.make_optional_type_proto(
                        helper.make_tensor_type_proto(F, [2]))),
                    helper.make_value_info("same", helper.make_optional_type_proto(opt))],
                   opset=18)
    gm = _module(model)
    x = np.array([1.5, -2.0], np.float32)
    gm.run(o=None, x=x)
    assert gm.get_output(0).numpy() == np.array(False)
    np.testing.assert_array_equal(gm.get_output(1), x)
    assert gm.get_output(2) is None
    v = np.arange(4, dtype=np.float32)
    gm.run(o=v, x=x)
    assert gm.get_output(0).numpy() == np.array(True)
    np.testing.assert_array_equal(gm.get_output(2), v)


def test_run_time_errors_name_the_node():
    """A SequenceAt position out of range and OptionalGetElement of None stop the run:
    ExecutionError naming the node (the library's status, one native call)."""
    nodes = [helper.make_node("SequenceAt", ["seq", "i"], ["at"], name="pick")]
    model = _model(nodes, [_seq_info("seq"), helper.make_tensor_value_info("i", I64, [])],
                   [helper.make_tensor_value_info("at", F, [2])])
    gm = _module(model, shapes={"seq": [(2,), (2,)]})
    seq = [np.ones(2, np.float32), np.zeros(2, np.float32)]
    gm.run(seq=seq, i=np.array(-2, np.int64))
    np.testing.assert_array_equal(gm.get_output(0).numpy(), seq[0])
    with pytest.raises(ExecutionError, match="pick"):
        gm.run(seq=seq, i=np.array(2, np.int64))

    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))
    model = _model([helper.make_node("OptionalGetElement", ["o"], ["y"], name="unwrap")],
                   [helper.make_value_info("o", opt)],
                   [helper.make_tensor_value_info("y", F, [3])], opset=18)
    gm = _module(model)
    gm.run(o=np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(gm.get_output(0).numpy(), np.arange(3, dtype=np.float32))
    with pytest.raises(ExecutionError, match="unwrap"):
        gm.run(o=None)

    model = _model([helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, name="join")],
                   [_seq_info("seq")], [helper.make_tensor_value_info("y", F, [None])])
    gm = _module(model, shapes={"seq": {"capacity": 3, "max_shape": (4,)}})
    gm.run(seq=[np.ones(2, np.float32), np.zeros(3, np.float32)])
    np.testing.assert_array_equal(gm.get_output(0).numpy(), [1, 1, 0, 0, 0])
    with pytest.raises(ExecutionError, match="join"):
        gm.run(seq=[])


def test_input_errors():
    """Too many elements, another shape than an exact compile, a missing ``shapes=``
    entry: each refused with the input named."""
    model = _model([helper.make_node("SequenceLength", ["seq"], ["n"])], [_seq_info("seq")],
                   [helper.make_tensor_value_info("n", I64, [])])
    with pytest.raises(CompileError, match=r"seq.*shapes=\{'seq'"):
        monolib.compile(model)
    gm = _module(model, shapes={"seq": {"capacity": 2, "max_shape": (3,)}})
    gm.run(seq=[np.ones(3, np.float32)])
    assert gm.get_output(0).numpy() == 1
    gm.run(seq=[])
    assert gm.get_output(0).numpy() == 0
    with pytest.raises(InputError, match="3 elements.*at most 2"):
        gm.set_input("seq", [np.ones(1, np.float32)] * 3)
    with pytest.raises(InputError, match="element 0 has shape"):
        gm.set_input("seq", [np.ones(4, np.float32)])
    with pytest.raises(InputError, match="not None"):
        gm.set_input("seq", None)
    exact = _module(model, shapes={"seq": [(3,), (1,)]})
    with pytest.raises(InputError, match="exactly"):
        exact.set_input("seq", [np.ones(1, np.float32), np.ones(3, np.float32)])


def test_graph_json_describes_the_slot():
    """The graph JSON's sequence input/output entries carry their layout."""
    model = _model([helper.make_node("SequenceInsert", ["seq", "t"], ["out"])],
                   [_seq_info("seq"), helper.make_tensor_value_info("t", F, [2])],
                   [_seq_info("out")])
    lib = monolib.compile(model, shapes={"seq": [(2,)]})
    graph = lib["get_graph_json"]()
    graph = json.loads(graph) if isinstance(graph, (str, bytes)) else graph
    seq_in, seq_out = graph["inputs"][0]["sequence"], graph["outputs"][0]["sequence"]
    assert seq_in == {"kind": "sequence", "dtype": "float32", "capacity": 1, "rank": 1,
                      "elem_max": [2], "shapes": [[2]]}
    assert seq_out["capacity"] == 2 and seq_out["shapes"] == [[2], [2]]
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    assert gm.get_input_info() == ({"seq": ("sequence", 1, (2,)), "t": (2,)},
                                   {"seq": "sequence(float32)", "t": "float32"})
    assert gm.get_output_info()[0] == {"out": ("sequence", 2, (2,))}


def test_loop_appends_to_a_sequence_vs_ort():
    """The TorchScript pattern: a Loop appends to a carried sequence (from
    SequenceEmpty), ConcatFromSequence joins it after the loop. The slot is sized by the
    trip-count bound (max_trip_count); a run past it stops naming the Loop."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=F),
         helper.make_node("Add", ["x", "f"], ["step"]),
         helper.make_node("SequenceInsert", ["s_in", "step"], ["s_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 _seq_info("s_in", F, 2)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), _seq_info("s_out", F, 2)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
             helper.make_node("Loop", ["m", "", "empty"], ["seq"], body=body, name="append"),
             helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
             helper.make_node("SequenceLength", ["seq"], ["n"])]
    model = _model(nodes, [helper.make_tensor_value_info("m", I64, []),
                           helper.make_tensor_value_info("x", F, [1, 3])],
                   [helper.make_tensor_value_info("cat", F, [None, 3]),
                    helper.make_tensor_value_info("n", I64, [])])
    gm = _module(model, max_trip_count={"append": 4})
    x = np.array([[0.5, -1.0, 2.0]], np.float32)
    for m in (1, 2, 4):
        feeds = {"m": np.array(m, np.int64), "x": x}
        gm.run(**feeds)
        for k, want in enumerate(_ort(model, feeds)):
            _assert_same(gm.get_output(k).numpy(), want)
    with pytest.raises(ExecutionError, match="append"):
        gm.run(m=np.array(5, np.int64), x=x)


def test_if_with_sequence_branches_vs_ort():
    """A run-time If whose branches give sequences of different lengths and element
    shapes: one slot holds either."""
    then_g = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["a", "a"], ["t"])], "then", [],
        [_seq_info("t", F, 1)])
    else_g = helper.make_graph(
        [helper.make_node("SplitToSequence", ["b"], ["e"], axis=0, keepdims=0)], "else", [],
        [_seq_info("e", F, 1)])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=then_g, else_branch=else_g),
             helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("a", F, [2]),
                           helper.make_tensor_value_info("b", F, [3, 5])],
                   [_seq_info("s", F, 1), helper.make_tensor_value_info("cat", F, [None])])
    gm = _module(model)
    rng = np.random.default_rng(3)
    for c in (True, False):
        feeds = {"c": np.array(c), "a": rng.standard_normal(2).astype(np.float32),
                 "b": rng.standard_normal((3, 5)).astype(np.float32)}
        gm.run(**feeds)
        want = _ort(model, feeds)
        _assert_same(gm.get_output(0), want[0])
        _assert_same(gm.get_output(1).numpy(), want[1])


def test_elements_of_several_ranks():
    """A sequence may hold elements of different ranks (each record carries its rank):
    inserted, passed through and returned as ONNX Runtime does; taking one out as a
    tensor is refused by name."""
    model = _model([helper.make_node("SequenceInsert", ["seq", "t"], ["out"])],
                   [helper.make_tensor_sequence_value_info("seq", F, None),
                    helper.make_tensor_value_info("t", F, [2, 2])],
                   [helper.make_tensor_sequence_value_info("out", F, None)])
    gm = _module(model, shapes={"seq": [(), (3,)], "t": (2, 2)})
    feeds = {"seq": [np.array(1.5, np.float32), np.arange(3, dtype=np.float32)],
             "t": np.ones((2, 2), np.float32)}
    gm.run(**feeds)
    _assert_same(gm.get_output(0), _ort(model, feeds)[0])
    at = _model([helper.make_node("SequenceAt", ["seq", "i"], ["y"], name="take")],
                [helper.make_tensor_sequence_value_info("seq", F, None),
                 helper.make_tensor_value_info("i", I64, [])],
                [helper.make_tensor_value_info("y", F, [None])])
    with pytest.raises(monolib.errors.ShapeError, match="take.*several ranks"):
        monolib.compile(at, shapes={"seq": [(), (3,)]})


def test_references_agree_with_ort():
    """Each sequence op's NumPy reference (reference_eval: the oracle for debugging and
    Loop's reference) gives ONNX Runtime's values, lists included."""
    from monolib.compiler.frontend.onnx import import_model
    from monolib.compiler.reference_eval import evaluate

    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
             helper.make_node("SequenceInsert", ["s", "y", "minus1"], ["s2"]),
             helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),
             helper.make_node("SequenceAt", ["s3", "one"], ["at"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["stack"], axis=0, new_axis=1),
             helper.make_node("SequenceLength", ["s3"], ["n"]),
             helper.make_node("Optional", ["at"], ["opt"]),
             helper.make_node("OptionalHasElement", ["opt"], ["has"]),
             helper.make_node("OptionalGetElement", ["opt"], ["got"])]
    inits = [helper.make_tensor("minus1", I64, [], [-1]), helper.make_tensor("zero", I64, [], [0]),
             helper.make_tensor("one", I64, [], [1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 4]),
                           helper.make_tensor_value_info("y", F, [3])],
                   [_seq_info("s3"), helper.make_tensor_value_info("at", F, [3]),
                    helper.make_tensor_value_info("stack", F, [4, 3]),
                    helper.make_tensor_value_info("n", I64, []),
                    helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                    helper.make_tensor_value_info("got", F, [3])], inits, opset=18)
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((3, 4), np.float32),
             "y": rng.standard_normal(3).astype(np.float32)}
    want = _ort(model, feeds)
    got = evaluate(import_model(model), feeds)
    for g, w in zip(got, want):
        _assert_same(g if isinstance(g, list) else np.asarray(g), w)
    gm = _module(model)
    gm.run(**feeds)
    for k, w in enumerate(want):
        g = gm.get_output(k)
        _assert_same(g if isinstance(g, list) else g.numpy(), w)


def test_if_with_optional_branches_vs_ort():
    """A run-time If giving an empty optional sequence in one branch and one holding a
    sequence in the other: None or a list back, as ONNX Runtime gives."""
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [3]))
    opt_t = helper.make_optional_type_proto(seq_t)
    then_g = helper.make_graph([helper.make_node("Optional", [], ["none"], type=seq_t)], "then",
                               [], [helper.make_value_info("none", opt_t)])
    else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
                                helper.make_node("Optional", ["s"], ["some"])], "else", [],
                               [helper.make_value_info("some", opt_t)])
    model = _model([helper.make_node("If", ["c"], ["o"], then_branch=then_g, else_branch=else_g),
                    helper.make_node("OptionalHasElement", ["o"], ["has"])],
                   [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                    helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_value_info("o", opt_t),
                    helper.make_tensor_value_info("has", TensorProto.BOOL, [])], opset=18)
    gm = _module(model)
    x = np.array([1, 2, 3], np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        gm.run(**feeds)
        want = _ort(model, feeds)
        got = gm.get_output(0)
        assert (got is None) == (want[0] is None)
        if want[0] is not None:
            _assert_same(got, want[0])
        assert gm.get_output(1).numpy() == want[1]


def test_sequence_map_over_run_time_length_vs_ort():
    """SequenceMap over a sequence whose count is known only at run time: ONNX's
    function body (a Loop bounded by the capacity), elements of several lengths."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["e", "e"], ["sq"]), helper.make_node("Shape", ["e"], ["n"])],
        "body", [helper.make_tensor_value_info("e", F, ["N"])],
        [helper.make_tensor_value_info("sq", F, ["N"]),
         helper.make_tensor_value_info("n", I64, [1])])
    model = _model([helper.make_node("SequenceMap", ["s"], ["sqs", "ns"], body=body)],
                   [_seq_info("s")], [_seq_info("sqs"), _seq_info("ns", I64)])
    gm = _module(model, shapes={"s": {"capacity": 4, "max_shape": (6,)}})
    rng = np.random.default_rng(5)
    for lengths in ([3, 6, 1], [], [2, 2, 2, 5]):
        feeds = {"s": [rng.standard_normal(k).astype(np.float32) for k in lengths]}
        gm.run(**feeds)
        for k, want in enumerate(_ort(model, feeds)):
            _assert_same(gm.get_output(k), want)
