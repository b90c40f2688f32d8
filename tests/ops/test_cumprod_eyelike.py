"""CumProd (26) and EyeLike (9) against ``onnx.reference``: each axis, exclusive and
reverse, int32 and float64; EyeLike diagonals above/below/outside, dtype override."""

import numpy as np
import onnx
import pytest
from refnode import check_node

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("axis,exclusive,reverse,dtype", [
    (0, 0, 0, np.float32), (1, 1, 0, np.float64), (-1, 1, 1, np.int32), (2, 0, 1, np.float32)])
def test_cumprod(axis, exclusive, reverse, dtype):
    x = (RNG.random((2, 3, 4)) + 0.5).astype(dtype) if dtype != np.int32 else \
        RNG.integers(-3, 4, (2, 3, 4)).astype(dtype)
    check_node("CumProd", {"x": x}, ["y"], opset=26, consts={"a": np.array(axis, np.int64)},
               exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("k,dtype", [(0, None), (2, onnx.TensorProto.INT32), (-1, None),
                                     (7, onnx.TensorProto.DOUBLE)])
def test_eyelike(k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check_node("EyeLike", {"x": RNG.random((3, 5)).astype(np.float32)}, ["y"], opset=22, **attrs)
