"""A greedy decoder as an ONNX ``Loop`` (issue 13): g2p-id's real LSTM decoder step
(``g2p-id-py==0.4.2``) inside a Loop body with ArgMax, OneHot feedback and a stop token
read from the outer scope (``monolib.models.greedy``). Compiled to one library (the
whole decode is one native call), it matches ONNX Runtime token for token, both ORT
running the same Loop and g2p-id's own Python loop over the decoder step, and gives
real Indonesian phonemes."""

import numpy as np
import pytest

import monolib
from monolib.models import fetch_model
from monolib.models.greedy import (BOS, EOS, MAX_TOKENS, PHONEMES, encode_word,
                                   greedy_decoder_loop, phonemes)

pytestmark = pytest.mark.slow

WORDS = {"halo": "halo", "makan": "makan", "bermain": "bərmain", "nyanyi": "ɲaɲi",
         "syarat": "sjarat"}


@pytest.fixture(scope="module")
def decoder():
    model = greedy_decoder_loop(fetch_model("g2p_id_decoder"), MAX_TOKENS)
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    return model, gm


def _feeds(ort_session, word, stop=EOS):
    h, c = ort_session("g2p_id_encoder").run(None, {"input_1": encode_word(word)})
    start = np.zeros((1, 1, len(PHONEMES)), np.float32)
    start[0, 0, BOS] = 1.0
    return {"start": start, "h0": h, "c0": c, "stop": np.array(stop, np.int64)}


def _step_loop(ort_session, feeds):
    """g2p-id's ``LSTM.predict`` loop: one ORT call of the decoder step per token."""
    step = ort_session("g2p_id_decoder")
    tok, h, c = feeds["start"], feeds["h0"], feeds["c0"]
    out = []
    while len(out) < MAX_TOKENS:
        probs, h, c = step.run(None, {"input_2": tok, "input_3": h, "input_4": c})
        k = int(np.argmax(probs[0, -1]))
        out.append(k)
        if k == int(feeds["stop"]):
            break
        tok = np.zeros_like(tok)
        tok[0, 0, k] = 1.0
    return out, h, c


@pytest.mark.parametrize("word", sorted(WORDS))
def test_loop_decoder_matches_onnxruntime(decoder, ort_session, word):
    model, gm = decoder
    from monolib.compiler.testing import ort_session as session

    feeds = _feeds(ort_session, word)
    gm.run(**feeds)
    tokens, h, c = (gm.get_output(i).numpy() for i in range(3))
    want = session(model).run(None, feeds)
    assert tokens.tolist() == want[0].tolist()
    np.testing.assert_allclose(h, want[1], atol=2e-5)
    np.testing.assert_allclose(c, want[2], atol=2e-5)
    steps, sh, sc = _step_loop(ort_session, feeds)
    assert tokens.tolist() == steps
    np.testing.assert_allclose(h, sh, atol=2e-5)
    assert phonemes(tokens) == WORDS[word]
    assert tokens[-1] == EOS and len(tokens) < MAX_TOKENS


def test_loop_decoder_runs_to_the_bound(decoder, ort_session):
    """A stop token never emitted: the Loop runs its full trip count M."""
    model, gm = decoder
    feeds = _feeds(ort_session, "makan", stop=len(PHONEMES) + 5)
    gm.run(**feeds)
    tokens = gm.get_output(0).numpy()
    assert tokens.shape == (MAX_TOKENS,)
    assert tokens.tolist() == _step_loop(ort_session, feeds)[0]
