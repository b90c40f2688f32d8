"""Nearest upsampling by integer factors (resize.h ``ml_upsample_nearest``): the 2x and
4x shuffle paths for 4-byte elements (rows with a scalar tail), other factors, and 1-, 2-
and 8-byte dtypes, against ``np.repeat`` (what nearest / asymmetric / floor with integer
scales is; ONNX Runtime lacks some of these dtypes); a large one split over the thread
pool gives the single-thread result."""

from __future__ import annotations

import numpy as np
from harness import run_threads
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.build import lower

RNG = np.random.default_rng(17)

# name -> (dtype, input shape, (fy, fx)); W = 37: whole vectors of 8 and a tail of 5
CASES = {
    "f32_x2": (np.float32, (1, 3, 5, 37), (2, 2)),
    "f32_x4": (np.float32, (2, 2, 3, 37), (4, 4)),
    "f32_rows_only": (np.float32, (1, 2, 3, 37), (3, 1)),
    "f32_x3_cols": (np.float32, (1, 2, 3, 37), (1, 3)),
    "u8_x2": (np.uint8, (1, 2, 4, 37), (2, 2)),
    "i16_x2x3": (np.int16, (1, 2, 4, 19), (2, 3)),
    "i64_x2": (np.int64, (1, 2, 4, 37), (2, 2)),
    "i32_x4": (np.int32, (1, 1, 4, 21), (4, 4)),
    # large enough to split over threads (the PP-OCR det FPN's first 2x)
    "big": (np.float32, (1, 96, 40, 40), (2, 2)),
}
ONNX_TYPES = {
    np.float32: TensorProto.FLOAT,
    np.uint8: TensorProto.UINT8,
    np.int16: TensorProto.INT16,
    np.int64: TensorProto.INT64,
    np.int32: TensorProto.INT32,
}


def _model():
    nodes, inits, ins, outs = [], [], [], []
    for name, (dt, shape, (fy, fx)) in CASES.items():
        scales = np.array([1, 1, fy, fx], np.float32)
        inits.append(numpy_helper.from_array(scales, f"s_{name}"))
        nodes.append(
            helper.make_node(
                "Resize",
                [f"x_{name}", "", f"s_{name}"],
                [f"y_{name}"],
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        )
        out = [*shape[:2], shape[2] * fy, shape[3] * fx]
        ins.append(helper.make_tensor_value_info(f"x_{name}", ONNX_TYPES[dt], list(shape)))
        outs.append(helper.make_tensor_value_info(f"y_{name}", ONNX_TYPES[dt], out))
    graph = helper.make_graph(nodes, "upsample", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _feeds() -> dict[str, np.ndarray]:
    feeds = {}
    for name, (dt, shape, _) in CASES.items():
        if np.issubdtype(dt, np.integer):
            info = np.iinfo(dt)
            feeds[f"x_{name}"] = RNG.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
        else:
            feeds[f"x_{name}"] = RNG.standard_normal(shape).astype(dt)
    return feeds


def test_integer_upsampling_kernel() -> None:
    model, feeds = _model(), _feeds()
    source = lower(model)[0]
    assert source.count("ml_upsample_nearest(") == len(CASES) + 1  # + its definition
    names = list(CASES)
    one, two = run_threads(model, feeds)
    for name, got in zip(names, one):
        _, _, (fy, fx) = CASES[name]
        want = np.repeat(np.repeat(feeds[f"x_{name}"], fy, axis=2), fx, axis=3)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    for name, got, ref in zip(names, two, one):
        np.testing.assert_array_equal(got, ref, err_msg=name)
