"""Every cross-compiled library exports the C API of monolib.h, the low-level ABI and
the container symbols: read from the ELF (aarch64), PE (.dll) and Mach-O (.dylib)
files without loading them; a compiled library with run-time dims too. Needs zig's C
compiler (``pip install ziglang``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from capihelp import CONV_HEAD_SHAPES, INCLUDE, conv_head_model, two_factory

from monolib.export.csource import CSourceModule
from monolib.runtime import GraphExecutorFactoryModule
from monolib.abi.binfmt import exported_symbols, parse_binary
from monolib.abi.binfmt.macho import macho_symbols
from monolib.abi.binfmt.pe import pe_exports

pytest.importorskip("ziglang")
pytestmark = pytest.mark.slow

API = sorted(
    set(
        re.findall(
            r"MONOLIB_API [^;(]*?\b(monolib_\w+)\(",
            (INCLUDE / "monolib.h").read_text(encoding="utf-8"),
        )
    )
)
CONTAINER = ["__monolib_container_start", "__monolib_container_end"]


def _symbols(path: str) -> set[str]:
    buf = Path(path).read_bytes()
    info = parse_binary(buf, path)
    if info.format == "PE":
        return set(pe_exports(buf, info, path))
    if info.format == "Mach-O":  # C names carry a leading underscore
        return {n[1:] for n in macho_symbols(buf, info, path) if n.startswith("_")}
    return set(exported_symbols(buf, info))


@pytest.mark.parametrize("triple", ["aarch64-linux-gnu", "x86_64-windows-gnu", "aarch64-macos"])
def test_cross_library_exports_the_c_api(tmp_path, triple):
    two = two_factory()
    factory = GraphExecutorFactoryModule(
        two.graph_json, two.params, CSourceModule(two.lib.source, f"c -mtriple={triple}")
    )
    path = factory.export_library(str(tmp_path / "two"))
    assert len(API) >= 22 and {"monolib_open", "monolib_set_spin"} <= set(API)
    # the hand-written model defines no thread pool functions and no timed run
    # (generated code does)
    generated = {"monolib_set_num_threads", "monolib_set_spin", "monolib_stop_threads",
                 "monolib_sleep_threads", "monolib_run_timed"}
    want = set(API) - generated | set(CONTAINER)
    missing = want - _symbols(path)
    assert not missing, f"{path} does not export {sorted(missing)}"


@pytest.mark.parametrize("triple", ["aarch64-linux-gnu", "x86_64-windows-gnu", "aarch64-macos"])
def test_cross_library_with_run_time_dims_exports_the_c_api(tmp_path, triple):
    """Generated code with run-time dims (the C API's symbol table and shape checks)
    cross-compiles, and exports the whole API, monolib_set_num_threads included."""
    pytest.importorskip("onnx")
    import monolib

    factory = monolib.compile(
        conv_head_model(), target=f"c -mtriple={triple}", shapes=CONV_HEAD_SHAPES
    )
    path = factory.export_library(str(tmp_path / "conv_head"))
    missing = (set(API) | set(CONTAINER)) - _symbols(path)
    assert not missing, f"{path} does not export {sorted(missing)}"
