"""The tuning cache (compiler/tuning/cache.py): keyed by CPU, invalidated by a kernel
change, shareable as a file."""

from __future__ import annotations

import json

import pytest

from monolib.compiler.tuning.cache import TuningCache, cpu_key, kernel_hash
from monolib.errors import CompileError

CPUINFO = """processor\t: 0
model name\t: Test CPU 9000
flags\t\t: fpu sse4_2 avx avx2 fma avx512f lm
"""


def test_cpu_key_model_and_isa_flags():
    key = cpu_key(CPUINFO)
    assert key == "Test CPU 9000 | sse4_2 avx avx2 fma avx512f"
    assert cpu_key(CPUINFO.replace(" avx512f", "")) != key  # another ISA: another key
    assert cpu_key(CPUINFO.replace("9000", "9001")) != key


def test_kernel_hash_follows_sources(tmp_path):
    (tmp_path / "nn").mkdir()
    (tmp_path / "nn" / "k.h").write_text("void f(void) {}")
    files = ("nn/k.h",)
    h = kernel_hash(tmp_path, files)
    assert kernel_hash(tmp_path, files) == h
    (tmp_path / "nn" / "k.h").write_text("void f(void) { /* changed */ }")
    assert kernel_hash(tmp_path, files) != h
    assert len(kernel_hash()) == 16  # the real kernel sources


def test_every_candidate_source_is_hashed():
    """Each module conv.py emits a candidate through (its ``from .x import``) and each
    header those modules include is in KERNEL_SOURCES: a change to any of them re-measures
    (direct_ocv's conv_ocv.py / conv_ocv.h were missing). conv_cost decides the rule only,
    _common holds no kernel."""
    import re
    from pathlib import Path

    from monolib.compiler.tuning.cache import KERNEL_SOURCES

    nn = Path(__file__).resolve().parents[2] / "src/monolib/compiler/ops/nn"
    mods = set(re.findall(r"^from \.(\w+) import", (nn / "conv.py").read_text(), re.M))
    mods -= {"conv_cost", "_common"}
    need = {"nn/conv.py"} | {f"nn/{m}.py" for m in mods}
    for py in sorted(need):
        text = (nn.parent / py).read_text()
        need |= {f"nn/{h}" for h in re.findall(r'include(?:_checked)?\((?:ctx, )?"(\w+\.h)"', text)
                 if (nn / h).exists()}
    assert len(need) > 8
    assert need <= set(KERNEL_SOURCES), sorted(need - set(KERNEL_SOURCES))
    assert all((nn.parent / f).exists() for f in KERNEL_SOURCES)


def test_keyed_by_cpu_and_invalidated_by_kernels(tuning_dir):
    c = TuningCache(cpu="cpu A", kernels="k1")
    c.put("sig", "gemm", "direct", {"gemm": 1.0, "direct": 2.0})
    path = c.save()
    assert json.loads(path.read_text())["entries"]["sig"]["choice"] == "gemm"
    assert TuningCache(cpu="cpu A", kernels="k1").choices() == {"sig": "gemm"}
    other_cpu = TuningCache(cpu="cpu B", kernels="k1")
    assert other_cpu.path != path and other_cpu.choices() == {}
    changed = TuningCache(cpu="cpu A", kernels="k2")  # a kernel changed: entry dropped
    assert changed.path == path and changed.choices() == {}
    changed.put("sig", "direct", "direct", {"direct": 1.0})
    changed.save()  # and replaced
    doc = json.loads(path.read_text())
    assert doc["kernels"] == "k2" and doc["entries"]["sig"]["choice"] == "direct"


def test_export_import(tmp_path):
    src = TuningCache(tmp_path / "a", cpu="cpu A", kernels="k1")
    src.put("sig", "gemm", "direct", {"gemm": 1.0})
    exported = tmp_path / "shared.json"
    exported.write_text(json.dumps(src.document()))
    dst = TuningCache(tmp_path / "b", cpu="cpu A", kernels="k1")
    assert dst.merge_file(exported) == 1
    dst.save()
    assert TuningCache(tmp_path / "b", cpu="cpu A", kernels="k1").choices() == {"sig": "gemm"}
    with pytest.raises(CompileError, match="cpu"):
        TuningCache(tmp_path / "c", cpu="cpu B", kernels="k1").merge_file(exported)
    with pytest.raises(CompileError, match="kernels"):
        TuningCache(tmp_path / "c", cpu="cpu A", kernels="k2").merge_file(exported)


def test_unreadable_file_ignored(tuning_dir):
    c = TuningCache(cpu="cpu A", kernels="k1")
    tuning_dir.mkdir(parents=True)
    c.path.write_text("{not json")
    assert TuningCache(cpu="cpu A", kernels="k1").choices() == {}
