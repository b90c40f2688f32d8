"""Pre-processing of the PP-OCRv6 small detector and recognizer (``ppocrv6_det``,
``ppocrv6_rec``) as ``rapidocr==3.10.0`` does it.

The detector (``rapidocr/ch_ppocr_det/utils.py``, ``DetPreProcess``, with
``config.yaml``'s ``Det`` mean and std of 0.5) takes ``(x / 255 - 0.5) / 0.5`` NCHW,
not the ImageNet normalization of PP-OCRv4 (:func:`monolib.models.ocr.det_preprocess`).
The recognizer (``ch_ppocr_rec/main.py``, ``resize_norm_img``, ``rec_img_shape
[3, 48, 320]``) takes the line resized to height 48 at ``ceil(48 * w / h)``, squeezed
to at most the width, ``(x / 255 - 0.5) / 0.5``, zero-padded on the right: that is
:func:`monolib.models.ocr.line_preprocess` (Pillow's bilinear resize for OpenCV's).
Its 18710 classes are :func:`monolib.models.ocr.load_charset` of the model (blank,
``metadata_props["character"]``, space) and its output is already softmaxed.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import MonolibError
from .ocr import line_preprocess

__all__ = ["det_preprocess", "rec_preprocess"]

logger = logging.getLogger(__name__)


def det_preprocess(image: np.ndarray) -> np.ndarray:
    """PP-OCRv6 detector input from an RGB uint8 image ``[H, W, 3]`` (H, W multiples of 32).

    Returns
    -------
    numpy.ndarray
        float32 ``[1, 3, H, W]``: ``(x / 255 - 0.5) / 0.5``.

    Raises
    ------
    MonolibError
        A side is not a multiple of 32.
    """
    h, w = image.shape[:2]
    if h % 32 or w % 32:
        raise MonolibError(f"detector input is {h}x{w}; both sides must be multiples of 32")
    x = (image.astype(np.float32) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def rec_preprocess(image: np.ndarray, width: int | None = 320) -> np.ndarray:
    """PP-OCRv6 recognizer input ``[1, 3, 48, width]`` from an RGB uint8 line image
    (``width=None``: the line's natural width, for a library with a run-time width)."""
    return line_preprocess(image, 48, width)
