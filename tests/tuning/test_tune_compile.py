"""Tuned compiles (compiler/tuning/measure.py, compile(tune=True), --tune): every
candidate computes the convolution, a real timing run picks a valid one and caches it,
a tuned real model equals the untuned one."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import monolib
from monolib.cli import main
from monolib.compiler.build import lower
from monolib.compiler.tuning.cache import TuningCache
from monolib.compiler.tuning.measure import conv_model
from monolib.compiler.tuning.select import Selection, selecting
from monolib.runtime.device import cpu
from monolib.runtime.graph_module import GraphModule

from .test_select import conv_model as one_conv


def run(factory, feeds):
    gm = GraphModule(factory["default"](cpu()))
    gm.run(**feeds)
    return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]


def seen_of(model, **kw):
    sel = Selection()
    with selecting(sel):
        lower(model, **kw)
    return sel.seen


@pytest.mark.parametrize(
    "x,w,group,strides",
    [
        ((1, 32, 12, 12), (56, 32, 3, 3), 1, (1, 1)),  # Winograd F(2)/F(4) x cob, direct, GEMM
        ((2, 16, 9, 9), (16, 1, 3, 3), 16, (2, 2)),  # depthwise rows 3/4, direct, GEMM, folded
    ],
)
def test_every_candidate_matches_ort(x, w, group, strides, ort_run, rng):
    """The benchmark library (all candidates forced, one build) computes what ORT does
    with each candidate."""
    (s,) = seen_of(one_conv(x, w, group=group, strides=strides)).values()
    assert len(s.candidates) >= 3
    model = conv_model(s.sig, len(s.candidates))
    forced = {f"cand{i}": c.label for i, c in enumerate(s.candidates)}
    with selecting(Selection(forced=forced)):
        factory = monolib.compile(model)
    feeds = {"x": rng.standard_normal(x).astype(np.float32)}
    got = run(factory, feeds)
    want = ort_run(model, feeds)
    for c, g, r in zip(s.candidates, got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=c.label)


def test_real_timing_run_caches_a_valid_pick(tuning_dir, ort_run, rng):
    """compile(tune=True): measured for real (noisy: only the pick's validity and the
    cache write are checked), outputs still those of ORT."""
    model = one_conv((1, 16, 10, 10), (16, 16, 3, 3))
    (s,) = seen_of(model).values()
    feeds = {"x": rng.standard_normal((1, 16, 10, 10)).astype(np.float32)}
    got = run(monolib.compile(model, tune=True, tune_budget_s=10), feeds)
    (entry,) = TuningCache().entries.values()
    labels = {c.label for c in s.candidates}
    assert entry["choice"] in labels and set(entry["times_ms"]) == labels
    assert min(entry["times_ms"].values()) > 0
    np.testing.assert_allclose(got[0], ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_tuned_real_model_matches_ort(tuning_dir, ort_run, rng):
    """PP-OCR's direction classifier (53 convs: 3x3 stride 2, depthwise, 1x1, SE) with
    every signature cached to a candidate other than the rule's (the cache a tuning run
    would leave, made deterministic): the next compile reads it and still computes
    what ORT does."""
    from monolib.models.fetch import fetch_model

    model = onnx.load(fetch_model("ppocr_cls"))
    shapes = {"x": (1, 3, 48, 96)}
    sel = Selection()
    with selecting(sel):
        src_rule = lower(model, shapes=shapes)[0]
    seen = sel.seen
    cache = TuningCache()
    changed = 0
    for key, s in seen.items():
        other = [c for c in s.candidates if c != s.default]
        if other:
            cache.put(key, other[-1].label, s.default.label, {})
            changed += 1
    assert changed >= 5
    feeds = {"x": rng.standard_normal(shapes["x"]).astype(np.float32)}
    cache.save()
    with selecting(Selection(table=cache.choices())):
        assert lower(model, shapes=shapes)[0] != src_rule
    tuned = run(monolib.compile(model, shapes=shapes), feeds)  # reads the cache
    np.testing.assert_allclose(tuned[0], ort_run(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_cli_tune(tmp_path, tuning_dir):
    model = one_conv((1, 8, 8, 8), (8, 8, 3, 3))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "m.so"
    assert main(["compile", str(path), "-o", str(out), "--tune", "--tune-budget", "10"]) == 0
    assert out.exists()
    (cache_file,) = tuning_dir.glob("*.json")
    assert len(json.loads(cache_file.read_text())["entries"]) == 1
    exported = tmp_path / "export.json"
    assert main(["tune", "export", str(exported)]) == 0
    assert json.loads(exported.read_text())["entries"]


def test_gemm_candidates_match_ort(ort_run, rng):
    """Gemm with a run-time A: read in place (the rule) or packed (pack_a=1); both in
    one benchmark library, both equal to ORT (alpha, beta, a constant C row, Relu)."""
    from monolib.compiler.tuning.measure import gemm_model

    sig = {"op": "Gemm", "a": [5, 24], "b": [24, 40], "c": [40], "transA": 0, "transB": 0,
           "alpha": 0.5, "beta": 2.0, "const_b": True, "const_c": True,
           "epilogue": "fused", "dtype": "float32", "layout": "row-major"}
    model = gemm_model(sig, 2)
    sel = Selection(forced={"cand0": "gemm(pack_a=0)", "cand1": "gemm(pack_a=1)"})
    with selecting(sel):
        src = lower(model)[0]
        factory = monolib.compile(model)
    assert "ml_pack_a_par(" in src  # cand1 packs A when it runs
    (seen,) = sel.seen.values()
    assert seen.sig == sig and len(seen.candidates) == 2
    feeds = {"a": rng.standard_normal((5, 24)).astype(np.float32)}
    for g, r in zip(run(factory, feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
