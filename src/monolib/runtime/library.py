"""``load_module``: check a library file, dlopen it, rebuild its module tree.

Order matters for safety: the file is read and checked first (ELF headers, the
``.monolib`` section range, the container header, manifest digest and small
sections, see :mod:`.binfmt` and :mod:`.container`; then the code digest of
:mod:`.integrity`: headers, code, data and integer tensors, weights excluded) and only
then handed to the dynamic loader, so a truncated, corrupt or foreign file raises a
:class:`LibraryLoadError` / :class:`ContainerError` (:class:`IntegrityError` for
damaged code) instead of crashing. Sections are
then used in place from the mapped library: the weights are never copied (TVM RFC
"Standardize GraphRuntime exports into a single DLL", with its container's missing
magic, version, digest and alignment added).

With ``trusted_keys`` the library's detached Ed25519 signature
(:mod:`.trust`) is checked before ANY of the above: ``dlopen`` runs a
library's constructors, so the bytes are read once into a sealed memfd, verified
there, and that memfd is what gets loaded (never the path again).
"""

from __future__ import annotations

import ctypes
import json
import logging
import mmap
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..abi.binfmt import find_container, host_format, host_machine
from ..abi.container import HEADER_SIZE, Container
from ..abi.names import CONTAINER_END, CONTAINER_START, DATA_SECTION, LIBRARY, LOADER_HINT_SECTION
from ..errors import ContainerError, LibraryLoadError, MonolibError, SignatureError
from . import integrity, isa
from .dso import DSOModule, open_library, still_loaded
from .module import Module, get_loader

__all__ = ["load_module", "read_container", "read_loader_hints"]

logger = logging.getLogger(__name__)

def read_container(
    path: str,
    verify: bool = False,
    shown: str | None = None,
    extract: Callable[[Container], Any] | None = None,
    check_code: bool = False,
) -> tuple[Container, dict[str, Any]]:
    """Read and check the container of the library file ``path`` without dlopen.

    Parameters
    ----------
    path : str
        The library file.
    verify : bool
        Check every section's SHA-256 (else the small ones only).
    shown : str, optional
        The name used in error messages (default: ``path``).
    extract : callable, optional
        ``extract(container)`` is called while the file is mapped (read section data
        with ``container.section_data``; copy what you keep); its result is
        ``info["extracted"]``.
    check_code : bool
        Also check the code digest (:func:`.integrity.check_code`, never raising):
        ``info["code_digest"]`` is its :class:`~.integrity.CodeDigest` (else None).

    Returns
    -------
    (container, info)
        The parsed :class:`Container` (its buffer released: manifest only) and
        ``{"file_size", "section_offset", "section_size", "elf", "extracted",
        "code_digest"}``.

    Raises
    ------
    LibraryLoadError
        Missing, unreadable, empty, not an ELF shared library, truncated, no container.
    ContainerError
        The container is corrupt (see :class:`Container`).
    """
    shown = shown or path
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise LibraryLoadError(f"{shown}: cannot open library file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            raise LibraryLoadError(f"{shown}: not a regular file")
        if size == 0:
            raise LibraryLoadError(f"{shown}: library file is empty")
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)  # the mapping does not need the descriptor
    try:
        offset, length, elf = find_container(mm, shown)
        where = f"{shown} (.monolib section at file offset {offset})"
        with memoryview(mm)[offset : offset + length] as view:
            container = Container(view, source=where, verify=verify)
            extracted = extract(container) if extract else None
            container.release()
        code = integrity.check_code(mm, container, offset, container.flags) if check_code else None
    finally:
        try:
            mm.close()
        except BufferError:
            pass  # an error's traceback still holds a view; the GC unmaps it later
    info = {
        "file_size": size,
        "section_offset": offset,
        "section_size": length,
        "elf": elf,
        "extracted": extracted,
        "code_digest": code,
    }
    return container, info


def read_loader_hints(path: str) -> dict[int, dict]:
    """``{module index: loader hint}`` of a library file, read without dlopen.

    Raises
    ------
    LibraryLoadError, ContainerError
        The file is not a readable monolib library.
    """

    def extract(container: Container) -> dict[int, dict]:
        out = {}
        for i, entry in enumerate(container.modules):
            for sec in entry.sections:
                if sec.name == LOADER_HINT_SECTION:
                    raw = bytes(container.section_data(i, sec))
                    out[i] = json.loads(raw.decode("utf-8"))
        return out

    _, info = read_container(path, extract=extract)
    return info["extracted"]


def _loader_of(type_key: str, path: str, shown: str, i: int) -> tuple[Callable, bool]:
    """``get_loader`` for module ``i`` of the library at ``path``; a missing loader's
    error names the Python module the library recorded for it (best effort)."""

    def hint() -> dict | None:
        if not os.path.isfile(path):
            return None
        try:
            return read_loader_hints(path).get(i)
        except Exception as exc:  # noqa: BLE001  (only the wording of an error depends on it)
            logger.debug("no loader hint from %s (module %d): %r", shown, i, exc)
            return None

    return get_loader(type_key, where=f"{shown} (module {i})", hint=hint)


def _map_container(dso: DSOModule, container: Container, path: str) -> np.ndarray:
    """A read-only uint8 view of the container in the mapped library (no copy)."""
    start = dso.symbol_address(CONTAINER_START)
    n = dso.symbol_address(CONTAINER_END) - start
    if n < container.total_size:
        raise LibraryLoadError(
            f"{path}: mapped container is {n} bytes, its header says {container.total_size}"
        )
    buffer = (ctypes.c_char * n).from_address(start)
    dso.watch(buffer)  # every view of the container (weights...) holds it: close waits
    arr = np.frombuffer(buffer, dtype=np.uint8)
    # The pages are read-only; NumPy would let a write through and segfault.
    arr.flags.writeable = False
    if bytes(arr[:HEADER_SIZE]) != container.header_bytes:
        raise LibraryLoadError(f"{path}: mapped container header does not match the file's")
    return arr


def _load_one(container: Container, i: int, mapped: np.ndarray, path: str) -> Module:
    entry = container.modules[i]
    floader, takes_sections = _loader_of(entry.type_key, path, path, i)
    sections = container.sections_of(i, mapped)
    if not takes_sections and DATA_SECTION not in sections:
        raise ContainerError(f"{path}: module {i} ({entry.type_key}) has no 'data' section")
    try:
        module = floader(sections if takes_sections else sections[DATA_SECTION])
    except MonolibError:
        raise
    except Exception as exc:  # a user loader failing is a load error naming it
        raise ContainerError(
            f"{path}: loader for module {i} ({entry.type_key!r}) failed: {exc!r}"
        ) from exc
    if not isinstance(module, Module):
        raise ContainerError(f"{path}: loader for {entry.type_key!r} returned no Module")
    return module


def _build_tree(container: Container, mapped: np.ndarray, dso: DSOModule, path: str) -> Module:
    modules: list[Module] = []
    for i, entry in enumerate(container.modules):
        if entry.type_key == LIBRARY:
            if any(m is dso for m in modules):
                raise ContainerError(f"{path}: manifest lists two DSO ('library') modules")
            modules.append(dso)
        else:
            modules.append(_load_one(container, i, mapped, path))
    if container.import_tree is None:  # legacy layout: everything imported by the DSO
        for m in modules:
            if m is not dso:
                dso.import_module(m)
                if hasattr(m, "use_library"):  # a factory runs the DSO's code
                    m.use_library(dso)
        return dso
    for i, m in enumerate(modules):
        for c in container.children(i):
            m.import_module(modules[c])
    return modules[container.root]


def _load_path(
    path: str,
    verify: bool,
    shown: str,
    keepalive: Any = None,
    on_dlopen: Callable[[], None] | None = None,
    on_unload: Callable[[], None] | None = None,
) -> Module:
    container, info = read_container(path, verify=verify, shown=shown, check_code=True)
    elf = info["elf"]
    if elf is None:
        raise LibraryLoadError(
            f"{shown}: a bare container, not a library: nothing to dlopen "
            "(inspect it with `monolib inspect`)"
        )
    if elf.format != host_format():
        raise LibraryLoadError(
            f"{shown}: a {elf.format} library ({elf.machine}); this "
            f"system loads {host_format()} libraries: run it on its target"
        )
    if elf.machine != host_machine():
        raise LibraryLoadError(
            f"{shown}: library built for {elf.machine}, this machine is "
            f"{host_machine()}; run it on the target"
        )
    isa.check_library(path, container, info["section_offset"], shown)  # an error, not SIGILL
    for i, entry in enumerate(container.modules):  # fail before running any of its code
        if entry.type_key != LIBRARY:
            _loader_of(entry.type_key, path, shown, i)
    integrity.require(info["code_digest"], shown)  # damaged code must never reach dlopen
    # dlopen searches the library path for a name without a slash: make it absolute
    cdll = open_library(os.path.abspath(path))
    if on_dlopen is not None:
        on_dlopen()
    dso = DSOModule(cdll, shown, keepalive=keepalive, on_unload=on_unload)
    mapped = _map_container(dso, container, shown)
    root = _build_tree(container, mapped, dso, shown)
    logger.debug("loaded %s: %d modules, root %s", shown, len(container.modules), root.type_key)
    return root


# glibc's dlopen hands back an already loaded library whose NAME equals the path
# asked for: a reused "/proc/self/fd/N" would silently return an EARLIER library
# (its code, not the new bytes, and not the verified ones). So a memfd that was
# dlopen'd stays open, its number not reused, as long as its library is loaded:
# until Module.close unloads it (_release_memfd), else for the process's life.
_LOADED_MEMFDS: list[int] = []
_memfd_lock = threading.Lock()


def _release_memfd(fd: int, path: str) -> None:
    """After ``dlclose``: close the memfd unless the loader still has the library
    under its name (then the number must stay taken)."""
    if still_loaded(path):
        logger.debug("%s is still loaded after dlclose: its memfd stays open", path)
        return
    with _memfd_lock:
        if fd not in _LOADED_MEMFDS:
            return
        _LOADED_MEMFDS.remove(fd)
    os.close(fd)


def _seal(fd: int) -> None:
    """Forbid any further change of the memfd's content (write, grow, shrink)."""
    try:
        import fcntl

        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except (ImportError, AttributeError, OSError) as exc:  # old kernel: best effort
        logger.debug("could not seal the library memfd: %s", exc)


def _has_memfd() -> bool:
    return hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def _new_memfd() -> int:
    flags = getattr(os, "MFD_CLOEXEC", 0) | getattr(os, "MFD_ALLOW_SEALING", 0)
    return os.memfd_create("monolib-library", flags)


def _load_memfd(
    fd: int, verify: bool, shown: str, check: Callable[[int], None] | None = None
) -> Module:
    """Seal the memfd ``fd`` (holding a whole library), run ``check(fd)`` on the sealed
    content, then dlopen it as ``/proc/self/fd/N``. Takes ownership of ``fd``."""
    opened: list[bool] = []
    try:
        _seal(fd)
        if check is not None:
            check(fd)
        path = f"/proc/self/fd/{fd}"
        return _load_path(
            path,
            verify,
            shown,
            on_dlopen=lambda: opened.append(True),
            on_unload=lambda: _release_memfd(fd, path),
        )
    finally:
        if opened:
            with _memfd_lock:
                _LOADED_MEMFDS.append(fd)
        else:
            os.close(fd)  # never dlopen'd: its number may be reused


def _load_bytes(data: Any, verify: bool, shown: str = "<bytes>") -> Module:
    """Load a library held in memory: sealed memfd + /proc/self/fd/N (a temp file
    where there is no memfd)."""
    view = memoryview(data).cast("B")
    if _has_memfd():
        fd = _new_memfd()
        try:
            with os.fdopen(os.dup(fd), "wb") as f:
                f.write(view)
        except BaseException:
            os.close(fd)
            raise
        return _load_memfd(fd, verify, shown)
    # No memfd (not Linux): a private temp file, less strict than a sealed memfd.
    import tempfile  # only this path needs it (it imports random, shutil...)

    fd, tmp = tempfile.mkstemp(suffix=".so", prefix="monolib-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(view)
        return _load_path(tmp, verify, shown)
    finally:
        os.unlink(tmp)


def _open_regular(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise LibraryLoadError(f"{path}: cannot open library file: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LibraryLoadError(f"{path}: not a regular file")
    return fd


def _copy_file(path: str, write: Callable[[bytes], Any]) -> None:
    """Read the regular file ``path`` once, through one descriptor, into ``write``."""
    fd = _open_regular(path)
    try:
        while chunk := os.read(fd, 1 << 22):
            write(chunk)
    except OSError as exc:
        raise LibraryLoadError(f"{path}: cannot read library file: {exc.strerror}") from None
    finally:
        os.close(fd)


def _verify_memfd(fd: int, signature: Any, trusted_keys: Any, shown: str) -> None:
    """Verify the signature over the (sealed) content of ``fd``, read via a mapping."""
    from . import trust  # lazily: only a trusted load needs hashlib/hmac/base64

    size = os.fstat(fd).st_size
    if size == 0:
        info = trust.verify_bytes(b"", signature, trusted_keys, where=shown)
    else:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        try:
            info = trust.verify_bytes(mm, signature, trusted_keys, where=shown)
        finally:
            mm.close()
    logger.info("%s: signed by trusted key %s; loading the verified bytes", shown, info.key_id)


def _load_trusted(path: Any, verify: bool, trusted_keys: Any, signature: Any) -> Module:
    """Read once, verify those bytes, load those bytes (never the path again).

    With a memfd: the file (or the given bytes) is copied into a memfd, the memfd is
    SEALED (no write, grow or shrink, by anyone), the signature is checked over the
    sealed content, and that same memfd is dlopen'd. Elsewhere: a private copy in
    memory is verified and then loaded through a temp file.
    """
    from . import trust  # lazily: only a trusted load needs hashlib/hmac/base64

    in_memory = isinstance(path, (bytes, bytearray, memoryview))
    shown = "<bytes>" if in_memory else _fspath(path)
    if signature is None:
        if in_memory:
            raise SignatureError(
                "<bytes>: a library given in memory has no signature file beside it: "
                "pass signature= (the .sig path or its content)"
            )
        signature = trust.signature_path(shown)
    if not _has_memfd():
        data = bytes(path) if in_memory else _read_all(shown)  # a private copy
        trust.verify_bytes(data, signature, trusted_keys, where=shown)
        return _load_bytes(data, verify, f"{shown} (verified)")
    fd = _new_memfd()
    try:
        with os.fdopen(os.dup(fd), "wb") as f:
            if in_memory:
                f.write(memoryview(path).cast("B"))
            else:
                _copy_file(shown, f.write)
    except BaseException:
        os.close(fd)
        raise

    def check(sealed: int) -> None:
        _verify_memfd(sealed, signature, trusted_keys, shown)

    return _load_memfd(fd, verify, f"{shown} (verified)", check)


def _read_all(path: str) -> bytes:
    parts: list[bytes] = []
    _copy_file(path, parts.append)
    return b"".join(parts)


def _is_wasm(path: Any) -> bool:
    """Whether ``path`` (bytes-like, or a readable file) holds a WebAssembly module."""
    if isinstance(path, (bytes, bytearray, memoryview)):
        return bytes(memoryview(path).cast("B")[:4]) == b"\0asm"
    try:
        with open(_fspath(path), "rb") as f:
            return f.read(4) == b"\0asm"
    except (OSError, TypeError, ValueError):
        return False  # the native path reports what is wrong with it


def _fspath(path: Any) -> str:
    path = os.fspath(path)
    return os.fsdecode(path) if isinstance(path, bytes) else path


def load_module(
    path: Any, verify: bool = False, trusted_keys: Any = None, signature: Any = None
) -> Module:
    """Load an exported library and return the ROOT of its module tree.

    Parameters
    ----------
    path : str, os.PathLike, or bytes-like
        The library file (``model.so``), or its whole content in memory.
    verify : bool
        Check the SHA-256 of every container section, weights included (O(size));
        a plain load checks the header, manifest and sections <= 128 KiB only
        (``container.SMALL_SECTION_BYTES``).
    trusted_keys : sequence of (path, bytes or Ed25519PublicKey), optional
        When given, the library must carry a valid Ed25519 signature by one of these
        public keys (:mod:`monolib.runtime.trust`). The file is read ONCE into a memfd
        that is then sealed (nobody can change it any more), the signature is checked
        over exactly those bytes, and exactly that memfd is dlopen'd
        (``/proc/self/fd/N``): the path is never opened again, so the file cannot be
        swapped between check and load, and no code of an unverified library runs.
        Needs the ``cryptography`` package.
    signature : str, os.PathLike, bytes or dict, optional
        The detached signature (path, JSON content or parsed document); default
        ``path + ".sig"``. Required when ``path`` is bytes. Giving it without
        ``trusted_keys`` is an error (it would check nothing).

    Returns
    -------
    Module
        The root module (the graph executor factory for a compiled model); for a
        legacy container (no import tree), the DSO module with every other module
        as its import.

    Raises
    ------
    LibraryLoadError
        Missing, truncated or foreign file, no container, the dynamic loader refused.
    ContainerError
        Corrupt container (bad magic, version, digest, manifest).
    IntegrityError
        A byte of the library's code, headers, data or integer tensors differs from
        its code digest (:mod:`.integrity`; the message names the section or tensor),
        or that digest is damaged, or missing from a library exported with one.
        Checked before dlopen: none of its code has run.
    UnknownTypeKeyError
        A module type key has no registered loader.
    SignatureError
        With ``trusted_keys``: the signature is missing or malformed, the bytes were
        modified after signing, the signer is not trusted, ``trusted_keys`` is empty,
        or ``cryptography`` is not installed. Nothing was loaded.

    Notes
    -----
    Raw sections are used in place: the factory's params are a read-only view of
    the mapped library, never copied. A WebAssembly module (``.wasm``, starting with
    ``\0asm``) runs through wasmtime instead (:mod:`.wasm_module`, docs/wasm.md): the
    root is then a factory whose executors run in the module.
    """
    if _is_wasm(path):
        from .wasm_module import load_wasm  # wasmtime only for a .wasm

        return load_wasm(path, verify, trusted_keys, signature)
    if trusted_keys is not None:
        return _load_trusted(path, verify, trusted_keys, signature)
    if signature is not None:  # fail closed: a caller must not believe it was checked
        raise SignatureError("signature= given without trusted_keys=: nothing would be verified")
    if isinstance(path, (bytes, bytearray, memoryview)):
        return _load_bytes(path, verify)
    path = _fspath(path)
    return _load_path(path, verify, path)
