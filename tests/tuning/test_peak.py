"""bench/peak.py: the FMA peak loop builds and runs; the flop counts are exact."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PEAK = Path(__file__).resolve().parents[2] / "bench" / "peak.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_peak", PEAK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_flop_counts_and_peak():
    peak = load()
    assert peak.gemm_flops(2, 3, 4) == 48
    # [1, 8, 5, 5] output of W [8, 4/2, 3, 3] (group 2): 2 * 8*25 * 2*9
    assert peak.conv_flops((8, 2, 3, 3), (1, 8, 5, 5)) == 2 * 8 * 25 * 2 * 9
    g = peak.peak_gflops(reps=2, seconds=0.02)
    assert g > 1.0  # any core with a vector unit does far more than 1 GFLOP/s
    rate, frac = peak.achieved(2e9, 1.0)
    assert rate == 2.0 and abs(frac - 2.0 / peak.peak_gflops()) < 1e-12
    assert "GFLOP/s" in peak.report("x", 2e9, 1.0)
