"""The WebAssembly steps of ``export_library`` (target ``c -mtriple=wasm32-wasi``).

One ``.wasm`` per model (docs/wasm.md): the generated C and the C API (``monolib.h``)
built by zig's clang with wasi-libc as a WASI *reactor* (no ``main``; a host calls
``_initialize`` once, then the exports), SIMD128, single-threaded
(``threadpool.h``: ``ML_NO_THREADS`` on ``__wasm__``).

The container goes in twice over, but its bytes once:

* an active data segment (:func:`write_embed_asm`: ``.incbin`` into a read-only data
  section, 4096-aligned, ``__monolib_container_start/_end`` around it): the C API reads
  the weights in place from linear memory, never copying them (wasmtime maps data
  segments copy-on-write from the compiled module);
* after linking, a custom section ``"monolib"`` (:func:`add_container_section`) that
  points at those bytes in the file: ``{"version": 1, "offset", "size", "address"}``,
  so ``monolib inspect``/``view``/``verify`` (:mod:`monolib.abi.binfmt.wasm`) and a
  JavaScript host (``WebAssembly.Module.customSections``) find the graph and weights
  without instantiating the module.

No code digest trailer (``runtime/integrity.py``): a host validates every byte of a
module's code when it compiles it, so a damaged ``.wasm`` is an error there, never a
crash; signatures (``monolib sign``/``verify``, detached) cover the whole file as for a
native library.
"""

from __future__ import annotations

import json
import logging
import os

from ..abi.binfmt.wasm import (
    CONTAINER_SECTION,
    data_segments,
    parse_wasm,
    wasm_exports,
    wasm_globals,
)
from ..abi.container import MAGIC
from ..abi.names import CAPI_SYMBOLS, CONTAINER_END, CONTAINER_START, LOW_LEVEL_SYMBOLS
from ..errors import ExportError

__all__ = ["EXPORTS", "add_container_section", "container_pointer",
           "link_options", "write_embed_asm"]

logger = logging.getLogger(__name__)

#: What every monolib ``.wasm`` exports besides ``memory`` and ``_initialize``: the C
#: API of ``monolib.h``, the allocator a host copies its inputs through, the low-level
#: ABI, and the container's bounds (i32 globals holding its addresses).
EXPORTS = (*CAPI_SYMBOLS, "malloc", "free", *LOW_LEVEL_SYMBOLS, CONTAINER_START, CONTAINER_END)

# The container as a data symbol of its own section (wasm object files need each data
# symbol's size). Read-only data; 4096-aligned so every payload keeps its alignment.
_ASM = """/* monolib container, embedded by monolib.export.wasm */
    .section .rodata.monolib,"",@
    .p2align 12
    .globl {start}
    .type {start},@object
{start}:
    .incbin "{blob}"
    .size {start}, {size}
    .globl {end}
    .type {end},@object
{end}:
    .byte 0
    .size {end}, 1
"""


def write_embed_asm(directory: str, blob: str) -> str:
    """Write ``container.s`` into ``directory``: the file ``blob`` as a data segment.

    Returns
    -------
    str
        The path of the assembler file.

    Raises
    ------
    ExportError
        The name cannot be quoted for ``.incbin``.
    """
    if any(c in blob for c in '"\\\n'):
        raise ExportError(f"container file name {blob!r} cannot be quoted for .incbin")
    size = os.path.getsize(os.path.join(directory, blob))
    path = os.path.join(directory, "container.s")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_ASM.format(start=CONTAINER_START, end=CONTAINER_END, blob=blob, size=size))
    return path


def link_options() -> list[str]:
    """Linker options exporting :data:`EXPORTS` (one missing is a link error)."""
    return [f"-Wl,--export={s}" for s in EXPORTS]


def container_pointer(data: bytes, path: str) -> dict:
    """Where the container lies in the linked module ``data``: the address of the
    exported ``__monolib_container_start`` global, found in a data segment.

    Returns
    -------
    dict
        ``{"version": 1, "offset": file offset, "size": bytes, "address": address}``.

    Raises
    ------
    ExportError
        No such export, or no data segment holds a container at its address.
    """
    info = parse_wasm(data, path)
    exports = wasm_exports(data, info, path)
    kinds = {name: exports.get(name) for name in (CONTAINER_START, CONTAINER_END)}
    if any(k is None or k[0] != "global" for k in kinds.values()):
        raise ExportError(f"{path}: the module exports no {CONTAINER_START}/{CONTAINER_END} globals")
    values = wasm_globals(data, info, path)
    start, end = (values.get(kinds[n][1]) for n in (CONTAINER_START, CONTAINER_END))
    if start is None or end is None or end <= start:
        raise ExportError(f"{path}: the container symbols have no constant addresses")
    for seg in data_segments(data, info, path):
        if seg.address <= start and end <= seg.address + seg.size:
            offset = seg.offset + (start - seg.address)
            if data[offset : offset + len(MAGIC)] == MAGIC:
                return {"version": 1, "offset": offset, "size": end - start, "address": start}
    raise ExportError(f"{path}: no data segment holds the container at address {start}")


def _custom_section(name: str, payload: bytes) -> bytes:
    body = _leb(len(name.encode())) + name.encode() + payload
    return b"\x00" + _leb(len(body)) + body


def _leb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def add_container_section(path: str) -> dict:
    """Append the ``"monolib"`` custom section (:func:`container_pointer`) to the linked
    module at ``path`` (after every other section: no offset in the file moves).

    Returns
    -------
    dict
        The record written.
    """
    with open(path, "rb") as f:
        data = f.read()
    record = container_pointer(data, path)
    payload = json.dumps(record, separators=(",", ":")).encode("utf-8")
    with open(path, "ab") as f:
        f.write(_custom_section(CONTAINER_SECTION, payload))
    logger.debug("%s: container at file offset %d (%d bytes), address %d", path,
                 record["offset"], record["size"], record["address"])
    return record
