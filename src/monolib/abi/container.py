"""The container: the binary blob embedded in an exported library (write and read).

Layout (little endian), as fixed in ``docs/ARCHITECTURE.md``::

    header (128 bytes)
      magic b"\\x7fMONOLIB" (8) | u32 format version | u32 flags | u64 total size
      u64 manifest offset | u64 manifest size | 24 reserved | sha256(manifest) (32)
      | 32 reserved
    payloads, each at an offset aligned to 4096 (so weights are used in place)
    manifest: UTF-8 JSON
      {"modules": [{"type_key", "sections": [{"name", "offset", "size",
                     "stored_size", "codec", "sha256"}]}],
       "root": 0, "import_tree": {"row_ptr": [...], "child_indices": [...]},
       "producer": "monolib 0.1.0"}

``sha256`` is the digest of the stored bytes (before decompression), so a check
never needs to decompress. The import tree is CSR like TVM's ``_import_tree``:
the children of module ``i`` are ``child_indices[row_ptr[i]:row_ptr[i+1]]``. A
manifest without ``import_tree`` is the legacy layout (every module an import of the
DSO module, the DSO module the root). This module is pure bytes <-> manifest: it
never touches files or the dynamic loader.
"""

from __future__ import annotations

import io
import json
import logging
import struct
import zlib
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, BinaryIO, NamedTuple

from ..errors import ContainerError

__all__ = [
    "CODECS",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "PAYLOAD_ALIGN",
    "SMALL_SECTION_BYTES",
    "Container",
    "ModuleEntry",
    "SectionEntry",
    "pack_container",
    "sha256",
    "write_container",
]

logger = logging.getLogger(__name__)

MAGIC = b"\x7fMONOLIB"
#: 2 since run-time shapes (issue 12): its graph JSON may be version 2. The container
#: bytes are laid out as in 1, so a format-1 library loads as before.
FORMAT_VERSION = 2
#: Format versions this reader understands (it reads every version it ever wrote).
READABLE_VERSIONS = (1, 2)
HEADER_SIZE = 128
PAYLOAD_ALIGN = 4096
MIN_ALIGN = 64
#: Sections up to this size are digest-checked on every load; larger ones on verify.
#: 128 KiB: a manifest and a graph JSON fit; weights beyond it are checked on verify
#: only, so a plain load hashes < 1 ms and never needs OpenSSL (see :func:`sha256`).
SMALL_SECTION_BYTES = 1 << 17
PRODUCER = "monolib 0.1.0"

#: Up to this many bytes are hashed with the interpreter's built-in SHA-256 (no
#: OpenSSL to load: importing ``hashlib`` costs ~3-5 ms, more than hashing a manifest
#: and a graph JSON at ~250 MB/s); larger inputs go to OpenSSL's (SHA-NI, ~1.5 GB/s).
_BUILTIN_SHA_BYTES = SMALL_SECTION_BYTES


def _builtin_sha256() -> Any:
    try:
        from _sha256 import sha256 as builtin  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as builtin  # CPython >= 3.12
        except ImportError:
            return None
    return builtin


# Every load hashes the manifest: import the hash with the package (~0.3 ms: on some
# builds _sha256 is a shared object of its own), not inside the first load_module.
_BUILTIN_SHA256 = _builtin_sha256()


def sha256(data: Any) -> Any:
    """A SHA-256 hash object of ``data`` (bytes-like): ``hashlib.sha256``'s interface.

    Inputs up to :data:`_BUILTIN_SHA_BYTES` use CPython's built-in ``_sha256`` so a
    plain load never imports ``hashlib`` (OpenSSL); larger ones ``hashlib.sha256``.
    """
    if memoryview(data).nbytes <= _BUILTIN_SHA_BYTES and _BUILTIN_SHA256 is not None:
        return _BUILTIN_SHA256(data)
    import hashlib

    return hashlib.sha256(data)


# magic, version, flags, total, manifest offset, manifest size, reserved, digest, reserved
_HEADER = struct.Struct("<8sIIQQQ24s32s32s")
assert _HEADER.size == HEADER_SIZE


def _decode_zlib(data: memoryview, size: int) -> bytes:
    # bounded: a corrupt or hostile section cannot inflate past its declared size
    d = zlib.decompressobj()
    out = d.decompress(data, size + 1)
    if len(out) != size or not d.eof:
        raise ValueError(f"decompressed to {len(out)}+ bytes, manifest says {size}")
    return out


def _zstd():
    try:
        import zstandard
    except ImportError:
        raise ContainerError(
            "zstd sections need the `zstandard` package: pip install zstandard"
        ) from None
    return zstandard


def _encode_zstd(data: Any) -> bytes:
    return _zstd().ZstdCompressor(level=9).compress(bytes(data))


def _decode_zstd(data: memoryview, size: int) -> bytes:
    zstandard = _zstd()
    try:
        out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    except zstandard.ZstdError as exc:
        raise ValueError(str(exc)) from None
    if len(out) != size:
        raise ValueError(f"decompressed to {len(out)} bytes, manifest says {size}")
    return out


# codec name -> (encode, decode); "raw" sections are used in place (zero copy);
# compressed ones are decoded into memory at load (zstd: the `zstandard` package,
# imported only when a zstd section is met).
CODECS: dict[str, tuple[Any, Any]] = {
    "raw": (None, None),
    "zlib": (lambda data: zlib.compress(data, 6), _decode_zlib),
    "zstd": (_encode_zstd, _decode_zstd),
}


#: The most a codec can expand its input (deflate: 1032:1; zstd: an RLE block of
#: 128 KiB in 4 bytes, 32768:1). A section claiming more is refused before anything
#: is allocated for it; the decoders are also bounded by the claimed size.
MAX_RATIO = {"raw": 1, "zlib": 1032, "zstd": 1 << 15}


class SectionEntry(NamedTuple):
    """One payload: ``offset`` from the container start, ``size`` once decoded,
    ``stored_size`` in the file, ``codec`` and ``sha256`` (hex, of the stored bytes)."""

    name: str
    offset: int
    size: int
    stored_size: int
    codec: str
    sha256: str

    def to_json(self) -> dict:
        return self._asdict()


class ModuleEntry:
    """One module of the manifest: its type key and its sections."""

    __slots__ = ("sections", "type_key")

    def __init__(self, type_key: str, sections: list[SectionEntry] | None = None) -> None:
        self.type_key = type_key
        self.sections = sections if sections is not None else []

    def to_json(self) -> dict:
        return {"type_key": self.type_key, "sections": [s.to_json() for s in self.sections]}


# --------------------------------------------------------------------------- write
def _pad_to(out: BinaryIO, pos: int, align: int) -> int:
    pad = (-pos) % align
    if pad:
        out.write(b"\0" * pad)
    return pos + pad


def _write_section(out: BinaryIO, pos: int, name: str, data: Any, codec: str):
    """Write one payload at the next aligned offset; returns (entry, new position)."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    encode = CODECS[codec][0]
    stored = memoryview(encode(view)) if encode else view
    pos = _pad_to(out, pos, PAYLOAD_ALIGN)
    digest = sha256(stored).hexdigest()
    out.write(stored)
    entry = SectionEntry(name, pos, view.nbytes, stored.nbytes, codec, digest)
    return entry, pos + stored.nbytes


def write_container(
    out: BinaryIO,
    modules: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    root: int = 0,
    import_tree: tuple[Sequence[int], Sequence[int]] | None = None,
    compress: str | None = None,
    producer: str = PRODUCER,
) -> int:
    """Write a container to the binary stream ``out`` (from its current position).

    Parameters
    ----------
    out : binary file object
        Written sequentially; offsets are relative to the position at entry.
    modules : sequence of (type_key, {section name: bytes-like})
        Manifest entries in index order; the DSO module is ``("library", {})``.
    root : int
        Index of the root module (what ``load_module`` returns).
    import_tree : (row_ptr, child_indices) or None
        CSR import tree; None writes the legacy layout (no ``import_tree`` key).
    compress : {None, "raw", "zlib", "zstd"}
        Codec for every section (None = "raw": used in place, zero copy).

    Returns
    -------
    int
        Total container size in bytes.

    Raises
    ------
    ContainerError
        Unknown codec.
    """
    codec = compress or "raw"
    if codec not in CODECS:
        raise ContainerError(f"unknown container codec {codec!r} (known: {', '.join(CODECS)})")
    base = out.tell()
    out.write(b"\0" * HEADER_SIZE)
    pos = HEADER_SIZE
    entries = []
    for type_key, sections in modules:
        entry = ModuleEntry(type_key)
        for name, data in sections.items():
            sec, pos = _write_section(out, pos, name, data, codec)
            entry.sections.append(sec)
        entries.append(entry)
    manifest: dict[str, Any] = {"modules": [e.to_json() for e in entries], "root": int(root)}
    if import_tree is not None:
        row_ptr, child_indices = import_tree
        manifest["import_tree"] = {
            "row_ptr": [int(i) for i in row_ptr],
            "child_indices": [int(i) for i in child_indices],
        }
    manifest["producer"] = producer
    blob = json.dumps(manifest, separators=(",", ":")).encode("utf-8")
    pos = _pad_to(out, pos, MIN_ALIGN)
    out.write(blob)
    total = pos + len(blob)
    header = _HEADER.pack(
        MAGIC, FORMAT_VERSION, 0, total, pos, len(blob), b"", sha256(blob).digest(), b""
    )
    end = out.tell()
    out.seek(base)
    out.write(header)
    out.seek(end)
    logger.debug("wrote container: %d modules, %d bytes", len(entries), total)
    return total


def pack_container(modules, **kwargs) -> bytes:
    """:func:`write_container` into a bytes object (same arguments)."""
    buf = io.BytesIO()
    write_container(buf, modules, **kwargs)
    return buf.getvalue()


# --------------------------------------------------------------------------- read
class Container:
    """A parsed, checked container over a buffer (bytes, mmap, memoryview, ndarray).

    On construction the header, the manifest digest, the manifest's structure and
    every small section (<= :data:`SMALL_SECTION_BYTES`) are checked, so opening is
    O(1) in the weights' size; ``verify=True`` checks every section's digest.

    Parameters
    ----------
    buf : buffer
        Starts at the container's first byte; may be longer than the container.
    source : str
        Where the buffer came from (a path), named in every error message.
    verify : bool
        Check the SHA-256 of every section, large ones included.

    Raises
    ------
    ContainerError
        Bad magic, unknown format version, truncated, manifest digest mismatch,
        malformed manifest, section out of range, digest mismatch.
    """

    def __init__(self, buf: Any, source: str = "<memory>", verify: bool = False) -> None:
        self.source = source
        self._buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        if self._buf.format != "B" or self._buf.ndim != 1:
            self._buf = self._buf.cast("B")
        self._read_header()
        self.manifest = self._read_manifest()
        self.modules = self._parse_modules()
        self.root, self.import_tree = self._parse_tree()
        self.verify(all_sections=verify)

    def _fail(self, what: str) -> ContainerError:
        return ContainerError(f"{self.source}: container {what}")

    def _read_header(self) -> None:
        buf = self._buf
        if buf.nbytes < HEADER_SIZE:
            raise self._fail(f"truncated: {buf.nbytes} bytes, the header alone is {HEADER_SIZE}")
        fields = _HEADER.unpack(buf[:HEADER_SIZE])
        magic, version, flags, total, moff, msize, _, digest, _ = fields
        if magic != MAGIC:
            raise self._fail(
                f"has bad magic {magic!r} (expected {MAGIC!r}): not a monolib container"
            )
        if version not in READABLE_VERSIONS:
            raise self._fail(
                f"format version {version} is not readable by this monolib "
                f"(reads {', '.join(map(str, READABLE_VERSIONS))}); upgrade monolib"
            )
        if total > buf.nbytes:
            raise self._fail(f"truncated: header says {total} bytes, only {buf.nbytes} present")
        if moff < HEADER_SIZE or moff + msize > total:
            raise self._fail(f"manifest range [{moff}, {moff + msize}) lies outside [128, {total})")
        self.format_version, self.flags, self.total_size = version, flags, total
        self.header_bytes = bytes(buf[:HEADER_SIZE])
        self._manifest_range = (moff, msize)
        self._manifest_digest = digest

    def _read_manifest(self) -> dict:
        moff, msize = self._manifest_range
        blob = self._buf[moff : moff + msize]
        if sha256(blob).digest() != self._manifest_digest:
            raise self._fail(f"manifest at offset {moff} fails its SHA-256 check (corrupt)")
        try:
            manifest = json.loads(bytes(blob).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._fail(f"manifest is not valid UTF-8 JSON: {exc}") from None
        except RecursionError:  # "[[[[..." nested past the interpreter's stack
            raise self._fail("manifest JSON is nested too deeply") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("modules"), list):
            raise self._fail('manifest has no "modules" list')
        return manifest

    def _parse_section(self, i: int, raw: Any) -> SectionEntry:
        try:
            sec = SectionEntry(
                str(raw["name"]),
                int(raw["offset"]),
                int(raw["size"]),
                int(raw["stored_size"]),
                str(raw["codec"]),
                str(raw["sha256"]),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Infinity: Overflow
            raise self._fail(f"module {i} has a malformed section entry ({exc!r})") from None
        where = f"section {sec.name!r} of module {i}"
        end = sec.offset + sec.stored_size
        if sec.offset < HEADER_SIZE or sec.stored_size < 0 or end > self.total_size:
            raise self._fail(f"{where}: range [{sec.offset}, {end}) outside the container")
        if sec.size < 0:
            raise self._fail(f"{where}: negative size {sec.size}")
        if sec.offset % MIN_ALIGN:
            raise self._fail(f"{where}: offset {sec.offset} is not {MIN_ALIGN}-byte aligned")
        if sec.codec not in CODECS:
            raise self._fail(f"{where}: unknown codec {sec.codec!r} (known: {', '.join(CODECS)})")
        if sec.codec == "raw" and sec.size != sec.stored_size:
            raise self._fail(f"{where}: raw section with size {sec.size} != {sec.stored_size}")
        if sec.size > MAX_RATIO.get(sec.codec, 1) * sec.stored_size + 1024:
            raise self._fail(
                f"{where}: {sec.codec} section of {sec.stored_size} bytes claims to decode to "
                f"{sec.size} (more than the codec's {MAX_RATIO[sec.codec]}:1 can give)"
            )
        return sec

    def _parse_modules(self) -> list[ModuleEntry]:
        out = []
        for i, raw in enumerate(self.manifest["modules"]):
            if not isinstance(raw, dict) or not isinstance(raw.get("type_key"), str):
                raise self._fail(f"module entry {i} has no type_key")
            sections = raw.get("sections", [])
            if not isinstance(sections, list):
                raise self._fail(f"module entry {i}: sections is not a list")
            out.append(ModuleEntry(raw["type_key"], [self._parse_section(i, s) for s in sections]))
        return out

    def _parse_tree(self) -> tuple[int, tuple[list[int], list[int]] | None]:
        n = len(self.modules)
        root = self.manifest.get("root", 0)
        tree = self.manifest.get("import_tree")
        if tree is None:
            return root, None
        try:
            row_ptr = [int(v) for v in tree["row_ptr"]]
            child = [int(v) for v in tree["child_indices"]]
        except (KeyError, TypeError, ValueError, OverflowError):
            raise self._fail("import_tree needs integer lists row_ptr and child_indices") from None
        ok = len(row_ptr) == n + 1 and row_ptr[0] == 0 and row_ptr[-1] == len(child)
        ok = ok and all(a <= b for a, b in pairwise(row_ptr))
        if not ok:
            raise self._fail(f"import_tree row_ptr {row_ptr} does not fit {n} modules")
        if any(c < 0 or c >= n for c in child) or not (isinstance(root, int) and 0 <= root < n):
            raise self._fail(f"import_tree refers to a module index outside [0, {n})")
        self._check_acyclic(root, row_ptr, child)
        return root, (row_ptr, child)

    def _check_acyclic(self, root: int, row_ptr: list[int], child: list[int]) -> None:
        state = [0] * len(self.modules)  # 0 new, 1 on the stack, 2 done
        stack = [(root, iter(child[row_ptr[root] : row_ptr[root + 1]]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state[nxt] == 1:
                raise self._fail(f"import_tree has a cycle through module {nxt}")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(child[row_ptr[nxt] : row_ptr[nxt + 1]])))

    def release(self) -> None:
        """Drop the reference to the parsed buffer (so an mmap under it can close).

        The manifest stays readable; :meth:`section_data` then needs ``buf``.
        """
        self._buf.release()

    # -- access ---------------------------------------------------------------
    def stored(self, sec: SectionEntry) -> memoryview:
        """The stored bytes of ``sec`` (a view of the buffer, no copy)."""
        return self._buf[sec.offset : sec.offset + sec.stored_size]

    def check_section(self, index: int, sec: SectionEntry) -> None:
        """Check ``sec``'s SHA-256; raises ContainerError naming it on mismatch."""
        if sha256(self.stored(sec)).hexdigest() != sec.sha256:
            raise self._fail(
                f"section {sec.name!r} of module {index} ({self.modules[index].type_key}) "
                f"at offset {sec.offset} fails its SHA-256 check (corrupt)"
            )

    def verify(self, all_sections: bool = True) -> None:
        """Check section digests: every one, or only the small ones."""
        for i, mod in enumerate(self.modules):
            for sec in mod.sections:
                if all_sections or sec.stored_size <= SMALL_SECTION_BYTES:
                    self.check_section(i, sec)

    def section_data(self, index: int, sec: SectionEntry, buf: Any = None):
        """The decoded payload of ``sec``: a zero-copy view for ``"raw"``.

        ``buf`` (default: the parsed buffer) is another buffer holding the same
        container, e.g. the mapped library after dlopen, for in-place use.
        """
        view = memoryview(buf).cast("B") if buf is not None else self._buf
        stored = view[sec.offset : sec.offset + sec.stored_size]
        decode = CODECS[sec.codec][1]
        if decode is None:
            return stored
        try:
            return memoryview(decode(stored, sec.size))
        except (zlib.error, ValueError) as exc:
            raise self._fail(f"section {sec.name!r} of module {index}: cannot decode ({exc})")
        except MemoryError:
            raise self._fail(
                f"section {sec.name!r} of module {index}: no memory to decode {sec.size} bytes"
            ) from None

    def sections_of(self, index: int, buf: Any = None) -> dict[str, memoryview]:
        """``{name: data}`` of every section of module ``index``."""
        mod = self.modules[index]
        return {s.name: self.section_data(index, s, buf) for s in mod.sections}

    def children(self, index: int) -> list[int]:
        """Indices of the modules ``index`` imports (legacy layout: from the DSO)."""
        if self.import_tree is None:
            return []
        row_ptr, child = self.import_tree
        return child[row_ptr[index] : row_ptr[index + 1]]
