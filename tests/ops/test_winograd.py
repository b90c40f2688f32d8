"""Winograd convolution (ops/nn/winograd.py, kernels/winograd.h).

The generated transforms satisfy the defining identity of F(m, r) exactly (Fractions);
Convs that take the Winograd path (the C source names its kernels) match the NumPy
reference and ONNX Runtime for partial edge tiles, pads 0/1/asymmetric, channel counts
off the GEMM blocking, 1-D 3/5-tap and 2-D 3x3 kernels, with bias and a fused epilogue;
a compiled model gives the same result on 1 and 2 threads; the path is skipped where it
does not apply.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import onnx
import pytest
from frontend.onnx_util import F32, make_model
from harness import (
    EPI,
    VECTOR_WIDTHS,
    NodeContext,
    check_threads_match_ort,
    make_node,
    run_c,
    run_threads,
)
from onnx import helper

from monolib.compiler.build import lower
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn import winograd
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.testing import ort_run
from monolib.compiler.tuning.select import Selection, selecting
from monolib.errors import CompileError

RNG = np.random.default_rng(2016)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


# -- the transforms ----------------------------------------------------------------------


@pytest.mark.parametrize("m, r_", [(1, 1), (2, 3), (3, 2), (4, 3), (4, 5), (6, 3), (2, 5)])
def test_cook_toom_identity_is_exact(m: int, r_: int) -> None:
    t = winograd.cook_toom(m, r_)
    rnd = random.Random(m * 10 + r_)
    a = t.alpha
    assert len(t.at) == m and len(t.g) == a and len(t.bt) == a
    for _ in range(4):
        g = [Fraction(rnd.randint(-9, 9), rnd.randint(1, 7)) for _ in range(r_)]
        d = [Fraction(rnd.randint(-9, 9), rnd.randint(1, 7)) for _ in range(a)]
        gg = [sum(t.g[k][j] * g[j] for j in range(r_)) for k in range(a)]
        bd = [sum(t.bt[k][j] * d[j] for j in range(a)) for k in range(a)]
        y = [sum(t.at[i][k] * gg[k] * bd[k] for k in range(a)) for i in range(m)]
        assert y == [sum(d[i + j] * g[j] for j in range(r_)) for i in range(m)]


def test_cook_toom_f43_is_lavins_up_to_row_scale() -> None:
    t = winograd.cook_toom(4, 3)  # points 0, +-1, +-2, inf
    assert [[int(x) for x in row] for row in t.bt] == [
        [4, 0, -5, 0, 1, 0],
        [0, 4, 4, -1, -1, 0],
        [0, -4, 4, 1, -1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1],
    ]
    assert [[int(x) for x in row] for row in t.at] == [
        [1, 1, 1, 1, 1, 0],
        [0, 1, -1, 2, -2, 0],
        [0, 1, 1, 4, 4, 0],
        [0, 1, -1, 8, -8, 1],
    ]
    assert t.g[1] == (Fraction(1, 6), Fraction(1, 6), Fraction(1, 6))


def test_cook_toom_bad_arguments() -> None:
    with pytest.raises(CompileError, match="must be >= 1"):
        winograd.cook_toom(0, 3)
    with pytest.raises(CompileError, match="distinct"):
        winograd.cook_toom(2, 3, (Fraction(0), Fraction(1), Fraction(1)))
    with pytest.raises(CompileError, match="distinct"):
        winograd.cook_toom(4, 3, (Fraction(0), Fraction(1)))


def test_transform_weights_in_float64_matches_the_convolution() -> None:
    """U = G g G^T, then A^T [U (.) B^T d B] A in float64 reproduces a 2-D correlation."""
    th = tw = winograd.cook_toom(4, 3)
    w = r(1, 1, 3, 3)
    d = RNG.standard_normal((6, 6))
    u = winograd.transform_weights(w, th, tw).reshape(6, 6).astype(np.float64)

    def f(m):
        return np.array([[float(x) for x in row] for row in m])

    y = f(th.at) @ (u * (f(th.bt) @ d @ f(tw.bt).T)) @ f(tw.at).T
    want = np.array(
        [[np.sum(d[i : i + 3, j : j + 3] * w[0, 0]) for j in range(4)] for i in range(4)]
    )
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


# -- the emitted kernel ------------------------------------------------------------------

CASES = {
    # x, w, attrs: partial edge tiles both ways, channels off MR (6) and NR (16)
    "3x3_pad1_partial_tiles": ((1, 13, 33, 35), (10, 13, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_no_pad": ((2, 9, 34, 38), (8, 9, 3, 3), {}),
    "3x3_asym_pads": ((1, 40, 21, 30), (27, 40, 3, 3), {"pads": [0, 1, 2, 0]}),
    "3x3_wide_blocks": ((1, 16, 10, 150), (9, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_many_channels": ((1, 70, 18, 18), (50, 70, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_narrow_output_f2": ((1, 40, 10, 18), (30, 40, 3, 3), {"pads": [0, 0, 0, 0]}),
    # rows of tiles fewer than a vector (14 and 9 tiles) and past whole vectors (35 = 32 +
    # 3 at F(2)): winograd.h stores those outputs a float at a time (mw 4 and 2)
    "3x3_rows_under_a_vector": ((1, 16, 20, 56), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_rows_past_vectors_f2": ((1, 12, 9, 70), (10, 12, 3, 3), {"pads": [1, 1, 1, 1]}),
    "1d_k5": ((1, 20, 87), (14, 20, 5), {"pads": [2, 1]}),
    "1d_k3": ((2, 17, 85), (13, 17, 3), {"pads": [1, 1]}),
    "1d_k5_one_block_channel_split": ((1, 24, 70), (100, 24, 5), {}),
    "column_k5_magika_like": ((1, 40, 90, 1), (30, 40, 5, 1), {}),
    "row_1x5": ((1, 20, 1, 90), (14, 20, 1, 5), {}),
    # dilated: run as the undilated conv of the phases side by side (ml_winograd_phases)
    "dil2_pad2_odd_sizes": ((1, 13, 33, 35), (10, 13, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "dil3_asym_pads_batch2": ((2, 16, 40, 31), (12, 16, 3, 3), {"pads": [3, 0, 0, 2], "dilations": [3, 3]}),
    "dil2_rows_only": ((1, 16, 26, 27), (16, 16, 3, 3), {"pads": [2, 1, 2, 1], "dilations": [2, 1]}),
    "dil2_no_pad": ((1, 16, 30, 30), (16, 16, 3, 3), {"dilations": [2, 2]}),
    "dil4_1d_k3": ((1, 16, 203), (16, 16, 3), {"pads": [4, 4], "dilations": [4]}),
    "dil2_pad2_narrow_f2": ((1, 24, 18, 34), (20, 24, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
}


def _node(xs, ws, attrs, bias=True):
    ins = [r(*xs), r(*ws, scale=0.3), r(ws[0]) if bias else None]
    return ins, make_node("Conv", ins, attrs, const=[1, 2], opset=11)


def _check(ins, attrs, options=()) -> None:
    """The emitted C, plain and with the test epilogue, against the NumPy reference.

    F(4x4, 3x3) and F(4, 5) in float32 lose a few bits to the transforms: the bound is
    relative to the output's largest magnitude (3e-5; the direct paths reach ~1e-6), far
    below what a wrong tile, tap or channel gives."""
    const = [1, 2] if len(ins) > 2 and ins[2] is not None else [1]
    node = make_node("Conv", ins, attrs, const=const, opset=11)
    ref = op_of(node).reference(node, list(ins))[0]
    tol = 3e-5 * float(np.abs(ref).max())
    for epi, want in ((None, ref), ("affine", ref * EPI[0] + EPI[1])):
        got = run_c(node, ins, epi, options)[0]
        err = float(np.abs(got - want).max())
        assert err <= tol, f"max abs error {err:.3g} > {tol:.3g} (epilogue {epi})"


def _forced(name: str):
    """Force the case's Winograd candidate on the test node (the cost-model rule may
    prefer direct or GEMM on these small shapes)."""
    label = "winograd(m=2)" if name.endswith("_f2") else "winograd(m=4)"
    return selecting(Selection(forced={"Conv_0": label}))


def _source(node) -> str:
    ctx = NodeContext(node)
    return op_of(node).emit(node, ctx) + "\n".join(ctx.helpers)


@pytest.mark.parametrize("name", sorted(CASES))
def test_winograd_conv_matches_reference(name: str) -> None:
    xs, ws, attrs = CASES[name]
    ins, node = _node(xs, ws, attrs)
    with _forced(name):
        src = _source(node)
        call = "ml_winograd_phases(" if name.startswith("dil") else "ml_winograd("
        assert call in src and "ml_wino_" in src, src[:400]
        if name.endswith("_f2"):
            assert "ml_wino_2x2_3x3_in" in src
        if "channel_split" in name:  # 17 tiles, one block: 2 tasks of 54 and 46 channels
            assert ".co_split = 2" in src
        _check(ins, attrs)


def test_winograd_without_bias() -> None:
    xs, ws, attrs = CASES["3x3_asym_pads"]
    ins, _ = _node(xs, ws, attrs, bias=False)
    with _forced("3x3_asym_pads"):
        _check(ins[:2], attrs)


@pytest.mark.parametrize(
    "xs, ws, attrs, why",
    [
        ((1, 16, 20, 20), (16, 16, 3, 3), {"strides": [2, 2]}, "stride"),
        ((1, 16, 20, 20), (16, 16, 3, 3), {"dilations": [2, 2], "pads": [1, 1, 1, 1]},
         "dilation, pads not a multiple of it"),
        ((1, 16, 20, 20), (16, 8, 3, 3), {"group": 2}, "group"),
        ((1, 4, 20, 20), (16, 4, 3, 3), {}, "few input channels"),
        ((1, 16, 20, 20), (16, 16, 5, 5), {}, "5x5"),
        ((1, 16, 6, 6), (16, 16, 3, 3), {}, "few tiles"),
        ((1, 16, 20, 20), (64, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "small, few input channels"),
        ((1, 40, 20, 20), (16, 40, 3, 3), {"pads": [1, 1, 1, 1]}, "small, few channel pairs"),
        ((1, 16, 1, 40), (16, 16, 1, 5), {}, "few 1-D tiles"),
    ],
)
def test_winograd_is_skipped_where_it_does_not_apply(xs, ws, attrs, why) -> None:
    _, node = _node(xs, ws, attrs)
    d = as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))
    assert winograd.plan_winograd(node, d, int(node.attrs["group"])) is None, why


def test_winograd_needs_constant_weights() -> None:
    node = make_node("Conv", [r(1, 16, 20, 20), r(16, 16, 3, 3)], {}, const=[], opset=11)
    d = as_2d([20, 20], conv_geometry(node))
    assert winograd.plan_winograd(node, d, 1) is None


def test_winograd_can_be_turned_off(monkeypatch) -> None:
    _, node = _node(*CASES["3x3_no_pad"])
    monkeypatch.setenv("MONOLIB_WINOGRAD", "0")
    assert "ml_winograd(" not in _source(node)
    monkeypatch.delenv("MONOLIB_WINOGRAD")
    monkeypatch.setattr(winograd, "ENABLED", False)
    assert "ml_winograd(" not in _source(node)


# -- a compiled model on the thread pool ---------------------------------------------------


def _model() -> onnx.ModelProto:
    """x [1,32,45,43] -> 3x3 conv (20) + bias -> Relu: 132 tiles, over the parallel
    threshold; s [1,48,301] -> 1-D 5-tap conv (40), no bias."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["y"]),
        helper.make_node("Conv", ["s", "w2"], ["z"], pads=[0, 0]),
    ]
    shapes = {"w1": (20, 32, 3, 3), "b1": (20,), "w2": (40, 48, 5)}
    weights = {k: r(*s, scale=0.2) for k, s in shapes.items()}
    return make_model(
        nodes,
        [("x", F32, [1, 32, 45, 43]), ("s", F32, [1, 48, 301])],
        [("y", F32, [1, 20, 45, 43]), ("z", F32, [1, 40, 297])],
        weights,
    )


def test_compiled_winograd_on_one_and_two_threads() -> None:
    model = _model()
    source, _, _ = lower(model, None, None)
    assert source.count("ml_winograd(&") == 2
    assert "ml_wino_4x4_3x3_in" in source and "ml_wino_1x4_1x5_in" in source
    rng = np.random.default_rng(5)
    feeds = {
        "x": rng.standard_normal((1, 32, 45, 43), np.float32),
        "s": rng.standard_normal((1, 48, 301), np.float32),
    }
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    for got, ref in zip(one, want):
        assert np.abs(got - ref).max() <= 3e-5 * np.abs(ref).max()
    assert (one[0] >= 0).all()  # the fused Relu
    for a, b in zip(one, two):  # tasks own whole blocks: the same sums
        np.testing.assert_array_equal(a, b)


def test_compiled_dilated_winograd_on_one_and_two_threads() -> None:
    """A dilated 3x3 conv (DeepLab's and U^2-Net's atrous convs) with a fused residual
    Add + Relu: the rule runs it as the Winograd conv of its phases (the cost model puts
    it at about half the direct and GEMM paths' time), gathered and scattered in tasks
    over channels; 1 and 2 threads give the same bits, and ORT's values."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    model = make_model(nodes, [("x", F32, [1, 48, 64, 62])], [("y", F32, [1, 48, 64, 62])],
                       {"w": r(48, 48, 3, 3, scale=0.1), "b": r(48)})
    source, _, _ = lower(model, None, None)
    assert "ml_winograd_phases(&wa_" in source
    feeds = {"x": np.random.default_rng(7).standard_normal((1, 48, 64, 62), np.float32)}
    check_threads_match_ort(model, feeds)


@pytest.mark.parametrize("width", sorted(VECTOR_WIDTHS))
@pytest.mark.parametrize(
    "name", ["3x3_pad1_partial_tiles", "1d_k5", "3x3_narrow_output_f2", "dil3_asym_pads_batch2"]
)
def test_winograd_other_vector_widths(name: str, width: str) -> None:
    xs, ws, attrs = CASES[name]
    ins, _ = _node(xs, ws, attrs)
    with _forced(name):
        _check(ins, attrs, VECTOR_WIDTHS[width])
