"""Helpers of the C API tests: a small hand-written model ("two"), ctypes bindings
of ``monolib.h``, Python's outputs of a library, zig's C compiler, the aarch64
sysroot that qemu runs against."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from monolib.export.csource import CSourceModule
from monolib.runtime import GraphExecutorFactoryModule

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "c" / "run_model.c"
INCLUDE = ROOT / "src" / "monolib" / "include"
CLS_SHAPE = (1, 3, 48, 192)
# The classifier with a run-time batch: any of 1..8 by the generic path, batch 2 by a
# specialized one (opt_shapes).
CLS_DYN_KW = {"shapes": {"x": ((1, 8), 3, 48, 192)}, "opt_shapes": {"x": [(2, 3, 48, 192)]}}
# The aarch64 C library that qemu-aarch64 -L reads (Debian libc6-arm64-cross), and its
# glibc (Debian 12's): zig links against the version named in the triple, so a program
# built for it asks for nothing newer than the sysroot's C library has.
SYSROOT = Path("/usr/aarch64-linux-gnu")
GLIBC = "2.36"

# "two": y = x * w + n (float32[2,3]); flag = n > 0 (bool[1]); n is an int64 scalar
# whose name needs escaping in C. Arena: x@0, n@64, y@128, flag@192 (256 bytes).
TWO_C = r"""
#include <stdint.h>
int32_t monolib_run(const uint8_t* params, uint8_t* arena) {
  const float* x = (const float*)arena;
  int64_t n = *(const int64_t*)(arena + 64);
  float* y = (float*)(arena + 128);
  const float* w = (const float*)params;
  for (int i = 0; i < 6; ++i) y[i] = x[i] * w[i] + (float)n;
  arena[192] = n > 0;
  return RUN_STATUS;
}
int32_t monolib_run_op(int32_t i, const uint8_t* params, uint8_t* arena) {
  return i == 0 ? monolib_run(params, arena) : -1;
}
int32_t monolib_num_ops(void) { return 1; }
"""
N_NAME = 'n "count" \u00e9?'
W = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2) / 4


def two_factory(status: int = 0) -> GraphExecutorFactoryModule:
    """The "two" model as a factory over hand-written C (``monolib_run`` returns status)."""
    graph = {
        "format": "monolib.graph",
        "version": 1,
        "name": "two",
        "arena_bytes": 256,
        "params_bytes": 64,
        "inputs": [
            {"name": "x", "shape": [2, 3], "dtype": "float32", "offset": 0},
            {"name": N_NAME, "shape": [], "dtype": "int64", "offset": 64},
        ],
        "outputs": [
            {"name": "y", "shape": [2, 3], "dtype": "float32", "offset": 128},
            {"name": "flag", "shape": [1], "dtype": "bool", "offset": 192},
        ],
        "nodes": [
            {
                "name": "op",
                "op": "Custom",
                "inputs": ["x", N_NAME],
                "outputs": ["y"],
                "shape": [2, 3],
                "dtype": "float32",
                "offset": 128,
            }
        ],
        "params": [{"name": "w", "shape": [2, 3], "dtype": "float32", "offset": 0, "nbytes": 24}],
    }
    params = np.zeros(64, np.uint8)
    params[:24] = np.frombuffer(W.tobytes(), np.uint8)
    source = TWO_C.replace("RUN_STATUS", str(status))
    return GraphExecutorFactoryModule(graph, params, CSourceModule(source))


class TensorInfo(ctypes.Structure):
    """``monolib_tensor_info`` of monolib.h."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype_name", ctypes.c_char_p),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("nbytes", ctypes.c_uint64),
        ("shape_lo", ctypes.POINTER(ctypes.c_int64)),
        ("shape_hi", ctypes.POINTER(ctypes.c_int64)),
        ("shape_step", ctypes.POINTER(ctypes.c_int64)),
    ]


def bind(path: str) -> ctypes.CDLL:
    """The library at ``path`` with the argument/result types of monolib.h set."""
    lib = ctypes.CDLL(os.path.abspath(path))
    vp, i32, model = ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p
    sigs = {
        "monolib_capi_version": (i32, []),
        "monolib_open": (model, []),
        "monolib_close": (None, [model]),
        "monolib_num_inputs": (i32, [model]),
        "monolib_num_outputs": (i32, [model]),
        "monolib_input_info": (i32, [model, i32, ctypes.POINTER(TensorInfo)]),
        "monolib_output_info": (i32, [model, i32, ctypes.POINTER(TensorInfo)]),
        "monolib_input_index": (i32, [model, ctypes.c_char_p]),
        "monolib_output_index": (i32, [model, ctypes.c_char_p]),
        "monolib_set_input": (i32, [model, i32, vp, ctypes.c_size_t]),
        "monolib_set_input_shaped": (
            i32, [model, i32, vp, ctypes.POINTER(ctypes.c_int64), i32]
        ),
        "monolib_output_shape": (i32, [model, i32, ctypes.POINTER(ctypes.c_int64)]),
        "monolib_run_model": (i32, [model]),
        "monolib_get_output": (i32, [model, i32, vp, ctypes.c_size_t]),
        "monolib_output_data": (vp, [model, i32]),
        "monolib_last_error": (ctypes.c_char_p, []),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def last_error(lib: ctypes.CDLL) -> str:
    return lib.monolib_last_error().decode("utf-8")


def cls_batch(line: np.ndarray, batch: int) -> np.ndarray:
    """A classifier input of ``batch`` rows: ``line`` (1, 3, 48, 192) first, then seeded
    noise (softmax not saturated, so comparisons see every bit)."""
    noise = np.random.default_rng(batch).normal(0, 1.5, (batch - 1, *CLS_SHAPE[1:]))
    return np.ascontiguousarray(np.concatenate([line, noise.astype(np.float32)]), np.float32)


def conv_head_model():
    """A small ONNX model with run-time batch, height and width: x (batch, 3, h, w) ->
    Conv 3x3 stride 2 pad 1 -> Relu = feat (batch, 4, h/2, w/2) -> GlobalAveragePool ->
    Flatten -> Gemm = logits (batch, 5). Compile with ``CONV_HEAD_SHAPES``."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)) * 0.3,
        "b": rng.standard_normal(4) * 0.1,
        "g": rng.standard_normal((5, 4)) * 0.5,
        "c": rng.standard_normal(5) * 0.1,
    }
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1], strides=[2, 2]),
            helper.make_node("Relu", ["conv"], ["feat"]),
            helper.make_node("GlobalAveragePool", ["feat"], ["pool"]),
            helper.make_node("Flatten", ["pool"], ["flat"]),
            helper.make_node("Gemm", ["flat", "g", "c"], ["logits"], transB=1),
        ],
        "conv_head",
        [helper.make_tensor_value_info("x", f32, ["batch", 3, "h", "w"])],
        [
            helper.make_tensor_value_info("feat", f32, ["batch", 4, "oh", "ow"]),
            helper.make_tensor_value_info("logits", f32, ["batch", 5]),
        ],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


CONV_HEAD_SHAPES = {"x": ((1, 4), 3, (8, 32, 8), (8, 32, 8))}


def python_outputs(lib: Path, x: np.ndarray) -> list[np.ndarray]:
    """The outputs of ``lib`` run from Python (``load_module``) on input ``x``."""
    from monolib.runtime import load_module
    from monolib.runtime.graph_module import GraphModule

    mod = GraphModule(load_module(str(lib)).default())
    mod.set_input(0, x)
    mod.run()
    return [mod.get_output(i).numpy().copy() for i in range(mod.get_num_outputs())]


def zig_cc() -> list[str] | None:
    """zig's C compiler (PyPI ``ziglang``, else ``zig`` on PATH), or None."""
    import importlib.util
    import sys

    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc"]
    if shutil.which("zig"):
        return ["zig", "cc"]
    return None


def assert_near_host(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """``got`` (an aarch64 library's) within 1e-4 of the range of ``want`` (the host's:
    another ISA, other roundings); the difference printed after ``what``."""
    diff = float(np.abs(got - want).max())
    span = float(want.max() - want.min())
    print(f"{what}: max |diff| {diff:.3g} (range {span:.3g})")
    assert diff <= 1e-4 * max(span, 1e-6), (got, want)


def qemu_run_model(qemu: str, exe: Path, *args: str) -> subprocess.CompletedProcess:
    """``exe`` (run_model built for aarch64) run under ``qemu`` with ``args``; output
    captured as text, the exit status left to the caller."""
    return subprocess.run(
        [qemu, "-L", str(SYSROOT), str(exe), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
