"""The opset 27-28 semantic changes monolib declares it handles (``also_versions``),
against ``onnx.reference``: BitShift on signed types with negative or too wide shifts,
Mod ``fmod=0`` on floats with the spec's special values, SpaceToDepth ``mode="CRD"``."""

import numpy as np
import pytest
from refnode import check_node


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16])
def test_bitshift_28(direction, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, -3 if info.min else 3, 0, 1, 77, info.max], dtype)
    bits = info.bits
    s = np.array([1, -1 if info.min else 2, bits, bits + 5, 3, 0], dtype)
    check_node("BitShift", {"x": x, "s": s}, ["y"], opset=28, direction=direction)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mod_float_fmod0_28(dtype):
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, np.inf, 3.0, 3.0, -3.0, np.nan, 2.0], dtype)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 2.0, 0.0, np.inf, np.inf, 1.0, np.nan], dtype)
    got = check_node("Mod", {"a": a, "b": b}, ["y"], opset=28, fmod=0)[0]
    # the sign of a zero result is the divisor's (the spec's first special case)
    assert np.signbit(got[5]) and not np.signbit(got[4])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_spacetodepth_28(mode):
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    check_node("SpaceToDepth", {"x": x}, ["y"], opset=28, blocksize=2, mode=mode)
