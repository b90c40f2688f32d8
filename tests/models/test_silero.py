"""Silero VAD, streaming (``If`` nodes folded with ``sr=16000``) and sequence models:
compiled, exported, run in a fresh process chunk by chunk, compared with ONNX Runtime,
checked for meaning (silence ~0, speech > 0.5), and against each other."""

import numpy as np
import pytest

pytestmark = pytest.mark.slow

SEQ = 32  # chunks per call of the sequence model (its compiled T)


@pytest.fixture(scope="module")
def streaming(model_lib, fresh_run, ort_session, speech):
    chunks, _, _ = speech
    state0 = np.zeros((2, 1, 128), np.float32)
    got = fresh_run(model_lib("silero"), {"input": chunks[:, None], "state": state0},
                    steps=len(chunks), carry=["1=state"])
    sess = ort_session("silero_vad")
    sr = np.array(16000, np.int64)
    want_p, want_s, state = [], [], state0
    for c in chunks:
        p, state = sess.run(None, {"input": c[None], "state": state, "sr": sr})
        want_p.append(p)
        want_s.append(state)
    return got, [np.stack(want_p), np.stack(want_s)]


def test_streaming_matches_onnxruntime(streaming, matches):
    matches(*streaming, "Silero VAD streaming")


def test_streaming_hears_speech(streaming, speech):
    probs = streaming[0][0].reshape(-1)
    _, first, last = speech
    silence = np.r_[probs[1:first - 2], probs[last + 4:]]
    assert silence.max() < 0.1, silence.max()
    assert np.median(probs[first + 2:last - 1]) > 0.5


@pytest.fixture(scope="module")
def sequence(model_lib, fresh_run, ort_session, speech):
    chunks, _, _ = speech
    blocks = chunks.reshape(-1, SEQ, chunks.shape[1])
    zeros = np.zeros((1, 1, 128), np.float32)
    got = fresh_run(model_lib("silero_seq"), {"input": blocks, "h": zeros, "c": zeros},
                    steps=len(blocks), carry=["1=h", "2=c"])
    sess = ort_session("silero_vad_sequence")
    want, h, c = [], zeros, zeros
    for b in blocks:
        p, h, c = sess.run(None, {"input": b, "h": h, "c": c})
        want.append(p)
    return got, want


def test_sequence_matches_onnxruntime(sequence, matches):
    got, want = sequence
    matches(got[:1], [np.stack(want)], "Silero VAD sequence")


def test_sequence_equals_streaming(sequence, streaming):
    seq = sequence[0][0].reshape(-1)
    stream = streaming[0][0].reshape(-1)
    assert seq.shape == stream.shape
    np.testing.assert_allclose(seq, stream, atol=1e-4)
