"""Meaningful inputs for the Magika file-type classifier (standard_v3_3).

Follows Magika's feature extraction (``magika/magika.py``, ``_extract_features``):
from the first ``block_size`` bytes stripped of leading whitespace, the first
``beg_size`` bytes padded at the end; from the last ``block_size`` bytes stripped of
trailing whitespace, the last ``end_size`` bytes padded at the start; the padding
token is 256. The sizes come from the wheel's ``config.min.json``.
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

import numpy as np

__all__ = ["load_config", "magika_features", "magika_label"]

logger = logging.getLogger(__name__)

_WHITESPACE = b" \t\n\r\x0b\x0c"


def load_config(path: str | Path) -> dict:
    """The model's config (``config.min.json``) with ``target_labels_space`` as a list."""
    cfg = json.loads(Path(path).read_text())
    labels = cfg["target_labels_space"]
    if isinstance(labels, str):  # stored as a Python list literal
        cfg["target_labels_space"] = ast.literal_eval(labels)
    return cfg


def magika_features(content: bytes, config: dict) -> np.ndarray:
    """Model input for one file's bytes.

    Returns
    -------
    numpy.ndarray
        int32 ``[1, beg_size + end_size]`` (``[1, 2048]`` for standard_v3_3): byte
        values 0..255, padding 256.
    """
    block, beg_n, end_n = config["block_size"], config["beg_size"], config["end_size"]
    pad = config["padding_token"]
    beg_bytes = content[:block].lstrip(_WHITESPACE)[:beg_n]
    end_bytes = content[-block:].rstrip(_WHITESPACE)[-end_n:] if end_n else b""
    beg = np.full(beg_n, pad, np.int32)
    beg[:len(beg_bytes)] = np.frombuffer(beg_bytes, np.uint8)
    end = np.full(end_n, pad, np.int32)
    if end_bytes:
        end[end_n - len(end_bytes):] = np.frombuffer(end_bytes, np.uint8)
    return np.concatenate([beg, end])[None]


def magika_label(scores: np.ndarray, config: dict) -> str:
    """The top label of one row of class scores ``[214]`` (or ``[1, 214]``)."""
    return config["target_labels_space"][int(np.asarray(scores).reshape(-1).argmax())]
