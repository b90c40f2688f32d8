"""Read an ELF shared object's headers without loading it.

Parses the ELF header, the program headers and the section headers with ``struct``
(layout from the System V ABI / ELF specification, ``elf(5)``), checks that every
range they name lies inside the file and that the program headers (what the dynamic
loader maps) agree with the section headers, and reads the symbol tables
(``.symtab``, ``.dynsym``). :mod:`monolib.abi.binfmt` dispatches here by magic.
"""

from __future__ import annotations

import logging
import struct

from .common import ElfInfo, ElfSection, ElfSegment, c_string, fail, past_end, unpack

__all__ = [
    "ELF_MAGIC",
    "MACHINES",
    "PF_R",
    "PF_W",
    "PF_X",
    "PT_DYNAMIC",
    "PT_GNU_STACK",
    "PT_LOAD",
    "SHF_ALLOC",
    "SHF_EXECINSTR",
    "SHF_WRITE",
    "SHT_NOBITS",
    "dynsym_exports",
    "elf_symbols",
    "parse_elf",
]

logger = logging.getLogger(__name__)

ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
SHT_NOBITS = 8
_SHN_XINDEX = 0xFFFF
MACHINES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv"}

# per ELF class: (file header after e_ident, section header, program header,
# indices of p_offset, p_filesz, p_flags, p_vaddr, p_memsz in the program header tuple)
_LAYOUT = {
    1: ("HHIIIIIHHHHHH", "IIIIIIIIII", "IIIIIIII", (1, 4, 6, 2, 5)),
    2: ("HHIQQQIHHHHHH", "IIQQQQIIQQ", "IIQQQQQQ", (2, 5, 1, 3, 6)),
}


# section flags (sh_flags) and segment flags (p_flags), from elf(5)
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
PF_X, PF_W, PF_R = 0x1, 0x2, 0x4
PT_LOAD, PT_DYNAMIC, PT_GNU_STACK = 1, 2, 0x6474E551


def _read_segments(buf, path, end, hdr, ph_fmt, idx) -> list[ElfSegment]:
    phoff, phentsize, phnum = hdr[4], hdr[8], hdr[9]
    ph_struct = struct.Struct(end + ph_fmt)
    if phnum and phentsize != ph_struct.size:
        raise fail(path, f"ELF program header size {phentsize} is invalid")
    segments = []
    for i in range(phnum):
        ph = unpack(ph_struct, buf, phoff + i * phentsize, path, f"program header {i}", "ELF")
        seg = ElfSegment(ph[0], ph[idx[2]], ph[idx[0]], ph[idx[1]], ph[idx[3]], ph[idx[4]])
        if seg.offset + seg.filesz > len(buf):
            raise past_end(path, "ELF", f"segment {i}", seg.offset + seg.filesz, len(buf))
        segments.append(seg)
    return segments


def _read_sections(buf, path, end, hdr, sh_fmt) -> list[ElfSection]:
    shoff, shentsize, shnum, shstrndx = hdr[5], hdr[10], hdr[11], hdr[12]
    sh_struct = struct.Struct(end + sh_fmt)
    if shoff == 0:
        return []
    if shentsize != sh_struct.size:
        raise fail(path, f"ELF section header size {shentsize} is invalid")
    first = unpack(sh_struct, buf, shoff, path, "section header 0", "ELF")
    if shnum == 0:  # extended numbering: the count lives in section 0's sh_size
        shnum = first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    if shoff + shnum * shentsize > len(buf):
        raise fail(
            path,
            f"truncated ELF file: {shnum} section headers at {shoff} "
            f"run past the end ({len(buf)} bytes)",
        )
    raw = [
        unpack(sh_struct, buf, shoff + i * shentsize, path, f"section {i}", "ELF")
        for i in range(shnum)
    ]
    for i, sh in enumerate(raw):
        if sh[1] != SHT_NOBITS and sh[4] + sh[5] > len(buf):
            raise past_end(path, "ELF", f"section {i}", sh[4] + sh[5], len(buf))
    if not 0 <= shstrndx < shnum:
        raise fail(path, f"ELF section name table index {shstrndx} is out of range")
    strtab = raw[shstrndx]
    names = bytes(buf[strtab[4] : strtab[4] + strtab[5]])
    return [ElfSection(c_string(names, sh[0]), *sh[1:7]) for sh in raw]


def parse_elf(buf, path: str = "<memory>") -> ElfInfo:
    """Parse and check an ELF shared object held in ``buf`` (bytes, mmap, memoryview).

    Raises
    ------
    LibraryLoadError
        Not an ELF file, not a shared object, or a header/segment/section range lies
        outside the file (truncated). The message names ``path``.
    """
    if len(buf) < 16 or bytes(buf[:4]) != ELF_MAGIC:
        head = bytes(buf[:16])
        raise fail(path, f"not an ELF shared library (starts with {head!r})")
    bits_code, data_code = buf[4], buf[5]
    if bits_code not in _LAYOUT or data_code not in (1, 2):
        raise fail(path, f"ELF header has invalid class {bits_code} or byte order {data_code}")
    end = "<" if data_code == 1 else ">"
    hdr_fmt, sh_fmt, ph_fmt, ph_idx = _LAYOUT[bits_code]
    hdr = unpack(struct.Struct(end + hdr_fmt), buf, 16, path, "ELF header", "ELF")
    if hdr[0] != _ET_DYN:
        raise fail(path, f"ELF file of type {hdr[0]} is not a shared library (ET_DYN = 3)")
    segments = _read_segments(buf, path, end, hdr, ph_fmt, ph_idx)
    sections = _read_sections(buf, path, end, hdr, sh_fmt)
    _check_mapping(path, sections, segments)
    machine = MACHINES.get(hdr[1], f"machine {hdr[1]}")
    return ElfInfo(32 * bits_code, machine, sections, segments, "ELF", end)


def _inside(sec: ElfSection, seg: ElfSegment, nobits: bool) -> bool:
    """``sec`` lies in ``seg`` in memory and, unless NOBITS, at the same place in
    the file (file offset - address equal for both)."""
    in_memory = seg.vaddr <= sec.addr and sec.addr + sec.size <= seg.vaddr + seg.memsz
    if nobits:
        return in_memory
    in_file = seg.offset <= sec.offset and sec.offset + sec.size <= seg.offset + seg.filesz
    return in_memory and in_file and sec.offset - seg.offset == sec.addr - seg.vaddr


_SHT_DYNAMIC = 6
_RIGHTS = {PF_R: "read", PF_W: "write", PF_X: "execute"}


def _check_mapping(path: str, sections: list[ElfSection], segments: list[ElfSegment]) -> None:
    """The program headers (what the dynamic loader maps) agree with the section
    headers (what the linker laid out): every allocated section lies in a PT_LOAD
    segment at the same file offset and address, with its segment giving the write
    and execute rights it needs, and PT_DYNAMIC lies in a PT_LOAD. A damaged program
    header that would make ``dlopen`` map too little, or map code without execute
    rights, and crash the process, is refused here first. (A file without section
    headers is not checked: the loader reads program headers only.)"""
    loads = [s for s in segments if s.type == PT_LOAD]
    if not loads:
        raise fail(path, "ELF library has no PT_LOAD segment: nothing to map (damaged)")
    for seg in loads:
        if seg.filesz > seg.memsz:
            raise fail(path, f"ELF PT_LOAD at file offset {seg.offset}: filesz > memsz (damaged)")
    need = {SHF_ALLOC: PF_R, SHF_WRITE: PF_W, SHF_EXECINSTR: PF_X}
    for sec in sections:
        if not sec.flags & SHF_ALLOC or sec.size == 0 or sec.flags & 0x400:  # SHF_TLS
            continue
        nobits = sec.type == SHT_NOBITS
        home = next((g for g in loads if _inside(sec, g, nobits)), None)
        if home is None:
            raise fail(
                path,
                f"ELF section {sec.name!r} (address {sec.addr:#x}, {sec.size} bytes) lies "
                "in no loadable segment: program headers damaged",
            )
        for flag, right in need.items():
            if sec.flags & flag and not home.flags & right:
                raise fail(
                    path,
                    f"ELF section {sec.name!r} needs {_RIGHTS[right]} "
                    "rights its segment lacks: program headers damaged",
                )
    for seg in segments:
        if seg.type == PT_DYNAMIC and not any(
            g.vaddr <= seg.vaddr and seg.vaddr + seg.memsz <= g.vaddr + g.memsz for g in loads
        ):
            raise fail(path, "ELF PT_DYNAMIC lies in no loadable segment: program headers damaged")
    # the loader reads the dynamic table through PT_DYNAMIC alone: one pointing
    # anywhere but the linker's .dynamic section feeds it garbage (a crash in dlopen)
    dyn_segs = [s for s in segments if s.type == PT_DYNAMIC]
    dyn_secs = [s for s in sections if s.type == _SHT_DYNAMIC]
    if dyn_secs and (
        len(dyn_segs) != 1
        or (dyn_segs[0].vaddr, dyn_segs[0].offset, dyn_segs[0].filesz)
        != (dyn_secs[0].addr, dyn_secs[0].offset, dyn_secs[0].size)
    ):
        raise fail(path, "ELF PT_DYNAMIC does not match the .dynamic section: program "
                   "headers damaged")


_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_SYM = {32: "IIIBBH", 64: "IBBHQQ"}  # Elf32_Sym / Elf64_Sym
_SHN_UNDEF = 0


def _symbols(buf, info: ElfInfo, types: tuple[int, ...]):
    """``(name, binding, section index, value, size)`` of every named entry of the
    symbol tables of ``types`` (whose ranges :func:`parse_elf` checked)."""
    fmt = struct.Struct(info.byteorder + _SYM[info.bits])
    for sec in info.sections:
        if sec.type not in types or not 0 <= sec.link < len(info.sections):
            continue
        strtab = info.sections[sec.link]
        strings = bytes(buf[strtab.offset : strtab.offset + strtab.size])
        for pos in range(sec.offset, sec.offset + sec.size - fmt.size + 1, fmt.size):
            sym = fmt.unpack_from(buf, pos)
            if info.bits == 32:  # st_name, st_value, st_size, st_info, st_other, st_shndx
                name_off, value, size, bind_info, shndx = sym[0], sym[1], sym[2], sym[3], sym[5]
            else:  # st_name, st_info, st_other, st_shndx, st_value, st_size
                name_off, bind_info, shndx, value, size = sym[0], sym[1], sym[3], sym[4], sym[5]
            if name_off < len(strings):
                yield c_string(strings, name_off), bind_info >> 4, shndx, value, size


def dynsym_exports(buf, info: ElfInfo) -> list[str]:
    """Names of the defined global/weak symbols of an ELF file's ``.dynsym`` (what
    ``dlsym`` can find), read from the file, sorted.

    ``info`` is :func:`parse_elf`'s result for ``buf`` (whose ranges it checked).
    """
    return sorted(
        name
        for name, bind, shndx, _, _ in _symbols(buf, info, (_SHT_DYNSYM,))
        if shndx != _SHN_UNDEF and bind in (1, 2)  # STB_GLOBAL, STB_WEAK
    )


def elf_symbols(buf, info: ElfInfo) -> dict[str, tuple[int, int]]:
    """``{name: (file offset, size)}`` of the defined ELF symbols (``.symtab`` and
    ``.dynsym``) whose bytes lie in the file; a zero ``st_size`` runs to the end of
    its section. ``info`` is :func:`parse_elf`'s result for ``buf``."""
    nsec = len(info.sections)
    out: dict[str, tuple[int, int]] = {}
    for name, _, shndx, value, sym_size in _symbols(buf, info, (_SHT_SYMTAB, _SHT_DYNSYM)):
        if not 0 < shndx < nsec:
            continue
        home = info.sections[shndx]
        if home.type == SHT_NOBITS or not home.addr <= value < home.addr + home.size:
            continue
        left = home.addr + home.size - value
        out.setdefault(name, (home.offset + value - home.addr, min(sym_size or left, left)))
    return out
