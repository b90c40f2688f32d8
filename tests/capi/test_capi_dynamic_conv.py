"""The C API (version 2) of a small COMPILED library with three run-time dims: Conv +
Relu + GlobalAveragePool + Gemm (``conv_head_model``) with a run-time batch 1..4 and
height and width 8..32 in steps of 8, run from C by ``examples/c/run_model.c`` at two
sizes: this run's output shapes, Python's outputs of the same library bit for bit, ONNX
Runtime's within 1e-5; handles at different sizes from threads. And two inputs that
share a named dim (``dims=``), checked by monolib_run_model. Fast (the classifier's slow
tests: test_capi_dynamic_cls.py)."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
from capihelp import (
    CONV_HEAD_SHAPES,
    TensorInfo,
    bind,
    conv_head_model,
    last_error,
    python_outputs,
)

SIZES = [(2, 16, 24), (4, 32, 8)]  # (batch, h, w): mixed, and both upper bound and lower


@pytest.fixture(scope="module")
def conv_head(tmp_path_factory):
    """(the ONNX model, the host library exported from it)."""
    pytest.importorskip("onnx")
    import monolib

    model = conv_head_model()
    out = tmp_path_factory.mktemp("conv_head") / "conv_head.so"
    monolib.compile(model, shapes=CONV_HEAD_SHAPES).export_library(str(out))
    return model, out


def _info(lib, model, kind: str, i: int) -> tuple:
    info = TensorInfo()
    assert getattr(lib, f"monolib_{kind}_info")(model, i, ctypes.byref(info)) == 0
    axes = range(info.ndim)
    return (
        [info.shape[d] for d in axes],
        [(info.shape_lo[d], info.shape_hi[d], info.shape_step[d]) for d in axes],
        info.nbytes,
    )


def test_info_reports_each_run_time_dim(conv_head):
    lib = bind(str(conv_head[1]))
    model = lib.monolib_open()
    assert model, last_error(lib)
    try:
        assert _info(lib, model, "input", 0) == (
            [-1, 3, -1, -1], [(1, 4, 1), (3, 3, 1), (8, 32, 8), (8, 32, 8)], 4 * 3 * 32 * 32 * 4
        )  # fmt: skip
        # feat's h/2 and w/2: bounded by the slot (docs/c_api.md); its batch by the symbol
        shape, bounds, nbytes = _info(lib, model, "output", 0)
        assert shape == [-1, 4, -1, -1] and nbytes == 4 * 4 * 16 * 16 * 4
        assert bounds[:2] == [(1, 4, 1), (4, 4, 1)]
        assert all(lo <= 4 and hi >= 16 for lo, hi, _ in bounds[2:])
        assert _info(lib, model, "output", 1) == ([-1, 5], [(1, 4, 1), (5, 5, 1)], 4 * 5 * 4)
    finally:
        lib.monolib_close(model)


@pytest.mark.parametrize("batch, h, w", SIZES)
def test_example_runs_like_python_and_ort(tmp_path, run_model_exe, conv_head, batch, h, w):
    pytest.importorskip("onnxruntime")
    from monolib.compiler.testing import ort_run

    model, lib = conv_head
    x = np.random.default_rng(h * w + batch).normal(size=(batch, 3, h, w)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    res = subprocess.run(
        [str(run_model_exe), str(lib), "-i", f"{tmp_path / 'x.bin'}@{batch},3,{h},{w}",
         "-o", str(tmp_path / "out")],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "input 0: x float32[1..4,3,8..32:8,8..32:8] (49152 bytes at most)" in res.stdout
    assert f"this run: [{batch},4,{h // 2},{w // 2}] ({batch * h * w * 4} bytes)" in res.stdout
    assert f"this run: [{batch},5] ({batch * 20} bytes)" in res.stdout
    wants = python_outputs(lib, x)
    refs = ort_run(model, {"x": x})
    for i, (want, ref) in enumerate(zip(wants, refs)):
        got = np.fromfile(tmp_path / f"out.{i}.bin", np.float32)
        assert want.shape == ref.shape
        np.testing.assert_array_equal(got, want.ravel())  # same library, same bits
        np.testing.assert_allclose(got.reshape(ref.shape), ref, atol=1e-5, rtol=1e-5)


def test_example_refuses_a_size_off_the_step(tmp_path, run_model_exe, conv_head):
    np.zeros(3 * 12 * 16, np.float32).tofile(tmp_path / "x.bin")
    res = subprocess.run(
        [str(run_model_exe), str(conv_head[1]), "-i", f"{tmp_path / 'x.bin'}@1,3,12,16"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 1
    assert (
        'error: monolib_set_input_shaped: input "x" axis 2 (dim "h") is 12, outside its bounds '
        "[8, 32] step 8"
    ) in res.stderr


def _run_handle(lib, handle, x: np.ndarray) -> list[np.ndarray]:
    """Run ``x`` on ``handle``; each output at this run's shape."""
    shape = (ctypes.c_int64 * 4)(*x.shape)
    assert lib.monolib_set_input_shaped(handle, 0, x.ctypes.data, shape, 4) == 0, last_error(lib)
    assert lib.monolib_run_model(handle) == 0, last_error(lib)
    outs = []
    for i, ndim in enumerate((4, 2)):
        out_shape = (ctypes.c_int64 * ndim)()
        assert lib.monolib_output_shape(handle, i, out_shape) == 0
        got = np.empty(tuple(out_shape), np.float32)
        assert lib.monolib_get_output(handle, i, got.ctypes.data, got.nbytes) == 0
        outs.append(got)
    return outs


def test_handles_at_different_sizes_run_concurrently(conv_head):
    """Four threads, a handle each, each at its own size (ctypes drops the GIL in the
    calls): the run-time sizes live in each handle's arena, so every run equals the
    same size run alone."""
    from concurrent.futures import ThreadPoolExecutor

    lib = bind(str(conv_head[1]))
    sizes = [(1, 8, 8), (4, 32, 32), (2, 16, 24), (3, 24, 8)]
    xs = [np.random.default_rng(b * h * w).normal(size=(b, 3, h, w)).astype(np.float32)
          for b, h, w in sizes]  # fmt: skip
    want = [python_outputs(conv_head[1], x) for x in xs]

    def work(k: int) -> list[list[np.ndarray]]:
        handle = lib.monolib_open()
        try:
            return [_run_handle(lib, handle, xs[k]) for _ in range(20)]
        finally:
            lib.monolib_close(handle)

    with ThreadPoolExecutor(len(sizes)) as pool:
        results = list(pool.map(work, range(len(sizes))))
    for k, runs in enumerate(results):
        for outs in runs:
            for got, ref in zip(outs, want[k]):
                np.testing.assert_array_equal(got, ref)


def test_a_handle_with_no_input_set_runs_at_the_smallest_shape(conv_head):
    lib = bind(str(conv_head[1]))
    handle = lib.monolib_open()
    try:
        assert lib.monolib_run_model(handle) == 0, last_error(lib)
        shape = (ctypes.c_int64 * 4)()
        assert lib.monolib_output_shape(handle, 0, shape) == 0
        assert list(shape) == [1, 4, 4, 4]
        feat = np.empty((1, 4, 4, 4), np.float32)
        assert lib.monolib_get_output(handle, 0, feat.ctypes.data, feat.nbytes) == 0
        zeros = np.zeros((1, 3, 8, 8), np.float32)
        np.testing.assert_array_equal(feat, python_outputs(conv_head[1], zeros)[0])
    finally:
        lib.monolib_close(handle)


def test_inputs_sharing_a_named_dim_are_checked_at_run(tmp_path):
    """z = x * y with x and y both (batch, 4), compiled with dims={"batch": (1, 6)}: one
    symbol for both inputs; different batches are refused by monolib_run_model, equal
    ones run."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import monolib

    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "y"], ["z"])],
        "shared",
        [helper.make_tensor_value_info(n, f32, ["batch", 4]) for n in "xy"],
        [helper.make_tensor_value_info("z", f32, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    factory = monolib.compile(model, dims={"batch": (1, 6)})
    lib = bind(factory.export_library(str(tmp_path / "shared.so")))
    handle = lib.monolib_open()
    try:
        x = np.arange(24, dtype=np.float32).reshape(6, 4)
        y = x[::-1].copy()
        for i, (arr, rows) in enumerate(((x, 3), (y, 2))):
            shape = (ctypes.c_int64 * 2)(rows, 4)
            assert lib.monolib_set_input_shaped(handle, i, arr.ctypes.data, shape, 2) == 0
        assert lib.monolib_run_model(handle) == -1
        assert last_error(lib) == (
            'monolib_run_model: inputs "x" (axis 0) and "y" (axis 0) share dim "batch" '
            "[1, 6] step 1 but are 3 and 2"
        )
        shape = (ctypes.c_int64 * 2)(3, 4)
        assert lib.monolib_set_input_shaped(handle, 1, y.ctypes.data, shape, 2) == 0
        assert lib.monolib_run_model(handle) == 0, last_error(lib)
        z = np.empty((3, 4), np.float32)
        assert lib.monolib_get_output(handle, 0, z.ctypes.data, z.nbytes) == 0
        np.testing.assert_array_equal(z, x[:3] * y[:3])
    finally:
        lib.monolib_close(handle)
