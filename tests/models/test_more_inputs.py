"""The input/output helpers of the "More real models" on synthetic data (no model):
openWakeWord's streaming framing, ddddocr's pre-processing and CTC decoding, the
PP-OCRv6 detector's normalization."""

import numpy as np
import pytest

from monolib.errors import MonolibError
from monolib.models import captcha, ppocrv6, wakeword


def test_to_pcm_scales_pads_and_rounds():
    pcm = wakeword.to_pcm(np.array([0.5, -2.0, 1.0], np.float32), padding_s=0.01)
    assert pcm.dtype == np.float32 and len(pcm) == wakeword.CHUNK  # 160 + 3 + 160, to 1280
    np.testing.assert_array_equal(pcm[158:165], [0, 0, 16384, -32767, 32767, 0, 0])
    assert len(wakeword.to_pcm(np.zeros(16000))) == 48000 - 48000 % 1280 + 1280


def test_stream_scores_frames_like_openwakeword():
    """Fake models that expose what they read: the mel model sees each chunk after the
    480 samples before it, the embedding model the last 76 frames, the head the last
    16 embeddings; the buffers start as ones (frames) and silence (embeddings)."""

    def mel(x):  # 8 frames whose bands all hold the input's last sample
        assert x.shape == (1, wakeword.MEL_SAMPLES)
        return np.full((1, 1, 8, 32), x[0, -1], np.float32)

    def embed(x):  # 96 copies of the newest frame
        assert x.shape == (1, wakeword.WINDOW, 32, 1)
        return np.full((1, 1, 1, 96), x[0, -1, 0, 0], np.float32)

    def head(x):  # the newest embedding
        assert x.shape == (1, wakeword.N_EMBEDDINGS, 96)
        return np.array([[x[0, -1, 0]]], np.float32)

    audio = np.linspace(0.01, 0.9, 30 * 1280 - 2 * 16000, dtype=np.float32)
    record = {}
    scores = wakeword.stream_scores(mel, embed, head, audio, record)
    pcm = wakeword.to_pcm(audio)
    assert len(scores) == len(pcm) // wakeword.CHUNK == 30
    assert len(record["mel"]) == len(record["embed"]) == 31 and len(record["head"]) == 30
    assert not record["mel"][0].any()  # the silence the embeddings start from
    v = pcm[1279::1280] / 10 + 2  # each step's (fake) mel frames, scaled
    np.testing.assert_array_equal(scores, v)
    for step in (0, 12, 13, 20):  # step s reads samples [1280 s - 480, 1280 (s + 1))
        lo = 1280 * step - 480
        want = np.concatenate([np.zeros(max(0, -lo)), pcm[max(0, lo):1280 * (step + 1)]])
        np.testing.assert_array_equal(record["mel"][step + 1][0], want)
        frames = np.concatenate([np.ones(76), np.repeat(v[:step + 1], 8)])[-76:]
        np.testing.assert_array_equal(record["embed"][step + 1][0, :, 0, 0], frames)
        embeddings = np.concatenate([np.full(16, 2.0), v[:step + 1]])[-16:]  # silence: 0/10+2
        np.testing.assert_array_equal(record["head"][step][0, :, 0], embeddings)


def test_ctc_decode_merges_repeats_drops_blanks():
    idx = captcha.ASCII_INDEX
    seq = [0, idx["A"], idx["A"], 0, idx["b"], 0, idx["b"], idx["3"], 17, 0]
    logits = np.zeros((len(seq), 1, 8210), np.float32)
    logits[np.arange(len(seq)), 0, seq] = 5.0
    assert captcha.ctc_decode(logits) == "Abb3?"
    with pytest.raises(MonolibError, match="expected"):
        captcha.ctc_decode(logits[:, 0])
    assert len(set(idx.values())) == 62 and 0 not in idx.values()


def test_captcha_preprocess_keeps_aspect_gray_unit_range():
    pytest.importorskip("PIL")
    img = captcha.render_captcha("Ab3", (200, 80), seed=1)
    assert img.shape == (80, 200, 3) and img.dtype == np.uint8
    x = captcha.preprocess(img)
    assert x.shape == (1, 1, 64, 160) and x.dtype == np.float32  # int(200 * 64 / 80)
    assert 0.0 <= x.min() < 0.4 and 0.9 < x.max() <= 1.0  # dark ink on a light background
    with pytest.raises(MonolibError, match="empty"):
        captcha.render_captcha("")


def test_v6_det_preprocess_is_half_mean_half_std():
    img = np.zeros((32, 64, 3), np.uint8)
    img[0, 0] = 255
    x = ppocrv6.det_preprocess(img)
    assert x.shape == (1, 3, 32, 64)
    np.testing.assert_array_equal(x[0, :, 0, 0], 1.0)
    np.testing.assert_array_equal(x[0, :, 0, 1], -1.0)
    with pytest.raises(MonolibError, match="multiples of 32"):
        ppocrv6.det_preprocess(np.zeros((30, 64, 3), np.uint8))
