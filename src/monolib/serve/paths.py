"""The libraries a serving application is made of: ``{model name: path}`` from what
the user gives, and each file's SHA-256 (a replaced library is a new version). No Ray
here: ``monolib serve`` checks its arguments before Ray starts."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["file_digest", "model_paths"]

logger = logging.getLogger(__name__)


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex): a replaced library is a new version."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_paths(path_or_paths: Any, name: str | None = None) -> dict[str, str]:
    """``{model name: absolute path}`` from a path, ``"name=path"`` strings, a list of
    them, or a mapping; a bare path's name is its file stem (``name`` for a single one).

    Raises
    ------
    InputError
        No path, a name given twice, or a file that does not exist.
    """
    if isinstance(path_or_paths, Mapping):
        items = [(str(k), str(v)) for k, v in path_or_paths.items()]
    else:
        paths = ([path_or_paths] if isinstance(path_or_paths, (str, os.PathLike))
                 else list(path_or_paths))
        items = []
        for p in paths:
            text = os.fspath(p)
            n, sep, rest = text.partition("=")
            if sep and n and "/" not in n:
                items.append((n, rest))
            else:
                items.append((Path(text).name.split(".")[0], text))
    if name is not None:
        if len(items) != 1:
            raise InputError(f"name={name!r} names one model, {len(items)} paths were given")
        items = [(name, items[0][1])]
    if not items:
        raise InputError("serve: no library given")
    out: dict[str, str] = {}
    for n, p in items:
        if n in out:
            raise InputError(f"serve: model name {n!r} given twice ({out[n]}, {p})")
        if not os.path.isfile(p):
            raise InputError(f"serve: model {n!r}: no such file {p!r}")
        out[n] = os.path.abspath(p)
    return out
