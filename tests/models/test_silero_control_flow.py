"""Silero VAD op15 compiled WITHOUT ``constants=`` (issue 13): ``sr`` stays an input and
the chunk length is a run-time dim (``shapes=`` bounds 288..576, step 32), so ONE
library answers at 16 kHz (512 samples + 64 of context) and at 8 kHz (256 + 32), each
matching ONNX Runtime chunk by chunk on synthesized speech, and its 16 kHz run matches
the sequence model as ``test_silero.py`` does for the constant-folded build.

The model's ``If`` nodes test dims of their inputs (a batch of 1, the state's batch),
so with these shapes every condition folds at compile time; the run-time branch
machinery itself is tested in ``tests/ops/test_control_flow.py``."""

import numpy as np
import pytest

import monolib
from monolib.models import fetch_model, vad

pytestmark = pytest.mark.slow

SEQ = 32


@pytest.fixture(scope="module")
def library():
    factory = monolib.compile(str(fetch_model("silero_vad")),
                              shapes={"input": (1, (288, 576, 32)), "state": (2, 1, 128)})
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    assert "sr" in gm.input_names  # not frozen
    return gm


def _chunks(audio: np.ndarray, chunk: int, context: int) -> np.ndarray:
    """``vad.vad_chunks`` at another rate: rows of ``context + chunk`` samples."""
    n = -(-len(audio) // chunk)
    padded = np.zeros(context + n * chunk, np.float32)
    padded[context:context + len(audio)] = audio
    idx = np.arange(n)[:, None] * chunk + np.arange(chunk + context)[None, :]
    return padded[idx]


def _stream(library, ort_session, chunks, sr):
    state = np.zeros((2, 1, 128), np.float32)
    want_state = state
    sess = ort_session("silero_vad")
    got, want = [], []
    for c in chunks:
        library.run(input=c[None], state=state, sr=np.array(sr, np.int64))
        p, state = library.get_output(0).numpy(), library.get_output(1).numpy()
        wp, want_state = sess.run(None, {"input": c[None], "state": want_state,
                                         "sr": np.array(sr, np.int64)})
        got.append(p.reshape(-1)[0])
        want.append(wp.reshape(-1)[0])
        # the LSTM state grows to ~14-23 over a stream: absolute 1e-4 plus float32's
        # accumulated relative rounding (ORT and monolib sum in different orders)
        np.testing.assert_allclose(state, want_state, rtol=2e-5, atol=1e-4)
    return np.array(got), np.array(want)


def test_16k_matches_onnxruntime_and_sequence_model(library, ort_session, speech):
    chunks, first, last = speech
    assert chunks.shape[1] == vad.CHUNK + vad.CONTEXT
    got, want = _stream(library, ort_session, chunks, 16000)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # the sequence model over the same chunks, SEQ at a time, its state carried
    seq = ort_session("silero_vad_sequence")
    zeros = np.zeros((1, 1, 128), np.float32)
    h, c, probs = zeros, zeros, []
    for block in chunks.reshape(-1, SEQ, chunks.shape[1]):
        p, h, c = seq.run(None, {"input": block, "h": h, "c": c})
        probs.append(np.asarray(p).reshape(-1))
    np.testing.assert_allclose(got, np.concatenate(probs), atol=1e-4)
    assert np.median(got[first + 2:last - 1]) > 0.5 and got[1:first - 2].max() < 0.1


def test_8k_matches_onnxruntime(library, ort_session, speech):
    chunks, first, last = speech
    audio = chunks[:, vad.CONTEXT:].reshape(-1)
    audio8 = vad.resample(audio, 16000, 8000)
    chunks8 = _chunks(audio8, vad.CHUNK // 2, vad.CONTEXT // 2)
    assert chunks8.shape[1] == 288
    got, want = _stream(library, ort_session, chunks8, 8000)
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert got.max() > 0.5  # it hears the speech at 8 kHz too
