"""The "More real models" of issue 14, compiled once each (static shapes as ``bench/``
times them, and one run-time-width build), run in monolib, compared with ONNX Runtime
within the model tests' bound, and checked for meaning on real inputs:

* PP-OCRv6 small detector (``rapidocr==3.10.0``): finds the two lines of a rendered page,
  the same boxes as ORT's map gives;
* PP-OCRv6 small recognizer: reads a rendered line;
* ddddocr's CRNN (``ddddocr==1.6.1``): reads rendered captcha-like words, at the bench's
  fixed width and through one library with a run-time width;
* openWakeWord 0.4.0's mel spectrogram -> speech embedding -> "alexa" head, streamed
  over speech from espeak-ng: "alexa" scores high, another phrase low, as with ORT.
"""

import os
from pathlib import Path

import numpy as np
import pytest

import monolib
from monolib.models import captcha, fetch_model, ocr, ppocrv6, vad, wakeword

from .conftest import PAGE, TEXT, shared_library

pytestmark = pytest.mark.slow

#: the bench's static shapes (bench/bench_inputs.py)
SHAPES = {
    "ppocrv6_det": {"x": (1, 3, 640, 640)},
    "ppocrv6_rec": {"x": (1, 3, 48, 320)},
    "ddddocr": {"input1": (1, 1, 64, 256)},
    "oww_mel": {"input": (1, wakeword.MEL_SAMPLES)},
    "oww_embedding": {"input_1": (1, wakeword.WINDOW, 32, 1)},
    "oww_alexa": {"onnx::Flatten_0": (1, wakeword.N_EMBEDDINGS, 96)},
}
CAPTCHA = "Ab3De9"


class _Lib:
    """An exported model library loaded in this process."""

    def __init__(self, path: Path, input_name: str):
        self.gm = monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))
        self.name = input_name

    def __call__(self, x: np.ndarray) -> list[np.ndarray]:
        self.gm.run(**{self.name: x})
        return [self.gm.get_output(i).numpy().copy() for i in range(self.gm.get_num_outputs())]


@pytest.fixture(scope="module")
def lib(shared_dir):
    """``lib(key)``: the library of ``key`` at its bench shape; ``lib("ddddocr",
    dynamic=True)``: ddddocr with a run-time width 32..512. Each is compiled and exported
    once per test session (the xdist workers share it through a file lock)."""
    loaded = {}

    def get(key: str, dynamic: bool = False) -> _Lib:
        if (key, dynamic) in loaded:
            return loaded[key, dynamic]
        shapes = {"input1": (1, 1, 64, (32, 512))} if dynamic else SHAPES[key]
        path = shared_library(shared_dir, f"more_{key}{'_dyn' if dynamic else ''}", key, shapes)
        loaded[key, dynamic] = _Lib(path, next(iter(shapes)))
        return loaded[key, dynamic]

    return get


def _ort(ort_session, key, x, optimized=True):
    sess = ort_session(key, optimized)
    return sess.run(None, {sess.get_inputs()[0].name: x})


@pytest.fixture(scope="module")
def det_io(lib, ort_session, page):
    x = ppocrv6.det_preprocess(page[0])
    return (x, lib("ppocrv6_det")(x), _ort(ort_session, "ppocrv6_det", x),
            _ort(ort_session, "ppocrv6_det", x, optimized=False))


def test_v6_det_matches_onnxruntime(det_io, matches):
    _, got, want, unopt = det_io
    matches(got, want, "PP-OCRv6 det", want_unopt=unopt)


def test_v6_det_finds_the_text_boxes(det_io, page):
    _, (prob,), (want,), _ = det_io
    _, bands = page
    boxes = ocr.text_boxes(prob[0, 0])
    assert len(boxes) == len(PAGE), boxes
    for (x0, y0, x1, y1), (b0, b1) in zip(boxes, bands):
        assert b0 < (y0 + y1) / 2 < b1 and x0 < 60 < x1, (boxes, bands)
    ort_boxes = ocr.text_boxes(want[0, 0])
    assert np.abs(np.array(boxes) - np.array(ort_boxes)).max() <= 1, (boxes, ort_boxes)


def test_v6_rec_reads_the_line(lib, ort_session, text_line, matches):
    x = ppocrv6.rec_preprocess(text_line, 320)
    got = lib("ppocrv6_rec")(x)
    matches(got, _ort(ort_session, "ppocrv6_rec", x), "PP-OCRv6 rec",
            want_unopt=_ort(ort_session, "ppocrv6_rec", x, optimized=False))
    charset = ocr.load_charset(fetch_model("ppocrv6_rec"))
    assert got[0].shape == (1, 40, len(charset))
    assert ocr.ctc_greedy_decode(got[0], charset) == TEXT


def test_ddddocr_reads_the_captcha(lib, ort_session, matches):
    x = captcha.preprocess(captcha.render_captcha(CAPTCHA))
    assert x.shape == SHAPES["ddddocr"]["input1"]
    got = lib("ddddocr")(x)
    matches(got, _ort(ort_session, "ddddocr", x), "ddddocr")
    assert captcha.ctc_decode(got[0]) == CAPTCHA


@pytest.mark.parametrize("word,size", [("8hQ2", (200, 80)), ("x9Yt7Pm", (320, 64))])
def test_ddddocr_run_time_width(lib, ort_session, matches, word, size):
    """One library for any width: words of other lengths, images of another height."""
    x = captcha.preprocess(captcha.render_captcha(word, size, seed=len(word)))
    assert x.shape[3] == int(size[0] * 64 / size[1])
    got = lib("ddddocr", dynamic=True)(x)
    matches(got, _ort(ort_session, "ddddocr", x), f"ddddocr at width {x.shape[3]}")
    assert captcha.ctc_decode(got[0]) == word


@pytest.fixture(scope="module")
def wake(lib, ort_session):
    """For "alexa" and another phrase: the streamed scores by monolib and by ORT, and
    every model input of ORT's stream."""
    pytest.importorskip("onnxruntime")

    def ort_fn(key):
        return lambda x: _ort(ort_session, key, x)[0]

    def ml_fn(key):
        return lambda x: lib(key)(x)[0]

    keys = ("oww_mel", "oww_embedding", "oww_alexa")
    out = {}
    for text in ("alexa", "good morning everyone"):
        audio = vad.synthesize_speech(text)
        record = {}
        want = wakeword.stream_scores(*map(ort_fn, keys), audio, record)
        got = wakeword.stream_scores(*map(ml_fn, keys), audio)
        out[text] = got, want, record
    return out


def test_wakeword_scores_alexa_high(wake):
    got, want, _ = wake["alexa"]
    assert got.max() > 0.5 and want.max() > 0.5, (got, want)
    assert got.argmax() == want.argmax()
    other, other_ort, _ = wake["good morning everyone"]
    assert other.max() < 0.1 and other_ort.max() < 0.1, (other, other_ort)
    for text, (g, w, _) in wake.items():
        np.testing.assert_allclose(g, w, atol=1e-3, err_msg=text)


def test_wakeword_models_match_onnxruntime(wake, lib, ort_session, matches):
    """Each model on every input of ORT's stream (the alexa clip: speech and silence)."""
    _, _, record = wake["alexa"]
    for stage, key in (("mel", "oww_mel"), ("embed", "oww_embedding"), ("head", "oww_alexa")):
        got = [lib(key)(x)[0] for x in record[stage]]
        want = [_ort(ort_session, key, x)[0] for x in record[stage]]
        matches([np.stack(got)], [np.stack(want)], f"{key} over {len(got)} stream steps")


def test_two_threads(lib, ort_session, det_io, matches):
    """At 2 threads the libraries still match ORT, bit for bit their 1-thread results."""
    from monolib.runtime import set_num_threads

    x_det = det_io[0]
    x_cap = captcha.preprocess(captcha.render_captcha(CAPTCHA))
    x_emb = np.random.default_rng(0).standard_normal(SHAPES["oww_embedding"]["input_1"],
                                                     np.float32)
    cases = [("ppocrv6_det", x_det), ("ddddocr", x_cap), ("oww_embedding", x_emb)]
    try:
        set_num_threads(1)
        one = {key: lib(key)(x) for key, x in cases}
        set_num_threads(2)
        two = {key: lib(key)(x) for key, x in cases}
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    for key, x in cases:
        matches(two[key], _ort(ort_session, key, x), f"{key} at 2 threads",
                want_unopt=_ort(ort_session, key, x, optimized=False))
        for a, b in zip(one[key], two[key]):
            np.testing.assert_array_equal(a, b, err_msg=f"{key}: 2 threads vs 1")
