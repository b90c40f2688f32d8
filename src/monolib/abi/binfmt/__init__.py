"""Find the container inside a library file by reading it, never by loading it.

The one dispatcher over the binary-format readers: :func:`parse_binary` picks the
ELF (:mod:`.elf`), PE (``.dll``, :mod:`.pe`), Mach-O (``.dylib``, :mod:`.macho`) or
WebAssembly (``.wasm``, :mod:`.wasm`: the container's place from its ``"monolib"``
custom section) reader by the file's magic; each checks that every range it reads lies inside the
file and returns the records of :mod:`.common`. :func:`find_container` then finds
the section holding the container (``.monolib``; :data:`~monolib.abi.names.SECTION_NAMES`).
``load_module`` runs this BEFORE ``dlopen`` so a truncated or foreign file is a
:class:`LibraryLoadError`, not a crash in the dynamic loader; ``monolib inspect``
uses it to read a library without running any of its code. A file that starts with
the container magic is accepted as a bare container (offset 0).
"""

from __future__ import annotations

import logging
import platform
import sys

from ..container import MAGIC
from ..names import SECTION_NAMES
from .common import ElfInfo, fail
from .elf import ELF_MAGIC, SHT_NOBITS, dynsym_exports, elf_symbols, parse_elf
from .macho import macho_symbols, parse_macho
from .pe import parse_pe, pe_exports
from .wasm import WASM_MAGIC, find_wasm_container, parse_wasm, wasm_exports

__all__ = [
    "exported_symbols",
    "find_container",
    "find_symbol",
    "host_format",
    "host_machine",
    "parse_binary",
]

logger = logging.getLogger(__name__)

_MACHO_MAGICS = (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\xce\xfa\xed\xfe")


def parse_binary(buf, path: str = "<memory>") -> ElfInfo:
    """Parse an ELF, PE (``.dll``) or Mach-O (``.dylib``) library by its magic.

    Raises
    ------
    LibraryLoadError
        Not a shared library of a known format, or truncated / malformed.
    """
    head = bytes(buf[:4])
    if head == ELF_MAGIC:
        return parse_elf(buf, path)
    if head[:2] == b"MZ":
        return parse_pe(buf, path)
    if head in _MACHO_MAGICS:
        return parse_macho(buf, path)
    if head == WASM_MAGIC[:4]:
        return parse_wasm(buf, path)
    if bytes(buf[257:262]) == b"ustar":
        raise fail(
            path,
            "a tar archive of object files (export_library to '.tar'): link them into a "
            "shared library first, e.g. cc -shared -o model.so lib.o container.o -lm",
        )
    raise fail(path, f"not a shared library (ELF, PE or Mach-O): starts with {bytes(buf[:16])!r}")


def exported_symbols(buf, info: ElfInfo) -> list[str] | None:
    """Names of the defined global/weak symbols of an ELF file's ``.dynsym`` (what
    ``dlsym`` can find), or a WebAssembly module's exports, read from the file; None
    for other formats.

    ``info`` is :func:`parse_binary`'s result for ``buf`` (whose ranges it checked).
    """
    if info.format == "wasm":
        return list(wasm_exports(buf, info))
    return dynsym_exports(buf, info) if info.format == "ELF" else None


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
        return elf_symbols(buf, info).get(name)
    if info.format == "PE":
        return pe_exports(buf, info, path).get(name)
    if info.format == "wasm":  # a module's data symbols are addresses, not file ranges
        return None
    return macho_symbols(buf, info, path).get("_" + name)


def host_machine() -> str:
    """This machine's architecture in :data:`.elf.MACHINES` spelling (``"x86_64"``...)."""
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
        File offset and size of the container section (``elf`` None for a bare
        container file, whose offset is 0 and size the file's size).

    Raises
    ------
    LibraryLoadError
        Not a shared library, truncated, or no container section.
    """
    if bytes(buf[: len(MAGIC)]) == MAGIC:
        return 0, len(buf), None
    if bytes(buf[:4]) == WASM_MAGIC[:4]:
        return find_wasm_container(buf, path)[:3]
    info = parse_binary(buf, path)
    name = SECTION_NAMES[info.format]
    sec = info.section(name)
    if sec is None or (info.format == "ELF" and sec.type == SHT_NOBITS):
        raise fail(
            path,
            f"{info.format} library has no {name} section: not exported by "
            "monolib (or stripped of its container)",
        )
    return sec.offset, sec.size, info
