"""The PE and Mach-O readers on hand-built minimal files, and random damage to
headers of all three formats: only MonolibError subclasses, never another exception
(the readers run before dlopen, so they are the guard against crashes)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from tinylib import tiny_factory

from monolib.runtime import LibraryLoadError, MonolibError
from monolib.abi.binfmt import find_container, parse_binary
from monolib.abi.container import Container


def container_bytes() -> bytes:
    f = tiny_factory()
    from monolib.abi.container import pack_container

    return pack_container(
        [(f.type_key, f.save_sections()), ("library", {})], import_tree=([0, 1, 1], [1])
    )


def make_pe(blob: bytes) -> bytes:
    """A minimal PE32+ DLL: DOS header, COFF header, optional header, one section."""
    lfanew, opt_size = 64, 240
    dos = b"MZ" + bytes(0x3A) + struct.pack("<I", lfanew)
    coff = b"PE\0\0" + struct.pack("<HHIIIHH", 0x8664, 1, 0, 0, 0, opt_size, 0x2022)
    opt = struct.pack("<H", 0x20B) + bytes(opt_size - 2)
    raw_off = 4096
    sec = struct.pack(
        "<8sIIIIIIHHI", b".monolib", len(blob), 0x3000, len(blob), raw_off, 0, 0, 0, 0, 0x40000040
    )
    head = dos + coff + opt + sec
    return head + bytes(raw_off - len(head)) + blob


def make_macho(blob: bytes) -> bytes:
    """A minimal 64-bit arm64 dylib: header, one LC_SEGMENT_64 with one section."""
    off = 16384
    sect = struct.pack(
        "<16s16sQQIIIIIIII",
        b"__monolib",
        b"__DATA_CONST",
        0x8000,
        len(blob),
        off,
        14,
        0,
        0,
        0,
        0,
        0,
        0,
    )
    seg = struct.pack(
        "<II16sQQQQiiII",
        0x19,
        72 + 80,
        b"__DATA_CONST",
        0x8000,
        len(blob),
        off,
        len(blob),
        3,
        3,
        1,
        0x10,
    )
    head = struct.pack("<IiiIIIII", 0xFEEDFACF, 0x0100000C, 0, 6, 1, len(seg + sect), 0, 0)
    head += seg + sect
    return head + bytes(off - len(head)) + blob


@pytest.mark.parametrize(
    "make, fmt, machine", [(make_pe, "PE", "x86_64"), (make_macho, "Mach-O", "aarch64")]
)
def test_minimal_files_are_read(make, fmt, machine):
    blob = container_bytes()
    data = make(blob)
    off, size, info = find_container(data, "f")
    assert (info.format, info.machine, info.bits) == (fmt, machine, 64)
    assert data[off : off + size] == blob
    assert Container(data[off : off + size]).modules[0].type_key == "graph_executor_factory"


def test_pe_and_macho_errors():
    blob = container_bytes()
    pe = bytearray(make_pe(blob))
    struct.pack_into("<H", pe, 64 + 4 + 18, 0x22)  # Characteristics without IMAGE_FILE_DLL
    with pytest.raises(LibraryLoadError, match="not a DLL"):
        parse_binary(bytes(pe), "x.dll")
    with pytest.raises(LibraryLoadError, match="truncated PE"):
        parse_binary(make_pe(blob)[:5000], "x.dll")
    with pytest.raises(LibraryLoadError, match="fat"):
        parse_binary(b"\xca\xfe\xba\xbe" + bytes(60), "x.dylib")
    with pytest.raises(LibraryLoadError, match="truncated Mach-O"):
        parse_binary(make_macho(blob)[:17000], "x.dylib")
    mo = bytearray(make_macho(blob))
    struct.pack_into("<I", mo, 12, 2)  # MH_EXECUTE
    with pytest.raises(LibraryLoadError, match="not a dylib"):
        parse_binary(bytes(mo), "x.dylib")


@pytest.mark.parametrize("fmt", ["ELF", "PE", "Mach-O"])
def test_random_header_damage_raises_only_monolib_errors(fmt, tiny_lib):
    blob = container_bytes()
    data = {
        "ELF": lambda: Path(tiny_lib).read_bytes(),
        "PE": lambda: make_pe(blob),
        "Mach-O": lambda: make_macho(blob),
    }[fmt]()
    rng = np.random.default_rng(7)
    head = 512 if fmt != "ELF" else 64
    shoff = struct.unpack_from("<Q", data, 0x28)[0] if fmt == "ELF" else None
    for i in range(400):
        bad = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            if shoff is not None and i % 2:  # the ELF section table at the end
                pos = int(rng.integers(shoff, len(data)))
            else:
                pos = int(rng.integers(0, head))
            bad[pos] = int(rng.integers(0, 256))
        cut = len(bad) if i % 5 else int(rng.integers(0, len(bad)))
        damaged = bytes(bad[:cut])
        try:
            off, size, _ = find_container(damaged, "fuzz")
            Container(damaged[off : off + size], source="fuzz")
        except MonolibError:
            pass


def test_random_trailer_damage_is_never_verified(tiny_lib):
    """1-3 random bytes of the code-digest trailer (JSON or footer) changed, or the file
    cut inside it (400 cases): ``check_code`` never raises and never says "verified",
    and ``require`` raises an IntegrityError (or, for a cut, refuses the missing
    digest the container's flag promised). Pure Python: no dlopen."""
    from monolib.runtime import IntegrityError
    from monolib.runtime.integrity import check_code, read_trailer, require

    data = Path(tiny_lib).read_bytes()
    body = read_trailer(data)[1]
    off, size, _ = find_container(data, "lib")
    container = Container(data[off : off + size])
    assert check_code(data, container, off, container.flags).status == "verified"
    rng = np.random.default_rng(15)
    statuses = set()
    for i in range(400):
        bad = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(body, len(data)))
            bad[pos] ^= int(rng.integers(1, 256))
        if i % 8 == 0:  # a cut inside the trailer (the body intact)
            bad = bad[: int(rng.integers(body, len(data)))]
        report = check_code(bytes(bad), container, off, container.flags)
        statuses.add(report.status)
        assert report.status != "verified", f"case {i}: damage not seen"
        with pytest.raises(IntegrityError):
            require(report, "fuzz")
    assert statuses <= {"malformed", "missing"}
