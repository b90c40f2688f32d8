"""Embed the container in the library with an assembler file (``.incbin``).

Never a C array: TVM's ``devc.c`` turns a 100 MB blob into 400 MB of C text that
takes minutes to compile; ``.incbin`` makes the assembler copy the bytes (0.15 s for
4 MB here). The section is read-only (``"a"``, no ``"w"``), page aligned (so the
runtime can view the weights in place from the mapping) and reached only through the
global symbols, never by a PC-relative reference from code, so its size does not run
into the 2 GB relocation limits of the small code model.
"""

from __future__ import annotations

import logging
import os

from ..runtime.errors import ExportError
from ..runtime.library import END_SYMBOL, START_SYMBOL
from .targets import Target

__all__ = ["ASM_TEMPLATE_ELF", "write_embed_asm"]

logger = logging.getLogger(__name__)

ASM_TEMPLATE_ELF = """\
/* monolib container, embedded by monolib.export.embed */
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
"""


def write_embed_asm(directory: str, blob_name: str, target: Target | str = "c") -> str:
    """Write ``container.s`` into ``directory``, embedding the file ``blob_name``.

    ``blob_name`` is resolved by the assembler relative to its working directory:
    run the compiler with ``cwd=directory``.

    Returns
    -------
    str
        The path of the assembler file.

    Raises
    ------
    ExportError
        The target's object format is not ELF (Mach-O and PE are not done yet).
    """
    target = Target(target)
    if target.os != "linux":
        raise ExportError(f"embedding the container for {target.os} targets ({target}) is "
                          "not implemented yet: only ELF (Linux) libraries can be exported")
    if any(c in blob_name for c in '"\\\n'):
        raise ExportError(f"container file name {blob_name!r} cannot be quoted for .incbin")
    path = os.path.join(directory, "container.s")
    with open(path, "w", encoding="utf-8") as f:
        f.write(ASM_TEMPLATE_ELF.format(start=START_SYMBOL, end=END_SYMBOL, blob=blob_name))
    return path
