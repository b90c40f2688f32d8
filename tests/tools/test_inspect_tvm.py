"""``monolib inspect`` on libraries exported by Apache TVM, built BY HAND from the
published layouts (tvm-ffi's ``ProcessLibraryBin``, TVM's legacy
``ProcessModuleBlob``): a C file holding the symbol's bytes compiled with gcc, and
hand-made PE and Mach-O files carrying the symbol in their symbol tables."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

FUZZ_DIR = str(Path(__file__).resolve().parents[2] / "fuzz")
sys.path.insert(0, FUZZ_DIR)
import fuzz_container

from monolib.cli import main
from monolib.abi.binfmt import parse_binary
from monolib.errors import ContainerError, ToolchainError
from monolib.export.toolchain import find_compiler, link_shared
from monolib.tools.inspect import inspect_library
from monolib.tools.tvm_container import find_tvm, parse_tvm_blob

u64, string, vec = fuzz_container.u64, fuzz_container.string, fuzz_container.vec
make_pe, make_macho = fuzz_container.make_pe, fuzz_container.make_macho
ffi_blob, legacy_blob = fuzz_container.tvm_ffi_blob, fuzz_container.tvm_legacy_blob
VM_BYTES, CUDA_BYTES = fuzz_container.VM_BYTES, fuzz_container.CUDA_BYTES


def gcc_library(tmp_path, symbol: str, blob: bytes) -> str:
    """A shared library (the export's compiler and flags) holding ``blob`` as ``symbol``."""
    try:
        find_compiler()
    except ToolchainError as e:
        pytest.skip(str(e))
    src = tmp_path / "tvmlib.c"
    data = ", ".join(str(b) for b in blob)
    src.write_text(
        f"const unsigned char {symbol}[{len(blob)}] = {{{data}}};\n"
        "int __tvm_ffi_main(void) { return 0; }\n"
    )
    out = tmp_path / "tvmlib.so"
    link_shared([str(src)], str(out))
    return str(out)


def tree_of(report: dict) -> dict[int, tuple[str, list[int], int | None]]:
    return {
        m["index"]: (
            m["type_key"],
            m["imports"],
            m["sections"][0]["size"] if m["sections"] else None,
        )
        for m in report["modules"]
    }


def test_current_ffi_container_in_an_elf_library(tmp_path, capsys):
    path = gcc_library(tmp_path, "__tvm_ffi__library_bin", ffi_blob())
    report = inspect_library(path)
    assert report["tvm"]["layout"] == "ffi"
    assert report["tvm"]["symbol"] == "__tvm_ffi__library_bin"
    assert report["tvm"]["size"] == len(ffi_blob()) - 8
    assert report["binary"].startswith("ELF64")
    assert tree_of(report) == {
        0: ("relax.VMExecutable", [1, 2], len(VM_BYTES)),
        1: ("_lib", [], None),
        2: ("cuda", [], len(CUDA_BYTES)),
    }
    # the recorded offset points at the module's bytes in the file
    with open(path, "rb") as f:
        data = f.read()
    sec = report["modules"][2]["sections"][0]
    start = report["tvm"]["offset"] + sec["offset"]
    assert data[start : start + sec["size"]] == CUDA_BYTES

    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "Apache TVM container, current (tvm-ffi) layout" in out
    assert "[0] relax.VMExecutable" in out and "└─ [2] cuda" in out
    assert str(len(VM_BYTES)) in out
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["modules"][0]["type_key"] == "relax.VMExecutable"


@pytest.mark.parametrize("prefixed", [True, False])
def test_legacy_container_in_an_elf_library(tmp_path, prefixed):
    path = gcc_library(tmp_path, "__tvm_dev_mblob", legacy_blob(prefixed))
    report = inspect_library(path)
    assert report["tvm"]["layout"] == "legacy"
    assert tree_of(report) == {
        0: ("GraphExecutorFactory", [1], len(VM_BYTES)),
        1: ("_lib", [2], None),
        2: ("metal", [], len(CUDA_BYTES)),
    }


def test_legacy_container_without_import_tree_roots_at_the_library():
    tvm = parse_tvm_blob(legacy_blob(tree=False), "legacy")
    assert [m.type_key for m in tvm.modules] == ["_lib", "GraphExecutorFactory", "metal"]
    assert tvm.children(0) == [1, 2] and tvm.children(1) == [] and tvm.children(2) == []


def test_a_plain_library_is_still_refused(tmp_path):
    from monolib.errors import LibraryLoadError

    path = gcc_library(tmp_path, "some_other_symbol", b"abc")
    with pytest.raises(LibraryLoadError, match="no .monolib section"):
        inspect_library(path)


def sized(body: bytes) -> bytes:
    return u64(len(body)) + body


@pytest.mark.parametrize(
    "blob, match",
    [
        (u64(100) + vec([0]), "the blob claims 100 bytes, 16 present"),
        (sized(u64(1 << 60) + u64(0)), "row_ptr claims 1152921504606846976 entries"),
        (sized(u64(2) + u64(0)), "row_ptr claims 2 entries, only 8 bytes left"),
        (sized(vec([0, 1]) + vec([]) + string("x") + u64(9)[:7]), "truncated: length of bytes"),
        (sized(vec([0, 1]) + vec([]) + string("x") + u64(1000)), "claims 1000 bytes, only 0"),
        (
            sized(vec([0, 1]) + vec([]) + u64(1 << 62)),
            "kind of module 0 claims 4611686018427387904",
        ),
        (sized(vec([0, 2]) + vec([0, 5]) + string("_lib")), "module outside"),
        (sized(vec([0, 2]) + vec([0]) + string("_lib")), "row_ptr \\[0, 2\\] does not fit 1"),
        (sized(vec([]) + vec([])), "row_ptr is empty"),
        (sized(vec([0, 0]) + vec([]) + string(b"\xff")), "not UTF-8"),
    ],
)
def test_corrupt_ffi_blobs_are_container_errors(blob, match):
    with pytest.raises(ContainerError, match=match):
        parse_tvm_blob(blob, "ffi", where="t.so")


def test_every_truncation_of_both_layouts_is_a_container_error():
    for layout, blob in (("ffi", ffi_blob()), ("legacy", legacy_blob())):
        full = parse_tvm_blob(blob, layout)
        assert len(full.modules) == 3
        for cut in range(len(blob) - 1):
            try:
                parse_tvm_blob(blob[:cut], layout)
            except ContainerError:
                continue
            raise AssertionError(f"{layout}: a blob cut at {cut} parsed")


# --------------------------------------------------------------------------- PE and Mach-O
@pytest.mark.parametrize("make, fmt", [(make_pe, "PE"), (make_macho, "Mach-O")])
@pytest.mark.parametrize("symbol", ["__tvm_ffi__library_bin", "__tvm_dev_mblob"])
def test_pe_and_macho_libraries(make, fmt, symbol, tmp_path):
    blob = ffi_blob() if "ffi" in symbol else legacy_blob()
    path = tmp_path / ("m.dll" if fmt == "PE" else "m.dylib")
    path.write_bytes(make(symbol, blob))
    report = inspect_library(str(path))
    assert report["binary"].startswith(fmt)
    assert report["tvm"]["symbol"] == symbol
    types = [m["type_key"] for m in report["modules"]]
    assert types == (
        ["relax.VMExecutable", "_lib", "cuda"]
        if "ffi" in symbol
        else ["GraphExecutorFactory", "_lib", "metal"]
    )
    data = path.read_bytes()
    info = parse_binary(data, str(path))
    offset, _ = find_tvm(data, info, str(path))
    assert data[offset : offset + len(blob)] == blob


def test_macho_section_count_is_checked_before_reading():
    from monolib.errors import LibraryLoadError

    data = bytearray(make_macho("__tvm_ffi__library_bin", ffi_blob()))
    struct.pack_into("<I", data, 32 + 64, 1 << 31)  # nsects of the LC_SEGMENT_64
    with pytest.raises(
        LibraryLoadError, match="claims 2147483648 sections, its load command holds 1"
    ):
        parse_binary(bytes(data), "m.dylib")


@settings(max_examples=300, deadline=None)
@given(
    layout=st.sampled_from(["ffi", "legacy"]),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
    cut=st.none() | st.integers(0, 10_000),
)
def test_damaged_tvm_blobs_parse_or_raise_container_error(layout, edits, cut):
    """Byte flips and truncation of both layouts: a ContainerError or a parse whose
    every module lies inside the blob (no count or length is trusted unchecked)."""
    blob = bytearray(ffi_blob() if layout == "ffi" else legacy_blob())
    for pos, byte in edits:
        blob[pos % len(blob)] ^= byte
    data = bytes(blob[: cut % len(blob)] if cut is not None else blob)
    try:
        tvm = parse_tvm_blob(data, layout)
    except ContainerError:
        return
    for i, m in enumerate(tvm.modules):
        if m.size is not None:
            assert 0 <= m.offset and m.offset + m.size <= len(data)
        assert all(0 <= c < len(tvm.modules) for c in tvm.children(i))
