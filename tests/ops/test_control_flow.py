"""Run-time control flow (issue 13): ``If`` on a run-time condition, ``Loop`` and
``Scan`` compiled into the one library (``compiler/ops/control``), each checked against
ONNX Runtime on real data; the trip-count bound (derived, ``max_trip_count``, refused
with the hint) and a run past it (an ``ExecutionError`` naming the node)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.errors import ExecutionError, UnsupportedOpError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset=17, inits=()):
    g = helper.make_graph(nodes, "cf", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def _module(model, **kw):
    return monolib.GraphModule(monolib.compile(model, **kw)["default"](monolib.cpu()))


def _run(gm, feeds):
    gm.run(**feeds)
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]


def _check(model, feeds_list, ort_run, **kw):
    gm = _module(model, **kw)
    for feeds in feeds_list:
        got = _run(gm, feeds)
        want = ort_run(model, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return gm


def _if_model(then_out_shape=(2, 3), else_slice=False):
    """y = x * 2 + w if sum(x) > 0 else x - w (or a slice of x), w captured."""
    w = helper.make_tensor("w", F, [3], [0.5, -1.0, 2.0])
    then_b = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t0"]), helper.make_node("Add", ["t0", "w"], ["t"])],
        "then", [], [_vi("t", F, list(then_out_shape))],
        initializer=[helper.make_tensor("two", F, [], [2.0])])
    if else_slice:
        else_nodes = [helper.make_node("Slice", ["x", "s0", "s1", "ax"], ["e"])]
        else_init = [helper.make_tensor("s0", I64, [1], [0]), helper.make_tensor("s1", I64, [1], [1]),
                     helper.make_tensor("ax", I64, [1], [0])]
        eshape = [1, 3]
    else:
        else_nodes, else_init, eshape = [helper.make_node("Sub", ["x", "w"], ["e"])], [], [2, 3]
    else_b = helper.make_graph(else_nodes, "else", [], [_vi("e", F, eshape)], initializer=else_init)
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
             helper.make_node("Relu", ["y"], ["z"])]
    zero = helper.make_tensor("zero", F, [], [0.0])
    return _model(nodes, [_vi("x", F, [2, 3])], [_vi("z", F, ["a", "b"])], inits=[w, zero])


def test_if_runtime_condition_both_branches(ort_run):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 1
    _check(_if_model(), [{"x": x}, {"x": -x}], ort_run)


def test_if_branch_shapes_differ_computed_dim(ort_run):
    """then gives [2, 3], else [1, 3]: the If's output dim 0 is written by the branch."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 1
    gm = _check(_if_model(else_slice=True), [{"x": x}, {"x": -x}, {"x": x}], ort_run)
    assert _run(gm, {"x": -x})[0].shape == (1, 3)


def _counter_loop(with_m=True, scan=True, stop_at=None):
    """Carried (i_sum, acc[2]): acc = acc * 0.5 + x[i % 3]; scan output acc; optional
    stop when the running sum reaches ``stop_at`` (cond computed in the body)."""
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Add", ["s_in", "fi"], ["s_out"]),
        helper.make_node("Mul", ["acc_in", "half"], ["a0"]),
        helper.make_node("Mod", ["i", "three"], ["k"]),
        helper.make_node("Gather", ["x", "k"], ["row"], axis=0),
        helper.make_node("Add", ["a0", "row"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan_acc"]),
    ]
    if stop_at is None:
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        body_nodes.append(helper.make_node("Less", ["s_out", "lim"], ["c_out"]))
    outs = [_vi("c_out", B, []), _vi("s_out", F, []), _vi("acc_out", F, [2])]
    if scan:
        outs.append(_vi("scan_acc", F, [2]))
    inits = [helper.make_tensor("half", F, [], [0.5]), helper.make_tensor("three", I64, [], [3]),
             helper.make_tensor("lim", F, [], [float(stop_at or 0)])]
    body = helper.make_graph(body_nodes, "body",
                             [_vi("i", I64, []), _vi("c_in", B, []), _vi("s_in", F, []),
                              _vi("acc_in", F, [2])], outs, initializer=inits)
    loop_out = ["s_fin", "acc_fin"] + (["accs"] if scan else [])
    loop = helper.make_node("Loop", ["m" if with_m else "", "cond", "s0", "acc0"], loop_out,
                            body=body, name="the_loop")
    inputs = [_vi("cond", B, []), _vi("s0", F, []), _vi("acc0", F, [2]), _vi("x", F, [3, 2])]
    if with_m:
        inputs.insert(0, _vi("m", I64, []))
    outputs = [_vi("s_fin", F, []), _vi("acc_fin", F, [2])] + ([_vi("accs", F, ["t", 2])] if scan else [])
    return _model([loop], inputs, outputs)


def _loop_feeds(rng, m=None, cond=True):
    f = {"cond": np.array(cond), "s0": np.array(0.5, np.float32),
         "acc0": rng.standard_normal(2).astype(np.float32),
         "x": rng.standard_normal((3, 2)).astype(np.float32)}
    if m is not None:
        f["m"] = np.array(m, np.int64)
    return f


def test_loop_runtime_trip_count_and_cond(rng, ort_run):
    """M and cond are run-time inputs: the scan output's length is a computed dim
    bounded by max_trip_count; 0, a few and the bound iterations, cond false."""
    model = _counter_loop()
    feeds = [_loop_feeds(rng, m) for m in (0, 3, 7, 8)] + [_loop_feeds(rng, 5, cond=False)]
    gm = _check(model, feeds, ort_run, max_trip_count={"the_loop": 8})
    assert _run(gm, _loop_feeds(rng, 7))[2].shape == (7, 2)


def test_loop_stops_on_body_condition(rng, ort_run):
    """A while loop (no M): the body's cond output stops it (running sum of i >= 10)."""
    model = _counter_loop(with_m=False, stop_at=10)
    _check(model, [_loop_feeds(rng)], ort_run, max_trip_count={"the_loop": 16})


def test_loop_without_scan_outputs_needs_no_bound(rng, ort_run):
    model = _counter_loop(scan=False)
    _check(model, [_loop_feeds(rng, m) for m in (0, 1, 50)], ort_run)


def test_loop_bound_refused_with_hint():
    with pytest.raises(UnsupportedOpError, match=r"max_trip_count=\{'the_loop': N\}.*--max-trips"):
        monolib.compile(_counter_loop())


def test_loop_past_bound_stops_with_error(rng):
    gm = _module(_counter_loop(), max_trip_count={"the_loop": 4})
    _run(gm, _loop_feeds(rng, 4))
    with pytest.raises(ExecutionError, match="'the_loop'.*max_trip_count"):
        _run(gm, _loop_feeds(rng, 5))
    assert _run(gm, _loop_feeds(rng, 2))[2].shape == (2, 2)  # the library still runs


def test_loop_constant_trip_count_static_scan(rng, ort_run):
    """M a constant, cond passed through: the scan output is static [M, 2]."""
    model = _counter_loop()
    feeds = _loop_feeds(rng)
    gm = _module(model, constants={"m": np.array(6, np.int64), "cond": np.array(True)})
    got = _run(gm, {k: v for k, v in feeds.items() if k not in ("cond",)})
    want = ort_run(model, {**feeds, "m": np.array(6, np.int64)})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert gm.get_output(2).numpy().shape == (6, 2)


def test_if_inside_loop_reads_outer_values(rng, ort_run):
    """Nested control flow: an If in a Loop body, on the iteration's parity, reading a
    value captured two scopes out."""
    then_b = helper.make_graph([helper.make_node("Add", ["v_in", "x"], ["t"])], "then", [],
                               [_vi("t", F, [3])])
    else_b = helper.make_graph([helper.make_node("Mul", ["v_in", "x"], ["e"])], "else", [],
                               [_vi("e", F, [3])])
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Equal", ["r", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["v_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("v_in", F, [3])],
        [_vi("c_out", B, []), _vi("v_out", F, [3])],
        initializer=[helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [], [0])])
    model = _model([helper.make_node("Loop", ["m", "", "v0"], ["v"], body=body)],
                   [_vi("m", I64, []), _vi("v0", F, [3]), _vi("x", F, [3])], [_vi("v", F, [3])])
    feeds = [{"m": np.array(m, np.int64), "v0": rng.standard_normal(3).astype(np.float32),
              "x": rng.uniform(0.5, 1.5, 3).astype(np.float32)} for m in (0, 1, 4, 5)]
    _check(model, feeds, ort_run)


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 1, 0),
                                                              (-1, 0, 0, 1)])
def test_scan_axes_and_directions(rng, ort_run, in_axis, in_dir, out_axis, out_dir):
    """A running sum over the scan axis of x [4, 5] plus a captured bias; state and
    per-step outputs."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "xi"], ["s0"]), helper.make_node("Add", ["s0", "b"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "xi"], ["y"])],
        "body", [_vi("s_in", F, ["n"]), _vi("xi", F, ["n"])],
        [_vi("s_out", F, ["n"]), _vi("y", F, ["n"])])
    n = 5 if in_axis in (1, -1) else 4
    other = 4 if n == 5 else 5
    node = helper.make_node("Scan", ["s", "x"], ["s_fin", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    model = _model([node], [_vi("s", F, [other]), _vi("x", F, [4, 5]), _vi("b", F, [other])],
                   [_vi("s_fin", F, ["n"]), _vi("ys", F, ["p", "q"])])
    feeds = {"s": rng.standard_normal(other).astype(np.float32),
             "x": rng.standard_normal((4, 5)).astype(np.float32),
             "b": rng.standard_normal(other).astype(np.float32)}
    _check(model, [feeds], ort_run)
    assert n in (4, 5)


def test_scan_over_runtime_length(rng, ort_run):
    """The scan axis is a run-time dim (shapes= bounds): one library, several lengths."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "xi"], ["s_out"]), helper.make_node("Tanh", ["s_out"], ["y"])],
        "body", [_vi("s_in", F, [3]), _vi("xi", F, [3])], [_vi("s_out", F, [3]), _vi("y", F, [3])])
    node = helper.make_node("Scan", ["s", "x"], ["s_fin", "ys"], body=body, num_scan_inputs=1)
    model = _model([node], [_vi("s", F, [3]), _vi("x", F, ["T", 3])],
                   [_vi("s_fin", F, [3]), _vi("ys", F, ["T", 3])])
    feeds = [{"s": rng.standard_normal(3).astype(np.float32),
              "x": rng.standard_normal((t, 3)).astype(np.float32)} for t in (1, 4, 9)]
    _check(model, feeds, ort_run, shapes={"x": ((1, 9), 3)})


def test_loop_carried_shape_change_refused():
    """A carried value doubling per iteration (Concat with itself) is refused, naming
    the node."""
    body = helper.make_graph(
        [helper.make_node("Concat", ["v_in", "v_in"], ["v_out"], axis=0),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("v_in", F, ["n"])],
        [_vi("c_out", B, []), _vi("v_out", F, ["m"])])
    model = _model([helper.make_node("Loop", ["m", "", "v0"], ["v"], body=body, name="grow")],
                   [_vi("m", I64, []), _vi("v0", F, [2])], [_vi("v", F, ["k"])])
    with pytest.raises(monolib.errors.ShapeError, match=r"'grow'.*constant step"):
        monolib.compile(model, max_trip_count={"grow": 4})


def test_if_branch_ranks_differ_refused():
    then_b = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [_vi("t", F, [2, 3])])
    else_b = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)], "else",
                               [], [_vi("e", F, [])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b,
                                     name="pick")],
                   [_vi("x", F, [2, 3]), _vi("c", B, [])], [_vi("y", F, ["a", "b"])])
    with pytest.raises(monolib.errors.ShapeError, match="'pick'.*rank 2 in then_branch"):
        monolib.compile(model)


def test_cli_max_trips(tmp_path, rng, capsys, ort_run):
    """``monolib compile --max-trips the_loop=8``; without it the CLI prints the hint."""
    import onnx

    from monolib.cli import main

    model = _counter_loop()
    path = tmp_path / "loop.onnx"
    onnx.save(model, path)
    assert main(["compile", str(path), "-o", str(tmp_path / "x.so")]) == 1
    assert "--max-trips the_loop=N" in capsys.readouterr().err
    lib = tmp_path / "loop.so"
    assert main(["compile", str(path), "-o", str(lib), "--max-trips", "the_loop=8"]) == 0
    gm = monolib.GraphModule(monolib.load_module(str(lib))["default"](monolib.cpu()))
    feeds = _loop_feeds(rng, 6)
    for g, w in zip(_run(gm, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_nested_loops_and_a_data_dependent_body(rng, ort_run):
    """A Loop in a Loop body; the inner body counts the positive entries of a captured
    row with NonZero (a computed dim inside a subgraph) and accumulates the count."""
    inner = helper.make_graph(
        [helper.make_node("Gather", ["x", "j"], ["row"], axis=0),
         helper.make_node("Add", ["row", "shift"], ["row2"]),
         helper.make_node("Greater", ["row2", "zero"], ["pos"]),
         helper.make_node("NonZero", ["pos"], ["nz"]),
         helper.make_node("Shape", ["nz"], ["nzs"]),
         helper.make_node("Gather", ["nzs", "one"], ["cnt"], axis=0),
         helper.make_node("Add", ["acc_in", "cnt"], ["acc_out"]),
         helper.make_node("Identity", ["ci"], ["co"])],
        "inner", [_vi("j", I64, []), _vi("ci", B, []), _vi("acc_in", I64, [])],
        [_vi("co", B, []), _vi("acc_out", I64, [])],
        initializer=[helper.make_tensor("zero", F, [], [0.0]),
                     helper.make_tensor("one", I64, [], [1])])
    outer = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["fi", "step"], ["shift"]),
         helper.make_node("Loop", ["rows", "", "tot_in"], ["tot_out"], body=inner),
         helper.make_node("Identity", ["tot_out"], ["per_i"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "outer", [_vi("i", I64, []), _vi("c_in", B, []), _vi("tot_in", I64, [])],
        [_vi("c_out", B, []), _vi("tot_out", I64, []), _vi("per_i", I64, [])],
        initializer=[helper.make_tensor("step", F, [], [-0.25])])
    model = _model([helper.make_node("Loop", ["m", "", "t0"], ["total", "each"], body=outer,
                                     name="outer_loop")],
                   [_vi("m", I64, []), _vi("rows", I64, []), _vi("t0", I64, []), _vi("x", F, [4, 6])],
                   [_vi("total", I64, []), _vi("each", I64, ["k"])])
    feeds = [{"m": np.array(m, np.int64), "rows": np.array(r, np.int64),
              "t0": np.array(0, np.int64), "x": rng.standard_normal((4, 6)).astype(np.float32)}
             for m, r in ((3, 4), (5, 2), (0, 4))]
    _check(model, feeds, ort_run, max_trip_count={"outer_loop": 5})


def _growing_loop():
    """ids [1, n] grows by one per iteration (Concat of i * 2 + its length so far, read
    through Shape); a float carried value sums the ids."""
    body = helper.make_graph(
        [helper.make_node("Shape", ["ids_in"], ["shp"]),
         helper.make_node("Gather", ["shp", "one"], ["n"], axis=0),
         helper.make_node("Mul", ["i", "two"], ["i2"]),
         helper.make_node("Add", ["i2", "n"], ["v"]),
         helper.make_node("Reshape", ["v", "shape11"], ["v11"]),
         helper.make_node("Concat", ["ids_in", "v11"], ["ids_out"], axis=1),
         helper.make_node("ReduceSum", ["ids_out"], ["tot"], keepdims=0),
         helper.make_node("Cast", ["tot"], ["ftot"], to=F),
         helper.make_node("Add", ["acc_in", "ftot"], ["acc_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("ids_in", I64, [1, "n"]),
                 _vi("acc_in", F, [])],
        [_vi("c_out", B, []), _vi("ids_out", I64, [1, "n2"]), _vi("acc_out", F, [])],
        initializer=[helper.make_tensor("one", I64, [], [1]), helper.make_tensor("two", I64, [], [2]),
                     helper.make_tensor("shape11", I64, [2], [1, 1])])
    return _model([helper.make_node("Loop", ["m", "", "ids0", "a0"], ["ids", "acc"], body=body,
                                    name="grow")],
                  [_vi("m", I64, []), _vi("ids0", I64, [1, 2]), _vi("a0", F, [])],
                  [_vi("ids", I64, [1, "k"]), _vi("acc", F, [])])


def test_loop_carried_value_growing_per_iteration(ort_run):
    """A carried tensor growing by a constant step gets a computed dim (its slot
    planned at the bound): run-time M within the bound, 0 trips, and past the bound."""
    model = _growing_loop()
    feeds = [{"m": np.array(m, np.int64), "ids0": np.array([[7, 3]], np.int64),
              "a0": np.array(0.5, np.float32)} for m in (0, 1, 5, 6)]
    gm = _check(model, feeds, ort_run, max_trip_count={"grow": 6})
    assert _run(gm, feeds[2])[0].shape == (1, 7)
    with pytest.raises(ExecutionError, match="'grow'"):
        _run(gm, {**feeds[0], "m": np.array(7, np.int64)})
    with pytest.raises(UnsupportedOpError, match=r"grows per iteration.*max_trip_count"):
        monolib.compile(model)


def test_loop_carried_data_dependent_dim_checked_each_iteration(rng, ort_run):
    """The body's carried output follows a run-time Slice (a computed dim) where the
    carried value is [1] (as in ONNX's test_loop11): it runs while the slice keeps one
    element and stops, naming the node, when it does not."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "ax0"], ["st"]),
         helper.make_node("Add", ["st", "w"], ["en"]),
         helper.make_node("Slice", ["x", "st", "en", "ax0"], ["piece"]),
         helper.make_node("Add", ["y_in", "piece"], ["y_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("y_in", F, [1])],
        [_vi("c_out", B, []), _vi("y_out", F, ["n"])],
        initializer=[helper.make_tensor("ax0", I64, [1], [0])])
    model = _model([helper.make_node("Loop", ["m", "", "y0"], ["y"], body=body, name="slicer")],
                   [_vi("m", I64, []), _vi("y0", F, [1]), _vi("x", F, [8]), _vi("w", I64, [1])],
                   [_vi("y", F, ["k"])])
    feeds = [{"m": np.array(m, np.int64), "y0": rng.standard_normal(1).astype(np.float32),
              "x": rng.standard_normal(8).astype(np.float32), "w": np.array([1], np.int64)}
             for m in (0, 3, 8)]
    gm = _check(model, feeds, ort_run)
    with pytest.raises(ExecutionError, match="'slicer'"):
        _run(gm, {**feeds[1], "w": np.array([2], np.int64)})  # two elements: [1] -> [2]
    with pytest.raises(ExecutionError, match="'slicer'"):
        _run(gm, {**feeds[1], "m": np.array(9, np.int64)})  # x[8:9] is empty


def test_if_branch_with_data_dependent_dim(rng, ort_run):
    """then: x[:k] for a run-time k (its length a computed dim the branch writes);
    else: x[::2]: the If's output dim is written from the taken branch's."""
    then_b = helper.make_graph([helper.make_node("Slice", ["x", "zero", "k"], ["t"])], "then", [],
                               [_vi("t", F, ["a"])],
                               initializer=[helper.make_tensor("zero", I64, [1], [0])])
    else_b = helper.make_graph([helper.make_node("Slice", ["x", "s0", "s1", "s2", "s3"], ["e"])],
                               "else", [], [_vi("e", F, ["b"])],
                               initializer=[helper.make_tensor("s0", I64, [1], [0]),
                                            helper.make_tensor("s1", I64, [1], [8]),
                                            helper.make_tensor("s2", I64, [1], [0]),
                                            helper.make_tensor("s3", I64, [1], [2])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b),
                    helper.make_node("Mul", ["y", "y"], ["z"])],
                   [_vi("x", F, [8]), _vi("c", B, []), _vi("k", I64, [1])], [_vi("z", F, ["n"])])
    x = rng.standard_normal(8).astype(np.float32)
    feeds = [{"x": x, "c": np.array(c), "k": np.array([k], np.int64)}
             for c, k in ((True, 3), (False, 3), (True, 0), (True, 8))]
    _check(model, feeds, ort_run)
