"""The Module base class and the loader registry.

A :class:`Module` has a ``type_key``, a table of functions (``mod["name"]``) and
``imported_modules``; modules form a tree whose root ``load_module`` returns. This
follows TVM's runtime ``Module`` (``tvm.runtime.Module``, RFC "Standardize
GraphRuntime exports into a single DLL"): every module other than the DSO module
serializes itself with :meth:`Module.save_sections` and is rebuilt on load by the
loader registered for its type key with :func:`register_loader`.

User-defined module types are an extension point: subclass :class:`Module`, set a
``type_key``, implement ``_get_own_function`` and ``save_to_bytes`` (or
``save_sections``), and register a loader at import time of the defining Python
module. Exporting stores a small ``"loader_hint"`` section beside a user module's
own sections (JSON: the defining Python module, its file, the class), so a process
that loads the library without that loader registered gets an
:class:`UnknownTypeKeyError` saying what to import (see ``examples/user_module/``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..abi.names import DATA_SECTION, LIBRARY, LOADER_HINT_SECTION
from ..errors import ExportError, FunctionNotFoundError, ModuleClosedError, UnknownTypeKeyError

__all__ = [
    "Loader",
    "Module",
    "get_loader",
    "register_exporter",
    "register_loader",
    "registered_type_keys",
]

logger = logging.getLogger(__name__)

#: ``floader(data: memoryview) -> Module`` or, with ``sections=True``,
#: ``floader({name: memoryview}) -> Module``.
Loader = Callable[[Any], "Module"]

# type_key -> (floader, takes_sections)
_LOADERS: dict[str, tuple[Loader, bool]] = {}

# Module.close of one tree at a time (two threads closing one tree release it once)
_close_lock = threading.RLock()

#: ``fexport(module, path, *, fcompile, compress, progress) -> str``, set by
#: ``monolib.export`` on import (:func:`register_exporter`); None until then.
_EXPORTER: Callable[..., str] | None = None

# LOADER_HINT_SECTION: the section export adds to a user-defined module: UTF-8 JSON
# {"module", "class"} naming its defining Python module ("file" too for __main__) (read
# back only to word an UnknownTypeKeyError; loaders taking sections=True see it too).


def _loader_hint(module: Module) -> bytes:
    cls = type(module)
    hint = {"module": cls.__module__, "class": cls.__name__}
    if cls.__module__ == "__main__":  # a script: its file is the only clue (else not stored)
        file = getattr(sys.modules.get("__main__"), "__file__", None)
        hint["file"] = file and os.path.abspath(file)
    return json.dumps(hint).encode("utf-8")


def _with_hint(module: Module, sections: Mapping[str, Any]) -> Mapping[str, Any]:
    """``sections`` plus the loader hint, for module types defined outside monolib
    (the built-in loaders are registered whenever monolib.runtime is imported)."""
    if type(module).__module__.startswith("monolib.") or LOADER_HINT_SECTION in sections:
        return sections
    return {**sections, LOADER_HINT_SECTION: _loader_hint(module)}


def _hinted(save_sections: Callable) -> Callable:
    @functools.wraps(save_sections)
    def wrapper(self: Module) -> Mapping[str, Any]:
        return _with_hint(self, save_sections(self))

    wrapper._adds_loader_hint = True  # type: ignore[attr-defined]
    return wrapper


class Module:
    """Base class of every module (TVM's ``runtime.Module``).

    Subclasses set ``type_key`` and override :meth:`_get_own_function` and
    :meth:`save_to_bytes` (or :meth:`save_sections`). A subclass whose code is
    compiled into the exported shared library itself (the DSO module, the C source
    module) sets ``exports_to_library = True``; at most one such module is in a tree.

    Attributes
    ----------
    type_key : str
        The key its loader is registered under (``"graph_executor_factory"``...).
    """

    type_key: str = "module"
    exports_to_library: bool = False
    _closed: bool = False

    def __init__(self) -> None:
        self._imports: list[Module] = []

    # -- lifetime ---------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called on this module (or on a module importing it)."""
        return self._closed

    def close(self) -> None:
        """Release what this module tree holds: executors, arenas, the loaded library.

        Closes this module and every module it imports (depth first, each once): the
        other modules first (a factory drops its view of the weights), then the
        library (:class:`~.dso.DSOModule`: its executors are closed, their arenas
        released, its thread pool's workers joined, and the library is unloaded with
        ``dlclose`` and its memfd closed as soon as nothing points into it any more:
        at once, unless an array viewing its weights or a function pointer taken from
        it is still alive, in which case when the last of those goes). Idempotent.
        Afterwards the modules' functions and the executors raise
        :class:`ModuleClosedError`. Also ``with load_module(path) as lib: ...``.
        """
        with _close_lock:
            tree = self._tree()
            # the library last: what the other modules hold may point into it
            for m in sorted(tree, key=lambda m: m.exports_to_library):
                if not m._closed:
                    m._closed = True
                    m._release()

    def _tree(self) -> list[Module]:
        """This module and everything it imports, depth first, each once."""
        out, seen, todo = [], set(), [self]
        while todo:
            m = todo.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            out.append(m)
            todo.extend(reversed(m._imports))
        return out

    def _release(self) -> None:
        """Drop what this module holds (subclasses override; called once, by close)."""

    def _check_open(self) -> None:
        """Raise :class:`ModuleClosedError` when this module was closed."""
        if self._closed:
            raise ModuleClosedError(
                f"{self!r} was closed (Module.close): load the library again to use it"
            )

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass's own save_sections also gets the loader hint added.
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("save_sections")
        if own is not None and not getattr(own, "_adds_loader_hint", False):
            cls.save_sections = _hinted(own)

    # -- the tree ---------------------------------------------------------------
    @property
    def imported_modules(self) -> list[Module]:
        """The modules this one imports (a copy of the list, in import order)."""
        return list(self._imports)

    def import_module(self, module: Module) -> None:
        """Add ``module`` as an import of this one (an edge of the import tree).

        Raises
        ------
        TypeError
            ``module`` is not a :class:`Module`.
        """
        if not isinstance(module, Module):
            raise TypeError(f"import_module expects a Module, got {type(module).__name__}")
        self._imports.append(module)

    # -- functions --------------------------------------------------------------
    def _get_own_function(self, name: str) -> Callable | None:
        """This module's function ``name`` or None (subclasses override)."""
        return None

    def get_function(self, name: str, query_imports: bool = False) -> Callable:
        """The function ``name`` of this module (or of its imports, depth first).

        Parameters
        ----------
        name : str
            Function name (``"default"``, ``"monolib_run"``...).
        query_imports : bool
            Also search the imported modules, depth first, in import order.

        Raises
        ------
        FunctionNotFoundError
            No such function; the message names the module type key.
        ModuleClosedError
            The module was closed.
        """
        self._check_open()
        func = self._find_function(name, set()) if query_imports else self._get_own_function(name)
        if func is None:
            where = " or its imports" if query_imports else ""
            raise FunctionNotFoundError(f"module {self.type_key!r}{where} has no function {name!r}")
        return func

    def _find_function(self, name: str, seen: set[int]) -> Callable | None:
        """Depth-first search of the import graph (``seen`` guards against cycles)."""
        seen.add(id(self))
        self._check_open()
        func = self._get_own_function(name)
        for child in self._imports:
            if func is not None:
                break
            if id(child) not in seen:
                func = child._find_function(name, seen)
        return func

    def __getitem__(self, name: str) -> Callable:
        if not isinstance(name, str):
            raise TypeError(f"function name must be a str, got {type(name).__name__}")
        return self.get_function(name)

    # -- serialization ----------------------------------------------------------
    def save_to_bytes(self) -> bytes:
        """The module's payload, given back to its loader on load.

        Raises
        ------
        ExportError
            The module type cannot be serialized.
        """
        raise ExportError(f"module type {self.type_key!r} cannot be serialized")

    def save_sections(self) -> Mapping[str, Any]:
        """Named payloads (bytes-like objects) stored as container sections.

        The default is one section ``{"data": save_to_bytes()}``; a module with large
        parts (the factory's params) returns several so each is aligned and checked.
        For a module type defined outside monolib, a ``"loader_hint"`` section is
        added (see :data:`monolib.abi.names.LOADER_HINT_SECTION`), overrides included.
        """
        return _with_hint(self, {DATA_SECTION: self.save_to_bytes()})

    def export_library(
        self,
        path: Any,
        *,
        fcompile: Callable | None = None,
        compress: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> str:
        """Write this module tree as ONE shared library (TVM's ``export_library``).

        The steps (collect, pack container, embed, compile and link, finish) live in
        ``monolib.export.library``, which registers itself with
        :func:`register_exporter` when ``monolib.export`` is imported (``import
        monolib`` does): the runtime never imports the export steps.

        Parameters
        ----------
        path : str or os.PathLike
            Output file (the target's OS suffix appended when it has none).
        fcompile : callable, optional
            ``fcompile(output, files, target)``: compile and link instead of the
            system C compiler.
        compress : {None, "zlib", "zstd"}
            Codec of the container sections.
        progress : callable, optional
            Called with each step's name as it starts.

        Returns
        -------
        str
            The path written.

        Raises
        ------
        ExportError
            No exporter is registered (``monolib.export`` was never imported), or
            the export failed (see ``monolib.export.library.export_library``).
        """
        if _EXPORTER is None:
            raise ExportError(
                f"cannot export {self!r}: no exporter registered; import monolib.export "
                "(import monolib does) before calling export_library"
            )
        return _EXPORTER(self, path, fcompile=fcompile, compress=compress, progress=progress)

    def __repr__(self) -> str:
        return f"Module(type_key={self.type_key!r}, imports={len(self._imports)})"


def register_loader(type_key: str, floader: Loader, sections: bool = False) -> None:
    """Register how to rebuild modules of ``type_key`` from a container.

    Parameters
    ----------
    type_key : str
        The module type key (a later registration for the same key replaces it).
    floader : callable
        ``floader(data: memoryview) -> Module`` (the ``"data"`` section), or with
        ``sections=True``, ``floader({name: memoryview}) -> Module``. The memoryviews
        are read-only views of the mapped library: keep a reference, never write.
    sections : bool
        Whether ``floader`` takes every section as a dict.

    Raises
    ------
    ValueError
        ``type_key`` is ``"library"`` (the DSO module is built by the loader itself).
    """
    if type_key == LIBRARY:
        raise ValueError('type key "library" is reserved for the DSO module')
    if not callable(floader):
        raise TypeError("floader must be callable")
    _LOADERS[type_key] = (floader, bool(sections))
    logger.debug("registered loader for %r (sections=%s)", type_key, sections)


def register_exporter(fexport: Callable[..., str]) -> None:
    """Set what :meth:`Module.export_library` calls (``monolib.export`` does, on import).

    Parameters
    ----------
    fexport : callable
        ``fexport(module, path, *, fcompile, compress, progress) -> str``, the path
        written. A later registration replaces the earlier one.

    Raises
    ------
    TypeError
        ``fexport`` is not callable.
    """
    global _EXPORTER
    if not callable(fexport):
        raise TypeError("fexport must be callable")
    _EXPORTER = fexport


def get_loader(
    type_key: str, where: str = "", hint: Callable[[], dict | None] | None = None
) -> tuple[Loader, bool]:
    """The loader registered for ``type_key`` and whether it takes all sections.

    Parameters
    ----------
    type_key : str
    where : str
        Where the key was met, for the message (``"<library path> (module <i>)"``).
    hint : callable, optional
        ``hint() -> dict or None``: the module's loader hint (see
        :data:`monolib.abi.names.LOADER_HINT_SECTION`), read only when no loader is registered.

    Raises
    ------
    UnknownTypeKeyError
        No loader is registered; the message names the key, ``where``, the known keys
        and, when the library recorded it, the Python module to import (attributes
        ``type_key`` and ``loader_hint``: that dict or None).
    """
    try:
        return _LOADERS[type_key]
    except KeyError:
        pass
    known = ", ".join(sorted(_LOADERS)) or "none"
    at = f" in {where}" if where else ""
    hint = hint() if hint is not None else None
    if hint and hint.get("module") not in (None, "__main__"):
        todo = f"import {hint['module']} (it defines {hint.get('class')} and registers its loader)"
    elif hint and hint.get("file"):
        todo = f"run the code of {hint['file']} that defines {hint.get('class')} and registers it"
    else:
        todo = "import the package that defines it and calls monolib.register_loader"
    err = UnknownTypeKeyError(
        f"no loader registered for module type key {type_key!r}{at} (registered: {known}); "
        f"{todo}, before load_module"
    )
    err.type_key, err.loader_hint = type_key, hint
    raise err


def registered_type_keys() -> list[str]:
    """The type keys that have a registered loader, sorted."""
    return sorted(_LOADERS)
