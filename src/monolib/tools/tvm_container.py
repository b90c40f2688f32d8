"""Read the module container of a library exported by Apache TVM, without loading it.

Two layouts, both little endian, made of TVM's stream primitives (``u64``; a string
or byte blob is ``u64 length + bytes``; a vector is ``u64 count + count u64``):

* current (tvm-ffi, symbol ``__tvm_ffi__library_bin`` in ``.rodata``; tvm-ffi's
  ``ProcessLibraryBin``)::

      u64 nbytes | vec row_ptr | vec child_indices
      | per module (len(row_ptr) - 1 of them): str kind [, bytes data unless "_lib"]

* legacy (symbol ``__tvm_dev_mblob``; TVM's ``ProcessModuleBlob``)::

      [u64 nbytes] | u64 entry count | per entry: str type_key, then
      "_lib": nothing (the library itself) | "_import_tree": vec row_ptr,
      vec child_indices | other: bytes data

The import tree is CSR: the children of module ``i`` are
``child_indices[row_ptr[i]:row_ptr[i + 1]]``; module 0 is the root. A legacy blob
without ``_import_tree`` has the library as the root importing every other module.
Every length and count is checked against the bytes left BEFORE anything is read or
allocated, so a corrupt blob is a :class:`ContainerError`, never a huge allocation.
"""

from __future__ import annotations

import logging
import struct
import sys
from itertools import pairwise
from typing import Any, NamedTuple

from ..abi.binfmt import find_symbol
from ..abi.container import sha256
from ..errors import ContainerError

__all__ = ["FFI_SYMBOL", "LEGACY_SYMBOL", "LIB_KEY", "TvmContainer", "TvmModule", "find_tvm"]

logger = logging.getLogger(__name__)

FFI_SYMBOL = "__tvm_ffi__library_bin"
LEGACY_SYMBOL = "__tvm_dev_mblob"
LIB_KEY = "_lib"
_TREE_KEY = "_import_tree"
_U64 = struct.Struct("<Q")


class TvmModule(NamedTuple):
    """One module of a TVM container: its type key (``"_lib"``: the library's own
    code), the offset of its bytes from the blob's start, their size and SHA-256
    (both None for ``"_lib"``)."""

    type_key: str
    offset: int | None
    size: int | None
    sha256: str | None


class TvmContainer(NamedTuple):
    """A parsed TVM container: ``layout`` (``"ffi"`` or ``"legacy"``), the symbol it
    was read from, its size in bytes, the modules, and the CSR import tree (root 0)."""

    layout: str
    symbol: str
    nbytes: int
    modules: list[TvmModule]
    row_ptr: list[int]
    child_indices: list[int]

    def children(self, i: int) -> list[int]:
        """Indices of the modules module ``i`` imports."""
        return self.child_indices[self.row_ptr[i] : self.row_ptr[i + 1]]


class _Reader:
    """Bounded reads from a byte view; every failure names the offset."""

    def __init__(self, buf: memoryview, where: str) -> None:
        self.buf, self.pos, self.where = buf, 0, where

    def fail(self, what: str) -> ContainerError:
        return ContainerError(f"{self.where}: {what} (at byte {self.pos})")

    def u64(self, what: str) -> int:
        if self.pos + 8 > len(self.buf):
            raise self.fail(f"truncated: {what} runs past the end ({len(self.buf)} bytes)")
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def blob(self, what: str) -> tuple[int, int]:
        """(offset, length) of a ``u64 length + bytes`` field, checked, not copied."""
        n = self.u64(f"length of {what}")
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{what} claims {n} bytes, only {len(self.buf) - self.pos} are left")
        start = self.pos
        self.pos += n
        return start, n

    def string(self, what: str) -> str:
        start, n = self.blob(what)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None

    def vec(self, what: str) -> list[int]:
        n = self.u64(f"count of {what}")
        if n > (len(self.buf) - self.pos) // 8:
            raise self.fail(
                f"{what} claims {n} entries, only {len(self.buf) - self.pos} bytes left"
            )
        out = list(struct.unpack_from(f"<{n}Q", self.buf, self.pos))
        self.pos += 8 * n
        return out

    def module(self, key: str) -> TvmModule:
        if key == LIB_KEY:
            return TvmModule(key, None, None, None)
        start, n = self.blob(f"bytes of module {key!r}")
        digest = sha256(self.buf[start : start + n]).hexdigest()
        return TvmModule(key, start, n, digest)


def _check_tree(r: _Reader, n: int, row_ptr: list[int], child: list[int]) -> None:
    ok = len(row_ptr) == n + 1 and row_ptr[0] == 0 and row_ptr[-1] == len(child)
    if not (ok and all(a <= b for a, b in pairwise(row_ptr))):
        raise r.fail(f"import tree row_ptr {row_ptr[:10]} does not fit {n} modules")
    if any(c >= n for c in child):
        raise r.fail(f"import tree names a module outside [0, {n})")


def _parse_ffi(r: _Reader) -> tuple[list[TvmModule], list[int], list[int]]:
    row_ptr = r.vec("import tree row_ptr")
    child = r.vec("import tree child_indices")
    if not row_ptr:
        raise r.fail("import tree row_ptr is empty (it has one entry per module, plus one)")
    modules = [r.module(r.string(f"kind of module {i}")) for i in range(len(row_ptr) - 1)]
    _check_tree(r, len(modules), row_ptr, child)
    return modules, row_ptr, child


def _parse_legacy(r: _Reader) -> tuple[list[TvmModule], list[int], list[int]]:
    count = r.u64("entry count")
    if count > (len(r.buf) - r.pos) // 8:  # every entry has at least its key's length
        raise r.fail(f"entry count {count} does not fit in {len(r.buf) - r.pos} bytes")
    modules: list[TvmModule] = []
    tree: tuple[list[int], list[int]] | None = None
    for i in range(count):
        key = r.string(f"type key of entry {i}")
        if key == _TREE_KEY:
            tree = (r.vec("_import_tree row_ptr"), r.vec("_import_tree child_indices"))
        else:
            modules.append(r.module(key))
    if tree is None:  # the oldest layout: the library imports every other module
        lib = next((i for i, m in enumerate(modules) if m.type_key == LIB_KEY), None)
        if lib is not None and lib != 0:
            modules.insert(0, modules.pop(lib))
        n = len(modules)
        return modules, [0, n - 1] + [n - 1] * (n - 1) if n else [0], list(range(1, n))
    _check_tree(r, len(modules), *tree)
    return modules, *tree


def parse_tvm_blob(buf: Any, layout: str, symbol: str = "", where: str = "<memory>"):
    """Parse a TVM container held in ``buf`` (its symbol's bytes and maybe more).

    Parameters
    ----------
    buf : buffer
        Starts at the symbol; may run past its end (the leading ``nbytes`` bounds it).
    layout : {"ffi", "legacy"}
    symbol, where : str
        Named in the result and in error messages.

    Returns
    -------
    TvmContainer

    Raises
    ------
    ContainerError
        Truncated, a length or count past the end, not UTF-8, a bad import tree.
    """
    view = memoryview(buf).cast("B")
    parse = _parse_ffi if layout == "ffi" else _parse_legacy
    try:
        return _parse_at(view, 8, parse, layout, symbol, where)
    except ContainerError:
        if layout != "legacy":
            raise
        first_error = sys.exc_info()[1]
    try:  # "may be prefixed with its size": a legacy blob without the prefix
        return _parse_at(view, 0, parse, layout, symbol, where)
    except ContainerError:
        raise first_error from None


def _parse_at(view: memoryview, base: int, parse, layout: str, symbol: str, where: str):
    if base:
        nbytes = _Reader(view, where).u64("the leading byte count")
        if nbytes > len(view) - base:
            raise ContainerError(
                f"{where}: truncated: the blob claims {nbytes} bytes, {len(view) - base} present"
            )
    else:
        nbytes = len(view)
    modules, row_ptr, child = parse(_Reader(view[base : base + nbytes], where))
    modules = [m._replace(offset=m.offset + base) if m.size is not None else m for m in modules]
    return TvmContainer(layout, symbol, nbytes, modules, row_ptr, child)


def find_tvm(buf: Any, info: Any, path: str = "<memory>") -> tuple[int, TvmContainer] | None:
    """Find and parse the TVM container of a library file's bytes, or None.

    ``info`` is :func:`monolib.abi.binfmt.parse_binary`'s result on ``buf``.
    Returns ``(file offset of the symbol, container)``; the current layout is
    preferred when a file has both symbols.

    Raises
    ------
    ContainerError
        The symbol is there but its bytes are not a valid container.
    LibraryLoadError
        A symbol table lies outside the file.
    """
    for symbol, layout in ((FFI_SYMBOL, "ffi"), (LEGACY_SYMBOL, "legacy")):
        found = find_symbol(buf, info, symbol, path)
        if found is None:
            continue
        offset, size = found
        where = f"{path} (TVM container {symbol} at file offset {offset})"
        view = memoryview(buf)[offset : offset + size]
        return offset, parse_tvm_blob(view, layout, symbol, where)
    return None
