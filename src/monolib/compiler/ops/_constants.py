"""Numbers that Python and a kernel header both use, written once.

A kernel header (``gemm.h``, ``conv.h``, ``qgemm.h``...) defines its tile sizes as
``ML_*`` macros; the Python that packs weights or sizes scratch for it uses the same
numbers. The Python value is the one written in the source tree; the generated C checks
the header's macro against it at compile time, so a header edited alone fails the build
instead of silently reading the packed weights wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .base import EmitContext

__all__ = ["include_checked"]

logger = logging.getLogger(__name__)


def include_checked(
    ctx: EmitContext, header: str, constants: Mapping[str, int], where: str
) -> None:
    """Paste ``header`` into the generated C, then assert each of its macros equals the
    Python value the emitting code relies on.

    Parameters
    ----------
    ctx : EmitContext
        The C emitter (``include`` and ``helper``, each pasted once per source).
    header : str
        Kernel header name, e.g. ``"gemm.h"``.
    constants : mapping of str to int
        Macro name -> the Python value, e.g. ``{"ML_MR": 6}``.
    where : str
        The Python module holding the values (named in the assertion's message).

    Notes
    -----
    Each check is a C11 ``_Static_assert`` at file scope, after the headers: it emits
    no code, so the library is the same.
    """
    ctx.include(header)
    for name, value in constants.items():
        message = f"{header}: {name} differs from {where}"
        ctx.helper(f'_Static_assert({name} == {int(value)}, "{message}");')
