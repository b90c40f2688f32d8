"""bench/calibrate_conv.py (issue 14: the Conv cost model calibrated per CPU): the work
terms read off the model reproduce its estimates, a fit to times made by known constants
finds those constants and scores their picks perfect, a fit to the wrong constants' times
moves the picks; and the rule's row-window exclusion of Winograd."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from monolib.compiler.ops.nn import conv, conv_cost

BENCH = Path(__file__).resolve().parents[2] / "bench"

# (x, w, pads): 3x3 on maps of 8-40 pixels, a strided one, 1x1, a 1-D 5-tap
SIGS = [
    ((1, 16, 40, 40), (32, 16, 3, 3), [1, 1, 1, 1], [1, 1]),
    ((1, 3, 32, 32), (16, 3, 3, 3), [1, 1, 1, 1], [2, 2]),
    ((1, 64, 8, 8), (64, 64, 3, 3), [1, 1, 1, 1], [1, 1]),
    ((1, 32, 14, 14), (48, 32, 1, 1), [0, 0, 0, 0], [1, 1]),
    ((1, 24, 60), (24, 24, 5), [0, 0], [1]),
    ((1, 8, 20, 20), (24, 8, 3, 3), [1, 1, 1, 1], [1, 1]),
    ((1, 3, 224, 224), (16, 3, 3, 3), [1, 1, 1, 1], [2, 2]),  # 1.4 MB in and out: past L2
]


def _tool():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("calibrate_conv")


def _sig(x, w, pads, strides):
    nd = len(x) - 2
    return {
        "op": "Conv", "x": list(x), "w": list(w), "group": 1,
        "attrs": {"kernel_shape": list(w[2:]), "strides": strides, "dilations": [1] * nd,
                  "pads": pads},
        "bias": True, "const_w": True, "epilogue": "fused", "dtype": "float32",
        "layout": "NCHW",
    }


def _data(costs):
    """Signatures timed 'by' ``costs``: every modelled candidate's estimate, in ms."""
    cc = _tool()
    out = []
    for args in SIGS:
        sig = _sig(*args)
        node, d = cc._node(sig)
        out.append((sig, {k: v / 1e6 for k, v in cc._costs(node, d, costs).items()}))
    return out


def test_work_terms_reproduce_the_model() -> None:
    cc = _tool()
    data = _data(conv_cost.COSTS)
    rows = cc.work_terms(data, conv_cost.COSTS)
    assert {r[1] for r in rows} >= {"gemm", "direct", "direct_ocv", "winograd(m=4)",
                                     "pixel_rows"}
    for row, p in zip(rows, cc.predict(rows, conv_cost.COSTS)):
        assert p == pytest.approx(row[4], rel=1e-9), row[:3]
    assert cc.regret(rows, cc.predict(rows, conv_cost.COSTS)) == (0.0, 0, len(SIGS))


def test_fit_moves_the_picks_to_the_measured_fastest() -> None:
    """Times made by other constants (direct twice as fast, Winograd's transforms
    three times dearer): the current constants mispick, the fitted ones pick what those
    times say is fastest."""
    cc = _tool()
    truth = {a: dict(ks) for a, ks in conv_cost.COSTS.items()}
    truth["direct"]["mac"] /= 2
    truth["direct"]["tile"] /= 2
    truth["winograd"]["in"] *= 3
    truth["winograd"]["t_out"] *= 3
    rows = cc.work_terms(_data(truth), conv_cost.COSTS)
    before = cc.regret(rows, cc.predict(rows, conv_cost.COSTS))
    assert before[0] > 0.02 and before[1] >= 1
    fitted = cc.fit(rows, conv_cost.COSTS, min_ns=0.0)
    after = cc.regret(rows, cc.predict(rows, fitted))
    assert after[0] < 0.25 * before[0] and after[1] < before[1]


def test_reads_one_group_convs_of_a_tuning_cache(tmp_path) -> None:
    cc = _tool()
    sig = _sig(*SIGS[0])
    dw = {**sig, "group": 16, "w": [16, 1, 3, 3]}
    entries = {json.dumps(sig, sort_keys=True): {"times_ms": {"gemm": 0.2}},
               json.dumps(dw, sort_keys=True): {"times_ms": {"depthwise": 0.1}},
               json.dumps({**sig, "op": "Gemm"}): {"times_ms": {"gemm": 0.1}}}
    cache = tmp_path / "c.json"
    cache.write_text(json.dumps({"entries": entries}))
    assert cc.rows_of(cache) == [(sig, {"gemm": 0.2})]


def _node(x, w, pads):
    return _tool()._node(_sig(x, w, pads, [1] * (len(x) - 2)))


def test_rule_leaves_row_windows_on_2d_maps_to_the_tuner() -> None:
    """1x3 and 3x1 windows on a 2-D map: no Winograd in the rule's comparison (it ran
    1.4-2.3x slower than the best there), still tuner candidates; a 1-D 5-tap signal
    keeps it (33 vs 56 us measured)."""
    row, d = _node((1, 48, 32, 8), (72, 48, 1, 3), [0, 1, 0, 1])
    assert conv_cost.row_window(d)
    assert not any(k.startswith("winograd") for k in conv.rule_costs(row, d, 1))
    assert any(c.algo == "winograd" for c in conv.conv_candidates(row, d, 1, False)[1])
    sig1d, d1 = _node((1, 48, 301), (40, 48, 5), [0, 0])
    assert not conv_cost.row_window(d1)
    assert "winograd(m=4)" in conv.rule_costs(sig1d, d1, 1)


def test_streamed_floats_count_only_past_l2() -> None:
    d = {"H": 224, "W": 224, "OH": 112, "OW": 112}
    assert conv_cost.streamed_floats(d, 1, 3, 16) == 3 * 224 * 224 + 16 * 112 * 112
    assert conv_cost.streamed_floats(d, 1, 3, 4) == 0  # 0.8 MB: within L2


def _scaled(alg: str, factor: float) -> dict:
    return {a: {k: v * (factor if a == alg else 1.0) for k, v in ks.items()}
            for a, ks in conv_cost.COSTS.items()}


def test_cache_keeps_this_cpus_cost_table(tuning_dir) -> None:
    from monolib.compiler.tuning.cache import TuningCache

    table = _scaled("direct_ocv", 2.0)
    cache = TuningCache()
    cache.conv_costs = table
    cache.save()
    assert TuningCache().conv_costs == table
    assert TuningCache(kernels="other").conv_costs == {}  # a kernel change drops it
    doc = json.loads(cache.path.read_text())
    doc["conv_costs"]["gemm"].pop("mac")  # fitted for another cost model
    cache.path.write_text(json.dumps(doc))
    assert TuningCache().conv_costs == {}


def test_compiles_price_candidates_with_this_cpus_costs(tuning_dir) -> None:
    """A stored table replaces the shipped constants for the fixed rule (no measured
    choice needed): with direct_ocv priced 1000x its shipped cost, a first-layer conv the
    shipped table gives it (PP-OCR's detector's, either vector width's table) goes to
    another algorithm."""
    from monolib.compiler.tuning.cache import TuningCache
    from monolib.compiler.tuning.select import selecting
    from monolib.compiler.tuning.tuner import selection_for

    node, d = _tool()._node(_sig((1, 3, 640, 640), (16, 3, 3, 3), [1, 1, 1, 1], [2, 2]))
    assert conv._rule(node, d, 1).algo == "direct_ocv"
    assert selection_for(lambda: None, "c", False) is None  # nothing cached yet
    cache = TuningCache()
    cache.conv_costs = _scaled("direct_ocv", 1000.0)
    cache.save()
    sel = selection_for(lambda: None, "c", False)
    assert sel is not None and sel.costs and not sel.table
    with selecting(sel):
        assert conv_cost.current_costs()["direct_ocv"]["mac"] == pytest.approx(
            1000 * conv_cost.COSTS["direct_ocv"]["mac"])
        assert conv._rule(node, d, 1).algo != "direct_ocv"
    assert conv._rule(node, d, 1).algo == "direct_ocv"  # outside the compile: shipped


def test_write_stores_the_fit_in_this_cpus_cache(tuning_dir, capsys) -> None:
    from monolib.compiler.tuning.cache import TuningCache

    cc = _tool()
    cache = TuningCache()
    for sig, times in _data(_scaled("gemm", 0.5)):
        cache.put(json.dumps(sig, sort_keys=True), "gemm", "gemm", times)
    cache.save()
    assert cc.main(["--write", "--folds", "0", "--min-us", "0"]) == 0
    assert "stored in" in capsys.readouterr().out
    stored = TuningCache().conv_costs
    assert set(stored) == set(conv_cost.COSTS)
    with pytest.raises(SystemExit):
        cc.main(["--write", "--cache", str(cache.path)])


def test_tune_show_lists_the_calibrated_constants(tuning_dir, capsys) -> None:
    from monolib.cli import main
    from monolib.compiler.tuning.cache import TuningCache

    assert main(["tune", "show"]) == 0
    assert "conv cost constants shipped" in " ".join(capsys.readouterr().out.split())
    cache = TuningCache()
    cache.conv_costs = _scaled("gemm", 2.0)
    cache.save()
    assert main(["tune", "show"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "calibrated here" in out and "conv cost gemm:" in out and "mac 0.0332" in out
