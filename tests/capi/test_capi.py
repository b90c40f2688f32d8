"""The C API of exported libraries (monolib.h): the header, the functions through
ctypes on hand-written models, its refusals, and the C example on the PP-OCR
classifier compared with Python's outputs."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import threading

import numpy as np
import pytest
from capihelp import (
    INCLUDE,
    N_NAME,
    ROOT,
    TensorInfo,
    W,
    bind,
    last_error,
    python_outputs,
    two_factory,
)

from monolib.cli import main
from monolib.export.capi import dlpack_dtype, header_text
from monolib.runtime import Module, load_module
from monolib.runtime.graph_module import GraphModule

HEADER = (INCLUDE / "monolib.h").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- header
def test_monolib_header_prints_the_shipped_header(capsys):
    assert main(["header"]) == 0
    out = capsys.readouterr().out
    assert out == HEADER == header_text()
    assert "monolib_open" in out and "MONOLIB_CAPI_VERSION 2" in out


USE_HEADER = """
#include "monolib.h"
int use(monolib_model* m);
int use(monolib_model* m) {
  monolib_tensor_info info;
  if (monolib_input_info(m, 0, &info) != MONOLIB_OK) return (int)monolib_last_error()[0];
  return (int)info.shape[0] + (info.dtype.code == MONOLIB_DTYPE_FLOAT);
}
"""


@pytest.mark.parametrize("lang, std", [("c", "-std=c99"), ("c", "-std=c11"), ("c++", "-std=c++11")])
def test_header_compiles_pedantic(tmp_path, cc, lang, std):
    compiler = cc if lang == "c" else (shutil.which("c++") or shutil.which("g++"))
    if compiler is None:
        pytest.skip("no C++ compiler (c++/g++) on PATH")
    src = tmp_path / ("use.c" if lang == "c" else "use.cc")
    src.write_text(USE_HEADER)
    res = subprocess.run(
        [
            compiler,
            "-x",
            lang,
            std,
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            f"-I{INCLUDE}",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "use.o"),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


# ----------------------------------------------------------------- the functions (ctypes)
@pytest.fixture(scope="module")
def two_lib(tmp_path_factory):
    path = two_factory().export_library(str(tmp_path_factory.mktemp("two") / "two.so"))
    return bind(path), path


def _info(lib, model, kind, i):
    info = TensorInfo()
    assert getattr(lib, f"monolib_{kind}_info")(model, i, ctypes.byref(info)) == 0
    return info


def test_tensor_info(two_lib):
    lib, _ = two_lib
    model = lib.monolib_open()
    assert model, last_error(lib)
    try:
        assert lib.monolib_capi_version() == 2
        assert (lib.monolib_num_inputs(model), lib.monolib_num_outputs(model)) == (2, 2)
        got = []
        for kind, i in (("input", 0), ("input", 1), ("output", 0), ("output", 1)):
            info = _info(lib, model, kind, i)
            got.append(
                (
                    info.name.decode(),
                    info.dtype_name.decode(),
                    info.code,
                    info.bits,
                    info.lanes,
                    [info.shape[d] for d in range(info.ndim)],
                    info.nbytes,
                )
            )
            # a static axis: its bounds are its size, step 1
            assert [info.shape_lo[d] for d in range(info.ndim)] == got[-1][5]
            assert [info.shape_hi[d] for d in range(info.ndim)] == got[-1][5]
            assert [info.shape_step[d] for d in range(info.ndim)] == [1] * info.ndim
        assert got == [
            ("x", "float32", 2, 32, 1, [2, 3], 24),
            (N_NAME, "int64", 0, 64, 1, [], 8),
            ("y", "float32", 2, 32, 1, [2, 3], 24),
            ("flag", "bool", 6, 8, 1, [1], 1),
        ]
        assert lib.monolib_input_index(model, N_NAME.encode()) == 1
        assert lib.monolib_output_index(model, b"flag") == 1
    finally:
        lib.monolib_close(model)


def test_run_matches_numpy_and_python(two_lib):
    lib, path = two_lib
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5
    n = np.array(3, np.int64)
    model = lib.monolib_open()
    try:
        assert lib.monolib_set_input(model, 0, x.ctypes.data, x.nbytes) == 0
        assert lib.monolib_set_input(model, 1, n.ctypes.data, n.nbytes) == 0
        assert lib.monolib_run_model(model) == 0, last_error(lib)
        y = np.empty((2, 3), np.float32)
        flag = np.zeros(1, np.bool_)
        assert lib.monolib_get_output(model, 0, y.ctypes.data, y.nbytes) == 0
        assert lib.monolib_get_output(model, 1, flag.ctypes.data, flag.nbytes) == 0
        ptr = lib.monolib_output_data(model, 0)
        assert ptr % 64 == 0
        in_place = np.ctypeslib.as_array((ctypes.c_float * 6).from_address(ptr)).reshape(2, 3)
        np.testing.assert_array_equal(in_place, x * W + 3)
    finally:
        lib.monolib_close(model)
    np.testing.assert_array_equal(y, x * W + 3)
    assert flag.tolist() == [True]
    py = GraphModule(load_module(path).default())
    py.set_input("x", x)
    py.set_input(N_NAME, n)
    py.run()
    np.testing.assert_array_equal(py.get_output(0).numpy(), y)


def test_two_handles_have_their_own_arenas(two_lib):
    lib, _ = two_lib
    a, b = lib.monolib_open(), lib.monolib_open()
    try:
        for model, value in ((a, 1.0), (b, 2.0)):
            x = np.full((2, 3), value, np.float32)
            assert lib.monolib_set_input(model, 0, x.ctypes.data, x.nbytes) == 0
            assert lib.monolib_run_model(model) == 0
        ya, yb = (np.empty((2, 3), np.float32) for _ in range(2))
        lib.monolib_get_output(a, 0, ya.ctypes.data, ya.nbytes)
        lib.monolib_get_output(b, 0, yb.ctypes.data, yb.nbytes)
        np.testing.assert_array_equal(ya, W * 1.0)
        np.testing.assert_array_equal(yb, W * 2.0)
    finally:
        lib.monolib_close(a)
        lib.monolib_close(b)


def test_error_paths_report_not_crash(two_lib):
    lib, _ = two_lib
    model = lib.monolib_open()
    buf = np.zeros(64, np.uint8)
    info = TensorInfo()
    cases = [
        (
            lambda: lib.monolib_set_input(model, 0, buf.ctypes.data, 20),
            'monolib_set_input: "x" (float32, 2 dims) holds 24 bytes, got 20',
        ),
        (
            lambda: lib.monolib_set_input(model, 2, buf.ctypes.data, 24),
            "monolib_set_input: input index 2 is out of range (the model has 2 inputs)",
        ),
        (
            lambda: lib.monolib_set_input(model, -1, buf.ctypes.data, 24),
            "input index -1 is out of range",
        ),
        (lambda: lib.monolib_set_input(model, 0, None, 24), 'data is NULL for "x"'),
        (
            lambda: lib.monolib_get_output(model, 0, buf.ctypes.data, 64),
            '"y" (float32, 2 dims) holds 24 bytes, got 64',
        ),
        (
            lambda: lib.monolib_get_output(model, 5, buf.ctypes.data, 24),
            "monolib_get_output: output index 5 is out of range (the model has 2 outputs)",
        ),
        (lambda: lib.monolib_output_info(model, 2, ctypes.byref(info)), "output index 2"),
        (lambda: lib.monolib_input_info(model, 0, None), "monolib_input_info: info is NULL"),
        (
            lambda: lib.monolib_input_index(model, b"nope"),
            'monolib_input_index: the model has no input named "nope"',
        ),
        (lambda: lib.monolib_num_inputs(None), "monolib_num_inputs: model is NULL"),
        (lambda: lib.monolib_run_model(None), "monolib_run_model: model is NULL"),
    ]
    try:
        for call, message in cases:
            assert call() == -1
            assert message in last_error(lib)
        assert lib.monolib_output_data(model, 9) is None
        assert "output index 9 is out of range" in last_error(lib)
    finally:
        lib.monolib_close(model)
    lib.monolib_close(None)  # ignored


def test_last_error_is_per_thread(two_lib):
    lib, _ = two_lib
    assert lib.monolib_num_outputs(None) == -1
    seen = []
    worker = threading.Thread(target=lambda: seen.append(last_error(lib)))
    worker.start()
    worker.join()
    assert seen == [""]
    assert "monolib_num_outputs: model is NULL" in last_error(lib)


def test_graph_failure_is_an_error(tmp_path):
    lib = bind(two_factory(status=3).export_library(str(tmp_path / "fail.so")))
    model = lib.monolib_open()
    try:
        assert lib.monolib_run_model(model) == -1
        assert "the graph failed (monolib_run returned 3)" in last_error(lib)
    finally:
        lib.monolib_close(model)


class FakeDevice(Module):
    """Stands for an OpenCL device module (the C API needs only its type key)."""

    type_key = "opencl"

    def save_to_bytes(self) -> bytes:
        return b"__kernel void k() {}"


def _with_device():
    factory = two_factory()
    factory.lib.import_module(FakeDevice())
    return factory


@pytest.mark.parametrize(
    "make, export_kw, message",
    [
        (lambda: two_factory().remove_params(), {}, "exported without its params"),
        (two_factory, {"compress": "zlib"}, "params are compressed (zlib)"),
        (_with_device, {}, "runs on a device (opencl module); the C API runs host-only"),
    ],
    ids=["no-params", "compressed", "device"],
)
def test_open_refuses_what_c_cannot_run(tmp_path, make, export_kw, message):
    lib = bind(make().export_library(str(tmp_path / "m.so"), **export_kw))
    assert lib.monolib_open() is None
    assert message in last_error(lib)
    assert last_error(lib).startswith("monolib_open: ")


def test_every_device_module_type_is_refused():
    from monolib.abi.names import DEVICE_TYPE_KEYS
    from monolib.runtime.cuda_module import CUDAModule
    from monolib.runtime.device_executor import DeviceModule
    from monolib.runtime.opencl_module import OpenCLModule

    for cls in (DeviceModule, OpenCLModule, CUDAModule):
        assert cls.type_key in DEVICE_TYPE_KEYS, cls


def test_dlpack_codes():
    assert dlpack_dtype("float16") == (2, 16)
    assert dlpack_dtype("uint8") == (1, 8)
    assert dlpack_dtype("bfloat16") == (4, 16)
    assert dlpack_dtype("complex64") == (5, 64)


# --------------------------------------------------------- the C example on a real model
@pytest.fixture(scope="module")
def cls_host(export_cls):
    return export_cls("c", "cls_host.so")


@pytest.mark.slow
@pytest.mark.parametrize("which", ["line", "noise"])
def test_example_runs_cls_like_python(tmp_path, run_model_exe, cls_host, cls_inputs, which):
    x = cls_inputs[which]
    x.tofile(tmp_path / "x.bin")
    res = subprocess.run(
        [
            str(run_model_exe),
            str(cls_host),
            "-i",
            str(tmp_path / "x.bin"),
            "-o",
            str(tmp_path / "out"),
            "-t",
            "2",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "input 0: x float32[1,3,48,192] (110592 bytes)" in res.stdout
    got = np.fromfile(tmp_path / "out.0.bin", np.float32)
    (want,) = python_outputs(cls_host, x)
    assert want.shape == (1, 2)
    np.testing.assert_array_equal(got, want.ravel())  # same library, same bits
    if which == "line":
        assert got[0] > 0.9, "an upright line reads as class 0"


@pytest.mark.slow
def test_example_reports_a_wrong_input_size(tmp_path, run_model_exe, cls_host):
    np.zeros(100, np.float32).tofile(tmp_path / "short.bin")
    res = subprocess.run(
        [str(run_model_exe), str(cls_host), "-i", str(tmp_path / "short.bin")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1
    assert 'error: monolib_set_input: "x" (float32, 4 dims) holds 110592 bytes, got 400' in (
        res.stderr
    )


@pytest.mark.slow
def test_doc_example_links_and_runs(tmp_path, cc, cls_host):
    """The example of docs/c_api.md, linked directly against the library (no dlopen)."""
    doc = (ROOT / "docs" / "c_api.md").read_text(encoding="utf-8")
    code = re.search(r"## Example\n\n```c\n(.*?)```", doc, re.DOTALL).group(1)
    (tmp_path / "app.c").write_text(code)
    lib = tmp_path / "libcls.so"
    lib.symlink_to(cls_host)
    exe = tmp_path / "app"
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            f"-I{INCLUDE}",
            str(tmp_path / "app.c"),
            str(lib),
            f"-Wl,-rpath,{tmp_path}",
            "-o",
            str(exe),
        ],
        check=True,
    )
    res = subprocess.run([str(exe)], check=False, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    (want,) = python_outputs(cls_host, np.zeros((1, 3, 48, 192), np.float32))
    assert res.stdout == f"upright {want[0, 0]:.3f}, rotated {want[0, 1]:.3f}\n"


def test_package_data_ships_the_header_and_template():
    """A wheel (not only an editable install) must carry monolib.h and the C template
    that every export pastes in: pyproject's package-data globs must cover them."""
    import fnmatch

    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = conf["tool"]["setuptools"]["package-data"]["monolib"]
    for path in ("include/monolib.h", "include/monolib_capi_impl.h"):
        assert any(fnmatch.fnmatch(path, g) for g in globs), f"{path} not in package-data {globs}"


@pytest.mark.slow
def test_handles_run_concurrently_from_threads(cls_host, cls_inputs):
    """One handle per thread, run at the same time (ctypes releases the GIL): each
    gets exactly Python's outputs for its own input."""
    lib = bind(str(cls_host))
    want = {k: python_outputs(cls_host, x)[0] for k, x in cls_inputs.items()}
    got: dict[str, list] = {k: [] for k in cls_inputs}

    def work(name: str) -> None:
        model = lib.monolib_open()
        x = cls_inputs[name]
        try:
            for _ in range(4):
                assert lib.monolib_set_input(model, 0, x.ctypes.data, x.nbytes) == 0
                assert lib.monolib_run_model(model) == 0
                y = np.empty((1, 2), np.float32)
                assert lib.monolib_get_output(model, 0, y.ctypes.data, y.nbytes) == 0
                got[name].append(y)
        finally:
            lib.monolib_close(model)

    threads = [threading.Thread(target=work, args=(k,)) for k in cls_inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, ys in got.items():
        assert len(ys) == 4
        for y in ys:
            np.testing.assert_array_equal(y, want[name])


def test_compiled_onnx_model_runs_through_the_c_api(tmp_path):
    """A model compiled by monolib (generated code, weights in the params section):
    y = relu(x) * w, z = x + 1, run through the C API, equal to NumPy."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import monolib

    w = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Mul", ["r", "w"], ["y"]),
            helper.make_node("Add", ["x", "one"], ["z"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 4]),
        ],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(1), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    lib = bind(monolib.compile(model).export_library(str(tmp_path / "g.so")))
    x = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    handle = lib.monolib_open()
    assert handle, last_error(lib)
    try:
        assert lib.monolib_output_index(handle, b"z") == 1
        assert lib.monolib_set_input(handle, 0, x.ctypes.data, x.nbytes) == 0
        assert lib.monolib_run_model(handle) == 0
        y, z = np.empty_like(x), np.empty_like(x)
        assert lib.monolib_get_output(handle, 0, y.ctypes.data, y.nbytes) == 0
        assert lib.monolib_get_output(handle, 1, z.ctypes.data, z.nbytes) == 0
    finally:
        lib.monolib_close(handle)
    np.testing.assert_array_equal(y, np.maximum(x, 0) * w)
    np.testing.assert_array_equal(z, x + 1)
