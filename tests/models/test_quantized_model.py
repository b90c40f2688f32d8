"""A real quantized model through monolib: the PP-OCR line classifier quantized with
``onnxruntime.quantization`` (uint8 activations, per-channel int8 weights in 7 bits;
recipe in ``bench/quantized.py``), compiled by monolib and compared with ONNX Runtime
running the same file, in both formats:

* QOperator (53 QLinearConv, 1 QLinearMatMul, Quantize/DequantizeLinear): monolib's
  integer kernels. Bound: every uint8 tensor compared (the last QLinearConv's output,
  the QLinearMatMul's logits) within one quantization step (|diff| <= 1), the
  dequantized logits within one step of their scale (measured: all equal).
* QDQ (Quantize/DequantizeLinear around 53 float Convs and a MatMul): each Conv runs in
  float32 between a per-channel DequantizeLinear and a QuantizeLinear; ORT fuses them to
  integer kernels. A one-step flip at a rounding tie (first seen 30 layers deep)
  compounds through the following layers (the last conv's output is up to 8 steps
  apart), so the bound is on the logits: within 2 steps (measured: 1).

In both, the meaning holds: upright lines are class 0, rotated ones class 1, with
probability > 0.9, on texts outside the calibration set too.
"""


import numpy as np
import onnx
import pytest

from .bench_recipes import load_bench, run_both

pytestmark = pytest.mark.slow

TEXTS = ["Hello World 2024", "Paddle reads 7 lines"]  # the second is not in the calibration


@pytest.fixture(scope="module", params=["qop", "qdq"])
def quantized(request):
    """(format, quantized model path, [(monolib outputs, ORT outputs)] per input in
    ``recipe.lines(TEXTS)`` order: upright, rotated, upright, rotated)."""
    pytest.importorskip("PIL")
    pytest.importorskip("onnxruntime.quantization")
    recipe = load_bench("quantized")
    path = recipe.quantized_cls(fmt=request.param)
    return request.param, path, run_both(path, recipe.SHAPE, recipe.lines(TEXTS))


def test_model_is_quantized_in_the_default_domain(quantized):
    fmt, path, _ = quantized
    model = onnx.load(str(path))
    ops = [(n.domain or "", n.op_type) for n in model.graph.node]
    assert all(d == "" for d, _ in ops), {d for d, _ in ops}
    kinds = [t for _, t in ops]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    if fmt == "qop":
        assert kinds.count("QLinearConv") == 53 and kinds.count("QLinearMatMul") == 1
        assert "Conv" not in kinds and "MatMul" not in kinds
        conv = [n for n in model.graph.node if n.op_type == "QLinearConv"][3]
        w, w_scale = inits[conv.input[3]], inits[conv.input[4]]
    else:
        assert kinds.count("Conv") == 53 and kinds.count("QuantizeLinear") >= 54
        conv = [n for n in model.graph.node if n.op_type == "Conv"][3]
        dq = next(n for n in model.graph.node if n.output[0] == conv.input[1])
        w, w_scale = inits[dq.input[0]], inits[dq.input[1]]
    assert w.dtype == np.int8 and w_scale.size == w.shape[0] > 1  # per channel


def test_close_to_onnxruntime(quantized):
    fmt, path, pairs = quantized
    model = onnx.load(str(path))
    scale = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    step = float(scale["linear_1.tmp_0_scale"])
    if fmt == "qdq":
        for got, want in pairs:
            diff = np.abs(got[1].astype(np.int32) - want[1].astype(np.int32))
            assert diff.max() <= 2, f"quantized logits off by {diff.max()} steps"
            np.testing.assert_allclose(got[2], want[2], rtol=0, atol=2 * step * 1.0001)
        return
    exact = total = 0
    for got, want in pairs:
        assert [g.shape for g in got] == [w.shape for w in want]
        _, q_logits, logits, q_conv = got
        _, w_q_logits, w_logits, w_q_conv = want
        for g, w in ((q_logits, w_q_logits), (q_conv, w_q_conv)):
            assert g.dtype == w.dtype == np.uint8
            diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
            assert diff.max() <= 1, f"uint8 tensor off by {diff.max()} steps"
            exact += int((diff == 0).sum())
            total += diff.size
        np.testing.assert_allclose(logits, w_logits, rtol=0, atol=step * 1.0001)
    # the integer kernels are exact and requantize as ORT does: (nearly) all equal
    assert exact / total > 0.999, f"{total - exact} of {total} elements differ by one step"


def test_upright_and_rotated_lines_are_told_apart(quantized):
    _, _, pairs = quantized
    for i, (got, want) in enumerate(pairs):
        probs = got[0]
        cls = i % 2  # lines() alternates upright (class 0) and rotated (class 180: 1)
        assert probs.shape == (1, 2)
        assert probs[0, cls] > 0.9, (i, probs, want[0])
