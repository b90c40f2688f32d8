"""The benchmarked models: fetch key, compile shapes and constants, and meaningful
inputs (rendered text, synthesized speech, a Python source file) for monolib and ORT."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from monolib.models import fetch_model, magika, ocr, vad

__all__ = ["MODEL_INPUTS", "BenchModel"]

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class BenchModel:
    """``make()`` returns (monolib feeds, ORT feeds): ORT also gets the inputs monolib
    compiles in as ``constants``."""

    key: str
    shapes: dict
    make: Callable[[], tuple[Feeds, Feeds]]
    constants: dict = field(default_factory=dict)


def _same(feeds: Feeds) -> tuple[Feeds, Feeds]:
    return feeds, feeds


def _det():
    image, _ = ocr.render_page(["Hello World 2024", "monolib compiles ONNX"])
    return _same({"x": ocr.det_preprocess(image)})


def _line(width: int):
    return lambda: _same({"x": ocr.line_preprocess(ocr.render_line("Hello World 2024"),
                                                   48, width)})


def _speech_chunks() -> np.ndarray:
    audio, _, _ = vad.speech_with_silence("The quick brown fox jumps over the lazy dog.", 0.2)
    return vad.vad_chunks(audio)


def _silero():
    chunk = _speech_chunks()[20:21]
    feeds = {"input": chunk, "state": np.zeros((2, 1, 128), np.float32)}
    return feeds, {**feeds, "sr": np.array(16000, np.int64)}


def _silero_seq():
    chunks = _speech_chunks()[:32]
    zeros = np.zeros((1, 1, 128), np.float32)
    return _same({"input": chunks, "h": zeros, "c": zeros})


def _magika():
    cfg = magika.load_config(fetch_model("magika_config"))
    source = Path(__file__).read_bytes()
    return _same({"bytes": magika.magika_features(source, cfg)})


MODEL_INPUTS: dict[str, BenchModel] = {
    "det": BenchModel("ppocr_det", {"x": (1, 3, 640, 640)}, _det),
    "rec": BenchModel("ppocr_rec", {"x": (1, 3, 48, 320)}, _line(320)),
    "cls": BenchModel("ppocr_cls", {"x": (1, 3, 48, 192)}, _line(192)),
    "silero": BenchModel("silero_vad", {"input": (1, 576), "state": (2, 1, 128)}, _silero,
                         {"sr": 16000}),
    "silero_seq": BenchModel("silero_vad_sequence",
                             {"input": (32, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
                             _silero_seq),
    "magika": BenchModel("magika", {"bytes": (1, 2048)}, _magika),
}
