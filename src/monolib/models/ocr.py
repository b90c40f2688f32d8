"""Meaningful inputs and outputs for the PP-OCR models (detector, recognizer, line
classifier): render text with a TrueType font, preprocess as PaddleOCR does, decode.

Follows PaddleOCR's inference preprocessing (``tools/infer/predict_det.py``,
``predict_rec.py``, ``predict_cls.py``): the detector takes RGB/255 normalized with
the ImageNet mean and std, NCHW; the recognizer and the classifier take a line resized
to height 48 keeping its aspect (width ``ceil(48 * w / h)``), ``(x/255 - 0.5) / 0.5``,
at that natural width for a recognizer with a run-time width, or padded with zeros on
the right to a fixed width. The recognizer's output is decoded greedily with CTC
(index 0 is the blank). Pillow is imported on first use only (it is a test/bench dependency).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from ..errors import MonolibError

__all__ = [
    "FONT_PATH",
    "ctc_greedy_decode",
    "det_preprocess",
    "line_preprocess",
    "load_charset",
    "read_page",
    "render_line",
    "render_page",
    "text_boxes",
]

logger = logging.getLogger(__name__)

#: Debian ``fonts-dejavu-core``.
FONT_PATH = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
_STD = np.array([0.229, 0.224, 0.225], np.float32)


def _font(size: int):
    from PIL import ImageFont

    if not FONT_PATH.exists():
        raise MonolibError(
            f"font {FONT_PATH} is missing: install Debian's fonts-dejavu-core"
        )
    return ImageFont.truetype(str(FONT_PATH), size)


def render_line(text: str, font_size: int = 32, margin: int = 8) -> np.ndarray:
    """Render one line of black text on white, cropped to the text plus ``margin``.

    Returns
    -------
    numpy.ndarray
        uint8 RGB image, shape ``[H, W, 3]``.
    """
    from PIL import Image, ImageDraw

    font = _font(font_size)
    left, top, right, bottom = font.getbbox(text)
    img = Image.new("RGB", (right - left + 2 * margin, bottom - top + 2 * margin), "white")
    ImageDraw.Draw(img).text((margin - left, margin - top), text, fill="black", font=font)
    return np.asarray(img)


def render_page(lines: list[str], size: int | tuple[int, int] = 640, font_size: int = 40,
                top: int = 200, spacing: int = 100) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Render text lines on a white page of ``size`` (``H`` x ``W``, or one int for a
    square), one every ``spacing`` pixels from ``top``, starting 40 px from the left.

    Returns
    -------
    image : numpy.ndarray
        uint8 RGB, shape ``[H, W, 3]``.
    bands : list of (int, int)
        For each line, the rows ``[y0, y1)`` its ink covers.
    """
    from PIL import Image, ImageDraw

    height, width = (size, size) if isinstance(size, int) else size
    font = _font(font_size)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    bands = []
    for i, line in enumerate(lines):
        y = top + i * spacing
        draw.text((40, y), line, fill="black", font=font)
        _, y0, _, y1 = draw.textbbox((40, y), line, font=font)
        bands.append((int(y0), int(y1)))
    return np.asarray(img), bands


def det_preprocess(image: np.ndarray) -> np.ndarray:
    """Detector input from an RGB uint8 image ``[H, W, 3]`` (H, W multiples of 32).

    Returns
    -------
    numpy.ndarray
        float32 ``[1, 3, H, W]``: ``(x/255 - mean) / std`` with the ImageNet mean/std.
    """
    h, w = image.shape[:2]
    if h % 32 or w % 32:
        raise MonolibError(f"detector input is {h}x{w}; both sides must be multiples of 32")
    x = (image.astype(np.float32) / 255.0 - _MEAN) / _STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def line_preprocess(image: np.ndarray, height: int = 48, width: int | None = None,
                    max_width: int = 1280) -> np.ndarray:
    """Recognizer/classifier input from an RGB uint8 line image ``[h, w, 3]``.

    Resized (bilinear) to ``height`` keeping the aspect ratio, to the natural width
    ``ceil(height * w / h)`` as PaddleOCR's ``resize_norm_img`` rounds it, and
    normalized to ``(x/255 - 0.5) / 0.5``. With ``width`` (a library of fixed width)
    the line is squeezed to at most ``width`` and padded with zeros on the right to
    ``width``; without it (a library with a run-time width) the input has the natural
    width, squeezed to at most ``max_width``.

    Returns
    -------
    numpy.ndarray
        float32 ``[1, 3, height, width]``, or ``[1, 3, height, W]`` with
        ``W = min(ceil(height * w / h), max_width)`` when ``width`` is None.
    """
    from PIL import Image

    h, w = image.shape[:2]
    natural = math.ceil(height * w / h)
    new_w = min(natural, width if width is not None else max_width)
    resized = np.asarray(Image.fromarray(image).resize((new_w, height), Image.BILINEAR))
    x = (resized.astype(np.float32) / 255.0 - 0.5) / 0.5
    out = np.zeros((1, 3, height, width if width is not None else new_w), np.float32)
    out[0, :, :, :new_w] = x.transpose(2, 0, 1)
    return out


def load_charset(model_path: str | Path) -> list[str]:
    """The recognizer's character list: ``["<blank>", *metadata "character", " "]``.

    Raises
    ------
    MonolibError
        The model has no ``character`` metadata.
    """
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    if "character" not in meta:
        raise MonolibError(f"{model_path} has no metadata_props['character']")
    return ["<blank>", *meta["character"].splitlines(), " "]


def ctc_greedy_decode(probs: np.ndarray, charset: list[str]) -> str:
    """Greedy CTC decoding of one line: argmax per step, merge repeats, drop blanks.

    Parameters
    ----------
    probs : numpy.ndarray
        float ``[T, C]`` (or ``[1, T, C]``) class probabilities; class 0 is the blank.
    charset : list of str
        From :func:`load_charset`, ``len(charset) == C``.
    """
    probs = np.asarray(probs)
    if probs.ndim == 3:
        probs = probs[0]
    best = probs.argmax(axis=-1)
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] != best[:-1]
    return "".join(charset[i] for i in best[keep & (best != 0)])


def text_boxes(prob_map: np.ndarray, threshold: float = 0.3, pad: int | None = None,
               min_rows: int = 4, unclip_ratio: float = 2.0) -> list[tuple[int, int, int, int]]:
    """Text boxes from the detector's probability map, for horizontal lines.

    The map is thresholded; each run of consecutive rows holding text pixels is a
    line, boxed by the columns it covers, then grown on every side (DBNet predicts
    shrunk text kernels). The growth is PaddleOCR's "unclip" distance
    ``area * unclip_ratio / perimeter`` of the kernel box (``DBPostProcess``, for an
    axis-aligned box), or ``pad`` pixels when given. The whole glyph height matters:
    a line read at its natural width by a recognizer with a run-time width (no
    squeezing to a fixed width) loses its word gaps when the tops are cut.

    Parameters
    ----------
    prob_map : numpy.ndarray
        float ``[H, W]`` (or ``[1, 1, H, W]``) probabilities.
    pad : int, optional
        A fixed growth in pixels instead of the unclip distance.
    unclip_ratio : float
        PaddleOCR's ``det_db_unclip_ratio`` (it ships 1.5 with polygon unclipping;
        2.0 suits this axis-aligned simplification).

    Returns
    -------
    list of (x0, y0, x1, y1)
        Half-open pixel boxes, top to bottom.
    """
    m = np.asarray(prob_map).reshape(prob_map.shape[-2:]) > threshold
    h, w = m.shape
    rows = m.any(axis=1)
    boxes = []
    y = 0
    while y < h:
        if not rows[y]:
            y += 1
            continue
        y0 = y
        while y < h and rows[y]:
            y += 1
        if y - y0 >= min_rows:
            cols = np.flatnonzero(m[y0:y].any(axis=0))
            bw, bh = int(cols[-1]) + 1 - int(cols[0]), y - y0
            d = pad if pad is not None else round(bw * bh * unclip_ratio / (2 * (bw + bh)))
            boxes.append((max(0, int(cols[0]) - d), max(0, y0 - d),
                          min(w, int(cols[-1]) + 1 + d), min(h, y + d)))
    return boxes


def read_page(image: np.ndarray, detect, recognize, charset: list[str],
              rec_width: int | None = None, threshold: float = 0.3):
    """Detect and read every text line of ``image`` (the PP-OCR pipeline, simplified).

    Parameters
    ----------
    image : numpy.ndarray
        uint8 RGB ``[H, W, 3]``, H and W multiples of 32.
    detect : callable
        ``detect(x [1, 3, H, W] float32) -> probability map [1, 1, H, W]``.
    recognize : callable
        ``recognize(x [1, 3, 48, W] float32) -> [1, T, C]`` class probabilities.
    charset : list of str
        From :func:`load_charset`.
    rec_width : int, optional
        The recognizer's fixed input width (each line padded to it); None (a recognizer
        with a run-time width): each line at its natural width (:func:`line_preprocess`).

    Returns
    -------
    list of ((x0, y0, x1, y1), str)
        Each text box (top to bottom, see :func:`text_boxes`) with its text.
    """
    prob = detect(det_preprocess(image))
    lines = []
    for x0, y0, x1, y1 in text_boxes(prob, threshold):
        probs = recognize(line_preprocess(image[y0:y1, x0:x1], 48, rec_width))
        lines.append(((x0, y0, x1, y1), ctc_greedy_decode(probs, charset)))
    return lines
