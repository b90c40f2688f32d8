"""DSOModule: the dlopen'd shared library (type key ``"library"``), via ctypes.

TVM calls this the "DSO module" (``runtime/library_module.cc``): the host code
compiled from generated C. At most one per module tree; it is never serialized
(it IS the file the container is embedded in).
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from typing import Any

from ..abi.names import LIBRARY
from ..errors import ExportError, LibraryLoadError
from .module import Module

__all__ = ["DSOModule", "open_library"]

logger = logging.getLogger(__name__)


def open_library(path: str) -> ctypes.CDLL:
    """``dlopen`` ``path`` (RTLD_LOCAL) with ctypes.

    Raises
    ------
    LibraryLoadError
        The dynamic loader refused the file; its message is included.
    """
    try:
        return ctypes.CDLL(os.fspath(path), mode=getattr(os, "RTLD_LOCAL", 0))
    except OSError as exc:
        raise LibraryLoadError(f"{path}: the dynamic loader refused the library: {exc}") from None


class DSOModule(Module):
    """A loaded shared library; ``get_function(name)`` returns its exported symbol.

    Parameters
    ----------
    cdll : ctypes.CDLL
        The loaded library.
    path : str
        Where it was loaded from (for messages; may be ``/proc/self/fd/N``).
    keepalive : object, optional
        Kept referenced as long as the module lives (e.g. the memfd of a library
        loaded from bytes).

    Notes
    -----
    A function is returned as a fresh ctypes function pointer: set its ``argtypes``
    and ``restype`` without affecting other callers. ctypes never ``dlclose``s, so
    views into the mapped library stay valid for the process's life.
    """

    type_key = LIBRARY
    exports_to_library = True

    def __init__(self, cdll: ctypes.CDLL, path: str = "", keepalive: Any = None) -> None:
        super().__init__()
        self.cdll = cdll
        self.path = path or getattr(cdll, "_name", "")
        self._keepalive = keepalive

    def _get_own_function(self, name: str) -> Callable | None:
        try:
            return self.cdll[name]
        except AttributeError:
            return None

    def symbol_address(self, name: str) -> int:
        """The address of the data symbol ``name`` in the mapped library.

        Raises
        ------
        LibraryLoadError
            No such exported symbol.
        """
        try:
            return ctypes.addressof(ctypes.c_char.in_dll(self.cdll, name))
        except ValueError:
            raise LibraryLoadError(f"{self.path}: library exports no symbol {name!r}") from None

    def save_to_bytes(self) -> bytes:
        raise ExportError(
            f"a loaded library ({self.path}) cannot be re-exported: export the module "
            "tree produced by monolib.compile (it holds the C source)"
        )

    def __repr__(self) -> str:
        return f"DSOModule({self.path!r}, imports={len(self._imports)})"
