"""kernels/vmath.h's ml_tanhf (what float32 Tanh, the RNN/LSTM/GRU cells and attention's
softcap mean in the C backend), measured against float64 tanh over the float32 range,
special values exactly; and Tanh fused into a conv's epilogue against NumPy."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from vmath_helpers import onnx_model as _model
from vmath_helpers import run_unary
from vmath_helpers import ulps as _ulps

from monolib.compiler.build import lower
from monolib.compiler.testing import run_model

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def test_tanh_within_ulps_and_special_values():
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 9.0,
                        -9.0, 9.5, 8.99, 0.5493, 1e30, -1e30], np.float32)
    sweep = np.linspace(-10, 10, 200_003, dtype=np.float32)  # odd length: vector tails
    mags = np.exp(RNG.uniform(np.log(1e-40), np.log(20.0), 100_000)).astype(np.float32)
    x = np.concatenate([special, sweep, mags, -mags])
    got = run_unary("Tanh", x, "ml_tanhf")
    ok = ~np.isnan(x)
    err = _ulps(got[ok], np.tanh(x[ok].astype(np.float64)))
    # 0.36 ulp of fit, the rest float32 rounding of P, Q and the division (exhaustively:
    # 5.5 near |x| = 7)
    assert err.max() <= 6.0, x[ok][err.argmax()]
    assert err.mean() < 0.6
    assert np.isnan(got[np.isnan(x)]).all()
    assert np.abs(got[ok]).max() <= 1.0
    s = got[: special.size]
    assert s[0] == 0 and not np.signbit(s[0]) and s[1] == 0 and np.signbit(s[1])
    assert s[2] == 1 and s[3] == -1 and s[13] == 1 and s[14] == -1
    assert s[5] == np.float32(1e-45) and s[6] == np.float32(-1e-45)  # tanh(x) = x
    assert s[7] == np.float32(1e-38)


def test_tanh_is_odd():
    x = np.exp(RNG.uniform(np.log(1e-30), np.log(12.0), 4099)).astype(np.float32)
    both = np.concatenate([x, -x])
    model = _model([helper.make_node("Tanh", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", F32, [both.size])],
                   [helper.make_tensor_value_info("y", F32, [both.size])])
    got = run_model(model, {"x": both})[0]
    np.testing.assert_array_equal(got[x.size:], -got[: x.size])


def test_tanh_in_a_conv_epilogue_matches_numpy():
    """Conv -> Tanh: the tanh runs in the GEMM's tile epilogue (ml_tanhf there), within
    float32 rounding of NumPy."""
    ci, co, hw = 5, 7, 9
    w = (RNG.standard_normal((co, ci, 1, 1)) * 0.7).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Tanh", ["c"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [1, ci, hw, hw])],
                   [helper.make_tensor_value_info("y", F32, [1, co, hw, hw])], {"w": w})
    epilogues = lower(model)[0].split("static void epi_")[1:]
    assert any("ml_tanhf(" in e.split("\n}\n")[0] for e in epilogues)
    x = (RNG.standard_normal((1, ci, hw, hw)) * 2).astype(np.float32)
    got = run_model(model, {"x": x})[0]
    c = np.einsum("oi,nihw->nohw", w.astype(np.float64)[:, :, 0, 0], x.astype(np.float64))
    np.testing.assert_allclose(got, np.tanh(c), rtol=2e-6, atol=2e-7)
