"""The ``com.microsoft`` QLinear ops on a real model: PP-OCR cls quantized with
``onnxruntime.quantization.quantize_static`` in the QOperator format over every op type
(uint8 activations, per-channel int8 weights in 7 bits, MinMax calibration on rendered
lines; the recipe of ``bench/quantized.py`` without its ``op_types_to_quantize``). With
onnxruntime 1.32 the quantizer emits 44 QLinearAdd, 27 QLinearMul and 1 QLinearSoftmax
(``com.microsoft``) beside 53 QLinearConv, 1 QLinearMatMul and Quantize/DequantizeLinear
around the float ops it leaves (BatchNormalization, HardSigmoid, Div, GlobalAveragePool).

Checks, every node output exposed, against ONNX Runtime's unoptimized run (its own
kernel per node) on two rendered lines:

* node by node: every ``com.microsoft`` node whose non-constant inputs are equal in both
  runs gives an equal output (measured: 25 nodes checked on the first line, all equal).
  Nodes past the first difference are not comparable: a float BatchNormalization result
  one ulp apart lands on the other side of a rounding tie of the QuantizeLinear after
  it, and the step propagates (as in ``docs/quantization.md``'s QDQ note);
* the end: both read the line upright (class 0) with the same probabilities.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from .bench_recipes import load_bench

pytestmark = pytest.mark.slow

TEXTS = ["Hello World 2024", "Paddle reads 7 lines"]


def _recipe():
    return load_bench("quantized")


def _quantized(recipe) -> Path:
    """The QOperator cls over every op type, cached by source SHA-256 and onnxruntime
    version in the model cache (never in the repository)."""
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from monolib.models import fetch_model
    from monolib.models.fetch import cache_dir, sha256_of

    src = fetch_model("ppocr_cls")
    cache = cache_dir() / "quantized"
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"ppocr_cls_qop_all_{sha256_of(src)[:16]}_ort{ort.__version__}.onnx"
    if out.exists():
        return out
    model = recipe._constants_as_initializers(onnx.load(str(src)))
    for d, v in zip(model.graph.input[0].type.tensor_type.shape.dim, recipe.SHAPE):
        d.ClearField("dim_param")
        d.dim_value = v
    feeds = iter([{"x": x} for x in recipe.lines(recipe.CALIB_TEXTS)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(feeds, None)

    fixed, tmp = (cache / f".{name}.{os.getpid()}.onnx" for name in ("cls_fixed", "cls_qall"))
    try:
        onnx.save(model, str(fixed))
        quantize_static(
            str(fixed),
            str(tmp),
            Reader(),
            quant_format=QuantFormat.QOperator,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
        )
        os.replace(tmp, out)
    finally:
        for p in (fixed, tmp):
            p.unlink(missing_ok=True)
    return out


@pytest.fixture(scope="module")
def runs():
    """(model, the model's output name, [(monolib {name: array}, ORT {name: array})])."""
    pytest.importorskip("PIL")
    import monolib
    from monolib.compiler.testing import ort_session

    recipe = _recipe()
    model = onnx.load(str(_quantized(recipe)))
    final = model.graph.output[0].name
    xs = recipe.lines(TEXTS)[::2]  # upright lines
    # every node output a graph output, typed from one ORT run (inference does not
    # know the com.microsoft ops)
    names = [o for n in model.graph.node for o in n.output if o]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names)
    sess = ort_session(probe.SerializeToString(), optimize=False)
    first = sess.run(None, {"x": xs[0]})
    del model.graph.output[:]
    for o, v in zip(names, first):
        model.graph.output.append(
            onnx.helper.make_tensor_value_info(
                o, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape
            )
        )
    factory = monolib.compile(model.SerializeToString(), target="c", shapes={"x": recipe.SHAPE})
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    pairs = []
    for x in xs:
        gm.run(x=x)
        got = {o: gm.get_output(k).numpy() for k, o in enumerate(names)}
        pairs.append((got, dict(zip(names, sess.run(None, {"x": x})))))
    return model, final, pairs


def test_quantizer_emitted_contrib_ops(runs):
    model, _, _ = runs
    ops = Counter((n.domain or "", n.op_type) for n in model.graph.node)
    assert (
        ops[("com.microsoft", "QLinearAdd")] >= 40 and ops[("com.microsoft", "QLinearMul")] >= 20
    ), ops
    assert ops[("com.microsoft", "QLinearSoftmax")] == 1, ops


def test_contrib_nodes_match_onnxruntime_node_by_node(runs):
    model, _, pairs = runs
    consts = {i.name for i in model.graph.initializer}
    for got, want in pairs:
        checked = 0
        for node in model.graph.node:
            if node.domain != "com.microsoft":
                continue
            ins = [i for i in node.input if i and i not in consts]
            if all(np.array_equal(got[i], want[i]) for i in ins):
                checked += 1
                np.testing.assert_array_equal(
                    got[node.output[0]], want[node.output[0]], err_msg=f"{node.op_type} {node.name}"
                )
        assert checked >= 10, checked


def test_reads_the_line_upright(runs):
    _, out, pairs = runs
    for got, want in pairs:
        np.testing.assert_allclose(got[out], want[out], atol=1 / 256 + 1e-6)
        assert got[out].ravel()[0] > 0.9
