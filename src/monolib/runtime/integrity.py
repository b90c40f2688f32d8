"""The code digest: a library's own bytes (headers, code, data, the container's small
parts) checked BEFORE ``dlopen``, weights excluded.

The container checks its header, manifest and small sections on every load, but not
the library around it: a flipped byte in ``.text`` crashed the loading process
(SIGSEGV, SIGILL...) where monolib promises an error. Export therefore appends a
**trailer** after linking, and :func:`check_code` re-hashes what it names before the
dynamic loader sees the file. Layout (little endian), at the very end of the file::

    body: the linked library, [0, body_size)
    trailer JSON (UTF-8)    {"algorithm": "blake2b-256",
                             "entries": [[name, [[offset, size], ...], hex digest], ...],
                             "skipped": [[offset, size, name], ...]}
    footer (64 bytes)       magic b"\\x7fMLCODE1" (8) | u32 version | u32 JSON size
                            | u64 body size | 8 reserved | blake2b-256 of the JSON (32)

``entries`` and ``skipped`` together tile ``[0, body_size)`` exactly, so no byte is
left out by accident. An entry is one binary-format section (``.text``, ``.rodata``,
``.monolib``...), the bytes outside every section (file header, section table,
padding), or one integer tensor of a large params section; its digest is
BLAKE2b-256 over its ranges in order. ``skipped`` ranges are the weight payloads (raw
``params`` sections above :data:`~monolib.abi.container.SMALL_SECTION_BYTES`) minus
their integer tensors: those hold indices (Gather indices, Slice starts, tables the
compiler built), so a damaged weight gives wrong numbers, never an out-of-bounds
access; float (and large 8-bit or bool) tensors are values and stay unhashed, so a load stays
O(1) in the weights. BLAKE2b comes from CPython's built-in ``_blake2`` (~1.1 ms of CPU
per MiB here), so a plain load still never imports OpenSSL.

The exporter also sets bit :data:`FLAG_CODE_DIGEST` of the container header's flags:
a library carrying that bit but no trailer was truncated or stripped, and is refused.
A library with neither (exported before the digest existed) loads as before, with a
log line saying its code is not checked.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterable
from itertools import pairwise
from typing import Any, NamedTuple

from ..abi.binfmt.elf import SHT_NOBITS
from ..abi.container import SMALL_SECTION_BYTES, Container
from ..abi.names import GRAPH_SECTION, PARAMS_SECTION
from ..errors import IntegrityError

__all__ = [
    "ALGORITHM",
    "FLAG_CODE_DIGEST",
    "FOOTER_MAGIC",
    "FOOTER_SIZE",
    "CodeDigest",
    "check_code",
    "make_trailer",
    "read_trailer",
    "require",
    "without_digest",
]

logger = logging.getLogger(__name__)

FOOTER_MAGIC = b"\x7fMLCODE1"
VERSION = 1
ALGORITHM = "blake2b-256"
#: Container header flag: this library was exported with a code-digest trailer.
FLAG_CODE_DIGEST = 1
# magic, version, JSON size, body size, reserved, digest of the JSON
_FOOTER = struct.Struct("<8sIIQ8s32s")
FOOTER_SIZE = _FOOTER.size
assert FOOTER_SIZE == 64
#: A trailer JSON above this is refused unread (a real one is a few KiB).
_MAX_JSON = 16 << 20
#: 8-bit integer (and bool) tensors above this are quantized weights or masks
#: (values), not indices.
_SMALL_BYTE_TENSOR = 4096


def _blake2b() -> Any:
    try:
        from _blake2 import blake2b  # built in: no OpenSSL to import
    except ImportError:  # pragma: no cover - every CPython build has _blake2
        from hashlib import blake2b
    return blake2b


_BLAKE2B = _blake2b()


def _digest(buf: Any, ranges: Iterable[tuple[int, int]]) -> str:
    h = _BLAKE2B(digest_size=32)
    with memoryview(buf) as view:
        for off, size in ranges:
            h.update(view[off : off + size])
    return h.hexdigest()


class CodeDigest(NamedTuple):
    """What :func:`check_code` found.

    ``status``: ``"verified"``, ``"mismatch"`` (``mismatches`` names the entries and
    their ranges), ``"absent"`` (no trailer, none expected: an older library),
    ``"missing"`` (the container's flag says there was one) or ``"malformed"``
    (``error`` says why). ``covered``/``skipped`` are byte counts.
    """

    status: str
    algorithm: str = ""
    entries: int = 0
    covered: int = 0
    skipped: int = 0
    mismatches: tuple[str, ...] = ()
    error: str = ""

    def to_json(self) -> dict:
        """The report as a JSON-serializable dict (``monolib inspect --json``)."""
        out = self._asdict()
        out["mismatches"] = list(self.mismatches)
        return out


# --------------------------------------------------------------------------- write
def _integer_tensors(container: Container, i: int) -> list[tuple[str, int, int]]:
    """``(label, offset, nbytes)`` of module ``i``'s integer params tensors (offsets in
    the params blob), from its graph JSON; [] without one."""
    sec = next((s for s in container.modules[i].sections if s.name == GRAPH_SECTION), None)
    if sec is None:
        return []
    graph = json.loads(bytes(container.section_data(i, sec)).decode("utf-8"))
    out = []
    for p in graph.get("params", []) if isinstance(graph, dict) else []:
        dtype = str(p.get("dtype", ""))
        if not dtype.startswith(("int", "uint", "bool")):
            continue
        nbytes = int(p["nbytes"])
        if dtype in ("int8", "uint8", "bool") and nbytes > _SMALL_BYTE_TENSOR:
            continue  # quantized weights, large masks: values, never indices
        if nbytes > 0:
            out.append((f"params tensor {p.get('name')!r} ({dtype})", int(p["offset"]), nbytes))
    return out


def _skips(container: Container, coff: int) -> tuple[list[tuple[int, int, str]], list]:
    """The weight payloads to leave out (file ranges) and the integer tensors inside
    them that stay in, as ``(offset, size, label)``."""
    skipped, kept = [], []
    for i, entry in enumerate(container.modules):
        for sec in entry.sections:
            if sec.name != PARAMS_SECTION or sec.codec != "raw":
                continue
            if sec.stored_size <= SMALL_SECTION_BYTES:
                continue  # checked by the container on every load: cheap, keep it
            start, end = coff + sec.offset, coff + sec.offset + sec.stored_size
            pos = start
            tensors = sorted(
                (start + o, start + min(o + n, sec.stored_size), label)
                for label, o, n in _integer_tensors(container, i)
                if 0 <= o < sec.stored_size
            )
            for lo, hi, label in tensors:
                if lo > pos:
                    skipped.append((pos, lo - pos, f"module {i} params"))
                lo = max(lo, pos)
                if hi > lo:
                    kept.append((lo, hi - lo, label))
                pos = max(pos, hi)
            if end > pos:
                skipped.append((pos, end - pos, f"module {i} params"))
    return skipped, kept


def _partition(info: Any, body: int, cuts: list[tuple[int, int, str]]) -> dict[str, list]:
    """Name every byte of ``[0, body)`` outside ``cuts``: by the binary-format section
    holding it, else as header / outside-sections bytes. ``{name: [[off, size]]}``."""
    secs = []
    for s in info.sections if info is not None else []:
        if s.size <= 0 or s.offset <= 0 or (info.format == "ELF" and s.type == SHT_NOBITS):
            continue
        lo, hi = min(s.offset, body), min(s.offset + s.size, body)
        if hi > lo:
            secs.append((lo, hi, s.name or "(unnamed section)"))
    bounds = {0, body}
    for lo, hi, _ in secs + [(o, o + n, "") for o, n, _ in cuts]:
        bounds.update((lo, hi))
    cut_set = sorted((o, o + n) for o, n, _ in cuts)
    fmt = info.format if info is not None else "container"
    out: dict[str, list] = {}
    edges = sorted(b for b in bounds if 0 <= b <= body)
    for a, b in pairwise(edges):
        if any(lo <= a and b <= hi for lo, hi in cut_set):
            continue
        name = next((n for lo, hi, n in secs if lo <= a and b <= hi), None)
        if name is None:
            name = f"{fmt} header" if a == 0 else "bytes outside sections"
        ranges = out.setdefault(name, [])
        if ranges and ranges[-1][0] + ranges[-1][1] == a:
            ranges[-1][1] += b - a
        else:
            ranges.append([a, b - a])
    return out


def make_trailer(buf: Any, coff: int, info: Any) -> bytes:
    """The trailer (JSON + footer) to append to the linked library held in ``buf``.

    Parameters
    ----------
    buf : buffer
        The whole linked library (its body: no trailer yet).
    coff : int
        File offset of the container section.
    info : ElfInfo or None
        ``parse_binary``'s result for ``buf`` (None: a bare container).

    Returns
    -------
    bytes
        What to append to the file.
    """
    body = len(buf)
    with memoryview(buf)[coff:] as view:
        container = Container(view, source="the linked library")
        try:
            skipped, kept = _skips(container, coff)
        finally:
            container.release()
    named = _partition(info, body, skipped + kept)
    entries = [[name, ranges, _digest(buf, ranges)] for name, ranges in named.items()]
    entries += [[label, [[o, n]], _digest(buf, [(o, n)])] for o, n, label in kept]
    doc = {
        "algorithm": ALGORITHM,
        "entries": entries,
        "skipped": [[o, n, label] for o, n, label in skipped],
    }
    blob = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    footer = _FOOTER.pack(
        FOOTER_MAGIC, VERSION, len(blob), body, b"", _BLAKE2B(blob, digest_size=32).digest()
    )
    covered = sum(n for _, rs, _ in entries for _, n in rs)
    logger.debug(
        "code digest: %d entries, %d bytes hashed, %d skipped",
        len(entries), covered, sum(n for _, n, _ in skipped),
    )
    return blob + footer


# --------------------------------------------------------------------------- read
def read_trailer(buf: Any) -> tuple[dict, int] | None:
    """The parsed trailer JSON and the body size of the file in ``buf``, or None when
    the file ends with no trailer.

    Raises
    ------
    IntegrityError
        A footer is there but the trailer is truncated, of an unknown version, fails
        its own digest or is not the expected JSON.
    """
    size = len(buf)
    tail = size - FOOTER_SIZE
    if size < FOOTER_SIZE or bytes(buf[tail : tail + 8]) != FOOTER_MAGIC:
        return None
    _, version, jsize, body, reserved, digest = _FOOTER.unpack(buf[tail:size])
    if reserved != bytes(8):
        raise IntegrityError("code digest trailer: its reserved footer bytes are not zero")
    if version != VERSION:
        raise IntegrityError(
            f"code digest trailer version {version} is not readable (reads {VERSION})"
        )
    if jsize > _MAX_JSON or body + jsize + FOOTER_SIZE != size:
        raise IntegrityError(
            f"code digest trailer sizes (body {body}, JSON {jsize}) do not add up to the "
            f"file's {size} bytes: truncated or damaged"
        )
    blob = bytes(buf[body : body + jsize])
    if _BLAKE2B(blob, digest_size=32).digest() != digest:
        raise IntegrityError(f"code digest trailer at file offset {body} fails its own digest")
    try:
        doc = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise IntegrityError("code digest trailer is not valid JSON") from None
    return doc, body


def _parse(doc: Any, body: int) -> tuple[list, list]:
    """Check the trailer's structure; ``(entries, skipped)`` with int ranges."""
    if not isinstance(doc, dict) or doc.get("algorithm") != ALGORITHM:
        raise IntegrityError(f"code digest trailer: algorithm is not {ALGORITHM!r}")
    try:
        entries = [
            (str(name), [(int(o), int(n)) for o, n in ranges], str(hexd))
            for name, ranges, hexd in doc["entries"]
        ]
        skipped = [(int(o), int(n), str(label)) for o, n, label in doc["skipped"]]
    except (KeyError, TypeError, ValueError, OverflowError):
        raise IntegrityError("code digest trailer: malformed entries") from None
    spans = sorted([r for _, rs, _ in entries for r in rs] + [(o, n) for o, n, _ in skipped])
    pos = 0
    for o, n in spans:
        if o != pos or n <= 0:
            raise IntegrityError(
                f"code digest trailer: its ranges do not tile the file (at byte {pos})"
            )
        pos += n
    if pos != body:
        raise IntegrityError(f"code digest trailer covers {pos} bytes, the library has {body}")
    return entries, skipped


def _skips_allowed(skipped: list, container: Container | None, coff: int) -> None:
    """Each skipped range lies inside a raw params payload of the container: code,
    headers and small sections can never be left out."""
    payloads = []
    for entry in container.modules if container is not None else []:
        for sec in entry.sections:
            if sec.name == PARAMS_SECTION and sec.codec == "raw":
                payloads.append((coff + sec.offset, coff + sec.offset + sec.stored_size))
    for o, n, label in skipped:
        if not any(lo <= o and o + n <= hi for lo, hi in payloads):
            raise IntegrityError(
                f"code digest trailer skips bytes [{o}, {o + n}) ({label}), which are no weights"
            )


def check_code(
    buf: Any, container: Container | None, coff: int, flags: int = 0
) -> CodeDigest:
    """Check the code digest of the library file held in ``buf`` (no dlopen).

    Parameters
    ----------
    buf : buffer
        The whole file (an mmap: only the covered ranges are read).
    container : Container or None
        Its parsed container (the skipped ranges must be weight payloads of it).
    coff : int
        File offset of the container.
    flags : int
        The container header's flags (:data:`FLAG_CODE_DIGEST`: a trailer is due).

    Returns
    -------
    CodeDigest
        Never raises for a damaged file: the status says (see :func:`require`).
    """
    try:
        found = read_trailer(buf)
        if found is None:
            return CodeDigest("missing" if flags & FLAG_CODE_DIGEST else "absent")
        doc, body = found
        entries, skipped = _parse(doc, body)
        _skips_allowed(skipped, container, coff)
    except IntegrityError as exc:
        return CodeDigest("malformed", error=str(exc))
    bad = []
    for name, ranges, hexd in entries:
        if _digest(buf, ranges) != hexd:
            where = ", ".join(f"[{o}, {o + n})" for o, n in ranges[:3])
            more = f" and {len(ranges) - 3} more" if len(ranges) > 3 else ""
            bad.append(f"{name} (file bytes {where}{more})")
    covered = sum(n for _, rs, _ in entries for _, n in rs)
    return CodeDigest(
        "mismatch" if bad else "verified",
        ALGORITHM,
        len(entries),
        covered,
        sum(n for _, n, _ in skipped),
        tuple(bad),
    )


def require(report: CodeDigest, shown: str) -> None:
    """Raise unless ``report`` lets the library be loaded; log an older library.

    Raises
    ------
    IntegrityError
        The digest does not match (naming every entry that differs), the trailer is
        malformed, or the library was exported with a digest that is now missing.
    """
    if report.status == "verified":
        return
    if report.status == "absent":
        logger.info(
            "%s: no code digest (exported before monolib recorded one): its code is not "
            "checked before dlopen; export it again to have it checked",
            shown,
        )
        return
    if report.status == "missing":
        raise IntegrityError(
            f"{shown}: exported with a code digest, but the file ends without it "
            "(truncated, stripped or modified after export); export it again"
        )
    if report.status == "malformed":
        raise IntegrityError(f"{shown}: {report.error}")
    shown_bad = "; ".join(report.mismatches[:5])
    more = f" and {len(report.mismatches) - 5} more" if len(report.mismatches) > 5 else ""
    raise IntegrityError(
        f"{shown}: the library's bytes differ from those exported, in {shown_bad}{more}: "
        "the file is damaged; export or download it again (nothing was loaded)"
    )


def without_digest(data: bytes) -> bytes:
    """``data`` (a whole library) as monolib wrote it before the code digest: the
    trailer cut off and :data:`FLAG_CODE_DIGEST` cleared (tests of older libraries).

    Raises
    ------
    IntegrityError
        ``data`` has a malformed trailer.
    """
    from ..abi.binfmt import find_container  # only this helper needs the section search

    found = read_trailer(data)
    out = bytearray(data[: found[1]] if found is not None else data)
    off = find_container(bytes(out))[0]
    (flags,) = struct.unpack_from("<I", out, off + 12)
    struct.pack_into("<I", out, off + 12, flags & ~FLAG_CODE_DIGEST)
    return bytes(out)
