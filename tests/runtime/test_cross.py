"""Cross-compiled exports (zig's C compiler): ELF aarch64, PE .dll, Mach-O .dylib.

Each library is read back WITHOUT loading it (inspect) and refused by load_module
with a message naming its format/architecture. Slow the first time (zig builds its
C runtime for the target and caches it), so marked slow; skipped without ziglang.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tinylib import tiny_graph, tiny_source

from monolib.export.csource import CSourceModule
from monolib.runtime import GraphExecutorFactoryModule, LibraryLoadError, load_module
from monolib.abi.binfmt import parse_binary
from monolib.abi.binfmt.macho import VM_PROT_EXECUTE
from monolib.abi.binfmt.pe import SCN_MEM_EXECUTE, SCN_MEM_WRITE
from monolib.tools.inspect import inspect_library

pytest.importorskip("ziglang")
pytestmark = pytest.mark.slow

CASES = [
    ("c -mtriple=aarch64-linux-gnu", ".so", "ELF64 aarch64", "built for aarch64"),
    ("c -mtriple=x86_64-windows-gnu", ".dll", "PE64 x86_64", "a PE library"),
    ("c -mtriple=aarch64-macos", ".dylib", "Mach-O64 aarch64", "a Mach-O library"),
]


@pytest.mark.parametrize(
    "target, suffix, binary, refusal", CASES, ids=["aarch64-linux", "windows", "macos"]
)
def test_cross_export_inspect_and_refuse(tmp_path, target, suffix, binary, refusal):
    graph, params = tiny_graph()
    factory = GraphExecutorFactoryModule(graph, params, CSourceModule(tiny_source(), target))
    path = factory.export_library(str(tmp_path / "model"))
    assert path == str(tmp_path / ("model" + suffix))
    assert os.listdir(tmp_path) == ["model" + suffix], "nothing beside the library"
    report = inspect_library(path, verify=True)
    assert report["binary"] == binary
    assert [m["type_key"] for m in report["modules"]] == ["graph_executor_factory", "library"]
    assert report["graphs"]["0"]["name"] == "tiny"
    info = parse_binary(Path(path).read_bytes(), path)
    sec = next(s for s in info.sections if s.name.endswith("monolib"))
    assert sec.addr % 4096 == 0
    if info.format == "PE":
        assert not sec.flags & (SCN_MEM_WRITE | SCN_MEM_EXECUTE)
    if info.format == "Mach-O":
        assert not sec.flags & VM_PROT_EXECUTE
    with pytest.raises(LibraryLoadError, match=refusal):
        load_module(path)
