"""Reading an exported library's ELF structure without loading it."""

from __future__ import annotations

import struct

import pytest
from tinylib import tiny_source

import monolib
from monolib.export.csource import CSourceModule
from monolib.runtime import DSOModule, LibraryLoadError, load_module
from monolib.abi.binfmt import find_container
from monolib.abi.binfmt.elf import (
    PF_X,
    PT_GNU_STACK,
    PT_LOAD,
    SHF_ALLOC,
    SHF_EXECINSTR,
    SHF_WRITE,
    parse_elf,
)
from monolib.abi.container import MAGIC, Container


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_monolib_section_is_read_only_aligned_and_stack_not_executable(big_lib):
    data = read(big_lib)
    elf = parse_elf(data, big_lib)
    sec = elf.section(".monolib")
    assert sec.flags & SHF_ALLOC and not sec.flags & (SHF_WRITE | SHF_EXECINSTR)
    assert sec.addr % 4096 == 0 and sec.offset % 4096 == 0
    assert data[sec.offset : sec.offset + 8] == MAGIC
    stack = [s for s in elf.segments if s.type == PT_GNU_STACK]
    assert stack and not stack[0].flags & PF_X
    (seg,) = [
        s
        for s in elf.segments
        if s.type == PT_LOAD and s.offset <= sec.offset < s.offset + s.filesz
    ]
    assert not seg.flags & PF_X, "the container must not be mapped executable"


def test_find_container_matches_the_symbols(tiny_lib):
    data = read(tiny_lib)
    off, size, elf = find_container(data, tiny_lib)
    c = Container(data[off : off + size])
    assert c.total_size <= size and elf.machine == "x86_64" and elf.bits == 64


def test_corrupt_section_table_is_an_error(tiny_lib, tmp_path):
    data = bytearray(read(tiny_lib))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    bad = data.copy()
    struct.pack_into("<Q", bad, 0x28, len(data) + 4096)  # section table past the end
    (tmp_path / "a.so").write_bytes(bad)
    with pytest.raises(LibraryLoadError, match="a.so.*truncated"):
        load_module(str(tmp_path / "a.so"))
    bad = data.copy()
    struct.pack_into("<H", bad, 0x3A, 17)  # nonsense section header size
    (tmp_path / "b.so").write_bytes(bad)
    with pytest.raises(LibraryLoadError, match="section header size"):
        load_module(str(tmp_path / "b.so"))
    bad = data.copy()
    # point the .monolib section's file offset far beyond the file
    idx = [s.name for s in parse_elf(data).sections].index(".monolib")
    struct.pack_into("<Q", bad, shoff + idx * 64 + 24, len(data) * 4)
    (tmp_path / "c.so").write_bytes(bad)
    with pytest.raises(LibraryLoadError, match=f"c.so.*section {idx}"):
        load_module(str(tmp_path / "c.so"))


def test_foreign_architecture_is_named(tiny_lib, tmp_path):
    data = bytearray(read(tiny_lib))
    struct.pack_into("<H", data, 0x12, 183)  # e_machine = EM_AARCH64
    (tmp_path / "arm.so").write_bytes(data)
    with pytest.raises(LibraryLoadError, match="built for aarch64"):
        load_module(str(tmp_path / "arm.so"))


def test_bare_container_is_inspectable_not_loadable(tiny_lib, tmp_path):
    data = read(tiny_lib)
    off, size, _ = find_container(data)
    (tmp_path / "c.bin").write_bytes(data[off : off + size])
    from monolib.tools.inspect import inspect_library

    assert inspect_library(str(tmp_path / "c.bin"))["binary"] == "bare container"
    with pytest.raises(LibraryLoadError, match="bare container"):
        load_module(str(tmp_path / "c.bin"))


def test_csource_alone_exports_to_a_dso(tmp_path):
    mod = CSourceModule(tiny_source())
    assert mod.build() is mod.build(), "the temporary build is cached"
    path = mod.export_library(str(tmp_path / "k.so"))
    root = load_module(path)
    assert isinstance(root, DSOModule) and root.imported_modules == []
    num_ops = root["monolib_num_ops"]
    assert num_ops() == 1
    with pytest.raises(monolib.FunctionNotFoundError, match="'library'.*'nope'"):
        root["nope"]


def test_pt_dynamic_moved_off_the_dynamic_section_is_refused(tmp_path):
    """A PT_DYNAMIC pointing a few bytes off .dynamic made dlopen read a garbage
    dynamic table and crash (found by the container fuzzer); it is refused first."""
    import struct

    import monolib
    from tinylib import tiny_factory

    path = tmp_path / "tiny.so"
    tiny_factory().export_library(str(path))
    data = bytearray(path.read_bytes())
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    dyn = next(phoff + i * phentsize for i in range(phnum)
               if struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 2)
    data[dyn + 16] ^= 0xD9  # p_vaddr's low byte, as the fuzzer's case did
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(monolib.MonolibError, match="PT_DYNAMIC"):
        monolib.load_module(str(bad))
