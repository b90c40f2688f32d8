"""``export_library``: a module tree -> ONE shared library, atomically.

Named steps, as in TVM's ``Module.export_library`` (RFC "Standardize GraphRuntime
exports into a single DLL"):

1. collect: walk the tree from the root, number the modules, find the one module
   that compiles to the library (CSourceModule); two are an ExportError;
2. pack container: every other module's ``save_sections()`` and the CSR import
   tree into ``container.bin`` (see :mod:`monolib.abi.container`);
3. embed container: the ``.incbin`` assembler file (see :mod:`.embed`);
4. compile and link: the C source + the assembler file -> a library in the work
   directory, with ``fcompile`` or the system C compiler;
5. code digest: append the trailer of :mod:`monolib.runtime.integrity` (a digest of
   every byte that is not a weight payload, checked before every ``dlopen``); a
   ``.wasm`` (target ``c -mtriple=wasm32-wasi``, :mod:`.wasm`) gets instead the
   ``"monolib"`` custom section pointing at its container (a host validates a module's
   code when it compiles it);
6. check and finish: re-read the container and the digest from the new file (no
   dlopen), move it to a temporary file beside the output, then ``os.replace`` it
   onto the path.

Intermediates live in a temporary directory; on any failure neither the output nor
the temporary output is left behind.
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import stat
import struct
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from ..abi.container import write_container
from ..abi.names import LIBRARY
from ..errors import ExportError
from ..runtime import integrity
from ..runtime.files import create_beside
from ..runtime.library import read_container
from ..runtime.module import Module
from .capi import tree_capi_source
from .csource import CSourceModule, split_source
from .embed import linker_options, write_embed_asm
from .objcache import default_cache
from .targets import Target
from .toolchain import build_jobs, compile_objects, isa_sections, link_shared
from . import wasm

__all__ = ["collect_modules", "export_library"]

logger = logging.getLogger(__name__)

# A library with no CSourceModule still needs one object file to link.
_EMPTY_C = "/* monolib: this library holds only its embedded container */\n"


def collect_modules(root: Module) -> tuple[list[Module], list[int], list[int]]:
    """Number the modules of the tree under ``root`` (depth first, root = 0).

    Returns
    -------
    (modules, row_ptr, child_indices)
        Unique modules in index order and the CSR import tree.

    Raises
    ------
    ExportError
        More than one module compiles to the library (a shared library holds one),
        or the imports form a cycle.
    """
    modules: list[Module] = []
    index: dict[int, int] = {}

    on_path: set[int] = set()

    def visit(mod: Module) -> int:
        if id(mod) in on_path:
            raise ExportError(f"the module tree has an import cycle through {mod!r}")
        if id(mod) not in index:
            index[id(mod)] = len(modules)
            modules.append(mod)
            on_path.add(id(mod))
            for child in mod.imported_modules:
                visit(child)
            on_path.discard(id(mod))
        return index[id(mod)]

    visit(root)
    libs = [m for m in modules if m.exports_to_library]
    if len(libs) > 1:
        raise ExportError(
            f"the module tree holds {len(libs)} modules that compile to the library "
            f"({', '.join(repr(m) for m in libs)}); a shared library holds exactly one"
        )
    row_ptr, child = [0], []
    for mod in modules:
        child.extend(index[id(c)] for c in mod.imported_modules)
        row_ptr.append(len(child))
    return modules, row_ptr, child


def _manifest_entries(modules: Sequence[Module]) -> list[tuple[str, Any]]:
    entries = []
    for mod in modules:
        if mod.exports_to_library:
            if not isinstance(mod, CSourceModule):
                mod.save_to_bytes()  # a loaded DSOModule: raises a clear ExportError
            entries.append((LIBRARY, isa_sections(mod.target)))  # checked at load
        else:
            entries.append((mod.type_key, dict(mod.save_sections())))
    return entries


def _output_path(path: Any, target: Target) -> str:
    path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ExportError(f"export_library needs a file path, got {path!r}")
    if not os.path.splitext(os.path.basename(path))[1]:
        path += target.lib_suffix  # the target's OS picks the suffix
    if os.path.isdir(path):
        raise ExportError(f"{path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ExportError(f"{path}: directory {parent} does not exist")
    return path


def _link_library(work: str, files: list[str], target: Target, fcompile) -> str:
    """Compile and link ``files`` into a shared library inside ``work``."""
    # Link inside the work directory: some linkers write companions (.lib, .pdb for
    # a .dll) beside their output, and nothing but the library may reach the user.
    linked = os.path.join(work, "lib" + target.lib_suffix)
    if fcompile is not None:
        fcompile(linked, files, target)
    else:  # the units in parallel, each from the object cache when there, then one link
        objects = compile_objects(files, target, cwd=work, jobs=build_jobs(), cache=default_cache())
        options = wasm.link_options() if target.is_wasm else linker_options(work, target)
        link_shared(objects, linked, target, cwd=work, options=options)
    if not os.path.isfile(linked) or os.path.getsize(linked) == 0:
        raise ExportError(f"the compiler produced no library at {linked}")
    if target.is_wasm:  # no trailer: a host validates the module's code when it compiles it
        wasm.add_container_section(linked)
        read_container(linked)  # found through that section, as inspect finds it
        return linked
    read_container(linked)  # the file must read back (no dlopen)
    _append_code_digest(linked)
    return linked


def _append_code_digest(linked: str) -> None:
    """Append the code-digest trailer (:mod:`monolib.runtime.integrity`) to the linked
    library and check that it reads back and verifies."""
    info = read_container(linked)[1]
    with open(linked, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        trailer = integrity.make_trailer(mm, info["section_offset"], info["elf"])
    with open(linked, "ab") as f:
        f.write(trailer)
    report = read_container(linked, check_code=True)[1]["code_digest"]
    if report.status != "verified":
        raise ExportError(f"{linked}: the code digest does not read back ({report})")
    logger.debug("code digest: %d bytes in %d entries", report.covered, report.entries)


def _pack_objects(work: str, files: list[str], target: Target, fcompile) -> str:
    """Compile ``files`` to object files and pack them into ``model.tar``, to be linked
    later into the user's own library or program (as TVM's ``.tar`` export)."""
    objects = compile_objects(files, target, cwd=work)
    packed = os.path.join(work, "model.tar")
    with tarfile.open(packed, "w") as tar:
        for obj in objects:
            tar.add(obj, arcname=os.path.basename(obj))
    return packed


# output suffix -> how the C source and the container's assembler file become the
# output (default: a shared library)
OUTPUT_FORMATS = {".tar": _pack_objects}


def _set_flag(blob: str, flag: int) -> None:
    """Set ``flag`` in the container header's u32 flags (bytes 12-15) of ``blob``."""
    with open(blob, "r+b") as f:
        f.seek(12)
        (flags,) = struct.unpack("<I", f.read(4))
        f.seek(12)
        f.write(struct.pack("<I", flags | flag))


def _build(work: str, tmp_out: str, modules, tree, lib, target, options) -> None:
    fcompile, compress, step, suffix = options
    step("pack container")
    blob = os.path.join(work, "container.bin")
    with open(blob, "wb") as f:
        write_container(f, _manifest_entries(modules), root=0, import_tree=tree, compress=compress)
    if suffix not in OUTPUT_FORMATS and not target.is_wasm:  # it will end with a code digest
        _set_flag(blob, integrity.FLAG_CODE_DIGEST)
    step("embed container")
    if target.is_wasm:  # a data segment (relative name: the assembler runs in work)
        asm = wasm.write_embed_asm(work, os.path.basename(blob))
    else:
        asm = write_embed_asm(work, blob, target)
    units = [_EMPTY_C]
    if isinstance(lib, CSourceModule):  # a shared library of the system compiler: split
        split = fcompile is None and suffix not in OUTPUT_FORMATS
        # the target: its CPU check in the glue, a portable one's levels (always split)
        units = split_source(lib.source, build_jobs() if split else 1, target)
        units[-1] += tree_capi_source(modules, lib, blob)  # monolib.h's C API (docs/c_api.md)
    srcs = [os.path.join(work, "lib.c" if len(units) == 1 else f"lib_{k}.c")
            for k in range(len(units))]
    for src, text in zip(srcs, units):
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
    step("compile and link")
    out = OUTPUT_FORMATS.get(suffix, _link_library)(work, [*srcs, asm], target, fcompile)
    step("finish")
    try:
        os.replace(out, tmp_out)  # same file system: a rename
    except OSError:
        shutil.copyfile(out, tmp_out)


def _reserve_beside(path: str) -> tuple[str, int]:
    """Create a new empty temporary file beside ``path``; return it and its mode.

    The file is created with mode 0o755 and the kernel applies the process umask, so
    its mode is the library's final one (what ``cc -shared`` gives, without the
    group/other write bits) and the umask is never changed to learn it: changing it,
    even for an instant, would let another thread create a world-writable file.

    Raises
    ------
    ExportError
        No temporary file can be created in the output's directory.
    """
    try:
        fd, tmp = create_beside(path, 0o755)
    except OSError as exc:
        raise ExportError(f"{path}: cannot write beside the output: {exc}") from exc
    try:
        return tmp, stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def export_library(
    mod: Module,
    path: Any,
    *,
    fcompile: Callable[[str, list[str], Target], None] | None = None,
    compress: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Export the module tree under ``mod`` as ONE shared library at ``path``.

    Parameters
    ----------
    mod : Module
        Root of the tree (what ``load_module`` will return), e.g. the factory.
    path : str or os.PathLike
        Output file. Without a suffix, the target OS's is appended (``.so``,
        ``.dylib``, ``.dll``); a given suffix is kept. ``.tar``: the object files
        (``lib.o``, ``container.o``) packed, to be linked later by the user.
    fcompile : callable, optional
        ``fcompile(output, files, target)``: compile and link the C source and the
        assembler file in ``files`` into ``output`` (default: the system C compiler).
    compress : {None, "zlib", "zstd"}
        Codec of the container sections (None: raw, used in place at load).
    progress : callable, optional
        Called with each step's name (str) as it starts.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ExportError
        Two library modules in the tree, a module that cannot be serialized, a bad
        path. Nothing is left at ``path`` (an older file there is kept untouched).
    ToolchainError
        No C compiler (the message says what to install), or it failed.
    """
    step = progress or (lambda name: None)
    step("collect modules")
    modules, row_ptr, child = collect_modules(mod)
    lib = next((m for m in modules if m.exports_to_library), None)
    target = lib.target if isinstance(lib, CSourceModule) else Target("c")
    path = _output_path(path, target)
    tmp_out, mode = _reserve_beside(path)
    try:
        with tempfile.TemporaryDirectory(prefix="monolib-export-", dir=_work_base(modules)) as work:
            options = (fcompile, compress, step, os.path.splitext(path)[1].lower())
            _build(work, tmp_out, modules, (row_ptr, child), lib, target, options)
        os.chmod(tmp_out, mode)  # the linker's output replaced the reserved file
        os.replace(tmp_out, path)
    except BaseException as exc:
        if os.path.exists(tmp_out):
            os.unlink(tmp_out)
        if isinstance(exc, OSError):  # disk full, permissions...: name the output
            raise ExportError(f"{path}: export failed: {exc}") from exc
        raise
    logger.info("exported %s (%d modules)", path, len(modules))
    return path


#: Where the intermediate files (container, object, library) go when they fit: the
#: assembler and the linker each write a full copy of the weights, and a disk that
#: takes 200 MB/s makes that most of a large model's export time.
_TMPFS = "/dev/shm"


def _work_base(modules) -> str | None:
    """A RAM-backed directory for the export's intermediates when it has room for three
    copies of the weights with 1 GB to spare (``None``: the system's temp directory)."""
    try:
        st = os.statvfs(_TMPFS)
    except OSError:
        return None
    weights = sum(int(getattr(getattr(m, "params", None), "nbytes", 0) or 0) for m in modules)
    free = st.f_bavail * st.f_frsize
    return _TMPFS if os.access(_TMPFS, os.W_OK) and free > 3 * weights + (1 << 30) else None

