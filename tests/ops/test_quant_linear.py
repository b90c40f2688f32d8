"""QuantizeLinear / DequantizeLinear, blocked (opset 21+: ``block_size``) and per axis,
through the whole compiler against ONNX Runtime: blocks that do not divide the dim,
every axis, constant and run-time scales, zero points at the ends of their range. One
model per opset holds every case (one C compile). Per-tensor cases and the QDQ pattern
are in ``test_math_quantize.py``."""

from __future__ import annotations

import numpy as np
import pytest
from test_quant_ops import Case, run_cases

from monolib.compiler.testing import make_node_model, run_model
from monolib.runtime.errors import ShapeError, UnsupportedOpError

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


def test_blocked_refusals():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(ShapeError, match=r"needs a scale of shape \[4, 2\]"):
        run_model(make_node_model("QuantizeLinear", {"x": x, "s": np.ones((4, 3), np.float32)},
                                  {"axis": 1, "block_size": 4}, opset=21), {"x": x})
    # int4 storage is not a monolib type (yet): refused, naming it
    model = make_node_model("QuantizeLinear", {"x": x, "s": np.array(1, np.float32)},
                            {"output_dtype": 22}, opset=21)  # 22: INT4
    with pytest.raises(UnsupportedOpError, match="int4"):
        run_model(model, {"x": x})
