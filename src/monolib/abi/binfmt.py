"""Find the container inside a library file by reading it, never by loading it.

Parses the ELF header, the program headers and the section headers with ``struct``
(layout from the System V ABI / ELF specification, ``elf(5)``), checks that every
range they name lies inside the file, and finds the section named ``.monolib``
(PE ``.dll`` and Mach-O ``.dylib`` files: see :mod:`.pe` and :mod:`.macho`).
``load_module`` runs this BEFORE ``dlopen`` so a truncated or foreign file is a
:class:`LibraryLoadError`, not a crash in the dynamic loader; ``monolib inspect``
uses it to read a library without running any of its code. A file that starts with
the container magic is accepted as a bare container (offset 0).
"""

from __future__ import annotations

import logging
import platform
import struct
import sys
from typing import NamedTuple

from .container import MAGIC
from ..errors import LibraryLoadError

__all__ = [
    "SECTION_NAME",
    "SECTION_NAMES",
    "ElfInfo",
    "ElfSection",
    "ElfSegment",
    "exported_symbols",
    "find_container",
    "find_symbol",
    "host_format",
    "host_machine",
    "parse_binary",
    "parse_elf",
]

logger = logging.getLogger(__name__)

SECTION_NAME = ".monolib"
#: The container section's name per object format (Mach-O: section of __DATA_CONST).
SECTION_NAMES = {"ELF": ".monolib", "PE": ".monolib", "Mach-O": "__monolib"}
_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3
_SHT_NOBITS = 8
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


class ElfSection(NamedTuple):
    """One section header: name, type, flags, virtual address, file offset, size."""

    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int = 0


class ElfSegment(NamedTuple):
    """One program header: type, flags (PF_R/W/X), file offset and size, virtual
    address and size in memory (ELF only; 0 for PE and Mach-O)."""

    type: int
    flags: int
    offset: int
    filesz: int
    vaddr: int = 0
    memsz: int = 0


class ElfInfo(NamedTuple):
    """What a parser read: class (32/64), machine, sections, segments, and the
    object format (``"ELF"``, ``"PE"``, ``"Mach-O"``; flags are the format's own)."""

    bits: int
    machine: str
    sections: list[ElfSection]
    segments: list[ElfSegment]
    format: str = "ELF"
    byteorder: str = "<"

    def section(self, name: str) -> ElfSection | None:
        """The first section called ``name``, or None."""
        return next((s for s in self.sections if s.name == name), None)


def _fail(path: str, what: str) -> LibraryLoadError:
    return LibraryLoadError(f"{path}: {what}")


def _unpack(buf, fmt: str, offset: int, path: str, what: str) -> tuple:
    st = struct.Struct(fmt)
    if offset < 0 or offset + st.size > len(buf):
        raise _fail(
            path,
            f"truncated ELF file: {what} at offset {offset} runs past the end ({len(buf)} bytes)",
        )
    return st.unpack_from(buf, offset)


def _read_segments(buf, path, end, hdr, ph_fmt, idx) -> list[ElfSegment]:
    phoff, phentsize, phnum = hdr[4], hdr[8], hdr[9]
    if phnum and phentsize != struct.calcsize(end + ph_fmt):
        raise _fail(path, f"ELF program header size {phentsize} is invalid")
    segments = []
    for i in range(phnum):
        ph = _unpack(buf, end + ph_fmt, phoff + i * phentsize, path, f"program header {i}")
        seg = ElfSegment(ph[0], ph[idx[2]], ph[idx[0]], ph[idx[1]], ph[idx[3]], ph[idx[4]])
        if seg.offset + seg.filesz > len(buf):
            raise _fail(
                path,
                f"truncated ELF file: segment {i} needs bytes up to "
                f"{seg.offset + seg.filesz}, the file has {len(buf)}",
            )
        segments.append(seg)
    return segments


def _read_sections(buf, path, end, hdr, sh_fmt) -> list[ElfSection]:
    shoff, shentsize, shnum, shstrndx = hdr[5], hdr[10], hdr[11], hdr[12]
    sh_struct = end + sh_fmt
    if shoff == 0:
        return []
    if shentsize != struct.calcsize(sh_struct):
        raise _fail(path, f"ELF section header size {shentsize} is invalid")
    first = _unpack(buf, sh_struct, shoff, path, "section header 0")
    if shnum == 0:  # extended numbering: the count lives in section 0's sh_size
        shnum = first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    if shoff + shnum * shentsize > len(buf):
        raise _fail(
            path,
            f"truncated ELF file: {shnum} section headers at {shoff} "
            f"run past the end ({len(buf)} bytes)",
        )
    raw = [
        _unpack(buf, sh_struct, shoff + i * shentsize, path, f"section {i}") for i in range(shnum)
    ]
    for i, sh in enumerate(raw):
        if sh[1] != _SHT_NOBITS and sh[4] + sh[5] > len(buf):
            raise _fail(
                path,
                f"truncated ELF file: section {i} needs bytes up to "
                f"{sh[4] + sh[5]}, the file has {len(buf)}",
            )
    if not 0 <= shstrndx < shnum:
        raise _fail(path, f"ELF section name table index {shstrndx} is out of range")
    strtab = raw[shstrndx]
    names = bytes(buf[strtab[4] : strtab[4] + strtab[5]])

    def name_of(off: int) -> str:
        stop = names.find(b"\0", off)
        return names[off : stop if stop >= 0 else len(names)].decode("utf-8", "replace")

    return [ElfSection(name_of(sh[0]), sh[1], sh[2], sh[3], sh[4], sh[5], sh[6]) for sh in raw]


def parse_elf(buf, path: str = "<memory>") -> ElfInfo:
    """Parse and check an ELF shared object held in ``buf`` (bytes, mmap, memoryview).

    Raises
    ------
    LibraryLoadError
        Not an ELF file, not a shared object, or a header/segment/section range lies
        outside the file (truncated). The message names ``path``.
    """
    if len(buf) < 16 or bytes(buf[:4]) != _ELF_MAGIC:
        head = bytes(buf[:16])
        raise _fail(path, f"not an ELF shared library (starts with {head!r})")
    bits_code, data_code = buf[4], buf[5]
    if bits_code not in _LAYOUT or data_code not in (1, 2):
        raise _fail(path, f"ELF header has invalid class {bits_code} or byte order {data_code}")
    end = "<" if data_code == 1 else ">"
    hdr_fmt, sh_fmt, ph_fmt, ph_idx = _LAYOUT[bits_code]
    hdr = _unpack(buf, end + hdr_fmt, 16, path, "ELF header")
    if hdr[0] != _ET_DYN:
        raise _fail(path, f"ELF file of type {hdr[0]} is not a shared library (ET_DYN = 3)")
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
        raise _fail(path, "ELF library has no PT_LOAD segment: nothing to map (damaged)")
    for seg in loads:
        if seg.filesz > seg.memsz:
            raise _fail(path, f"ELF PT_LOAD at file offset {seg.offset}: filesz > memsz (damaged)")
    need = {SHF_ALLOC: PF_R, SHF_WRITE: PF_W, SHF_EXECINSTR: PF_X}
    for sec in sections:
        if not sec.flags & SHF_ALLOC or sec.size == 0 or sec.flags & 0x400:  # SHF_TLS
            continue
        nobits = sec.type == _SHT_NOBITS
        home = next((g for g in loads if _inside(sec, g, nobits)), None)
        if home is None:
            raise _fail(
                path,
                f"ELF section {sec.name!r} (address {sec.addr:#x}, {sec.size} bytes) lies "
                "in no loadable segment: program headers damaged",
            )
        for flag, right in need.items():
            if sec.flags & flag and not home.flags & right:
                raise _fail(
                    path,
                    f"ELF section {sec.name!r} needs {_RIGHTS[right]} "
                    "rights its segment lacks: program headers damaged",
                )
    for seg in segments:
        if seg.type == PT_DYNAMIC and not any(
            g.vaddr <= seg.vaddr and seg.vaddr + seg.memsz <= g.vaddr + g.memsz for g in loads
        ):
            raise _fail(path, "ELF PT_DYNAMIC lies in no loadable segment: program headers damaged")
    # the loader reads the dynamic table through PT_DYNAMIC alone: one pointing
    # anywhere but the linker's .dynamic section feeds it garbage (a crash in dlopen)
    dyn_segs = [s for s in segments if s.type == PT_DYNAMIC]
    dyn_secs = [s for s in sections if s.type == _SHT_DYNAMIC]
    if dyn_secs and (
        len(dyn_segs) != 1
        or (dyn_segs[0].vaddr, dyn_segs[0].offset, dyn_segs[0].filesz)
        != (dyn_secs[0].addr, dyn_secs[0].offset, dyn_secs[0].size)
    ):
        raise _fail(path, "ELF PT_DYNAMIC does not match the .dynamic section: program "
                    "headers damaged")


_SHT_DYNSYM = 11
_SYM = {32: "IIIBBH", 64: "IBBHQQ"}  # Elf32_Sym / Elf64_Sym
_SHN_UNDEF = 0


def exported_symbols(buf, info: ElfInfo) -> list[str] | None:
    """Names of the defined global/weak symbols of an ELF file's ``.dynsym`` (what
    ``dlsym`` can find), read from the file; None for other formats.

    ``info`` is :func:`parse_elf`'s result for ``buf`` (whose ranges it checked).
    """
    if info.format != "ELF":
        return None
    names: list[str] = []
    fmt = info.byteorder + _SYM[info.bits]
    size = struct.calcsize(fmt)
    for sec in info.sections:
        if sec.type != _SHT_DYNSYM or not 0 <= sec.link < len(info.sections):
            continue
        strtab = info.sections[sec.link]
        strings = bytes(buf[strtab.offset : strtab.offset + strtab.size])
        for pos in range(sec.offset, sec.offset + sec.size - size + 1, size):
            sym = struct.unpack_from(fmt, buf, pos)
            name_off, bind_info, shndx = (
                (sym[0], sym[3], sym[5]) if info.bits == 32 else (sym[0], sym[1], sym[3])
            )
            if shndx == _SHN_UNDEF or (bind_info >> 4) not in (1, 2) or name_off >= len(strings):
                continue
            stop = strings.find(b"\0", name_off)
            names.append(strings[name_off : stop if stop >= 0 else None].decode("utf-8", "replace"))
    return sorted(names)


_SHT_SYMTAB = 2


def _elf_symbols(buf, info: ElfInfo) -> dict[str, tuple[int, int]]:
    """``{name: (file offset, size)}`` of the defined ELF symbols (``.symtab`` and
    ``.dynsym``) whose bytes lie in the file; a zero ``st_size`` runs to the end of
    its section."""
    fmt = info.byteorder + _SYM[info.bits]
    size = struct.calcsize(fmt)
    nsec = len(info.sections)
    out: dict[str, tuple[int, int]] = {}
    for sec in info.sections:
        if sec.type not in (_SHT_SYMTAB, _SHT_DYNSYM) or not 0 <= sec.link < nsec:
            continue
        strtab = info.sections[sec.link]
        strings = bytes(buf[strtab.offset : strtab.offset + strtab.size])
        for pos in range(sec.offset, sec.offset + sec.size - size + 1, size):
            sym = struct.unpack_from(fmt, buf, pos)
            if info.bits == 32:
                name_off, value, sym_size, shndx = sym[0], sym[1], sym[2], sym[5]
            else:
                name_off, shndx, value, sym_size = sym[0], sym[3], sym[4], sym[5]
            if not 0 < shndx < nsec or name_off >= len(strings):
                continue
            home = info.sections[shndx]
            if home.type == _SHT_NOBITS or not home.addr <= value < home.addr + home.size:
                continue
            stop = strings.find(b"\0", name_off)
            name = strings[name_off : stop if stop >= 0 else None].decode("utf-8", "replace")
            left = home.addr + home.size - value
            out.setdefault(name, (home.offset + value - home.addr, min(sym_size or left, left)))
    return out


def find_symbol(buf, info: ElfInfo, name: str, path: str = "<memory>") -> tuple[int, int] | None:
    """File offset and size of the data symbol ``name`` (C spelling, no leading
    underscore) in an ELF, PE or Mach-O file, read from its symbol tables, or None.

    ELF: ``.symtab`` and ``.dynsym`` (``st_size``; 0 runs to the section's end).
    PE: the export directory; Mach-O: ``LC_SYMTAB`` (``_name``); neither records a
    size, so the range runs to the end of the symbol's section. The range always
    lies inside the file (``info`` came from :func:`parse_binary` on ``buf``).

    Raises
    ------
    LibraryLoadError
        A symbol table (PE, Mach-O) lies outside the file.
    """
    if info.format == "ELF":
        return _elf_symbols(buf, info).get(name)
    if info.format == "PE":
        from .pe import pe_exports

        return pe_exports(buf, info, path).get(name)
    from .macho import macho_symbols

    return macho_symbols(buf, info, path).get("_" + name)


def host_machine() -> str:
    """This machine's architecture in :data:`MACHINES` spelling (``"x86_64"``...)."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64", "i686": "x86", "i386": "x86"}.get(name, name)


def host_format() -> str:
    """The object format this OS's dynamic loader takes (``"ELF"``, ``"PE"``, ``"Mach-O"``)."""
    if sys.platform.startswith("win"):
        return "PE"
    return "Mach-O" if sys.platform == "darwin" else "ELF"


def find_container(buf, path: str = "<memory>") -> tuple[int, int, ElfInfo | None]:
    """Locate the container in a library file's bytes.

    Parameters
    ----------
    buf : buffer
        The whole file (an mmap is fine: only headers and the section are touched).
    path : str
        Named in error messages.

    Returns
    -------
    (offset, size, elf) : (int, int, ElfInfo or None)
        File offset and size of the ``.monolib`` section (``elf`` None for a bare
        container file, whose offset is 0 and size the file's size).

    Raises
    ------
    LibraryLoadError
        Not an ELF shared library, truncated, or no ``.monolib`` section.
    """
    if bytes(buf[: len(MAGIC)]) == MAGIC:
        return 0, len(buf), None
    info = parse_binary(buf, path)
    name = SECTION_NAMES[info.format]
    sec = info.section(name)
    if sec is None or (info.format == "ELF" and sec.type == _SHT_NOBITS):
        raise _fail(
            path,
            f"{info.format} library has no {name} section: not exported by "
            "monolib (or stripped of its container)",
        )
    return sec.offset, sec.size, info


def parse_binary(buf, path: str = "<memory>") -> ElfInfo:
    """Parse an ELF, PE (``.dll``) or Mach-O (``.dylib``) library by its magic.

    Raises
    ------
    LibraryLoadError
        Not a shared library of a known format, or truncated / malformed.
    """
    head = bytes(buf[:4])
    if head == _ELF_MAGIC:
        return parse_elf(buf, path)
    if head[:2] == b"MZ":
        from .pe import parse_pe

        return parse_pe(buf, path)
    if head in (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\xce\xfa\xed\xfe"):
        from .macho import parse_macho

        return parse_macho(buf, path)
    if bytes(buf[257:262]) == b"ustar":
        raise _fail(
            path,
            "a tar archive of object files (export_library to '.tar'): link them into a "
            "shared library first, e.g. cc -shared -o model.so lib.o container.o -lm",
        )
    raise _fail(path, f"not a shared library (ELF, PE or Mach-O): starts with {bytes(buf[:16])!r}")
