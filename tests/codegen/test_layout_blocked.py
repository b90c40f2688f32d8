"""Tensors kept channel-blocked (NCHW16c) between a pixels-as-rows conv and a
channel-blocked depthwise conv (``backends/c/layout.py``).

A 1x1 conv -> 5x5 depthwise -> 1x1 conv chain, its algorithms forced, keeps both tensors
between the three blocked (the graph JSON marks them), matches ONNX Runtime and gives the
same bits at 1 and 2 threads; the debug executor returns those tensors in NCHW, equal to
ONNX Runtime's. Every condition that keeps a tensor NCHW is checked on its own: a
second reader, a graph output, channels not a multiple of 16, a chain with a side input
fused after the producer, a consumer that reads NCHW. Without forcing, a 1x1 conv next to
the depthwise one leans to pixels-as-rows (``rule_costs(blocked=True)``); one whose own
output stays NCHW (a residual Add fused after it) leans only by the credit of the copy in
(``blocked_in``), and reads the blocked tensor exactly when that pick is pixels-as-rows.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.ops.nn import conv
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.pipeline import prepare
from monolib.compiler.testing import ort_session
from monolib.compiler.tuning.select import Selection, selecting
from monolib.runtime.debug_executor import GraphModuleDebug

RNG = np.random.default_rng(11)
FORCED = {"pw1": "pixel_rows", "dw": "depthwise_cb", "pw2": "pixel_rows"}


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def chain(c: int = 32, mid: int = 64, out: int = 48, hw: int = 14, *, extra=(),
          outputs=("y",), mul_after_pw1: bool = False, residual: bool = False):
    """x [1, c, hw, hw] -> pw1 (1x1, mid) -> HardSwish -> dw (5x5, stride 1) -> Relu ->
    pw2 (1x1, out) -> y; ``extra``: more nodes; ``outputs``: graph outputs;
    ``mul_after_pw1``: a per-channel Mul (a side input) after pw1's HardSwish;
    ``residual``: pw2's own input (True) or the named tensor added to its output, fused
    after it."""
    inits = [numpy_helper.from_array(_w(mid, c, 1, 1), "w1"),
             numpy_helper.from_array(_w(mid), "b1"),
             numpy_helper.from_array(_w(mid, 1, 5, 5), "wd"),
             numpy_helper.from_array(_w(mid), "bd"),
             numpy_helper.from_array(_w(out, mid, 1, 1), "w2"),
             numpy_helper.from_array(_w(out), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["p1"], name="pw1"),
             helper.make_node("HardSwish", ["p1"], ["h1"], name="hs")]
    h1 = "h1"
    if mul_after_pw1:
        inits.append(numpy_helper.from_array(_w(mid).reshape(mid, 1, 1) + 1, "scale"))
        nodes.append(helper.make_node("Mul", ["h1", "scale"], ["h1s"], name="mul"))
        h1 = "h1s"
    nodes += [helper.make_node("Conv", [h1, "wd", "bd"], ["d"], name="dw", group=mid,
                               pads=[2, 2, 2, 2]),
              helper.make_node("Relu", ["d"], ["r"], name="relu"),
              helper.make_node("Conv", ["r", "w2", "b2"], ["y0" if residual else "y"],
                               name="pw2"), *extra]
    if residual:  # True: pw2's own input; a name: that tensor
        nodes.append(helper.make_node("Add", ["y0", "r" if residual is True else residual],
                                      ["y"], name="add"))
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, c, hw, hw])], outs, inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _compile(model, forced=FORCED):
    with selecting(Selection(forced=dict(forced or {}))):
        return monolib.compile(model, target="c")


def _blocked_nodes(factory) -> list[str]:
    return [n["name"] for n in factory.graph_json["nodes"] if n.get("layout") == "NCHW16c"]


def _run(factory, x: np.ndarray, threads: int = 1) -> list[np.ndarray]:
    monolib.runtime.set_num_threads(threads)
    try:
        gm = monolib.GraphModule(factory["default"](monolib.cpu()))
        gm.set_input(x=x)
        gm.run()
        return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]
    finally:
        monolib.runtime.set_num_threads(len(os.sched_getaffinity(0)))


def _ort(model, x: np.ndarray, names=("y",)) -> list[np.ndarray]:
    model = type(model).FromString(model.SerializeToString())
    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in have:
            model.graph.output.append(helper.make_empty_tensor_value_info(n))
    sess = ort_session(model)
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))
    return [got[n] for n in names]


def _x(c: int = 32, hw: int = 14) -> np.ndarray:
    return RNG.standard_normal((1, c, hw, hw)).astype(np.float32)


@pytest.mark.parametrize("c, hw, blocked", [
    (32, 14, ["pw1", "dw"]),  # their outputs: h1 and r
    (320, 14, ["pw1", "dw"]),  # K past one KC block: pw1 adds to the blocks it stored
    (32, 2, ["pw1"]),  # 4 pixels: pw1 copies its tile out; pw2 cannot read blocks in place
])
def test_chain_kept_blocked_matches_ort_on_one_and_two_threads(c, hw, blocked) -> None:
    model = chain(c=c, hw=hw)
    factory = _compile(model)
    assert _blocked_nodes(factory) == blocked
    x = _x(c, hw)
    (ref,) = _ort(model, x)
    one = _run(factory, x, 1)[0]
    np.testing.assert_allclose(one, ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))
    np.testing.assert_array_equal(_run(factory, x, 2)[0], one)


def test_debug_output_of_a_blocked_tensor_is_nchw() -> None:
    model = chain()
    factory = _compile(model)
    x = _x()
    h1, r = _ort(model, x, ("h1", "r"))
    dbg = GraphModuleDebug(factory["default"](monolib.cpu()))
    dbg.set_input(x=x)
    for name, ref in (("pw1", h1), ("dw", r)):
        got = dbg.debug_get_output(name).numpy()
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))


@pytest.mark.parametrize("case", ["second_reader", "graph_output", "channels_40",
                                  "side_input", "nchw_consumer", "read_again_by_the_consumer"])
def test_kept_nchw_when(case: str) -> None:
    """Each condition alone keeps the tensor pw1 -> dw (or dw -> pw2) NCHW; the results
    stay right."""
    kw: dict = {}
    forced = dict(FORCED)
    names = ("y",)
    if case == "read_again_by_the_consumer":  # r: pw2's input and its fused Add's
        model = chain(out=64, residual=True)
        factory = _compile(model)
        assert _blocked_nodes(factory) == ["pw1"]
        x = _x()
        (ref,) = _ort(model, x)
        np.testing.assert_allclose(_run(factory, x)[0], ref, rtol=1e-4,
                                   atol=1e-5 * float(np.abs(ref).max()))
        return
    if case == "second_reader":  # h1 also read by a ReduceMean
        kw["extra"] = [helper.make_node("ReduceMean", ["h1"], ["m"], name="rm", keepdims=1)]
        kw["outputs"] = names = ("y", "m")
    elif case == "graph_output":
        kw["outputs"] = names = ("y", "h1")
    elif case == "channels_40":
        kw["mid"] = 40
    elif case == "side_input":
        kw["mul_after_pw1"] = True
    elif case == "nchw_consumer":
        forced["dw"] = "depthwise(rows=4)"
    model = chain(**kw)
    factory = _compile(model, forced)
    assert "pw1" not in _blocked_nodes(factory)
    if case in ("second_reader", "graph_output", "side_input"):
        assert _blocked_nodes(factory) == ["dw"]  # dw -> pw2 still blocked
    x = _x()
    for got, ref in zip(_run(factory, x), _ort(model, x, names)):
        np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4,
                                   atol=1e-5 * float(np.abs(ref).max()))


def test_pointwise_leans_to_pixel_rows_next_to_a_blocked_depthwise(monkeypatch) -> None:
    """256 -> 256 1x1 at 14x14: pixels-as-rows' modelled cost drops by its transpose when
    the tensor it writes stays blocked, so the rule takes it there; compiled without
    forcing, the 1x1 convs on both sides of a channel-blocked depthwise conv keep both
    tensors blocked. The Zen 4 table on any host: the AVX2 one prices the GEMM and
    pixels-as-rows within 1% there, the pick then rests on its small discount."""
    from monolib.compiler.ops.nn import conv_cost

    monkeypatch.setattr(conv_cost, "shipped_costs", lambda: conv_cost.COSTS)
    model = chain(c=256, mid=256, out=256)
    node = next(n for n in prepare(model)[0].nodes if n.name == "pw1")
    d = as_2d([14, 14], conv_geometry(node))
    plain, near = conv.rule_costs(node, d, 1), conv.rule_costs(node, d, 1, blocked=True)
    assert near["pixel_rows"] < plain["pixel_rows"] and near["gemm"] == plain["gemm"]
    assert conv._rule(node, d, 1, blocked=True).algo == "pixel_rows"
    factory = _compile(model, {"dw": "depthwise_cb"})
    assert _blocked_nodes(factory) == ["pw1", "dw"]
    x = _x(256)
    (ref,) = _ort(model, x)
    np.testing.assert_allclose(_run(factory, x)[0], ref, rtol=1e-4,
                               atol=1e-5 * float(np.abs(ref).max()))


def _add_input_z(model, out: int, hw: int):
    """``model`` with y = y_before + z, z [1, out, hw, hw] a second graph input."""
    m = type(model).FromString(model.SerializeToString())
    for n in m.graph.node:
        n.output[:] = ["y_pre" if o == "y" else o for o in n.output]
    m.graph.node.append(helper.make_node("Add", ["y_pre", "z"], ["y"], name="add_z"))
    m.graph.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, out, hw, hw]))
    del m.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.parametrize("table", ["COSTS", "COSTS_AVX2"])
@pytest.mark.parametrize("c, out, hw", [(512, 2048, 7), (512, 512, 7), (64, 64, 14)])
def test_consumer_with_a_side_input_gets_no_output_discount(c, out, hw, table,
                                                            monkeypatch) -> None:
    """pw2 with a residual Add of a graph input fused after it: its output stays NCHW, so its pick
    for reading dw's blocked output is priced with the credit of dw's copy in
    (``blocked_in``: transpose - block per input float) but its own transpose out in
    full; the layout blocks dw -> pw2 exactly when that pick is pixels-as-rows, and the
    emitter agrees (it would refuse a blocked input otherwise). Results as ORT's, the
    same bits on 1 and 2 threads. Under both shipped tables, whichever host: with Zen 4's
    pw2 reads dw's blocked output at all three sizes, with AVX2's (a discount of 0.25 ns
    a float, measured) it runs the GEMM on NCHW."""
    from monolib.compiler.ops.nn import conv_cost

    costs = getattr(conv_cost, table)
    monkeypatch.setattr(conv_cost, "shipped_costs", lambda: costs)
    model = _add_input_z(chain(c=c, mid=c, out=out, hw=hw), out, hw)
    node = next(n for n in prepare(model)[0].nodes if n.name == "pw2")
    d = as_2d([hw, hw], conv_geometry(node))
    plain = conv.rule_costs(node, d, 1)
    credit = conv.rule_costs(node, d, 1, blocked_in=True)
    both = conv.rule_costs(node, d, 1, blocked=True, blocked_in=True)
    assert credit["gemm"] == plain["gemm"] == both["gemm"]
    assert both["pixel_rows"] < credit["pixel_rows"] < plain["pixel_rows"]
    reads = conv._rule(node, d, 1, blocked_in=True).algo == "pixel_rows"
    assert reads == (table == "COSTS")
    factory = _compile(model, {"pw1": "pixel_rows", "dw": "depthwise_cb"})
    assert ("dw" in _blocked_nodes(factory)) == reads
    x, z = _x(c, hw), RNG.standard_normal((1, out, hw, hw)).astype(np.float32)
    sess = ort_session(model)
    (ref,) = sess.run(None, {"x": x, "z": z})
    outs = []
    for threads in (1, 2):
        monolib.runtime.set_num_threads(threads)
        try:
            gm = monolib.GraphModule(factory["default"](monolib.cpu()))
            gm.set_input(x=x, z=z)
            gm.run()
            outs.append(gm.get_output(0).numpy().copy())
        finally:
            monolib.runtime.set_num_threads(len(os.sched_getaffinity(0)))
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))
    np.testing.assert_array_equal(outs[1], outs[0])
