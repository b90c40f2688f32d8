"""DSOModule: the dlopen'd shared library (type key ``"library"``), via ctypes.

TVM calls this the "DSO module" (``runtime/library_module.cc``): the host code
compiled from generated C. At most one per module tree; it is never serialized
(it IS the file the container is embedded in).

Unloading (``Module.close``): ctypes never ``dlclose``s, and doing so while anything
still points into the library would crash, so the library is unloaded only once
nothing can reach it: every function pointer :meth:`DSOModule.get_function` hands
out holds the module's keeper object, and every array viewing its mapped container
holds the buffer the container was mapped through. Close drops the module's own
references and those of its executors, then waits (weak references,
:class:`_Unloader`) until the ``CDLL``, the keeper and the buffers are gone: at once
in the common case, else when the last user lets go. (The function pointers are made
from ``dlsym`` addresses: ``CDLL[name]`` ones refer to themselves, so only a garbage
collection would free them.)
"""

from __future__ import annotations

import _ctypes
import ctypes
import gc
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..abi.names import LIBRARY, STOP_THREADS
from ..errors import ExportError, LibraryLoadError
from . import threads
from .module import Module

__all__ = ["DSOModule", "open_library", "still_loaded"]

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
    on_unload : callable, optional
        Called once the library is unloaded after :meth:`close` (e.g. to close the
        memfd it was loaded from).

    Notes
    -----
    A function is returned as a fresh ctypes function pointer: set its ``argtypes``
    and ``restype`` without affecting other callers. Until :meth:`close`, views into
    the mapped library stay valid; after it, the library stays mapped while any such
    function pointer or view (see :meth:`watch`) is alive.
    """

    type_key = LIBRARY
    exports_to_library = True

    def __init__(
        self,
        cdll: ctypes.CDLL,
        path: str = "",
        keepalive: Any = None,
        on_unload: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.cdll: ctypes.CDLL | None = cdll
        self.path = path or getattr(cdll, "_name", "")
        self._keepalive = keepalive
        self._on_unload = on_unload
        self._watched: list[weakref.ref] = []
        self._unloader: _Unloader | None = None
        self._keeper = _Keeper()  # every function pointer handed out holds it

    def watch(self, buffer: Any) -> None:
        """Keep the library loaded after :meth:`close` while ``buffer`` is alive.

        Parameters
        ----------
        buffer : object
            What arrays into the mapped library are made from (their ``.base``
            chain ends there), held weakly.
        """
        self._watched.append(weakref.ref(buffer))

    @property
    def unloaded(self) -> bool:
        """Whether the library was closed AND unloaded (``dlclose`` done)."""
        return self._unloader is not None and self._unloader.done

    def _release(self) -> None:
        """Close the executors made for this library, join its pool's workers, and
        unload it once nothing points into it (see the module docstring)."""
        for ex in threads.unregister_library(self):
            ex.close()
        stop = self._get_own_function(STOP_THREADS)
        if stop is not None:  # else (built before it) dlclose's destructor joins them
            stop.restype, stop.argtypes = ctypes.c_int32, []
            stop()
            del stop
        cdll, self.cdll = self.cdll, None
        refs = [weakref.ref(cdll), weakref.ref(self._keeper), *self._watched]
        handle, self._keeper = cdll._handle, None
        del cdll
        self._unloader = _Unloader(handle, refs, self.path, self._on_unload)
        self._keepalive = self._on_unload = None

    def _get_own_function(self, name: str) -> Callable | None:
        if self.cdll is None:
            return None
        try:
            if _DLSYM is None:  # Windows: CDLL's own lookup
                fn = self.cdll[name]
            else:
                fn = _Function(_DLSYM(self.cdll._handle, name))
        except (OSError, AttributeError):
            return None
        fn._library = self._keeper  # the library stays loaded while fn lives
        return fn

    def symbol_address(self, name: str) -> int:
        """The address of the data symbol ``name`` in the mapped library.

        Raises
        ------
        LibraryLoadError
            No such exported symbol.
        """
        self._check_open()
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


_DLSYM = getattr(_ctypes, "dlsym", None)


class _Function(_ctypes.CFuncPtr):
    """A C function of the library (cdecl, int result, no argtypes: as ``CDLL[name]``)."""

    _flags_ = _ctypes.FUNCFLAG_CDECL
    _restype_ = ctypes.c_int


class _Keeper:
    """What every function pointer of one library refers to (weakly watched)."""

    __slots__ = ("__weakref__",)


class _Unloader:
    """``dlclose(handle)`` then ``after()``, once every object of ``refs`` is gone.

    Checked at once (then once more after a garbage collection: a view may be alive
    only through a reference cycle); whatever is still alive then gets a
    ``weakref.finalize``, and the last one to go unloads the library.
    """

    def __init__(
        self, handle: int, refs: list[weakref.ref], path: str, after: Callable | None
    ) -> None:
        self.handle, self.path, self.after = handle, path, after
        self.done = False
        self._lock = threading.Lock()
        alive = [r() for r in refs]
        if any(o is not None for o in alive):
            del alive
            gc.collect()
            alive = [r() for r in refs]
        alive = [o for o in alive if o is not None]
        self._pending = len(alive)
        if not alive:
            self._unload()
            return
        logger.debug(
            "%s: closed; unloaded when %s go", path, ", ".join(type(o).__name__ for o in alive)
        )
        for o in alive:
            # not at exit: a daemon thread may still run the library's code then
            weakref.finalize(o, self._one_gone).atexit = False
        del alive, o

    def _one_gone(self) -> None:
        with self._lock:
            self._pending -= 1
            last = self._pending == 0
        if last:
            self._unload()

    def _unload(self) -> None:
        if not _unload_library(self.handle, self.path):
            return
        self.done = True
        if self.after is not None:
            self.after()
        logger.debug("%s: unloaded", self.path)


def _unload_library(handle: int, path: str) -> bool:
    """``dlclose`` (POSIX); False where there is none (the library stays loaded)."""
    dlclose = getattr(_ctypes, "dlclose", None)
    if dlclose is None:
        return False
    try:
        dlclose(handle)
    except OSError as exc:  # a bad handle: nothing was unloaded
        logger.warning("%s: dlclose failed: %s", path, exc)
        return False
    return True


def still_loaded(path: str) -> bool:
    """Whether a library of that name is loaded (``dlopen`` with ``RTLD_NOLOAD``).

    After ``dlclose``, the dynamic loader may keep a library loaded (another ``dlopen``
    of the same file, or one marked not to be deleted): its name then still stands
    for it, so a memfd it was loaded from must keep its number.

    Parameters
    ----------
    path : str
        The name it was loaded under.
    """
    if not hasattr(os, "RTLD_NOLOAD") or not hasattr(_ctypes, "dlopen"):
        return True  # cannot tell: keep it
    try:
        handle = _ctypes.dlopen(path, os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    _ctypes.dlclose(handle)
    return True
