"""The input/output helpers of the real-model tests, on synthetic data (no model):
CTC decoding, text boxes, PP-OCR preprocessing, VAD chunking, resampling, Magika
features."""

import numpy as np
import pytest

from monolib.models import magika, ocr, vad
from monolib.errors import MonolibError


def _one_hot(indices, classes):
    out = np.zeros((len(indices), classes), np.float32)
    out[np.arange(len(indices)), indices] = 1.0
    return out


def test_ctc_greedy_decode_merges_repeats_and_drops_blanks():
    charset = ["<blank>", "H", "e", "l", "o", " "]
    # H H e l <blank> l o <blank> <blank> ' ' : "Hello " (the blank splits the two l's)
    probs = _one_hot([1, 1, 2, 3, 0, 3, 4, 0, 0, 5], len(charset))
    assert ocr.ctc_greedy_decode(probs, charset) == "Hello "
    assert ocr.ctc_greedy_decode(probs[None], charset) == "Hello "
    assert ocr.ctc_greedy_decode(_one_hot([0, 0], 6), charset) == ""


def test_text_boxes_finds_each_band():
    m = np.zeros((1, 1, 100, 200), np.float32)
    m[0, 0, 10:20, 30:150] = 0.9
    m[0, 0, 50:62, 5:80] = 0.8
    m[0, 0, 90:92, 0:10] = 0.9  # two rows: below min_rows, noise
    assert ocr.text_boxes(m, pad=2) == [(28, 8, 152, 22), (3, 48, 82, 64)]
    assert ocr.text_boxes(np.zeros((32, 32))) == []


def test_line_preprocess_keeps_aspect_and_pads():
    line = np.full((24, 80, 3), 255, np.uint8)  # white, aspect 1:3.33 -> 48 x 160
    x = ocr.line_preprocess(line, 48, 320)
    assert x.shape == (1, 3, 48, 320) and x.dtype == np.float32
    np.testing.assert_allclose(x[..., :160], 1.0)  # (255/255 - 0.5) / 0.5
    assert not x[..., 160:].any()
    wide = ocr.line_preprocess(np.zeros((10, 1000, 3), np.uint8), 48, 192)
    np.testing.assert_allclose(wide, -1.0)  # clipped to the full width


def test_line_preprocess_natural_width():
    """No fixed width (a recognizer with a run-time width): ceil(48 * w / h), no padding,
    squeezed to max_width."""
    x = ocr.line_preprocess(np.full((25, 80, 3), 255, np.uint8))  # 48 * 80 / 25 = 153.6
    assert x.shape == (1, 3, 48, 154)
    np.testing.assert_allclose(x, 1.0)
    assert ocr.line_preprocess(np.zeros((10, 1000, 3), np.uint8), max_width=1280).shape[3] == 1280


def test_det_preprocess_normalizes_and_checks_size():
    img = np.zeros((64, 96, 3), np.uint8)
    x = ocr.det_preprocess(img)
    assert x.shape == (1, 3, 64, 96)
    np.testing.assert_allclose(x[0, :, 0, 0], -np.array([0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225],
                               rtol=1e-6)
    with pytest.raises(MonolibError, match="multiples of 32"):
        ocr.det_preprocess(np.zeros((60, 96, 3), np.uint8))


def test_vad_chunks_carry_64_samples_of_context():
    audio = np.arange(1, 1201, dtype=np.float32)
    chunks = vad.vad_chunks(audio)
    assert chunks.shape == (3, 576)
    assert not chunks[0, :64].any()
    np.testing.assert_array_equal(chunks[0, 64:], audio[:512])
    np.testing.assert_array_equal(chunks[1, :64], audio[448:512])
    np.testing.assert_array_equal(chunks[2, 64:64 + 176], audio[1024:])
    assert not chunks[2, 64 + 176:].any()


def test_stream_vad_carries_the_state():
    seen = []

    def step(x, state):
        seen.append(state.copy())
        return np.array([[x.sum()]]), state + 1

    probs = vad.stream_vad(step, np.ones((3, 576), np.float32))
    np.testing.assert_array_equal(probs, [576, 576, 576])
    assert [s[0, 0, 0] for s in seen] == [0, 1, 2]


def test_resample_keeps_a_tone():
    t = np.arange(22050) / 22050
    tone = np.sin(2 * np.pi * 440 * t)
    out = vad.resample(tone, 22050, 16000)
    assert len(out) == 16000 and out.dtype == np.float32
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(int(spectrum.argmax()) - 440) <= 1  # 1 Hz bins over one second


def test_magika_features_strip_and_pad():
    cfg = {"block_size": 4096, "beg_size": 8, "end_size": 8, "padding_token": 256}
    feats = magika.magika_features(b"  \n abc \t\n", cfg)
    assert feats.dtype == np.int32 and feats.shape == (1, 16)
    # the beginning is stripped on the left only, the end on the right only
    assert feats[0, :8].tolist() == [97, 98, 99, 32, 9, 10, 256, 256]
    assert feats[0, 8:].tolist() == [256, 32, 32, 10, 32, 97, 98, 99]
    long = bytes(range(256)) * 40
    f2 = magika.magika_features(long, {**cfg, "beg_size": 4, "end_size": 4})
    assert f2[0].tolist() == [0, 1, 2, 3, 252, 253, 254, 255]
