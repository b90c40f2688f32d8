"""CSourceModule (type key ``"c"``): generated C that becomes the DSO at export.

TVM's ``CSourceModule``: the code generator's output as text plus the target it is
for. ``export_library`` compiles it into the library together with the embedded
container. To run before export (``monolib.compile(...)`` then ``GraphModule``),
the first function lookup builds a temporary ``.so`` in a temporary directory,
dlopens it, deletes the directory, and caches the loaded module.

Heavy imports (subprocess, tempfile) are deferred to the first build so that
importing ``monolib`` stays fast.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..abi.names import C_SOURCE
from ..runtime.module import Module

__all__ = ["CSourceModule"]

logger = logging.getLogger(__name__)


class CSourceModule(Module):
    """Generated C source plus its target; compiled into the library at export.

    Parameters
    ----------
    source : str
        One self-contained C file implementing the ABI of ``docs/ARCHITECTURE.md``
        (``monolib_run``, ``monolib_run_op``, ``monolib_num_ops``).
    target : str or Target
        Target string (``"c"``, ``"c -mtriple=aarch64-linux-gnu"``...).

    Raises
    ------
    TargetError
        The target string is invalid.
    """

    type_key = C_SOURCE
    exports_to_library = True

    def __init__(self, source: str, target: Any = "c") -> None:
        from .targets import Target

        super().__init__()
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        self.source = source
        self.target = Target(target)
        self._dso = None
        self._lock = threading.Lock()

    def get_source(self, fmt: str = "c") -> str:
        """The C source text."""
        return self.source

    def build(self) -> Module:
        """The temporary DSO module built from the source (built once, then cached).

        Raises
        ------
        ToolchainError
            No C compiler, or it failed.
        ExportError
            The target is not the host (the library could not run here).
        """
        with self._lock:
            if self._dso is None:
                self._dso = _build_temporary(self)
            return self._dso

    def _get_own_function(self, name: str) -> Callable | None:
        return self.build()._get_own_function(name)

    def save_to_bytes(self) -> bytes:
        """The source as UTF-8 (used only if a tree is packed without compiling)."""
        return self.source.encode("utf-8")

    def __repr__(self) -> str:
        return f"CSourceModule(target={str(self.target)!r}, {len(self.source)} chars)"


def _build_temporary(mod: CSourceModule) -> Module:
    import os
    import tempfile

    from ..runtime.dso import DSOModule, open_library
    from ..errors import ExportError
    from .toolchain import link_shared

    if not mod.target.is_host:
        raise ExportError(
            f"cannot run code for target {mod.target} on this host; "
            "export_library it and run it on the target"
        )
    with tempfile.TemporaryDirectory(prefix="monolib-build-") as tmp:
        src = os.path.join(tmp, "lib.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(mod.source)
        out = os.path.join(tmp, "lib.so")
        link_shared([src], out, mod.target, cwd=tmp)
        cdll = open_library(out)  # the mapping outlives the deleted file
    logger.debug("built temporary library for %r", mod)
    return DSOModule(cdll, f"<temporary build of {mod!r}>")
