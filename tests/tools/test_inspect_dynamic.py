"""``inspect`` and ``view`` of a library with run-time dims (issue 12): bounded dims as
``n∈[1,64]``, the specialized shapes, the arena size at the upper bounds (the
hand-written "dyn" model of tests/runtime/tinylib.py)."""

from __future__ import annotations

import io
import json
import os
import re
import sys

import pytest

from monolib.tools.inspect import inspect_library, render_report
from monolib.tools.visualize import render_html

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runtime"))
from tinylib import dyn_factory, tiny_factory  # noqa: E402


@pytest.fixture(scope="module")
def dyn_lib(tmp_path_factory) -> str:
    return dyn_factory().export_library(str(tmp_path_factory.mktemp("dyn") / "dyn.so"))


def _text(report: dict) -> str:
    from rich.console import Console

    buf = io.StringIO()
    render_report(report, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


def test_inspect_reports_symbols_and_specializations(dyn_lib):
    report = inspect_library(dyn_lib)
    assert report["container"]["format_version"] == 2
    (graph,) = report["graphs"].values()
    assert graph["symbols"] == [
        {"name": "n", "lo": 1, "hi": 64, "step": 1},
        {"name": "k", "lo": 4, "hi": 32, "step": 4},
    ]
    assert graph["specializations"] == [{"n": 8, "k": 16}]
    assert graph["arena_at_bounds"] and graph["arena_bytes"] == 1984
    assert graph["inputs"][2] == {"name": "u", "shape": [2, "k"], "dtype": "float32"}
    json.dumps(report)  # --json prints it


def test_inspect_text_shows_bounded_dims(dyn_lib):
    pytest.importorskip("rich")
    text = _text(inspect_library(dyn_lib))
    assert "[n\u2208[1,64]]" in text and "[2, k\u2208[4,32]:4]" in text and "[2*n]" in text
    assert "run-time dims: n\u2208[1,64], k\u2208[4,32]:4" in text
    assert "specialized for: n=8, k=16" in text
    assert re.search(r"arena: 1\.9 KiB \(at the upper bounds\)", text)


def test_static_library_report_is_unchanged(tmp_path):
    path = tiny_factory().export_library(str(tmp_path / "tiny.so"))
    report = inspect_library(path)
    (graph,) = report["graphs"].values()
    assert "symbols" not in graph and "arena_at_bounds" not in graph
    pytest.importorskip("rich")
    text = _text(report)
    assert "run-time dims" not in text and "upper bounds" not in text


def test_view_shows_bounded_dims(dyn_lib, tmp_path):
    out = render_html(dyn_lib, str(tmp_path / "dyn.html"))
    page = open(out, encoding="utf-8").read()
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.DOTALL).group(1))
    summary = data["graphs"][0]["summary"]
    assert summary["inputs"][2]["shape"] == [2, "k\u2208[4,32]:4"]
    assert summary["outputs"][1]["shape"] == ["2*n"]
    assert summary["symbols"] == ["n\u2208[1,64]", "k\u2208[4,32]:4"]
    assert summary["specializations"] == ["n=8, k=16"]
    assert "(at the upper bounds)" in page and "specialized for" in page
