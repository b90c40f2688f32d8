"""A user-defined module type: the post-processing of the PP-OCR text direction
classifier (``ch_ppocr_mobile_v2.0_cls_infer.onnx``), shipped INSIDE the model library.

The classifier outputs ``float32[N, 2]`` softmax scores over the labels ``"0"`` and
``"180"`` (text upright or upside down, PaddleOCR's ``ClsPostProcess``).
:class:`ClsPostprocessModule` (type key ``"example_cls_postprocess"``) holds the label
list and the rotation threshold; its function ``decode(probs)`` returns
``[(label, score)]`` and ``needs_rotation(probs)`` the boolean per image.

How a module type becomes part of an exported library (monolib's extension point,
after TVM's runtime ``Module`` with ``save_to_bytes`` and a registered loader):

1. subclass :class:`monolib.Module`, set ``type_key``, implement
   ``_get_own_function(name)`` and ``save_to_bytes()``;
2. call :func:`monolib.register_loader` with a ``floader(data: memoryview)`` at
   import time of this Python module;
3. ``factory.import_module(ClsPostprocessModule(...))`` and ``export_library``;
4. in the process that loads the library, ``import examples.user_module.postprocess``
   BEFORE ``monolib.load_module`` (else an UnknownTypeKeyError names this module).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

import numpy as np

import monolib

__all__ = ["TYPE_KEY", "ClsPostprocessModule", "load_cls_postprocess"]

logger = logging.getLogger(__name__)

TYPE_KEY = "example_cls_postprocess"


class ClsPostprocessModule(monolib.Module):
    """Decode classifier scores into labels (PaddleOCR ``ClsPostProcess``).

    Parameters
    ----------
    labels : sequence of str
        One label per score column (``["0", "180"]``).
    threshold : float
        ``needs_rotation`` is true where the ``"180"`` score exceeds it (PaddleOCR's
        ``cls_thresh``, 0.9).
    """

    type_key = TYPE_KEY

    def __init__(self, labels: Sequence[str] = ("0", "180"), threshold: float = 0.9) -> None:
        super().__init__()
        self.labels, self.threshold = list(labels), float(threshold)

    def _get_own_function(self, name: str) -> Callable | None:
        return {"decode": self.decode, "needs_rotation": self.needs_rotation}.get(name)

    def decode(self, probs: np.ndarray) -> list[tuple[str, float]]:
        """``float32[N, len(labels)]`` scores -> ``[(best label, its score)]`` per row.

        Raises
        ------
        monolib.InputError
            ``probs`` is not 2-D with one column per label.
        """
        probs = np.asarray(probs)
        if probs.ndim != 2 or probs.shape[1] != len(self.labels):
            raise monolib.InputError(
                f"{TYPE_KEY}.decode: scores of shape {list(probs.shape)}, expected "
                f"[N, {len(self.labels)}] (labels {self.labels})"
            )
        best = probs.argmax(axis=1)
        return [(self.labels[k], float(probs[i, k])) for i, k in enumerate(best)]

    def needs_rotation(self, probs: np.ndarray) -> list[bool]:
        """Per row: the best label is ``"180"`` with a score above ``threshold``."""
        return [lab == "180" and s > self.threshold for lab, s in self.decode(probs)]

    def save_to_bytes(self) -> bytes:
        """UTF-8 JSON ``{"labels", "threshold"}`` (what the loader reads back)."""
        return json.dumps({"labels": self.labels, "threshold": self.threshold}).encode()


def load_cls_postprocess(data: memoryview) -> ClsPostprocessModule:
    """The loader of ``"example_cls_postprocess"``: the bytes of ``save_to_bytes``.

    Raises
    ------
    monolib.ContainerError
        The payload is not the JSON this module writes.
    """
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
        return ClsPostprocessModule(obj["labels"], obj["threshold"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise monolib.ContainerError(f"{TYPE_KEY}: malformed payload ({exc})") from None


monolib.register_loader(TYPE_KEY, load_cls_postprocess)
