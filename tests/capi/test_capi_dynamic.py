"""The C API (version 2) of a library with run-time dims: the hand-written "dyn" model
of tests/runtime/tinylib.py (n in [1, 64]; k in [4, 32] step 4) through ctypes, and a
C program linked against it, run at two sizes and matched with NumPy."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from capihelp import INCLUDE, TensorInfo, bind, last_error

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runtime"))
from tinylib import dyn_factory, dyn_reference  # noqa: E402


@pytest.fixture(scope="module")
def dyn(tmp_path_factory):
    path = dyn_factory().export_library(str(tmp_path_factory.mktemp("dyn") / "libdyn.so"))
    return bind(path), path


def _shape(values) -> ctypes.Array:
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def _info(lib, model, kind: str, i: int) -> tuple:
    info = TensorInfo()
    assert getattr(lib, f"monolib_{kind}_info")(model, i, ctypes.byref(info)) == 0
    axes = range(info.ndim)
    return (
        info.name.decode(),
        [info.shape[d] for d in axes],
        [(info.shape_lo[d], info.shape_hi[d], info.shape_step[d]) for d in axes],
        info.nbytes,
    )


def test_info_reports_run_time_dims_as_minus_one_with_bounds(dyn):
    lib, _ = dyn
    model = lib.monolib_open()
    assert model, last_error(lib)
    try:
        assert [_info(lib, model, "input", i) for i in range(3)] == [
            ("x", [-1], [(1, 64, 1)], 256),
            ("v", [-1], [(1, 64, 1)], 256),
            ("u", [2, -1], [(2, 2, 1), (4, 32, 4)], 256),
        ]
        # an output's run-time dim: lo 0, hi the elements its slot holds
        assert _info(lib, model, "output", 1) == ("z", [-1], [(0, 128, 1)], 512)
        assert _info(lib, model, "output", 3) == ("q", [1], [(1, 1, 1)], 4)
    finally:
        lib.monolib_close(model)


def _run(lib, model, n: int, k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n + k)
    x, v = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
    u = rng.normal(size=(2, k)).astype(np.float32)
    for i, arr in enumerate((x, v, u)):
        rc = lib.monolib_set_input_shaped(model, i, arr.ctypes.data, _shape(arr.shape), arr.ndim)
        assert rc == 0, last_error(lib)
    assert lib.monolib_run_model(model) == 0, last_error(lib)
    outs = []
    for i, ref in enumerate(dyn_reference(x, v, u)):
        shape = _shape([0] * ref.ndim)
        assert lib.monolib_output_shape(model, i, shape) == 0
        assert tuple(shape[: ref.ndim]) == ref.shape
        got = np.empty(ref.shape, np.float32)
        assert lib.monolib_get_output(model, i, got.ctypes.data, got.nbytes) == 0, last_error(lib)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
        outs.append(got)
    return outs


def test_runs_at_several_sizes_through_ctypes(dyn):
    lib, _ = dyn
    model = lib.monolib_open()
    try:
        for n, k in [(1, 4), (64, 32), (8, 16), (13, 20)]:
            _run(lib, model, n, k)
    finally:
        lib.monolib_close(model)


@pytest.mark.parametrize(
    "i, shape, message",
    [
        (0, [65], 'input "x" axis 0 (dim "n") is 65, outside its bounds [1, 64] step 1'),
        (0, [0], 'input "x" axis 0 (dim "n") is 0, outside its bounds [1, 64] step 1'),
        (2, [2, 6], 'input "u" axis 1 (dim "k") is 6, outside its bounds [4, 32] step 4'),
        (2, [3, 8], 'input "u" axis 0 is 3, the model expects 2'),
        (2, [8], 'input "u" has 2 dims, got 1'),
    ],
)
def test_set_input_shaped_checks_the_shape(dyn, i, shape, message):
    lib, _ = dyn
    model = lib.monolib_open()
    try:
        data = np.zeros(64, np.float32)
        rc = lib.monolib_set_input_shaped(model, i, data.ctypes.data, _shape(shape), len(shape))
        assert rc == -1
        assert last_error(lib) == f"monolib_set_input_shaped: {message}"
    finally:
        lib.monolib_close(model)


def test_shared_dims_wrong_sizes_and_the_static_call_are_errors(dyn):
    lib, _ = dyn
    model = lib.monolib_open()
    try:
        data = np.zeros(64, np.float32)
        assert lib.monolib_set_input(model, 0, data.ctypes.data, 16) == -1
        assert "input \"x\" has run-time dims: give its shape with monolib_set_input_shaped" in (
            last_error(lib)
        )
        assert lib.monolib_set_input_shaped(model, 0, data.ctypes.data, _shape([4]), 1) == 0
        assert lib.monolib_set_input_shaped(model, 1, data.ctypes.data, _shape([5]), 1) == 0
        assert lib.monolib_run_model(model) == -1
        assert last_error(lib) == (
            'monolib_run_model: inputs "x" (axis 0) and "v" (axis 0) share dim "n" [1, 64] step 1 '
            "but are 4 and 5"
        )
        assert lib.monolib_set_input_shaped(model, 1, data.ctypes.data, _shape([4]), 1) == 0
        assert lib.monolib_run_model(model) == 0, last_error(lib)
        # get_output takes this run's bytes: 4 floats of y, not its 64-float slot
        assert lib.monolib_get_output(model, 0, data.ctypes.data, 256) == -1
        assert '"y" (float32, 1 dims) holds 16 bytes, got 256' in last_error(lib)
        assert lib.monolib_get_output(model, 0, data.ctypes.data, 16) == 0
    finally:
        lib.monolib_close(model)


APP = r"""
#include <stdio.h>
#include <stdlib.h>
#include "monolib.h"

/* Run the model at (n, k) = argv pairs; print each output's shape and values. */
int main(int argc, char** argv) {
  monolib_model* m = monolib_open();
  int a;
  if (m == NULL) { fprintf(stderr, "%s\n", monolib_last_error()); return 1; }
  for (a = 1; a + 1 < argc; a += 2) {
    int64_t n = atoll(argv[a]), k = atoll(argv[a + 1]), i;
    int64_t xs[1], us[2], shape[2];
    float x[64], v[64], u[64], out[128];
    int32_t o;
    xs[0] = n; us[0] = 2; us[1] = k;
    for (i = 0; i < n; ++i) { x[i] = (float)i * 0.5f; v[i] = 1.0f - (float)i; }
    for (i = 0; i < 2 * k; ++i) u[i] = (float)i;
    if (monolib_set_input_shaped(m, 0, x, xs, 1) || monolib_set_input_shaped(m, 1, v, xs, 1) ||
        monolib_set_input_shaped(m, 2, u, us, 2) || monolib_run_model(m)) {
      fprintf(stderr, "%s\n", monolib_last_error());
      return 1;
    }
    for (o = 0; o < monolib_num_outputs(m); ++o) {
      monolib_tensor_info info;
      int64_t count = 1;
      int32_t d;
      if (monolib_output_info(m, o, &info) || monolib_output_shape(m, o, shape)) return 1;
      for (d = 0; d < info.ndim; ++d) count *= shape[d];
      if (monolib_get_output(m, o, out, (size_t)count * sizeof(float))) {
        fprintf(stderr, "%s\n", monolib_last_error());
        return 1;
      }
      printf("%s", info.name);
      for (d = 0; d < info.ndim; ++d) printf(" %lld", (long long)shape[d]);
      printf(":");
      for (i = 0; i < count; ++i) printf(" %.6g", out[i]);
      printf("\n");
    }
  }
  monolib_close(m);
  return 0;
}
"""


def test_c_program_runs_the_library_at_two_sizes(dyn, tmp_path, cc):
    _, path = dyn
    (tmp_path / "app.c").write_text(APP)
    exe = tmp_path / "app"
    subprocess.run(
        [cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", f"-I{INCLUDE}",
         str(tmp_path / "app.c"), path, f"-Wl,-rpath,{os.path.dirname(path)}", "-o", str(exe)],
        check=True,
    )  # fmt: skip
    res = subprocess.run([str(exe), "3", "8", "40", "24"], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    want = []
    for n, k in [(3, 8), (40, 24)]:
        x = np.arange(n, dtype=np.float32) * 0.5
        v = 1 - np.arange(n, dtype=np.float32)
        u = np.arange(2 * k, dtype=np.float32).reshape(2, k)
        for name, ref in zip("yztq", dyn_reference(x, v, u)):
            dims = "".join(f" {d}" for d in ref.shape)
            want.append(f"{name}{dims}:" + "".join(f" {float(e):.6g}" for e in ref.ravel()))
    got = res.stdout.splitlines()
    assert [line.split(":")[0] for line in got] == [line.split(":")[0] for line in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(
            np.array(g.split(":")[1].split(), float), np.array(w.split(":")[1].split(), float),
            rtol=1e-5,
        )


def test_example_program_runs_a_dynamic_library(dyn, tmp_path, run_model_exe):
    """examples/c/run_model.c: bounds printed, the input's shape after its file, each
    output written at its size in this run."""
    _, path = dyn
    x, v = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    u = np.arange(16, dtype=np.float32).reshape(2, 8)
    files = []
    for name, arr in (("x", x), ("v", v), ("u", u)):
        arr.tofile(tmp_path / f"{name}.bin")
        dims = ",".join(map(str, arr.shape))
        files += ["-i", f"{tmp_path / name}.bin@{dims}"]
    res = subprocess.run([str(run_model_exe), path, *files, "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "input 2: u float32[2,4..32:4] (256 bytes at most)" in res.stdout
    assert "this run: [10] (40 bytes)" in res.stdout
    for i, ref in enumerate(dyn_reference(x, v, u)):
        got = np.fromfile(tmp_path / f"out.{i}.bin", np.float32)
        np.testing.assert_allclose(got, ref.ravel(), rtol=1e-6)
    res = subprocess.run([str(run_model_exe), path, "-i", str(tmp_path / "x.bin")],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 1 and "give its shape with monolib_set_input_shaped" in res.stderr


def test_static_library_takes_the_shaped_calls_too(tmp_path):
    """A static library (no symbols compiled in): monolib_set_input_shaped checks the
    static shape, monolib_output_shape gives it."""
    from capihelp import W, two_factory

    lib = bind(two_factory().export_library(str(tmp_path / "two.so")))
    model = lib.monolib_open()
    try:
        x = np.ones((2, 3), np.float32)
        assert lib.monolib_set_input_shaped(model, 0, x.ctypes.data, _shape([2, 4]), 2) == -1
        assert last_error(lib) == (
            'monolib_set_input_shaped: input "x" axis 1 is 4, the model expects 3'
        )
        assert lib.monolib_set_input_shaped(model, 0, x.ctypes.data, _shape([2, 3]), 2) == 0
        assert lib.monolib_run_model(model) == 0, last_error(lib)
        shape = _shape([0, 0])
        assert lib.monolib_output_shape(model, 0, shape) == 0 and list(shape) == [2, 3]
        y = np.empty((2, 3), np.float32)
        assert lib.monolib_get_output(model, 0, y.ctypes.data, y.nbytes) == 0
        np.testing.assert_array_equal(y, x * W)
    finally:
        lib.monolib_close(model)
