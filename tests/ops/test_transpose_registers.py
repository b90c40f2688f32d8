"""Transposes of 4-byte elements by register blocks (``ops/tensor/transpose.h``
``ml_transpose2d``, chosen by ``transpose.py`` ``_register_blocks``).

Every permutation of 3-D and 4-D tensors (and a 5-D one) whose innermost output dim is
read with a stride: the same bits as NumPy for float32 (NaN payloads, -0 and
subnormals included: bits are moved, not computed) and int32, sizes that are and are not
multiples of the vector width, on 1 and 2 threads; the kernel itself at 4, 8 and 16
floats a vector; short dims keep the element loop.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.ops.tensor.transpose import _register_blocks
from monolib.compiler.testing import build_shared
from monolib.runtime import set_num_threads

RNG = np.random.default_rng(7)


def _model(shape, perm, elem):
    out = [shape[p] for p in perm]
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, out)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _special_floats(shape) -> np.ndarray:
    bits = RNG.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    flat = bits.reshape(-1)
    flat[::7] = 0x7FC01234  # a NaN with a payload
    flat[1::11] = 0x80000000  # -0
    flat[2::13] = 0x00000001  # the smallest subnormal
    return bits.view(np.float32)


CASES = [((3, 37, 45), p) for p in itertools.permutations(range(3))]
CASES += [((2, 24, 19, 33), p) for p in itertools.permutations(range(4))]
CASES += [((1, 64, 80, 80), (0, 2, 3, 1)), ((1, 80, 80, 64), (0, 3, 1, 2)),
          ((2, 3, 17, 8, 21), (0, 4, 2, 1, 3))]


@pytest.mark.parametrize("shape,perm", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_same_bits_as_numpy(shape, perm):
    x = _special_floats(shape)
    xi = RNG.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)
    for elem, arr in ((TensorProto.FLOAT, x), (TensorProto.INT32, xi)):
        gm = monolib.GraphModule(monolib.compile(_model(shape, perm, elem))["default"](monolib.cpu()))
        want = np.ascontiguousarray(np.transpose(arr, perm))
        try:
            for threads in (1, 2):
                set_num_threads(threads)
                gm.run(x=arr)
                got = gm.get_output(0).numpy()
                assert got.tobytes() == want.tobytes(), (elem, threads)
        finally:
            set_num_threads(1)


def test_which_transposes_take_register_blocks():
    # NCHW -> NHWC of 64 channels: rows of the input read contiguously, channels strided
    assert _register_blocks([6400, 64], [64, 1], [1, 6400]) == (0, 1)
    assert _register_blocks([6400, 4], [4, 1], [1, 6400]) is None  # 4 channels: short
    assert _register_blocks([64, 6400], [6400, 1], [6400, 1]) is None  # a plain copy


@pytest.mark.parametrize("vw,options", [(4, ["-DML_VW=4", "-DML_NP=1"]),
                                        (8, ["-DML_VW=8", "-DML_NP=1"]),
                                        (16, ["-DML_VW=16", "-DML_NP=2"])])
def test_kernel_at_each_vector_width(vw, options):
    src = ("#include <stdint.h>\n#include <string.h>\n" + kernel_header("gemm.h")
           + kernel_header("transpose.h") + "\nvoid t(int64_t R, int64_t C, const void* s, "
           "int64_t lds, void* d, int64_t ldd) { ml_transpose2d(R, C, s, lds, d, ldd); }\n")
    lib = build_shared(src, options)
    for r, c in ((vw, vw), (3 * vw + 5, 2 * vw + 3), (vw - 1, 40), (37, vw - 3)):
        lds, ldd = r + 3, c + 5  # leading dims past the edges: untouched
        a = RNG.standard_normal((c, lds)).astype(np.float32)
        d = np.full((r, ldd), -1.0, np.float32)
        lib.t(ctypes.c_int64(r), ctypes.c_int64(c), a.ctypes.data_as(ctypes.c_void_p),
              ctypes.c_int64(lds), d.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(ldd))
        np.testing.assert_array_equal(d[:, :c], a[:, :r].T)
        assert np.all(d[:, c:] == -1.0)
