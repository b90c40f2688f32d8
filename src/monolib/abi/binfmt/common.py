"""What the ELF, PE and Mach-O readers share: the records they return and the
checked reads they make.

A reader turns a file's headers into one :class:`ElfInfo` (named for the first
format read; it serves all three): sections, segments, class, machine. Every read
goes through :func:`unpack`, which refuses a range past the end of the file, so a
truncated or damaged file is a :class:`~monolib.errors.LibraryLoadError` naming the
file, never an ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import logging
import struct
from typing import NamedTuple

from ...errors import LibraryLoadError

__all__ = [
    "ElfInfo",
    "ElfSection",
    "ElfSegment",
    "c_string",
    "fail",
    "fixed_name",
    "past_end",
    "unpack",
]

logger = logging.getLogger(__name__)


class ElfSection(NamedTuple):
    """One section header: name, type, flags, virtual address, file offset, size,
    and (ELF) ``sh_link``. Type and flags are the format's own."""

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


def fail(path: str, what: str) -> LibraryLoadError:
    """The error for file ``path``: ``"<path>: <what>"``."""
    return LibraryLoadError(f"{path}: {what}")


def past_end(path: str, kind: str, what: str, end: int, size: int) -> LibraryLoadError:
    """The error for a ``kind`` file (``"ELF"``, ``"PE"``, ``"Mach-O"``) whose ``what``
    needs bytes up to ``end`` while the file has ``size``."""
    return fail(path, f"truncated {kind} file: {what} needs bytes up to {end}, the file has {size}")


def unpack(st: struct.Struct, buf, offset: int, path: str, what: str, kind: str) -> tuple:
    """``st.unpack_from(buf, offset)``, checked.

    Raises
    ------
    LibraryLoadError
        The record ``what`` at ``offset`` runs past the end of ``buf`` (a truncated
        ``kind`` file).
    """
    if offset < 0 or offset + st.size > len(buf):
        raise fail(
            path,
            f"truncated {kind} file: {what} at offset {offset} runs past the end "
            f"({len(buf)} bytes)",
        )
    return st.unpack_from(buf, offset)


def c_string(table: bytes, offset: int) -> str:
    """The NUL-terminated string at ``offset`` of a string table (to the table's end
    without a NUL); undecodable bytes become U+FFFD."""
    stop = table.find(b"\0", offset)
    return table[offset : stop if stop >= 0 else len(table)].decode("utf-8", "replace")


def fixed_name(raw: bytes) -> str:
    """A NUL-padded fixed-width name (PE and Mach-O section names)."""
    return raw.rstrip(b"\0").decode("utf-8", "replace")
