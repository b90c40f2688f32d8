"""Transcendentals in generated code, measured against NumPy float64 over the whole
float32 range: kernels/vmath.h's ml_expf (what expf means in the C backend), the
Sigmoid, Tanh and the tanh-GELU chain (rewritten to 2 sigmoid(2u) by the tanh_sigmoid
pass) in vectorized elementwise loops; special values (+-0, +-inf, NaN, subnormals,
the overflow and underflow edges) exactly."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.build import lower
from monolib.compiler.testing import run_model

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(11)
SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, -1e-38, 1e-30, -1e-30,
     88.72, 88.7228, 88.73, 89.0, 1e30, -87.3, -87.34, -103.9, -103.98, -104.5, -1e30,
     0.5, -0.5, 1.0, -1.0, 9.0, -9.0, 20.0, -20.0],
    np.float32,
)  # fmt: skip


def _inputs(n: int = 200_000) -> np.ndarray:
    """Special values, a uniform sweep of [-110, 95] and log-spaced magnitudes of both
    signs from 1e-40 to 1e38 (a length not a multiple of 8: vector and tail paths)."""
    sweep = np.linspace(-110, 95, n, dtype=np.float32)
    mags = np.exp(RNG.uniform(np.log(1e-40), np.log(1e38), n)).astype(np.float32)
    signs = RNG.choice(np.array([-1, 1], np.float32), n)
    return np.concatenate([SPECIAL, sweep, mags * signs, RNG.standard_normal(n)]).astype(np.float32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the float32 spacing at ``want`` (float64 reference);
    0 where both are the same non-finite value."""
    with np.errstate(over="ignore", invalid="ignore"):  # exp past FLT_MAX: inf
        w32 = want.astype(np.float32)
        spacing = np.spacing(np.abs(w32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - want) / spacing
    same = (got == w32) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0.0, err)


def _model(nodes, n: int, outputs: list[str], inits: dict | None = None):
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", F32, [n])],
        [helper.make_tensor_value_info(o, F32, [n]) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _unary_model(ops: list[str], n: int):
    nodes = [helper.make_node(op, ["x"], [op.lower()]) for op in ops]
    return _model(nodes, n, [op.lower() for op in ops])


@pytest.fixture(scope="module")
def unary_results():
    x = _inputs()
    model = _unary_model(["Exp", "Sigmoid", "Tanh"], x.size)
    source = lower(model)[0]
    got = run_model(model, {"x": x})
    return x, dict(zip(["exp", "sigmoid", "tanh"], got)), source


def test_generated_exp_is_vmath(unary_results):
    _, _, source = unary_results
    assert "static inline float ml_expf(float x)" in source
    # the ops call ml_expf by name: no macro renames C's expf behind their back
    assert "#define expf" not in source and "ml_expf(" in source.split("ml_expf(float x)")[1]


def test_exp_within_one_ulp(unary_results):
    x, got, _ = unary_results
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.exp(x64)
    err = _ulps(got["exp"], want)
    assert err.max() < 1.0, (x[err.argmax()], got["exp"][err.argmax()], want[err.argmax()])
    # edges: overflow to inf past ln(FLT_MAX), gradual underflow, 0 past -103.97
    special = dict(zip(SPECIAL.tolist(), got["exp"][: SPECIAL.size].tolist()))
    assert special[0.0] == 1.0 and special[np.inf] == np.inf and special[-np.inf] == 0.0
    assert special[float(np.float32(88.73))] == np.inf
    assert 0 < special[float(np.float32(-103.9))] < 1e-44 and special[-104.5] == 0.0
    assert np.isnan(got["exp"][np.isnan(x)]).all()


def test_sigmoid_within_three_ulps(unary_results):
    x, got, _ = unary_results
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want = 1.0 / (1.0 + np.exp(-x64))
    err = _ulps(got["sigmoid"], want)
    # 1 / (1 + e): e within 1 ulp, then an add and a division; where 1 + e rounds
    # (x near 17 and up) the absolute error stays under half an ulp of 1
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    assert err[normal].max() <= 3.0, x[normal][err[normal].argmax()]
    # below FLT_MIN (x < -87.3) exp(-x) overflows for x < -88.7: 0 instead of a subnormal
    tiny = ~normal & ~np.isnan(want)
    assert np.abs(got["sigmoid"][tiny] - want[tiny]).max() < np.finfo(np.float32).tiny
    assert np.isnan(got["sigmoid"][np.isnan(x)]).all()


def test_tanh_within_six_ulps(unary_results):
    x, got, _ = unary_results
    err = _ulps(got["tanh"], np.tanh(x.astype(np.float64)))
    # vmath.h's rational ml_tanhf: 5.5 ulp at most over all float32 (near |x| = 7, the
    # rounding of P, Q and the division on results within 2e-6 of 1); libm's took 1.25x
    # its time
    assert err.max() <= 6.0, x[err.argmax()]
    signs = np.signbit(got["tanh"][x == 0])
    assert list(signs) == list(np.signbit(x[x == 0]))  # tanh(-0) = -0


def _gelu_model(n: int):
    """Magika's tanh-GELU: x * (0.5 * (1 + tanh(0.7978846 * (x + 0.044715 x^3))))."""
    inits = {
        "c0": np.array(0.044715, np.float32),
        "c1": np.array(0.7978846, np.float32),
        "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes = [
        helper.make_node("Mul", ["c0", "x"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["b"]),
        helper.make_node("Mul", ["x", "b"], ["c"]),
        helper.make_node("Add", ["x", "c"], ["d"]),
        helper.make_node("Mul", ["c1", "d"], ["e"]),
        helper.make_node("Tanh", ["e"], ["f"]),
        helper.make_node("Add", ["one", "f"], ["g"]),
        helper.make_node("Mul", ["half", "g"], ["h"]),
        helper.make_node("Mul", ["x", "h"], ["y"]),
    ]
    return _model(nodes, n, ["y"], inits)


def test_tanh_gelu_as_sigmoid_is_accurate_on_wide_inputs():
    # wide inputs (conv outputs of tens) reach exp's overflow range in 2 sigmoid(2u)
    x = np.concatenate([SPECIAL, np.linspace(-60, 60, 50_001, dtype=np.float32)])
    model = _gelu_model(x.size)
    ops = lower(model)[0].split("/* ---- threadpool.h ---- */")[1]
    assert "tanhf(" not in ops and "ml_logisticf(" in ops
    got = run_model(model, {"x": x})[0]
    # the reference follows the float32 graph up to the tanh argument e, then is exact:
    # 0.5 (1 + tanh(e)) = 1 / (1 + exp(-2e)), written so (1 + tanh cancels in float64
    # too: at x = -7.1 it would be off by 60%)
    x32 = x.astype(np.float32)
    with np.errstate(all="ignore"):
        e = np.float32(0.7978846) * (x32 + x32 * (x32 * (np.float32(0.044715) * x32)))
        want = x.astype(np.float64) / (1.0 + np.exp(-2.0 * e.astype(np.float64)))
    finite = np.isfinite(want) & (np.abs(want) > 1e-30)
    rel = np.abs(got[finite] - want[finite]) / np.abs(want[finite])
    # gcc contracts x + x * t into one fma, NumPy rounds twice: e may differ by an ulp,
    # which moves exp(-2e) by 2 |e| 2^-23 relatively
    bound = 5e-7 + 3e-7 * np.abs(e[finite].astype(np.float64))
    assert (rel <= bound).all(), x[finite][(rel / bound).argmax()]
    assert np.isnan(got[np.isnan(x)]).all()
    assert got[np.isposinf(x)][0] == np.inf  # x * 1
    assert np.isnan(got[np.isneginf(x)]).all()  # -inf * 0, as the tanh form gives


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: the same float32 bits (-0 and 0 differ), or NaN in both."""
    want = want.astype(np.float32)
    return (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))


def test_clamps_keep_nan_and_signed_zero_bit_for_bit():
    # Relu, Clip, HardSigmoid and HardSwish clamp through vmath.h's ml_atleastf /
    # ml_atmostf (selects on the comparison's bits, which gcc vectorizes without
    # distributing HardSwish's product over the clamp's cases): the same bits as NumPy's
    # maximum / minimum, NaN kept, -0 kept where the ternary x < lo ? lo : x keeps it
    x = np.concatenate([SPECIAL, np.linspace(-9, 9, 10_001, dtype=np.float32),
                        RNG.standard_normal(5_003).astype(np.float32) * 4])  # fmt: skip
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(2.5, np.float32)}
    nodes = [
        helper.make_node("Relu", ["x"], ["relu"]),
        helper.make_node("Clip", ["x", "lo", "hi"], ["clip"]),
        helper.make_node("HardSigmoid", ["x"], ["hsig"], alpha=0.2, beta=0.5),
        helper.make_node("HardSwish", ["x"], ["hswish"]),
    ]
    model = _model(nodes, x.size, ["relu", "clip", "hsig", "hswish"], inits)
    ops = lower(model)[0].split("/* ---- threadpool.h ---- */")[1]
    assert "ml_atleastf(" in ops and "ml_atmostf(" in ops
    relu, clip, hsig, hswish = run_model(model, {"x": x})
    f = np.float32

    def at_least(v, lo):  # the ternary v < lo ? lo : v
        return np.where(v < lo, lo, v).astype(np.float32)

    def at_most(v, hi):
        return np.where(v > hi, hi, v).astype(np.float32)

    with np.errstate(invalid="ignore"):
        want = {"relu": at_least(x, f(0)), "clip": at_most(at_least(x, f(-0.5)), f(2.5))}
        # gcc contracts x * a + b into one fma (NumPy rounds twice): the ramp may differ
        # by an ulp, the clamped ends and the NaNs may not
        ramp = (x.astype(np.float64) * f(0.2) + 0.5).astype(np.float32)
        want["hsig"] = at_most(at_least(ramp, f(0)), f(1))
        ramp = (x.astype(np.float64) * f(1 / 6) + 0.5).astype(np.float32)
        want["hswish"] = x * at_most(at_least(ramp, f(0)), f(1))
    for name, got in zip(want, [relu, clip, hsig, hswish]):
        ok = _same_bits(got, want[name])
        if name in ("hsig", "hswish"):
            with np.errstate(invalid="ignore"):
                near = np.abs(got - want[name]) <= 2.5e-7 * np.abs(want[name])
            ok |= near & ~np.isin(want[name], [0, 1]) & (np.signbit(got) == np.signbit(want[name]))
        assert ok.all(), (name, x[~ok][:5], got[~ok][:5], want[name][~ok][:5])
    assert np.signbit(relu[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()
    assert np.isnan(hswish[np.isnan(x)]).all() and np.isnan(hsig[np.isnan(x)]).all()
