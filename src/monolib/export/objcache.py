"""A cache of compiled object files, keyed by content.

Building a library again (the same model, or a variant whose translation units are the
same text) reuses the object files of the first build instead of running the compiler.
The key is the SHA-256 of the unit's text, the compiler's identity (its command and
``--version`` output) and the flags (a portable build's levels each have theirs, so
each level of a unit is an entry of its own); an entry is the object's bytes followed by their
SHA-256, so a damaged entry is noticed, dropped and rebuilt. Entries are written to a
temporary file and renamed (atomic: a concurrent build sees a whole entry or none).
The oldest entries (by last use) go when the cache is over its size cap.

Where: ``$MONOLIB_OBJECT_CACHE`` if set (``off``: no cache), else
``$XDG_CACHE_HOME/monolib/objects`` or ``~/.cache/monolib/objects``. Cap:
``$MONOLIB_OBJECT_CACHE_MB`` (default 512).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Sequence

__all__ = ["DEFAULT_CAP_MB", "ObjectCache", "compiler_identity", "default_cache"]

logger = logging.getLogger(__name__)

#: Size cap of the default cache, in MiB.
DEFAULT_CAP_MB = 512
_DIGEST = 32  # bytes of SHA-256 after the object


@functools.lru_cache(maxsize=16)
def compiler_identity(cmd: tuple[str, ...]) -> str:
    """The compiler command and its ``--version`` output (a new compiler: new keys)."""
    try:
        res = subprocess.run([*cmd, "--version"], capture_output=True, text=True,
                             timeout=120, check=False)
        version = res.stdout + res.stderr
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"<no version: {exc}>"
    return "\0".join(cmd) + "\0" + version


class ObjectCache:
    """Object files by content hash in the directory ``root``.

    Parameters
    ----------
    root : str
        Directory of the entries (created on first store).
    cap_bytes : int
        Total size above which the least recently used entries are removed.
    """

    def __init__(self, root: str, cap_bytes: int = DEFAULT_CAP_MB << 20) -> None:
        self.root = os.fspath(root)
        self.cap_bytes = int(cap_bytes)
        self._stored = -1  # bytes stored since the last trim (-1: none yet)

    def key(self, text: str | bytes, compiler: Sequence[str], flags: Sequence[str]) -> str:
        """Hex key of the object that ``compiler`` with ``flags`` makes of ``text``."""
        h = hashlib.sha256()
        for part in (compiler_identity(tuple(compiler)), "\0".join(flags)):
            h.update(part.encode("utf-8"))
            h.update(b"\1")
        h.update(text.encode("utf-8") if isinstance(text, str) else text)
        return h.hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key + ".o")

    def get(self, key: str, dest: str) -> bool:
        """Write the cached object ``key`` to ``dest``; False when absent or damaged (a
        damaged entry is removed)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return False
        body, digest = data[:-_DIGEST], data[-_DIGEST:]
        if len(data) <= _DIGEST or hashlib.sha256(body).digest() != digest:
            logger.warning("object cache: %s is damaged; rebuilding it", path)
            _unlink(path)
            return False
        with open(dest, "wb") as f:
            f.write(body)
        try:
            os.utime(path)  # last use, for the size cap
        except OSError:
            pass
        logger.debug("object cache hit %s", key[:16])
        return True

    def put(self, key: str, obj: str) -> None:
        """Store the object file ``obj`` under ``key`` (atomically); errors are logged,
        never raised: the cache is an optimisation."""
        path = self._path(key)
        try:
            with open(obj, "rb") as f:
                body = f.read()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body + hashlib.sha256(body).digest())
                os.replace(tmp, path)
            except BaseException:
                _unlink(tmp)
                raise
            # the directory is walked at the first store and after each 1/16 of the cap
            if self._stored < 0 or self._stored + len(body) > self.cap_bytes // 16:
                self._stored = 0
                self._trim()
            else:
                self._stored += len(body)
        except OSError as exc:
            logger.info("object cache: cannot store %s: %s", path, exc)

    def _trim(self) -> None:
        """Remove the least recently used entries while the total is over the cap."""
        entries = []
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                entries.append((st.st_mtime, st.st_size, p))
        total = sum(e[1] for e in entries)
        for _, size, p in sorted(entries):
            if total <= self.cap_bytes:
                break
            _unlink(p)
            total -= size


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def default_cache() -> ObjectCache | None:
    """The cache of ``$MONOLIB_OBJECT_CACHE`` (``off``/``0``: None) or the user's cache
    directory, capped at ``$MONOLIB_OBJECT_CACHE_MB`` MiB."""
    where = os.environ.get("MONOLIB_OBJECT_CACHE", "").strip()
    if where.lower() in ("off", "0", "none", "no"):
        return None
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "monolib", "objects")
    try:
        cap = int(float(os.environ.get("MONOLIB_OBJECT_CACHE_MB", DEFAULT_CAP_MB)) * (1 << 20))
    except ValueError:
        cap = DEFAULT_CAP_MB << 20
    return ObjectCache(where, cap)
