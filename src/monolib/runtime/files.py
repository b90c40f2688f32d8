"""Files written whole or not at all: a new temporary file beside the target, renamed
over it (``os.replace``), created with its final mode so no umask change is needed.

Used by ``save_params``, ``export_library`` and the signing tool: a reader of the
target sees the old file or the new one, never a half-written one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

__all__ = ["create_beside", "write_atomic"]

logger = logging.getLogger(__name__)

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_TRIES = 100


def create_beside(path: str, mode: int = 0o666) -> tuple[int, str]:
    """Create a new, empty, uniquely named file in the directory of ``path``.

    Parameters
    ----------
    path : str
        The file the temporary one will replace (it need not exist).
    mode : int
        Creation mode; the kernel applies the process umask to it (as ``open()``
        does), so the file gets the mode a new file of that kind gets here.

    Returns
    -------
    (fd, tmp)
        The open descriptor (write only; the caller closes it) and the file's path,
        ``.<name>.<random>.tmp`` beside ``path``.

    Raises
    ------
    OSError
        The directory cannot be written, or no free name was found.
    """
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(_TRIES):
        tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, _FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path} after {_TRIES} tries")


def write_atomic(
    path: Any, chunks: Iterable[Any], chmod: int | None = None, sync: bool = False
) -> None:
    """Write the bytes-like ``chunks`` to ``path`` through a temp file and a rename.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced whole if it exists).
    chunks : iterable of bytes-like
        Written in order.
    chmod : int, optional
        An exact mode (e.g. ``0o600`` for a private key), set before any byte is
        written; default: ``0o666`` under the process umask, as ``open()`` gives.
    sync : bool
        ``fsync`` before the rename (the content survives a crash).

    Raises
    ------
    OSError
        The file cannot be created or written (no folder, no permission, disk full);
        the temporary file is removed and ``path`` is untouched.
    """
    path = os.fspath(path)
    fd, tmp = create_beside(path, 0o666 if chmod is None else chmod)
    try:
        if chmod is not None:
            os.fchmod(fd, chmod)  # exactly this mode, whatever the umask
        with os.fdopen(fd, "wb") as f:
            fd = -1  # the file object owns it now
            for chunk in chunks:
                f.write(chunk)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
