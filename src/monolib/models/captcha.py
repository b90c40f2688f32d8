"""Meaningful inputs and outputs for ddddocr's CRNN (``ddddocr`` key, ``common.onnx`` of
``ddddocr==1.6.1``): a rendered captcha-like word, ddddocr's pre-processing, CTC decoding.

Follows ``ddddocr/core/ocr_engine.py`` (``_preprocess_image``, ``_process_text_output``):
the image is resized (Lanczos) to height 64 keeping its aspect (width
``int(w * 64 / h)``), converted to grayscale, scaled to [0, 1], ``[1, 1, 64, W]``.
The model gives logits ``[T, 1, C]`` (its declared output shape ``[1, seqlen]`` is
wrong); the text is the argmax per step with repeats merged and index 0 (the blank)
dropped. ``common.onnx`` is ddddocr's ``beta`` model: its classes are
``ddddocr/charsets.py``'s ``CHARSET_BETA`` (8210 entries, mostly CJK);
:data:`ASCII_INDEX` holds the class of each ASCII letter and digit, read from that
list (a captcha word needs only those). Pillow is imported on first use only.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import MonolibError

__all__ = ["ASCII_INDEX", "HEIGHT", "ctc_decode", "preprocess", "render_captcha"]

logger = logging.getLogger(__name__)

HEIGHT = 64
_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_CLASSES = (
    7266, 4393, 1151, 6810, 5428, 55, 5690, 7412, 782, 4730, 5737, 2457, 320, 1503, 4429, 209,
    7576, 2376, 2714, 4102, 4588, 1073, 306, 689, 7877, 3073, 5461, 1204, 7961, 3128, 2547, 311,
    598, 1965, 6554, 7216, 2113, 210, 7844, 901, 3157, 2341, 1849, 5629, 5855, 897, 7712, 6887,
    2185, 521, 297, 2621, 4733, 4018, 2851, 309, 3606, 5223, 13, 6794, 4919, 4725)
#: class index of each ASCII letter and digit in ``CHARSET_BETA``
ASCII_INDEX: dict[str, int] = dict(zip(_CHARS, _CLASSES))
_CHAR_OF = {v: k for k, v in ASCII_INDEX.items()}


def render_captcha(word: str, size: tuple[int, int] = (256, HEIGHT), seed: int = 0) -> np.ndarray:
    """``word`` drawn as a simple captcha: a tinted background, four thin random lines,
    each character in its own dark color at a random height.

    Parameters
    ----------
    size : (int, int)
        Image ``(width, height)``; the characters are spread over the width.
    seed : int
        The random colors, lines and heights.

    Returns
    -------
    numpy.ndarray
        uint8 RGB ``[height, width, 3]``.
    """
    from PIL import Image, ImageDraw

    from .ocr import _font

    width, height = size
    if not word:
        raise MonolibError("render_captcha: empty word")
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (width, height), (235, 240, 245))
    draw = ImageDraw.Draw(img)
    for _ in range(4):
        ends = [tuple(int(v) for v in rng.integers(0, (width, height))) for _ in range(2)]
        draw.line(ends, fill=tuple(int(v) for v in rng.integers(120, 200, 3)), width=1)
    font = _font(int(height * 0.56))
    pitch = (width - 32) / len(word)
    for i, ch in enumerate(word):
        color = tuple(int(v) for v in rng.integers(0, 90, 3))
        draw.text((16 + i * pitch, int(rng.integers(height // 16, height // 4))), ch,
                  fill=color, font=font)
    return np.asarray(img)


def preprocess(image: np.ndarray) -> np.ndarray:
    """ddddocr's model input from an RGB uint8 image ``[h, w, 3]``.

    Returns
    -------
    numpy.ndarray
        float32 ``[1, 1, 64, int(w * 64 / h)]`` in [0, 1].
    """
    from PIL import Image

    h, w = image.shape[:2]
    img = Image.fromarray(image).resize((int(w * (HEIGHT / h)), HEIGHT), Image.LANCZOS)
    x = np.asarray(img.convert("L")).astype(np.float32) / 255.0
    return np.ascontiguousarray(x[None, None])


def ctc_decode(logits: np.ndarray) -> str:
    """The text of the model's logits ``[T, 1, C]``: argmax per step, repeats merged,
    blanks dropped; a class outside :data:`ASCII_INDEX` reads as ``?``."""
    logits = np.asarray(logits)
    if logits.ndim != 3 or logits.shape[1] != 1:
        raise MonolibError(f"ddddocr logits have shape {logits.shape}, expected [T, 1, C]")
    best = logits[:, 0].argmax(axis=-1)
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] != best[:-1]
    return "".join(_CHAR_OF.get(int(i), "?") for i in best[keep & (best != 0)])
