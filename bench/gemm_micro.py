"""GEMM micro-benchmark: monolib's ``kernels/gemm.h`` against NumPy (and ORT MatMul).

Compiles a tiny C wrapper around ``ml_sgemm`` with ``-O3 -march=native``, runs a few
shapes (big square, conv-like, attention-like, odd sizes, column tails) on one thread and
prints GFLOP/s, timed by the calling thread's CPU time (steady on a shared machine; wall
time counts the time other processes held the core). A is packed once outside the timed loop (as conv weights are packed at compile
time); B is packed inside (as activations are). Usage::

    python bench/gemm_micro.py [--reps N]
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["build", "main"]

logger = logging.getLogger(__name__)

KERNELS = Path(__file__).resolve().parents[1] / "src/monolib/compiler/ops/nn"  # gemm.h

WRAPPER = r"""
#include "gemm.h"
#include <stdlib.h>
#include <time.h>
void pack_a(int64_t M, int64_t K, const float* a, float* dst) { ml_pack_a(M, K, a, K, 1, dst); }
double run(int64_t M, int64_t N, int64_t K, const float* ap, const float* b, float* c,
           float* bbuf, int reps) {
    ml_gemm_args g = ml_gemm_defaults(M, N, K, ap, c);
    g.b.kind = ML_B_STRIDED; g.b.p = b; g.b.ldk = N; g.b.ldn = 1; g.bbuf = bbuf;
    struct timespec t0, t1;
    ml_sgemm(&g);
    /* the thread's CPU time: steady on a shared machine (wall time counts the time
     * other processes held the core) */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    for (int i = 0; i < reps; ++i) ml_sgemm(&g);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    return ((t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec)) / reps;
}
"""

SHAPES = [
    (1024, 1024, 1024),
    (512, 512, 512),
    (96, 25600, 48),  # 1x1 conv, det backbone
    (192, 6400, 96),
    (480, 400, 240),  # 1x1 conv, rec
    (40, 6625, 120),  # rec head
    (100, 100, 16),  # attention-like small
    (37, 53, 71),  # odd sizes
    (1, 512, 128),  # GEMV: LSTM input projection, one step
    (1, 1000, 1024),  # GEMV: classifier head
    (2048, 49, 512),  # 1x1 conv on a 7x7 map: a 1-column tail past 3 panels
    (256, 196, 1024),  # 1x1 conv on a 14x14 map: a 4-column tail
]


def build(workdir: str) -> ctypes.CDLL:
    """Compile the wrapper into ``workdir`` and load it."""
    src = Path(workdir) / "gemm_bench.c"
    so = Path(workdir) / "gemm_bench.so"
    src.write_text(WRAPPER)
    cc = os.environ.get("CC", "gcc")
    cmd = [cc, "-O3", "-march=native", "-fPIC", "-shared", f"-I{KERNELS}", str(src), "-o", str(so)]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(so))
    lib.run.restype = ctypes.c_double
    lib.run.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 4 + [ctypes.c_int]
    lib.pack_a.argtypes = [ctypes.c_int64] * 2 + [ctypes.c_void_p] * 2
    return lib


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def bench_shape(lib: ctypes.CDLL, m: int, n: int, k: int, reps: int) -> tuple[float, float, float]:
    """(monolib GFLOP/s, numpy GFLOP/s, max relative error) for one shape."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), np.float32)
    b = rng.standard_normal((k, n), np.float32)
    c = np.zeros((m, n), np.float32)
    ap = np.zeros(-(-m // 6) * 6 * k + 16, np.float32)
    bbuf = np.zeros(256 * 1024 + 16, np.float32)
    lib.pack_a(m, k, _ptr(a), _ptr(ap))
    t = lib.run(m, n, k, _ptr(ap), _ptr(b), _ptr(c), _ptr(bbuf), reps)
    ref = a @ b
    err = float(np.abs(c - ref).max() / (np.abs(ref).max() + 1e-30))
    a @ b
    t0 = time.thread_time()
    for _ in range(reps):
        a @ b
    tn = (time.thread_time() - t0) / reps
    flops = 2.0 * m * n * k
    return flops / t / 1e9, flops / tn / 1e9, err


def main() -> None:
    """Print a table of GFLOP/s per shape."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(tmp)
        print(f"{'M':>6} {'N':>6} {'K':>6} {'monolib':>9} {'numpy':>9} {'ratio':>6}  rel.err")
        for m, n, k in SHAPES:
            g, gn, err = bench_shape(lib, m, n, k, args.reps)
            print(f"{m:>6} {n:>6} {k:>6} {g:>9.1f} {gn:>9.1f} {g / gn:>6.2f}  {err:.1e}")


if __name__ == "__main__":
    main()
