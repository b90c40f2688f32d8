"""Read a Mach-O (macOS ``.dylib``) file's segments and sections without loading it.

Layout from Apple's ``<mach-o/loader.h>``: a 32-byte ``mach_header_64`` (magic
0xFEEDFACF, little endian), then ``ncmds`` load commands; ``LC_SEGMENT_64`` (0x19)
commands carry their ``section_64`` entries. Every segment's and section's file range
is checked to lie inside the file. Universal ("fat") and 32-bit files are refused.
"""

from __future__ import annotations

import logging
import struct

from .common import ElfInfo, ElfSection, ElfSegment, c_string, fail, fixed_name, past_end, unpack

__all__ = [
    "MACHO_CPUS",
    "VM_PROT_EXECUTE",
    "VM_PROT_READ",
    "VM_PROT_WRITE",
    "macho_symbols",
    "parse_macho",
]

logger = logging.getLogger(__name__)

MACHO_CPUS = {0x01000007: "x86_64", 0x0100000C: "aarch64"}
VM_PROT_READ, VM_PROT_WRITE, VM_PROT_EXECUTE = 1, 2, 4
_HEADER = struct.Struct("<IiiIIIII")
_LOAD = struct.Struct("<II")
_SEGMENT = struct.Struct("<II16sQQQQiiII")
_SECTION = struct.Struct("<16s16sQQIIIIIIII")
_LC_SEGMENT_64 = 0x19
_MH_DYLIB = 6
_S_ZEROFILL_TYPES = (0x1, 0xC, 0x12)  # S_ZEROFILL, S_GB_ZEROFILL, S_THREAD_LOCAL_ZEROFILL


def _unpack(st: struct.Struct, buf, offset: int, path: str, what: str) -> tuple:
    return unpack(st, buf, offset, path, what, "Mach-O")


def _segment(buf, pos: int, path: str, sections: list, segments: list) -> None:
    seg = _unpack(_SEGMENT, buf, pos, path, "LC_SEGMENT_64")
    cmdsize, fileoff, filesize, initprot, nsects = seg[1], seg[5], seg[6], seg[8], seg[9]
    if _SEGMENT.size + nsects * _SECTION.size > cmdsize:  # before reading any of them
        raise fail(
            path,
            f"Mach-O segment {fixed_name(seg[2])!r} claims {nsects} sections, its load "
            f"command holds {max(cmdsize - _SEGMENT.size, 0) // _SECTION.size}",
        )
    if fileoff + filesize > len(buf):
        raise past_end(path, "Mach-O", f"segment {fixed_name(seg[2])!r}", fileoff + filesize,
                       len(buf))
    segments.append(ElfSegment(_LC_SEGMENT_64, initprot, fileoff, filesize))
    for j in range(nsects):
        sec = _unpack(
            _SECTION,
            buf,
            pos + _SEGMENT.size + j * _SECTION.size,
            path,
            f"section {j} of segment {fixed_name(seg[2])!r}",
        )
        addr, size, offset, flags = sec[2], sec[3], sec[4], sec[8]
        if (flags & 0xFF) not in _S_ZEROFILL_TYPES and offset + size > len(buf):
            raise past_end(path, "Mach-O", f"section {fixed_name(sec[0])!r}", offset + size,
                           len(buf))
        sections.append(ElfSection(fixed_name(sec[0]), flags & 0xFF, initprot, addr, offset, size))


def parse_macho(buf, path: str = "<memory>") -> ElfInfo:
    """Parse a 64-bit little-endian Mach-O dylib held in ``buf``.

    Returns
    -------
    ElfInfo
        ``format="Mach-O"``; sections carry their segment's initial protection
        (``VM_PROT_*``) as ``flags``; segments likewise.

    Raises
    ------
    LibraryLoadError
        Fat or 32-bit file, not a dylib, or a command/segment/section lies outside
        the file.
    """
    magic = bytes(buf[:4])
    if magic == b"\xca\xfe\xba\xbe":
        raise fail(path, "universal (fat) Mach-O files are not supported: thin it with lipo")
    if magic != b"\xcf\xfa\xed\xfe":
        raise fail(path, "not a 64-bit little-endian Mach-O file")
    _, cpu, _, filetype, ncmds, sizeofcmds, _, _ = _unpack(_HEADER, buf, 0, path, "header")
    if filetype != _MH_DYLIB:
        raise fail(path, f"Mach-O file of type {filetype} is not a dylib (MH_DYLIB = 6)")
    if _HEADER.size + sizeofcmds > len(buf):
        raise fail(path, "truncated Mach-O file: load commands run past the end")
    sections: list = []
    segments: list = []
    pos = _HEADER.size
    for i in range(ncmds):
        cmd, size = _unpack(_LOAD, buf, pos, path, f"load command {i}")
        if size < _LOAD.size or pos + size > _HEADER.size + sizeofcmds:
            raise fail(path, f"Mach-O load command {i} has invalid size {size}")
        if cmd == _LC_SEGMENT_64:
            _segment(buf, pos, path, sections, segments)
        pos += size
    return ElfInfo(64, MACHO_CPUS.get(cpu, f"cpu {cpu:#x}"), sections, segments, format="Mach-O")


_LC_SYMTAB = 0x2
_SYMTAB = struct.Struct("<IIIIII")
_NLIST = struct.Struct("<IBBHQ")
_N_STAB, _N_TYPE, _N_SECT = 0xE0, 0x0E, 0x0E


def macho_symbols(buf, info: ElfInfo, path: str = "<memory>") -> dict[str, tuple[int, int]]:
    """``{name: (file offset, bytes to the end of its section)}`` of the symbols
    defined in a section (``N_SECT``) of a Mach-O file's ``LC_SYMTAB`` (names keep
    their leading ``_``). ``info`` is :func:`parse_macho`'s result for ``buf``.

    Raises
    ------
    LibraryLoadError
        The symbol or string table lies outside the file.
    """
    _, _, _, _, ncmds, _, _, _ = _HEADER.unpack_from(buf, 0)
    pos, out = _HEADER.size, {}
    for i in range(ncmds):
        cmd, size = _unpack(_LOAD, buf, pos, path, f"load command {i}")
        if cmd == _LC_SYMTAB:
            _, _, symoff, nsyms, stroff, strsize = _unpack(_SYMTAB, buf, pos, path, "LC_SYMTAB")
            if symoff + nsyms * _NLIST.size > len(buf) or stroff + strsize > len(buf):
                raise fail(path, "truncated Mach-O file: LC_SYMTAB tables run past the end")
            strings = bytes(buf[stroff : stroff + strsize])
            for j in range(nsyms):
                strx, ntype, nsect, _, value = _NLIST.unpack_from(buf, symoff + j * _NLIST.size)
                if ntype & _N_STAB or ntype & _N_TYPE != _N_SECT:
                    continue
                if not 0 < nsect <= len(info.sections) or strx >= len(strings):
                    continue
                sec = info.sections[nsect - 1]
                if sec.type in _S_ZEROFILL_TYPES or not sec.addr <= value < sec.addr + sec.size:
                    continue
                out.setdefault(c_string(strings, strx), (sec.offset + value - sec.addr, sec.addr + sec.size - value))
        pos += size
    return out
