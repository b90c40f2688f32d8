"""QuantizeLinear / DequantizeLinear, blocked (opset 21+: ``block_size``) and per axis,
through the whole compiler against ONNX Runtime: blocks that do not divide the dim,
every axis, constant and run-time scales, zero points at the ends of their range; and
the storage types (int4/uint4, float8) against ONNX Runtime and ONNX's reference
evaluator. One model per group holds every case (one C compile). Per-tensor cases and
the QDQ pattern are in ``test_math_quantize.py``."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from test_quant_ops import Case, build, run_cases

from monolib.compiler.testing import make_node_model, run_model
from monolib.errors import ShapeError, UnsupportedOpError

R = np.random.default_rng(5)


def _blocked_shape(shape, axis, bs):
    s = list(shape)
    s[axis] = -(-s[axis] // bs)
    return tuple(s)


BLOCKED = [((4, 7), 1, 3), ((6, 5), 0, 2), ((2, 9, 3), 1, 4), ((3, 4, 10), -1, 5), ((5, 16), 1, 16),
           ((2, 3, 4), 2, 1)]


def _zp(dtype, shape):
    info = np.iinfo(dtype)
    z = R.integers(info.min, info.max + 1, shape).astype(dtype)
    z.flat[0], z.flat[-1] = info.min, info.max  # the ends of the range
    return z


def test_blocked_and_per_axis_match_ort():
    cases = []
    for shape, axis, bs in BLOCKED:
        sshape = _blocked_shape(shape, axis, bs)
        attrs = {"axis": axis, "block_size": bs}
        for t in (np.uint8, np.int8):
            scale = R.uniform(0.01, 0.2, sshape).astype(np.float32)
            x = (R.standard_normal(shape) * 10).astype(np.float32)
            q = {"x": x, "s": scale, "z": _zp(t, sshape)}
            for consts in ((), ("s", "z")):
                cases.append(Case("QuantizeLinear", q, attrs, consts=consts))
            xq = R.integers(np.iinfo(t).min, np.iinfo(t).max + 1, shape).astype(t)
            for consts in ((), ("s", "z")):
                cases.append(Case("DequantizeLinear", {"x": xq, "s": scale, "z": _zp(t, sshape)},
                                  attrs, consts=consts))
    # per axis (opset 13 semantics, 21 attributes), int16 outputs
    x = (R.standard_normal((3, 5, 2)) * 300).astype(np.float32)
    for axis in (0, 1, -1):
        n = x.shape[axis]
        cases.append(Case("QuantizeLinear", {"x": x, "s": R.uniform(0.5, 2, n).astype(np.float32),
                                             "z": _zp(np.int16, (n,))}, {"axis": axis}))
    got, want = run_cases(cases, opset=21)
    for c, g, w in zip(cases, got, want):
        assert g[0].dtype == w[0].dtype
        np.testing.assert_array_equal(g[0], w[0], err_msg=f"{c.op} {c.attrs} {c.ins['x'].shape}")


def _storage_zp(dtype, shape):
    info = ml_dtypes.iinfo(dtype)
    z = R.integers(info.min, info.max + 1, shape)
    z.flat[0], z.flat[-1] = info.min, info.max
    return z.astype(dtype)


def test_int4_and_float8_match_reference():
    """int4/uint4 per axis and blocked, float8 e4m3fn/e5m2 per tensor and per axis
    (values past the float8 range saturate): Quantize, and Dequantize of run-time
    storage inputs, bit for bit against ONNX's reference evaluator (ONNX Runtime's
    Python API takes no int4/float8 arrays)."""
    cases = []
    x = (R.standard_normal((4, 6)) * 20).astype(np.float32)
    for t in (ml_dtypes.int4, ml_dtypes.uint4):
        for attrs, sshape in (({"axis": 1}, (6,)), ({"axis": 1, "block_size": 4}, (4, 2))):
            s = R.uniform(0.5, 3, sshape).astype(np.float32)
            cases.append(Case("QuantizeLinear", {"x": x, "s": s, "z": _storage_zp(t, sshape)}, attrs,
                              consts=("s", "z"), ort=False))
            xq = _storage_zp(t, (4, 6))
            cases.append(Case("DequantizeLinear", {"x": xq, "s": s, "z": _storage_zp(t, sshape)}, attrs,
                              consts=("s", "z"), ort=False))
    big = np.concatenate([x.ravel(), [1e6, -1e6, 0.0]]).astype(np.float32).reshape(3, 9)
    for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        for s in (np.array(0.25, np.float32), R.uniform(0.1, 2, 9).astype(np.float32)):
            attrs = {"axis": 1} if s.ndim else {}
            cases.append(Case("QuantizeLinear", {"x": big, "s": s, "z": np.zeros(s.shape, t)}, attrs,
                              consts=("s", "z"), ort=False))
            xq = R.standard_normal((3, 9)).astype(t)
            cases.append(Case("DequantizeLinear", {"x": xq, "s": s}, attrs, consts=("s",), ort=False))
    got, _ = run_cases(cases, opset=21)
    model, feeds, _ = build(cases, opset=21)
    ref = ReferenceEvaluator(model).run(None, feeds)
    for c, g, r in zip(cases, got, ref):
        what = f"{c.op} {c.attrs} {c.ins['x'].dtype}"
        assert g[0].dtype == r.dtype, what
        same = g[0].view(np.uint8) if g[0].dtype.itemsize == 1 else g[0]
        np.testing.assert_array_equal(same, r.view(np.uint8) if r.dtype.itemsize == 1 else r, err_msg=what)


def test_blocked_refusals():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(ShapeError, match=r"needs a scale of shape \[4, 2\]"):
        run_model(make_node_model("QuantizeLinear", {"x": x, "s": np.ones((4, 3), np.float32)},
                                  {"axis": 1, "block_size": 4}, opset=21), {"x": x})
    # a float8 output of DequantizeLinear is not a type it produces
    xq = np.ones((4, 6), np.int8)
    model = make_node_model("DequantizeLinear", {"x": xq, "s": np.array(1, np.float32)},
                            {"output_dtype": 17}, opset=23)  # 17: FLOAT8E4M3FN
    with pytest.raises(UnsupportedOpError, match="float8_e4m3fn"):
        run_model(model, {"x": xq})
