"""Silero VAD's sequence model quantized with ``onnxruntime.quantization.quantize_dynamic``
(``op_types_to_quantize=["LSTM"]``, int8 weights; recipe in
``bench/quantized_dynamic.py``): its LSTM becomes ``com.microsoft`` DynamicQuantizeLSTM
(weights 8-bit, X and each step's hidden state quantized at run time). monolib's library
runs spoken audio block by block, carrying h and c, beside ONNX Runtime on the same file.

ONNX Runtime runs with ``session.x64quantprecision`` (``ort_session(exact_int8=True)``):
on an AVX2 CPU without VNNI its default uint8 x int8 product saturates pairs of
products to int16 (``vpmaddubsw``); on this model's h x R product that moved single
steps' hidden values by up to 1.2e-2 against the exact product (a NumPy emulation of
the saturation reproduced ORT's default outputs to 2e-6). monolib's products are exact.

Bound: probabilities and states within 1e-4 (measured 8e-7 over the blocks; the float
sums run in another order than ORT's, so a state value at a rounding tie of the next
step's quantization could move one step, see ``ops/contrib/quant_lstm.py``); the
speech / non-speech decision (p > 0.5) equal on every chunk.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from .bench_recipes import load_bench

pytestmark = pytest.mark.slow

SEQ = 32  # chunks per call


def _recipe():
    return load_bench("quantized_dynamic")


@pytest.fixture(scope="module")
def runs(speech):
    """(model path, [(monolib (p, h, c), ORT (p, h, c))] per block of ``SEQ`` chunks)."""
    import monolib
    from monolib.compiler.testing import ort_session

    path = _recipe().quantized_vad_sequence()
    shapes = {"input": (SEQ, 576), "h": (1, 1, 128), "c": (1, 1, 128)}
    gm = monolib.GraphModule(
        monolib.compile(str(path), target="c", shapes=shapes)["default"](monolib.cpu())
    )
    sess = ort_session(path, exact_int8=True)
    chunks, _, _ = speech
    zeros = np.zeros((1, 1, 128), np.float32)
    mine, theirs, pairs = (zeros, zeros), (zeros, zeros), []
    for block in chunks.reshape(-1, SEQ, chunks.shape[1]):
        gm.run(input=block, h=mine[0], c=mine[1])
        got = [gm.get_output(i).numpy().copy() for i in range(3)]
        want = sess.run(None, {"input": block, "h": theirs[0], "c": theirs[1]})
        pairs.append((got, want))
        mine, theirs = got[1:], want[1:]
    return path, pairs


def test_quantizer_emitted_dynamic_quantize_lstm(runs):
    path, _ = runs
    ops = Counter((n.domain or "", n.op_type) for n in onnx.load(str(path)).graph.node)
    assert ops[("com.microsoft", "DynamicQuantizeLSTM")] == 1 and ops[("", "LSTM")] == 0, ops


def test_matches_onnxruntime_block_by_block(runs):
    _, pairs = runs
    assert len(pairs) >= 3
    for k, (got, want) in enumerate(pairs):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-4, err_msg=f"block {k}")
        np.testing.assert_array_equal(got[0] > 0.5, want[0] > 0.5, err_msg=f"block {k}")
    probs = np.concatenate([g[0].ravel() for g, _ in pairs])
    assert 0.1 < (probs > 0.5).mean() < 0.9  # the speech is found, the silence too
