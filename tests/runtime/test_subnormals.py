"""Subnormal floats are flushed to zero while a library runs (``threadpool.h``
``ml_fp_enter``: x86 MXCSR FTZ | DAZ in ``monolib_run`` / ``monolib_run_op`` and in the
pool's workers), and the caller's floating-point state is given back.

A product that underflows (1e-20 * 1e-20) is 0, as is a subnormal input times 2, on the
calling thread and on workers (an elementwise op split over 2 threads); NumPy in the
same thread still computes subnormals after the run; with -DML_KEEP_SUBNORMALS the
library keeps them.
"""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import make_node_model
from monolib.runtime import set_num_threads

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64", "i686"),
                                reason="MXCSR is x86's: elsewhere the flush is a no-op")

TINY = np.float32(1e-20)  # squared: 1e-40, a float32 subnormal
SUB = np.float32(1e-39)   # a float32 subnormal


def _mul(n: int):
    a = np.full(n, TINY, np.float32)
    b = np.full(n, TINY, np.float32)
    a[1::2] = SUB  # times 2 below
    b[1::2] = 2.0
    model = make_node_model("Mul", {"a": a, "b": b}, {})
    return model, a, b


@pytest.mark.parametrize("threads", [1, 2])
def test_underflow_is_zero_and_the_caller_keeps_its_state(threads):
    n = 1 << 20 if threads > 1 else 64  # large enough to split over the pool
    model, a, b = _mul(n)
    assert np.all(a * b != 0)  # NumPy here: subnormal results
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    try:
        set_num_threads(threads)
        gm.run(a=a, b=b)
        got = gm.get_output(0).numpy()
        for _ in range(3):  # run_op too
            gm.executor.run_op(0)
        got_op = gm.get_output(0).numpy()
    finally:
        set_num_threads(1)
    np.testing.assert_array_equal(got, np.zeros(n, np.float32))
    np.testing.assert_array_equal(got_op, np.zeros(n, np.float32))
    assert np.all(a * b != 0) and TINY * TINY != 0  # this thread's state is as before


def test_ml_keep_subnormals_keeps_them():
    from monolib.compiler.backends.c.headers import kernel_header
    from monolib.compiler.testing import build_shared

    src = ("#include <stdint.h>\n#include <stddef.h>\n" + kernel_header("threadpool.h") +
           "\nfloat mul(float a, float b) { ml_fp_state s = ml_fp_enter(); "
           "volatile float r = a * b; ml_fp_leave(s); return r; }\n")
    for options, want in (((), 0.0), (("-DML_KEEP_SUBNORMALS",), float(TINY * TINY))):
        lib = build_shared(src, options)
        lib.mul.restype = ctypes.c_float
        lib.mul.argtypes = [ctypes.c_float, ctypes.c_float]
        assert lib.mul(float(TINY), float(TINY)) == np.float32(want), options
