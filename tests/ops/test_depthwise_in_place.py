"""The depthwise fast path reading its input rows in place (``conv_depthwise.h``,
``ML_DW_IN_PLACE``): tiles that reach a left or right pad zero the lanes that read the
rows around, and rows whose reads would leave the tensor are padded into scratch.

Each input tensor sits against an inaccessible page (after it, or before it), so a read
past the tensor's ends faults; the outputs are compared with a float64 NumPy convolution
at the vector widths of AVX-512, AVX and SSE, for 3x3 (in place) and 5x5 (padded
copies) windows at strides 1 and 2, pads 0-2 and rows around the vector widths."""

from __future__ import annotations

import ctypes
import itertools
import mmap

import numpy as np
import pytest

from monolib.compiler.backends.c.generate import host_prelude
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.testing import build_shared

_C = r"""
ML_UNUSED void dw_run(int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, int K, int S,
                      int64_t P, const float* x, const float* w, const float* b, float* y) {
    int64_t n = ml_dw_scratch_floats(W, OH, OW, K, K, S, S, P, 1, 1);
    float* scratch = (float*)aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64 + 64));
    ml_dw_units_fn u = K == 3 ? (S == 1 ? ml_dw_units_3_11 : ml_dw_units_3_22)
                              : (S == 1 ? ml_dw_units_5_11 : ml_dw_units_5_22);
    ml_dwconv2d(1, C, H, W, OH, OW, K, K, S, S, P, P, 1, 1, x, w, b, y, scratch, 0, 0, 0, u);
    free(scratch);
}
"""

#: vector widths (the build's own, AVX's, SSE's)
WIDTHS = {"native": (), "vw8": ("-DML_VW=8", "-DML_NP=2"), "vw4": ("-DML_VW=4", "-DML_NP=1")}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class Guarded:
    """``n`` floats against a PROT_NONE page: after them (``after``) or before them."""

    def __init__(self, n: int, after: bool) -> None:
        page = mmap.PAGESIZE
        body = -(-n * 4 // page) * page
        self.m = mmap.mmap(-1, body + 2 * page)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.m))
        for at in (base, base + page + body):
            assert _libc.mprotect(at, page, 0) == 0, ctypes.get_errno()
        start = page + body - n * 4 if after else page
        self.array = np.frombuffer(self.m, np.float32, n, start)
        self.ptr = base + start

    def close(self) -> None:
        _libc.mprotect(ctypes.addressof(ctypes.c_char.from_buffer(self.m)), len(self.m), 3)
        del self.array
        self.m.close()


def _reference(x, w, b, k, s, p):
    c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (p, p), (p, p)])
    oh, ow = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
    y = np.tile(b.astype(np.float64)[:, None, None], (1, oh, ow))
    for ky, kx in itertools.product(range(k), range(k)):
        y += w[:, ky, kx, None, None] * xp[:, ky:ky + s * (oh - 1) + 1:s, kx:kx + s * (ow - 1) + 1:s]
    return y


@pytest.fixture(scope="module", params=sorted(WIDTHS))
def lib(request):
    source = (host_prelude() + kernel_header("gemm.h") + kernel_header("conv.h")
              + kernel_header("conv_depthwise.h") + _C)
    so = build_shared(source, WIDTHS[request.param])
    so.dw_run.argtypes = [ctypes.c_int64] * 5 + [ctypes.c_int] * 2 + [ctypes.c_int64] + \
        [ctypes.c_void_p] * 4
    return so


SHAPES = [(k, s, p, w) for k in (3, 5) for s in (1, 2) for p in range(0, k // 2 + 2)
          for w in (1, 3, 7, 8, 15, 16, 17, 31, 33, 40, 47, 80, 161)]


@pytest.mark.parametrize("after", [True, False], ids=["end", "start"])
def test_depthwise_in_place_matches_numpy_at_the_tensors_edges(lib, after):
    rng = np.random.default_rng(0)
    checked = 0
    for k, s, p, wd in SHAPES:
        for h in (1, 5, 12):
            oh, ow = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
            if oh < 1 or ow < 1:
                continue
            c = 3
            g = Guarded(c * h * wd, after)
            try:
                g.array[:] = rng.standard_normal(c * h * wd).astype(np.float32)
                w = rng.standard_normal((c, k, k)).astype(np.float32)
                b = rng.standard_normal(c).astype(np.float32)
                y = np.full((c, oh, ow), np.nan, np.float32)
                lib.dw_run(c, h, wd, oh, ow, k, s, p, g.ptr, w.ctypes.data, b.ctypes.data,
                           y.ctypes.data)
                ref = _reference(g.array.reshape(c, h, wd), w, b, k, s, p)
            finally:
                g.close()
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5,
                                       err_msg=f"k{k} s{s} p{p} {h}x{wd}")
            checked += 1
    assert checked > 250
