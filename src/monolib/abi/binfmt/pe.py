"""Read a PE (Windows ``.dll``) file's section table without loading it.

Layout from Microsoft's "PE Format" specification: the DOS header's ``e_lfanew``
(offset 0x3C) points at ``"PE\\0\\0"``, then the 20-byte COFF header, the optional
header (magic 0x20B = PE32+, 0x10B = PE32), then 40-byte section headers. Every
section's raw data range is checked to lie inside the file.
"""

from __future__ import annotations

import logging
import struct

from .common import ElfInfo, ElfSection, ElfSegment, c_string, fail, fixed_name, past_end, unpack

__all__ = [
    "PE_MACHINES",
    "SCN_MEM_EXECUTE",
    "SCN_MEM_READ",
    "SCN_MEM_WRITE",
    "parse_pe",
    "pe_exports",
]

logger = logging.getLogger(__name__)

PE_MACHINES = {0x8664: "x86_64", 0xAA64: "aarch64", 0x14C: "x86", 0x1C4: "arm"}
SCN_MEM_EXECUTE, SCN_MEM_READ, SCN_MEM_WRITE = 0x20000000, 0x40000000, 0x80000000
_COFF = struct.Struct("<HHIIIHH")
_SECTION = struct.Struct("<8sIIIIIIHHI")
_DLL = 0x2000  # IMAGE_FILE_DLL


_U16, _U32, _U32X2 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<II")


def _unpack(st: struct.Struct, buf, offset: int, path: str, what: str) -> tuple:
    return unpack(st, buf, offset, path, what, "PE")


def parse_pe(buf, path: str = "<memory>") -> ElfInfo:
    """Parse the headers and section table of a PE DLL held in ``buf``.

    Returns
    -------
    ElfInfo
        ``format="PE"``; each section's ``flags`` are its PE characteristics and
        ``offset``/``size`` its raw data in the file (``size`` = min(VirtualSize,
        SizeOfRawData)); one segment per section with the same flags.

    Raises
    ------
    LibraryLoadError
        Not a PE DLL, or a header or section lies outside the file.
    """
    if len(buf) < 0x40 or bytes(buf[:2]) != b"MZ":
        raise fail(path, "not a PE file (no MZ header)")
    (lfanew,) = struct.unpack_from("<I", buf, 0x3C)
    if bytes(buf[lfanew : lfanew + 4]) != b"PE\0\0":
        raise fail(path, f"not a PE file: no PE signature at offset {lfanew}")
    machine, nsec, _, _, _, opt_size, chars = _unpack(_COFF, buf, lfanew + 4, path, "COFF header")
    if not chars & _DLL:
        raise fail(path, "PE file is not a DLL")
    (opt_magic,) = _unpack(_U16, buf, lfanew + 24, path, "optional header")
    bits = {0x20B: 64, 0x10B: 32}.get(opt_magic)
    if bits is None:
        raise fail(path, f"PE optional header has unknown magic {opt_magic:#x}")
    table = lfanew + 24 + opt_size
    sections, segments = [], []
    for i in range(nsec):
        raw = _unpack(_SECTION, buf, table + i * _SECTION.size, path, f"section header {i}")
        name = fixed_name(raw[0])
        vsize, vaddr, rsize, roff, flags = raw[1], raw[2], raw[3], raw[4], raw[9]
        if rsize and roff + rsize > len(buf):
            raise past_end(path, "PE", f"section {name!r}", roff + rsize, len(buf))
        size = min(vsize, rsize) if vsize else rsize
        sections.append(ElfSection(name, 0, flags, vaddr, roff, size))
        segments.append(ElfSegment(0, flags, roff, rsize))
    machine_name = PE_MACHINES.get(machine, f"machine {machine:#x}")
    return ElfInfo(bits, machine_name, sections, segments, format="PE")


_EXPORT_DIR = struct.Struct("<IIHHIIIIIII")


def _rva_to_offset(info: ElfInfo, rva: int, need: int) -> tuple[int, int] | None:
    """(file offset, bytes left in its section) of ``rva``, if ``need`` bytes fit."""
    for sec in info.sections:
        if sec.addr <= rva and rva + need <= sec.addr + sec.size:
            return sec.offset + rva - sec.addr, sec.addr + sec.size - rva
    return None


def pe_exports(buf, info: ElfInfo, path: str = "<memory>") -> dict[str, tuple[int, int]]:
    """``{name: (file offset, bytes to the end of its section)}`` of the named
    exports of a PE file (its export directory, data directory 0), for exports whose
    address lies in a section's raw data. ``info`` is :func:`parse_pe`'s result.

    Raises
    ------
    LibraryLoadError
        The export directory or its tables lie outside the file.
    """
    (lfanew,) = struct.unpack_from("<I", buf, 0x3C)
    opt = lfanew + 24
    dirs = opt + (112 if info.bits == 64 else 96)
    (count,) = _unpack(_U32, buf, dirs - 4, path, "data directory count")
    if count < 1:
        return {}
    rva, size = _unpack(_U32X2, buf, dirs, path, "export data directory")
    if not rva or not size:
        return {}
    where = _rva_to_offset(info, rva, _EXPORT_DIR.size)
    if where is None:
        raise fail(path, f"PE export directory at RVA {rva:#x} lies outside every section")
    ed = _unpack(_EXPORT_DIR, buf, where[0], path, "export directory")
    nfuncs, nnames, funcs, names, ords = ed[6], ed[7], ed[8], ed[9], ed[10]
    tables = [(funcs, 4 * nfuncs), (names, 4 * nnames), (ords, 2 * nnames)]
    located = [_rva_to_offset(info, t, n) if n else (0, 0) for t, n in tables]
    if None in located:
        raise fail(path, "PE export tables lie outside every section (corrupt export directory)")
    (f_off, _), (n_off, _), (o_off, _) = located
    out: dict[str, tuple[int, int]] = {}
    for i in range(nnames):
        (name_rva,) = struct.unpack_from("<I", buf, n_off + 4 * i)
        (ordinal,) = struct.unpack_from("<H", buf, o_off + 2 * i)
        name_at = _rva_to_offset(info, name_rva, 1)
        if ordinal >= nfuncs or name_at is None:
            continue
        name = c_string(bytes(buf[name_at[0] : name_at[0] + min(name_at[1], 4096)]), 0)
        (func_rva,) = struct.unpack_from("<I", buf, f_off + 4 * ordinal)
        target = _rva_to_offset(info, func_rva, 1)
        if target is not None:
            out.setdefault(name, target)
    return out
