"""Concurrency and long runs (issue 6 part 6), the CI-sized run of bench/concurrency.py:
8 threads, each with its own executor from ONE loaded factory of a real model (PP-OCR
cls), 50 runs each on its own input; every output equals the single-threaded one bit
for bit, and RSS after the last run is within 5% of RSS after the first 10 runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from concurrency import hammer, thread_inputs  # bench/ is not a package


@pytest.fixture(scope="module")
def cls_factory(tmp_path_factory):
    pytest.importorskip("onnx")
    from bench_inputs import MODEL_INPUTS

    import monolib
    from monolib.models import fetch_model
    from monolib.errors import MonolibError

    spec = MODEL_INPUTS["cls"]
    try:
        path = fetch_model(spec.key)
    except MonolibError as exc:  # offline without a cached model: nothing to test with
        pytest.skip(f"PP-OCR cls model unavailable: {exc}")
    lib = tmp_path_factory.mktemp("conc") / "cls.so"
    monolib.compile(str(path), shapes=spec.shapes).export_library(str(lib))
    feeds, _ = spec.make()
    return monolib.load_module(str(lib)), feeds


def test_eight_threads_own_executors_same_bits_no_leak(cls_factory):
    import monolib

    factory, feeds = cls_factory
    inputs = thread_inputs(feeds, 8)
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    outs = set()
    for feeds_i in inputs:  # each thread's output differs: a mix-up would be seen
        gm.run(**feeds_i)
        outs.add(gm.get_output(0).numpy().tobytes())
    assert len(outs) == 8
    res = hammer(factory, inputs, runs=50, checkpoint=10)
    assert res["errors"] == []
    assert res["runs"] == 400
    assert res["mismatches"] == 0, f"{res['mismatches']} of 400 runs differ from 1 thread"
    # a leak grows the RSS; the kernel may shrink it meanwhile (a VM's page reclaim took
    # 10-14% of it back during these runs), which says nothing of a leak
    growth = res["rss_end"] / res["rss_checkpoint"] - 1
    assert growth <= 0.05, f"RSS {res['rss_checkpoint']} -> {res['rss_end']}"
