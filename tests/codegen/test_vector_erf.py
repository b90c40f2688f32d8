"""kernels/vmath.h's ml_erff (what float32 Erf and the exact GELU mean in the C
backend), measured against float64 erf over the whole float32 range, special values
exactly; and the exact GELU fused into a conv's epilogue against NumPy."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper
from vmath_helpers import onnx_model as _model
from vmath_helpers import run_unary
from vmath_helpers import ulps as _ulps

from monolib.compiler.build import lower
from monolib.compiler.testing import run_model

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(5)
_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def test_erf_within_six_ulps_and_special_values():
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 3.919,
                        3.92, -3.92, 3.1641540, -3.1641540, 0.875, 1e30], np.float32)
    sweep = np.linspace(-5, 5, 100_003, dtype=np.float32)  # odd length: vector tails
    mags = np.exp(RNG.uniform(np.log(1e-40), np.log(10.0), 50_000)).astype(np.float32)
    x = np.concatenate([special, sweep, mags, -mags])
    got = run_unary("Erf", x, "ml_erff")
    ok = ~np.isnan(x)
    err = _ulps(got[ok], _erf64(x[ok].astype(np.float64)))
    # 0.95 ulp of fit, the rest float32 rounding of P(x^2) and Q(x^2) (exhaustively: 6)
    assert err.max() <= 6.0, x[ok][err.argmax()]
    assert err.mean() < 0.8  # vs the unrounded reference (0.33 ulp vs the rounded one)
    assert np.isnan(got[np.isnan(x)]).all()
    s = got[: special.size]
    assert s[0] == 0 and not np.signbit(s[0]) and s[1] == 0 and np.signbit(s[1])
    assert s[2] == 1 and s[3] == -1 and s[9] == 1 and s[10] == -1 and s[14] == 1
    assert 0 < s[5] < 1e-44 and s[6] < 0  # subnormals keep 2/sqrt(pi) x


def test_exact_gelu_in_a_conv_epilogue_matches_numpy():
    """Conv -> Div -> Erf -> Add -> Mul -> Mul: the GELU runs in the GEMM's tile
    epilogue (ml_erff there), within float32 rounding of NumPy."""
    ci, co, hw = 5, 7, 9
    w = (RNG.standard_normal((co, ci, 1, 1)) * 0.7).astype(np.float32)
    inits = {"w": w, "sq": np.array(1.4142135, np.float32), "one": np.array(1, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Div", ["c", "sq"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["f"]), helper.make_node("Mul", ["c", "f"], ["g"]),
             helper.make_node("Mul", ["g", "half"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [1, ci, hw, hw])],
                   [helper.make_tensor_value_info("y", F32, [1, co, hw, hw])], inits)
    epilogues = lower(model)[0].split("static void epi_")[1:]
    assert any("ml_erff(" in e.split("\n}\n")[0] for e in epilogues)
    x = (RNG.standard_normal((1, ci, hw, hw)) * 2).astype(np.float32)
    got = run_model(model, {"x": x})[0]
    c = np.einsum("oi,nihw->nohw", w.astype(np.float64)[:, :, 0, 0], x.astype(np.float64))
    want = 0.5 * c * (1 + _erf64(c / math.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
