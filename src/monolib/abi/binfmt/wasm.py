"""Read a WebAssembly module (``.wasm``) without instantiating it: its sections, its
exports, and the monolib container in its data.

A ``.wasm`` exported by monolib (``export/wasm.py``, docs/wasm.md) holds the container
in an active data segment (the C API reads it in place from linear memory) and, after
the module's own sections, a custom section ``"monolib"``: UTF-8 JSON ``{"version": 1,
"offset": <file offset of the container>, "size": <its bytes>, "address": <its address
in linear memory>}``. :func:`find_wasm_container` trusts that pointer only after
checking that it lies inside one data segment at that address, so a file whose pointer
and data disagree is refused, never read past its end.

Every read is checked against the file's size (a truncated or damaged module is a
:class:`~monolib.errors.LibraryLoadError` naming the file). Wasm validation proper
happens when a host compiles the module: a damaged code section is an error there, not
a crash.
"""

from __future__ import annotations

import json
import logging
from typing import NamedTuple

from .common import ElfInfo, ElfSection, fail

__all__ = [
    "CONTAINER_SECTION",
    "SECTION_IDS",
    "WASM_MAGIC",
    "WasmSegment",
    "custom_section",
    "data_segments",
    "find_wasm_container",
    "memory_limits",
    "parse_wasm",
    "read_leb",
    "wasm_exports",
    "wasm_globals",
    "wasm_imports",
]

logger = logging.getLogger(__name__)

#: The first 8 bytes of a version-1 module: ``\0asm`` and version 1 (little endian).
WASM_MAGIC = b"\x00asm\x01\x00\x00\x00"
#: The custom section pointing at the container (docs/wasm.md).
CONTAINER_SECTION = "monolib"
#: Section id -> the name a report shows (custom sections show their own name).
SECTION_IDS = {
    1: "type", 2: "import", 3: "function", 4: "table", 5: "memory", 6: "global",
    7: "export", 8: "start", 9: "element", 10: "code", 11: "data", 12: "datacount",
    13: "tag",
}
_KIND = "WebAssembly"
#: export kinds (the binary format's external kinds)
EXPORT_KINDS = {0: "function", 1: "table", 2: "memory", 3: "global", 4: "tag"}


class WasmSegment(NamedTuple):
    """An active data segment: its linear-memory address, file offset and size."""

    address: int
    offset: int
    size: int


def read_leb(buf, pos: int, end: int, path: str, what: str, signed: bool = False) -> tuple[int, int]:
    """The LEB128 integer at ``pos`` (unsigned, or ``signed``) and the position after it.

    Raises
    ------
    LibraryLoadError
        It runs past ``end`` or over 10 bytes.
    """
    result = shift = 0
    for _ in range(10):
        if pos >= end:
            raise fail(path, f"truncated {_KIND} module: {what} runs past byte {end}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if signed and byte & 0x40:
                result -= 1 << shift
            return result, pos
    raise fail(path, f"malformed {_KIND} module: {what} is not a LEB128 number")


def _name(buf, pos: int, end: int, path: str, what: str) -> tuple[str, int]:
    n, pos = read_leb(buf, pos, end, path, what)
    if pos + n > end:
        raise fail(path, f"truncated {_KIND} module: {what} runs past byte {end}")
    return bytes(buf[pos : pos + n]).decode("utf-8", "replace"), pos + n


def parse_wasm(buf, path: str = "<memory>") -> ElfInfo:
    """The section list of a WebAssembly module (``format`` ``"wasm"``, machine
    ``"wasm32"``): each :class:`~.common.ElfSection` has the section's name (a custom
    section's own name), its id as ``type``, and its payload's file offset and size
    (a custom section's payload after its name).

    Raises
    ------
    LibraryLoadError
        Not a version-1 module, or a section runs past the end of the file.
    """
    size = len(buf)
    if bytes(buf[:8]) != WASM_MAGIC:
        raise fail(path, f"not a version-1 {_KIND} module: starts with {bytes(buf[:8])!r}")
    sections, pos = [], 8
    while pos < size:
        sid = buf[pos]
        length, start = read_leb(buf, pos + 1, size, path, f"the size of section {sid}")
        end = start + length
        if end > size:
            raise fail(path, f"truncated {_KIND} module: section {sid} at offset {pos} needs "
                       f"bytes up to {end}, the file has {size}")
        name, body = SECTION_IDS.get(sid, f"section {sid}"), start
        if sid == 0:
            name, body = _name(buf, start, end, path, "a custom section's name")
        sections.append(ElfSection(name, sid, 0, 0, body, end - body))
        pos = end
    return ElfInfo(32, "wasm32", sections, [], "wasm")


def custom_section(info: ElfInfo, name: str) -> ElfSection | None:
    """The first custom section called ``name``, or None."""
    return next((s for s in info.sections if s.type == 0 and s.name == name), None)


def _known(info: ElfInfo, sid: int) -> ElfSection | None:
    return next((s for s in info.sections if s.type == sid), None)


def _const_expr(buf, pos: int, end: int, path: str, what: str) -> tuple[int | None, int]:
    """An ``i32.const N; end`` expression: N (None for another expression) and the
    position after its ``end``."""
    op = buf[pos] if pos < end else None
    if op == 0x41:
        value, pos = read_leb(buf, pos + 1, end, path, what, signed=True)
        if pos < end and buf[pos] == 0x0B:
            return value & 0xFFFFFFFF, pos + 1
    while pos < end and buf[pos] != 0x0B:  # skip another expression to its end
        pos += 1
    if pos >= end:
        raise fail(path, f"truncated {_KIND} module: {what} has no end")
    return None, pos + 1


def data_segments(buf, info: ElfInfo, path: str = "<memory>") -> list[WasmSegment]:
    """The active data segments of memory 0 at a constant address, in file order."""
    sec = _known(info, 11)
    if sec is None:
        return []
    pos, end = sec.offset, sec.offset + sec.size
    count, pos = read_leb(buf, pos, end, path, "the data segment count")
    out = []
    for k in range(count):
        what = f"data segment {k}"
        flags, pos = read_leb(buf, pos, end, path, what)
        address, mem = None, 0
        if flags in (0, 2):
            if flags == 2:
                mem, pos = read_leb(buf, pos, end, path, what)
            address, pos = _const_expr(buf, pos, end, path, what)
        elif flags != 1:
            raise fail(path, f"malformed {_KIND} module: {what} has flags {flags}")
        n, pos = read_leb(buf, pos, end, path, what)
        if pos + n > end:
            raise fail(path, f"truncated {_KIND} module: {what} runs past its section")
        if address is not None and mem == 0:
            out.append(WasmSegment(address, pos, n))
        pos += n
    return out


def wasm_exports(buf, info: ElfInfo, path: str = "<memory>") -> dict[str, tuple[str, int]]:
    """``{name: (kind, index)}`` of the module's exports (kind ``"function"``,
    ``"memory"``, ``"global"``...)."""
    sec = _known(info, 7)
    if sec is None:
        return {}
    pos, end = sec.offset, sec.offset + sec.size
    count, pos = read_leb(buf, pos, end, path, "the export count")
    out = {}
    for _ in range(count):
        name, pos = _name(buf, pos, end, path, "an export's name")
        if pos >= end:
            raise fail(path, f"truncated {_KIND} module: export {name!r} runs past its section")
        kind = buf[pos]
        index, pos = read_leb(buf, pos + 1, end, path, f"export {name!r}")
        out[name] = (EXPORT_KINDS.get(kind, str(kind)), index)
    return out


def wasm_imports(buf, info: ElfInfo, path: str = "<memory>") -> list[tuple[str, str, str]]:
    """``[(module, name, kind)]`` of the module's imports, in order."""
    sec = _known(info, 2)
    if sec is None:
        return []
    pos, end = sec.offset, sec.offset + sec.size
    count, pos = read_leb(buf, pos, end, path, "the import count")
    out = []
    for _ in range(count):
        mod, pos = _name(buf, pos, end, path, "an import's module")
        name, pos = _name(buf, pos, end, path, "an import's name")
        kind = buf[pos] if pos < end else -1
        pos += 1
        if kind == 0:
            _, pos = read_leb(buf, pos, end, path, "an imported function")
        elif kind == 1:
            pos = _limits(buf, pos + 1, end, path)
        elif kind == 2:
            pos = _limits(buf, pos, end, path)
        elif kind == 3:
            pos += 2
        else:
            raise fail(path, f"malformed {_KIND} module: import kind {kind}")
        out.append((mod, name, EXPORT_KINDS.get(kind, str(kind))))
    return out


def wasm_globals(buf, info: ElfInfo, path: str = "<memory>") -> dict[int, int | None]:
    """``{global index: i32 constant initial value or None}`` of the module's own
    globals (indices after the imported ones)."""
    # imported globals come first in the index space
    first = sum(1 for _, _, kind in wasm_imports(buf, info, path) if kind == "global")
    sec = _known(info, 6)
    if sec is None:
        return {}
    pos, end = sec.offset, sec.offset + sec.size
    count, pos = read_leb(buf, pos, end, path, "the global count")
    out = {}
    for k in range(count):
        pos += 2  # valtype, mutability
        out[first + k], pos = _const_expr(buf, pos, end, path, f"global {first + k}")
    return out


def memory_limits(buf, info: ElfInfo, path: str = "<memory>") -> tuple[int, int | None] | None:
    """``(initial pages, maximum pages or None)`` of the module's own memory 0, or None
    (no memory section: an imported memory)."""
    sec = _known(info, 5)
    if sec is None:
        return None
    pos, end = sec.offset, sec.offset + sec.size
    count, pos = read_leb(buf, pos, end, path, "the memory count")
    if count < 1:
        return None
    flags, pos = read_leb(buf, pos, end, path, "memory 0's limits")
    initial, pos = read_leb(buf, pos, end, path, "memory 0's limits")
    maximum = read_leb(buf, pos, end, path, "memory 0's limits")[0] if flags & 1 else None
    return initial, maximum


def _limits(buf, pos: int, end: int, path: str) -> int:
    flags, pos = read_leb(buf, pos, end, path, "limits")
    _, pos = read_leb(buf, pos, end, path, "limits")
    if flags & 1:
        _, pos = read_leb(buf, pos, end, path, "limits")
    return pos


def find_wasm_container(buf, path: str = "<memory>") -> tuple[int, int, ElfInfo, dict]:
    """Locate the container of a ``.wasm`` exported by monolib, from its ``"monolib"``
    custom section, checked against the data segments.

    Returns
    -------
    (offset, size, info, pointer)
        The container's file offset and size, the parsed sections, and the custom
        section's record (``offset``, ``size``, ``address``: where the module sees it).

    Raises
    ------
    LibraryLoadError
        Not a module, no ``"monolib"`` custom section, or one that does not point at
        bytes of a data segment at the address it gives.
    """
    info = parse_wasm(buf, path)
    sec = custom_section(info, CONTAINER_SECTION)
    if sec is None:
        raise fail(path, f"{_KIND} module has no {CONTAINER_SECTION!r} custom section: not "
                   "exported by monolib (or stripped of it)")
    try:
        rec = json.loads(bytes(buf[sec.offset : sec.offset + sec.size]).decode("utf-8"))
        offset, size, address = (int(rec[k]) for k in ("offset", "size", "address"))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise fail(path, f"malformed {CONTAINER_SECTION!r} custom section: {exc}") from None
    for seg in data_segments(buf, info, path):
        inside = seg.offset <= offset and offset + size <= seg.offset + seg.size
        if inside and seg.address + (offset - seg.offset) == address:
            return offset, size, info, rec
    raise fail(path, f"the {CONTAINER_SECTION!r} custom section points at file bytes "
               f"[{offset}, +{size}) at address {address}, which no data segment holds")
