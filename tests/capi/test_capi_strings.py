"""String tensors through the C API (issue 13): a ``S<n>`` tensor is listed as
``dtype_name "S<n>"``, code OPAQUE, 8 bits, ``n`` lanes; a caller writes and reads
NUL-padded UTF-8 slots of ``n`` bytes (widths past 31 bytes, whose bit count no
``uint8_t`` holds, included)."""

from __future__ import annotations

import ctypes

import numpy as np
from capihelp import TensorInfo, bind, last_error
from onnx import TensorProto, helper

import monolib


def test_string_tensors_through_the_c_api(tmp_path):
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("StringConcat", ["x", "y"], ["z"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.STRING, [3]),
             helper.make_tensor_value_info("y", TensorProto.STRING, [1])],
            [helper.make_tensor_value_info("z", TensorProto.STRING, [3])]),
        opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    factory = monolib.compile(model, shapes={"x": {"width": 40}, "y": {"width": 2}})
    lib = bind(factory.export_library(str(tmp_path / "s.so")))
    handle = lib.monolib_open()
    assert handle, last_error(lib)
    try:
        info = TensorInfo()
        assert lib.monolib_output_info(handle, 0, ctypes.byref(info)) == 0
        assert info.dtype_name == b"S42"
        assert (info.code, info.bits, info.lanes, info.nbytes) == (3, 8, 42, 3 * 42)
        x = np.array(["é".encode() * 20, b"", b"abc"], dtype="S40")  # x[0]: 40 bytes, no NUL
        y = np.array([b"!"], dtype="S2")
        assert lib.monolib_set_input(handle, 0, x.ctypes.data, x.nbytes) == 0
        assert lib.monolib_set_input(handle, 1, y.ctypes.data, y.nbytes) == 0
        assert lib.monolib_run_model(handle) == 0
        z = np.empty(3, dtype="S42")
        assert lib.monolib_get_output(handle, 0, z.ctypes.data, z.nbytes) == 0
    finally:
        lib.monolib_close(handle)
    assert [s.decode() for s in z.tolist()] == ["é" * 20 + "!", "!", "abc!"]
