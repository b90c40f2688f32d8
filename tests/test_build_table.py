"""bench/build_time.py's build table (issue 15): each compiler run's own CPU time, the
two-core estimate, and the marked section of bench/RESULTS.md that build_time.py writes
and bench/run.py keeps when it rewrites the file."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_bench_tables import fake_results, load  # noqa: E402


def test_two_cores_places_largest_first():
    bt = load("build_time")
    assert bt._two_cores([3.0, 2.0, 2.0, 1.0]) == 4.0  # 3+1 | 2+2
    assert bt._two_cores([5.0, 1.0, 1.0]) == 5.0  # one unit longer than the rest
    assert bt._two_cores([]) == 0.0


def test_tool_times_count_each_compiler_run(tmp_path):
    bt = load("build_time")
    from monolib.export import toolchain

    src = tmp_path / "a.c"
    # enough work for a measurable CPU time: a long unrolled function
    src.write_text("double f(double x) {\n"
                   + "".join(f"  x = x * 1.0001 + {i}.5;\n" for i in range(3000))
                   + "  return x;\n}\n")
    orig = toolchain.run_tool
    with bt._ToolTimes() as tt:
        toolchain.run_tool(["gcc", "-O2", "-c", "-o", str(tmp_path / "a.o"), str(src)])
        with pytest.raises(toolchain.ToolchainError, match="failed"):
            toolchain.run_tool(["gcc", "-c", "-o", str(tmp_path / "b.o"), str(tmp_path / "none.c")])
    assert toolchain.run_tool is orig  # restored
    assert [k for k, _ in tt.runs] == ["cc", "cc"]
    assert tt.runs[0][1] > 0.005 and (tmp_path / "a.o").exists()


def test_table_section_is_replaced_and_kept_by_run(tmp_path):
    bt, run, flops = load("build_time"), load("run"), load("flops")
    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmarks\n\nold body\n")
    bt._write_table(["| model | x |", "|---|---|", "| cls | 1 |"], str(out))
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nold body\n")
    assert text.count(bt.TABLE_BEGIN) == 1 and "| cls | 1 |" in text
    bt._write_table(["| model | x |", "|---|---|", "| rec | 2 |"], str(out))
    text = out.read_text()
    assert "| rec | 2 |" in text and "| cls | 1 |" not in text and "old body" in text
    section = text[text.index(bt.TABLE_BEGIN):text.index(bt.TABLE_END) + len(bt.TABLE_END)]
    # bench/run.py rewrites the file from its own results and keeps the section
    info = {"cpu": "Test CPU", "cores": 2, "gcc": "gcc 0", "python": "3", "load": 0.5,
            "onnxruntime": "1", "monolib": "0", "numpy": "2", "peak_wall": 90.0}
    args = argparse.Namespace(argv=["--models", "x"], profile_repeat=5)
    for _ in range(2):
        run.write_markdown(fake_results(run, flops), info, args, out, (1, 2), 100.0)
        text = out.read_text()
        assert "old body" not in text and "| light_resnet50 |" in text
        assert text.count(bt.TABLE_BEGIN) == 1 and section in text


def test_function_times_name_the_slow_function(tmp_path):
    bt = load("build_time")
    src = tmp_path / "f.c"
    src.write_text("int small(int x) { return x + 1; }\n"
                   "double big(double* p) {\n"
                   + "".join(f"  p[{i % 97}] = p[{(i * 7) % 97}] * 1.0001 + p[{i % 89}];\n"
                             for i in range(4000))
                   + "  return p[0];\n}\n")
    times = dict(bt.function_times(str(src), ["-O2"]))
    assert set(times) == {"small", "big"}
    assert times["big"] > 10 * times["small"]
