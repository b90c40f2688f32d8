"""PP-OCRv4 rec quantized with ``onnxruntime.quantization.quantize_dynamic`` (recipe in
``bench/quantized_dynamic.py``), compiled by monolib and compared with ONNX Runtime
running the same file on rendered text lines.

What the quantizer emitted (onnxruntime 1.32, ``op_types_to_quantize=["MatMul"]``, int8
7-bit weights): 9 DynamicQuantizeLinear + 9 MatMulInteger (+ Cast, Mul) in the default
domain; the 4 activation x activation MatMuls stay float. ONNX Runtime's own optimizer
then rewrites that file (variant ``fused``) into 9 ``com.microsoft``
DynamicQuantizeMatMul, 7 QuickGelu, 2 FusedMatMul and 1 SkipLayerNormalization, the
contrib ops a user's ORT-optimized model carries.

Bound: the decoded text is identical, and so is the best class at every one of the 40
steps; the probabilities lie within 0.03. Why not tighter: A of each quantized MatMul is
quantized at run time, so a one-ulp float difference upstream (different summation
orders in the float ops) can move a value across a rounding tie, one quantization step;
ONNX Runtime's own optimized and unoptimized runs of the same file differ by up to 0.017
on these lines for that reason (measured: monolib within 3e-7 of ORT on 2 of 3 lines,
0.015 on the third).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from .bench_recipes import load_bench, run_both

pytestmark = pytest.mark.slow

TEXTS = ["Hello World 2024", "monolib compiles ONNX", "Paddle reads 7 lines"]


@pytest.fixture(scope="module", params=["dynamic", "fused"])
def runs(request):
    """(variant, model path, [(monolib probs, ORT probs)] per line of ``TEXTS``)."""
    pytest.importorskip("PIL")
    pytest.importorskip("onnxruntime.quantization")
    recipe = load_bench("quantized_dynamic")
    path = recipe.quantized_rec(request.param)
    pairs = run_both(path, recipe.SHAPE, recipe.lines(TEXTS))
    return request.param, path, [(got[0], want[0]) for got, want in pairs]


def test_quantizer_emitted_the_ops(runs):
    variant, path, _ = runs
    ops = Counter((n.domain or "", n.op_type) for n in onnx.load(str(path)).graph.node)
    if variant == "dynamic":
        assert ops[("", "DynamicQuantizeLinear")] == 9 and ops[("", "MatMulInteger")] == 9, ops
        assert not any(d for d, _ in ops), ops
    else:
        assert ops[("com.microsoft", "DynamicQuantizeMatMul")] == 9, ops
        assert ops[("", "MatMulInteger")] == 0 and ops[("", "DynamicQuantizeLinear")] == 0, ops


def test_matches_onnxruntime_and_reads_the_text(runs):
    from monolib.models import fetch_model, ocr

    variant, _, pairs = runs
    charset = ocr.load_charset(fetch_model("ppocr_rec"))
    for text, (got, want) in zip(TEXTS, pairs):
        assert got.shape == want.shape == (1, 40, len(charset))
        np.testing.assert_allclose(got, want, rtol=0, atol=0.03, err_msg=f"{variant}: {text!r}")
        np.testing.assert_array_equal(
            got.argmax(-1), want.argmax(-1), err_msg=f"{variant}: {text!r}"
        )
        read = ocr.ctc_greedy_decode(got, charset)
        assert read == ocr.ctc_greedy_decode(want, charset)
        assert read.strip() == text  # the quantized model may add a space at an end
