"""The C API (version 2) of a COMPILED library with a run-time dim: the PP-OCR
classifier through ``monolib.compile(shapes={"x": ((1, 8), 3, 48, 192)},
opt_shapes={"x": [(2, 3, 48, 192)]})``, exported, and run from C by
``examples/c/run_model.c`` and through ctypes at several batches (batch 2 by its
specialized path, the others by the generic one). Outputs equal Python's on the same
library bit for bit and ONNX Runtime's within 1e-5; the tensor info reports the batch as
-1 with its bounds. (The hand-written dynamic library: test_capi_dynamic.py; aarch64:
test_aarch64_qemu_dynamic.py.)"""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest
from capihelp import TensorInfo, bind, cls_batch, last_error, python_outputs

pytestmark = pytest.mark.slow

IN_BYTES = 8 * 3 * 48 * 192 * 4  # x at its upper bound


@pytest.fixture(scope="module")
def dyn_host(export_cls_dyn):
    return export_cls_dyn("c", "cls_dyn_host.so")


def _run_example(exe, lib, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), str(lib), *args], check=False, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_info_reports_the_batch_as_minus_one_with_bounds(dyn_host):
    lib = bind(str(dyn_host))
    model = lib.monolib_open()
    assert model, last_error(lib)
    try:
        got = []
        for kind in ("input", "output"):
            info = TensorInfo()
            assert getattr(lib, f"monolib_{kind}_info")(model, 0, ctypes.byref(info)) == 0
            axes = range(info.ndim)
            got.append((
                [info.shape[d] for d in axes],
                [(info.shape_lo[d], info.shape_hi[d], info.shape_step[d]) for d in axes],
                info.nbytes,
            ))  # fmt: skip
        assert got == [
            ([-1, 3, 48, 192], [(1, 8, 1), (3, 3, 1), (48, 48, 1), (192, 192, 1)], IN_BYTES),
            ([-1, 2], [(1, 8, 1), (2, 2, 1)], 8 * 2 * 4),
        ]
    finally:
        lib.monolib_close(model)


@pytest.mark.parametrize("batch", [1, 2, 5, 8])
def test_example_runs_each_batch_like_python_and_ort(
    tmp_path, run_model_exe, dyn_host, cls_model, cls_inputs, batch
):
    pytest.importorskip("onnxruntime")
    from monolib.compiler.testing import ort_run

    x = cls_batch(cls_inputs["line"], batch)
    x.tofile(tmp_path / "x.bin")
    res = _run_example(run_model_exe, dyn_host, "-i", f"{tmp_path / 'x.bin'}@{batch},3,48,192",
                       "-o", str(tmp_path / "out"), "-t", "2")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"input 0: x float32[1..8,3,48,192] ({IN_BYTES} bytes at most)" in res.stdout
    assert f"this run: [{batch},2] ({batch * 8} bytes)" in res.stdout
    got = np.fromfile(tmp_path / "out.0.bin", np.float32)
    (want,) = python_outputs(dyn_host, x)
    assert want.shape == (batch, 2)
    np.testing.assert_array_equal(got, want.ravel())  # same library, same bits
    (ref,) = ort_run(cls_model, {"x": x})
    np.testing.assert_allclose(got.reshape(batch, 2), ref, atol=1e-5, rtol=1e-5)
    assert got[0] > 0.9, "row 0, an upright line, reads as class 0"


def test_one_handle_runs_batches_in_turn(dyn_host, cls_inputs):
    """Through ctypes, one handle: each run's shape and bytes are its own (a big batch
    after a small one and back), equal to Python's."""
    lib = bind(str(dyn_host))
    model = lib.monolib_open()
    try:
        for batch in (8, 1, 2, 3, 2):
            x = cls_batch(cls_inputs["line"], batch)
            shape = (ctypes.c_int64 * 4)(*x.shape)
            assert lib.monolib_set_input_shaped(model, 0, x.ctypes.data, shape, 4) == 0
            assert lib.monolib_run_model(model) == 0, last_error(lib)
            out_shape = (ctypes.c_int64 * 2)()
            assert lib.monolib_output_shape(model, 0, out_shape) == 0
            assert list(out_shape) == [batch, 2]
            got = np.empty((batch, 2), np.float32)
            assert lib.monolib_get_output(model, 0, got.ctypes.data, got.nbytes) == 0
            np.testing.assert_array_equal(got, python_outputs(dyn_host, x)[0])
        big = np.empty((3, 2), np.float32)
        assert lib.monolib_get_output(model, 0, big.ctypes.data, big.nbytes) == -1
        assert "holds 16 bytes, got 24" in last_error(lib)
    finally:
        lib.monolib_close(model)


@pytest.mark.parametrize(
    "shape, floats, message",
    [
        ("9,3,48,192", None,
         'monolib_set_input_shaped: input "x" axis 0 (dim "x_0") is 9, outside its bounds '
         "[1, 8] step 1"),
        ("1,3,48,96", None,
         'monolib_set_input_shaped: input "x" axis 3 is 96, the model expects 192'),
        ("2,3,48", None, 'monolib_set_input_shaped: input "x" has 4 dims, got 3'),
        (None, 27648,
         'monolib_set_input: input "x" has run-time dims: give its shape with '
         "monolib_set_input_shaped\nhint: give input 0 as -i FILE@D0,D1,..."),
        # run_model.c's own check: the library cannot see a short buffer
        ("3,3,48,192", 2 * 27648,
         "input 0 (x): the file holds 221184 bytes, its shape needs 331776"),
    ],
)  # fmt: skip
def test_example_reports_a_wrong_shape(tmp_path, run_model_exe, dyn_host, shape, floats, message):
    """A file of the shape given (or of ``floats`` floats) that the model refuses."""
    floats = floats or int(np.prod([int(d) for d in shape.split(",")]))
    np.zeros(floats, np.float32).tofile(tmp_path / "x.bin")
    arg = str(tmp_path / "x.bin") + (f"@{shape}" if shape else "")
    res = _run_example(run_model_exe, dyn_host, "-i", arg)
    assert res.returncode == 1
    assert f"error: {message}" in res.stderr
