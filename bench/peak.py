"""The machine's peak float32 FMA throughput per core, and achieved GFLOP/s against it.

``peak_gflops()`` builds (as exported libraries are built: ``-O3 -march=native``) a C
loop of independent vector FMAs at the build's vector width (``ML_VW`` of ``gemm.h``'s
rule: 16 floats with AVX-512, 8 with AVX, else 4), enough accumulators to cover the FMA
latency on every port (no dependency stalls: the loop is issue-bound), and times it on
the calling thread: 2 flops per lane per FMA. Other benches call :func:`achieved` /
:func:`report` to print a conv's or GEMM's GFLOP/s and fraction of that peak, with
:func:`conv_flops` / :func:`gemm_flops` counting the work. Usage::

    python bench/peak.py [--reps 5]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import logging
from collections.abc import Sequence

__all__ = [
    "achieved", "conv_flops", "gemm_flops", "main", "peak_gflops", "report", "source",
]

logger = logging.getLogger(__name__)

#: Independent accumulators: latency (4 cycles) x FMA ports (2) x 1.5, within the 16
#: vector registers of AVX2 (AVX-512 has 32, 12 still saturate two ports).
ACCUMULATORS = 12

def source(nacc: int = ACCUMULATORS) -> str:
    """The C of the FMA loop with ``nacc`` accumulators, each its own variable (so that
    they live in registers: an array would be spilled through the opaque use)."""
    accs = [f"a{i}" for i in range(nacc)]
    init = "\n".join(f"    vf {a} = vm * (float)({i} + 1);" for i, a in enumerate(accs))
    body = "\n".join(f"        {a} = {a} * vm + vc;" for a in accs)
    keep = ", ".join(f'"+v"({a})' for a in accs)
    total = " + ".join(accs)
    return f"""
#include <stdint.h>
#include <time.h>
#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
int peak_vw(void) {{ return VW; }}
/* seconds for iters rounds of {nacc} independent FMAs (acc = acc * m + c); *sink keeps
 * the results alive. m and c come from the caller so nothing folds at compile time. */
double peak_run(int64_t iters, float m, float c, float* sink) {{
    vf vm, vc;
    for (int v = 0; v < VW; ++v) {{ vm[v] = m; vc[v] = c; }}
{init}
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t it = 0; it < iters; ++it) {{
{body}
        __asm__ volatile("" : {keep}); /* opaque: no folding, registers kept */
    }}
    clock_gettime(CLOCK_MONOTONIC, &t1);
    vf s = {total};
    float r = 0.0f;
    for (int v = 0; v < VW; ++v) r += s[v];
    *sink = r;
    return (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
}}
"""


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    from monolib.compiler.testing import build_shared

    lib = build_shared(source(), ("-ffp-contract=fast",))
    lib.peak_run.restype = ctypes.c_double
    lib.peak_run.argtypes = [ctypes.c_int64, ctypes.c_float, ctypes.c_float,
                             ctypes.POINTER(ctypes.c_float)]
    lib.peak_vw.restype = ctypes.c_int
    return lib


@functools.lru_cache(maxsize=None)
def peak_gflops(reps: int = 5, seconds: float = 0.1) -> float:
    """Peak float32 GFLOP/s of one core (best of ``reps`` runs of about ``seconds``).

    Returns
    -------
    float
        ``2 * lanes * FMAs / time`` in 1e9 per second, on the calling thread.
    """
    lib = _lib()
    vw, sink = lib.peak_vw(), ctypes.c_float()
    iters = 1 << 16
    while lib.peak_run(iters, 0.999999, 1e-7, ctypes.byref(sink)) < seconds / 4:
        iters *= 2  # calibrate: a run long enough for the clock, short for the bench
    iters = int(iters * seconds / max(lib.peak_run(iters, 0.999999, 1e-7,
                                                   ctypes.byref(sink)), 1e-9))
    best = min(lib.peak_run(iters, 0.999999, 1e-7, ctypes.byref(sink)) for _ in range(reps))
    return 2.0 * vw * ACCUMULATORS * iters / best / 1e9


def gemm_flops(m: int, n: int, k: int) -> int:
    """Flops of ``C[m, n] = A[m, k] B[k, n]`` (a multiply and an add per term)."""
    return 2 * m * n * k


def conv_flops(w_shape: Sequence[int], out_shape: Sequence[int]) -> int:
    """Flops of a (grouped) convolution: ``2 * N * C_out * prod(out spatial) *
    (C_in / group) * prod(kernel)``, from W ``[C_out, C_in/group, *K]`` and Y
    ``[N, C_out, *O]`` (the direct algorithm's count: Winograd's saved multiplies are
    credited, as is usual)."""
    per_out = 2
    for d in w_shape[1:]:
        per_out *= int(d)
    total = per_out
    for d in out_shape:
        total *= int(d)
    return total


def achieved(flops: float, seconds: float, threads: int = 1) -> tuple[float, float]:
    """(GFLOP/s, fraction of ``threads`` cores' peak) of a run of ``flops`` in
    ``seconds``."""
    g = flops / seconds / 1e9
    return g, g / (peak_gflops() * threads)


def report(name: str, flops: float, seconds: float, threads: int = 1) -> str:
    """``"<name>: 123.4 GFLOP/s, 56% of peak"``, printed and returned."""
    g, frac = achieved(flops, seconds, threads)
    line = f"{name}: {g:.1f} GFLOP/s, {100 * frac:.0f}% of peak ({threads} thread(s))"
    print(line)
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """Print this core's peak float32 FMA GFLOP/s."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    lib = _lib()
    g = peak_gflops(args.reps)
    print(f"peak float32 FMA, 1 core: {g:.1f} GFLOP/s ({lib.peak_vw()} floats per vector, "
          f"{ACCUMULATORS} accumulators)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
