"""Embed the container in the library with an assembler file (``.incbin``).

Never a C array: TVM's ``devc.c`` turns a 100 MB blob into 400 MB of C text that
takes minutes to compile; ``.incbin`` makes the assembler copy the bytes (0.15 s for
4 MB here). The section is read-only (``"a"``, no ``"w"``), page aligned (so the
runtime can view the weights in place from the mapping) and reached only through the
global symbols, never by a PC-relative reference from code, so its size does not run
into the 2 GB relocation limits of the small code model.

Placement (ELF): GNU ld puts an orphan read-only section between ``.text`` and
``.data``/``.got``, so a container over 2 GB would push the code's PC-relative
references to its own data and GOT out of range (the small code model's +-2 GB). A
linker script fragment (:func:`linker_options`) moves ``.monolib`` after ``.bss``, into
its own read-only segment at the end of the image: code and data stay close together
whatever the weights' size (as the x86-64 large-data sections ``.lrodata`` are placed).
"""

from __future__ import annotations

import logging
import os

from ..errors import ExportError
from ..abi.names import CONTAINER_END, CONTAINER_START
from .targets import Target

__all__ = ["ASM_TEMPLATES", "LINKER_SCRIPT", "linker_options", "symbol_prefix", "write_embed_asm"]

logger = logging.getLogger(__name__)

# Target OS -> assembler text. ELF: read-only "a" section, page aligned, non-executable
# stack note. PE: "dr" (data, read-only), exported by --export-all-symbols at link.
# Mach-O: __DATA_CONST (read-only after load), 16 KiB aligned (arm64 pages), and C
# symbols carry a leading underscore.
_HEADER = "/* monolib container, embedded by monolib.export.embed */\n"
#: PE and Mach-O: the start symbol, the blob, the end symbol (ELF adds types).
_SYMBOLS = """\
    .globl {start}
{start}:
    .incbin "{blob}"
    .globl {end}
{end}:
    .byte 0
"""
ASM_TEMPLATES = {
    "linux": _HEADER
    + """\
    .section .monolib,"a",@progbits
    .balign 4096
    .globl {start}
    .type {start}, @object
{start}:
    .incbin "{blob}"
    .globl {end}
    .type {end}, @object
{end}:
    .byte 0
    .section .note.GNU-stack,"",@progbits
""",
    "windows": _HEADER + '    .section .monolib,"dr"\n    .p2align 12\n' + _SYMBOLS,
    "macos": _HEADER + "    .section __DATA_CONST,__monolib\n    .p2align 14\n" + _SYMBOLS,
}


def symbol_prefix(target: Target) -> str:
    """What the target's C ABI prepends to a C name (``_`` on Mach-O and 32-bit Windows)."""
    if target.os == "macos" or (target.os == "windows" and target.arch == "x86"):
        return "_"
    return ""


def write_embed_asm(directory: str, blob_name: str, target: Target | str = "c") -> str:
    """Write ``container.s`` into ``directory``, embedding the file ``blob_name``.

    A relative ``blob_name`` is resolved by the assembler against its working
    directory (run the compiler with ``cwd=directory``); an absolute one anywhere.

    Returns
    -------
    str
        The path of the assembler file.

    Raises
    ------
    ExportError
        The name cannot be quoted for ``.incbin``, or the target OS has no template.
    """
    target = Target(target)
    template = ASM_TEMPLATES.get(target.os)
    if template is None:
        raise ExportError(f"no container embedding for {target.os} targets ({target})")
    if any(c in blob_name for c in '"\\\n'):
        raise ExportError(f"container file name {blob_name!r} cannot be quoted for .incbin")
    prefix = symbol_prefix(target)
    path = os.path.join(directory, "container.s")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            template.format(start=prefix + CONTAINER_START, end=prefix + CONTAINER_END, blob=blob_name)
        )
    return path


#: GNU ld / lld script fragment (augments the default script): ``.monolib`` after
#: ``.bss``, in a read-only segment of its own at the end of the image.
LINKER_SCRIPT = """\
/* monolib container placement, written by monolib.export.embed */
SECTIONS
{
  .monolib : { KEEP(*(.monolib)) }
}
INSERT AFTER .bss;
"""


def linker_options(directory: str, target: Target | str = "c") -> list[str]:
    """Link options that place the container section (ELF targets: write
    ``container.ld`` into ``directory`` and return ``["-Wl,-T,<path>"]``; other object
    formats need none and get ``[]``). Works with GNU ld and lld; gold cannot read an
    ``INSERT`` script, and places the orphan section at the end by itself anyway.
    """
    target = Target(target)
    if target.os != "linux":
        return []
    path = os.path.join(directory, "container.ld")
    with open(path, "w", encoding="utf-8") as f:
        f.write(LINKER_SCRIPT)
    return [f"-Wl,-T,{path}"]
