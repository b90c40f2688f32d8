"""A real quantized model: the PP-OCR line classifier (``ppocr_cls``) quantized with
``onnxruntime.quantization`` (static, QOperator format, default ONNX domain only), and
monolib's latency on it beside ONNX Runtime's running the same file.

    python bench/quantized.py [--runs 30]

The recipe (:func:`quantized_cls`) is shared with ``tests/models/test_quantized_model.py``:
``Conv`` and ``MatMul`` become ``QLinearConv``/``QLinearMatMul`` with uint8 activations
and per-channel int8 weights in 7 bits (``reduce_range``: ONNX Runtime's uint8 x int8
AVX2 kernel may saturate int16 pair sums on CPUs without VNNI, so with full-range
weights it would not be a fair reference), calibrated (MinMax) on rendered text lines,
upright and rotated. The PaddleOCR export holds its weights in ``Constant`` nodes; they
become initializers first, or the quantizer would treat them as activations. The file is written to the model cache (``$MONOLIB_CACHE`` or
``~/.cache/monolib/models``), never into the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from pathlib import Path

import numpy as np

SHAPE = (1, 3, 48, 192)
CALIB_TEXTS = ["Hello World 2024", "monolib compiles ONNX", "quick brown fox 42", "Zebra crossing"]
# graph outputs the comparison reads besides the softmax, per format: the quantized
# (uint8) logits, their float value after the bias, then the last conv's uint8 output
EXTRA_OUTPUTS = {
    "qop": ("linear_1.tmp_0_quantized", "linear_1.tmp_1"),
    "qdq": ("linear_1.tmp_0_QuantizeLinear_Output", "linear_1.tmp_1"),
}


def lines(texts: list[str]) -> list[np.ndarray]:
    """Each text rendered and preprocessed for cls ([1, 3, 48, 192] float32), upright and
    then rotated by 180 degrees."""
    from monolib.models import ocr

    out = []
    for t in texts:
        img = ocr.render_line(t)
        out.append(ocr.line_preprocess(img, SHAPE[2], SHAPE[3]))
        out.append(ocr.line_preprocess(np.ascontiguousarray(img[::-1, ::-1]), SHAPE[2], SHAPE[3]))
    return out


def _last_conv_uint8(model) -> str:
    """The uint8 output of the last convolution: QLinearConv's, or the QuantizeLinear
    after the last Conv (QDQ)."""
    conv = [n for n in model.graph.node if n.op_type in ("QLinearConv", "Conv")][-1]
    if conv.op_type == "QLinearConv":
        return conv.output[0]
    return next(n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear" and conv.output[0] in n.input)


def _constants_as_initializers(model):
    """The model with its ``Constant`` nodes (PaddleOCR exports hold every weight in one)
    turned into initializers: the quantizer treats only initializers as weights (per
    channel, weight type); a Constant's output would be quantized like an activation."""
    import onnx

    keep = []
    for node in model.graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model


def quantized_cls(cache: Path | None = None, reduce_range: bool = True, fmt: str = "qop") -> Path:
    """Path of the quantized cls model (built on first use, cached by onnxruntime version).

    uint8 activations, per-channel int8 weights; with ``reduce_range`` (the default) the
    weights use 7 bits, ONNX Runtime's advice for AVX2 CPUs without VNNI: its uint8 x
    int8 kernel then cannot saturate and stays an exact reference (with full-range
    weights it can be off by many steps; monolib's sums are exact either way). The float
    model's batch/height/width are fixed to ``SHAPE`` first; the extra outputs
    (``EXTRA_OUTPUTS[fmt]`` and the last conv's uint8 output) are added to the graph.
    ``fmt``: ``"qop"`` (QLinearConv/QLinearMatMul) or ``"qdq"`` (QuantizeLinear/
    DequantizeLinear around float Conv/MatMul; the model is converted to opset 13 first,
    as per-channel DequantizeLinear needs its ``axis``).
    """
    if fmt not in EXTRA_OUTPUTS:
        raise ValueError(f"fmt must be one of {sorted(EXTRA_OUTPUTS)}, got {fmt!r}")
    import onnx
    import onnxruntime
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from monolib.models import fetch_model
    from monolib.models.fetch import cache_dir

    cache = Path(cache or cache_dir()) / "quantized"
    cache.mkdir(parents=True, exist_ok=True)
    kind = f"{fmt}_s8r" if reduce_range else f"{fmt}_s8"
    tag = hashlib.sha256(f"{onnxruntime.__version__}|{CALIB_TEXTS}|{kind}-pc".encode()).hexdigest()[:12]
    out = cache / f"ppocr_cls_{kind}_{tag}.onnx"
    if out.exists():
        return out
    model = _constants_as_initializers(onnx.load(str(fetch_model("ppocr_cls"))))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, SHAPE):
        d.ClearField("dim_param")
        d.dim_value = v
    if fmt == "qdq":
        import onnx.version_converter

        model = onnx.version_converter.convert_version(model, 13)
    feeds = iter([{"x": x} for x in lines(CALIB_TEXTS)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(feeds, None)

    pid = os.getpid()
    fixed, raw, tmp = (cache / f".{name}.{pid}.onnx" for name in ("fixed", "raw", "final"))
    try:
        onnx.save(model, str(fixed))
        quantize_static(
            str(fixed),
            str(raw),
            Reader(),
            quant_format=QuantFormat.QOperator if fmt == "qop" else QuantFormat.QDQ,
            op_types_to_quantize=["Conv", "MatMul"],
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=reduce_range,
        )
        q = onnx.load(str(raw))
        types = {v.name: v for v in onnx.shape_inference.infer_shapes(q).graph.value_info}
        for name in EXTRA_OUTPUTS[fmt]:  # [1, 2]: after a Reshape inference cannot follow
            elem = types[name].type.tensor_type.elem_type
            q.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, [1, 2]))
        q.graph.output.append(types[_last_conv_uint8(q)])
        onnx.save(q, str(tmp))
        os.replace(tmp, out)  # never a partial file under the final name
    finally:
        for p in (fixed, raw, tmp):
            p.unlink(missing_ok=True)
    return out


def _interleaved_ms(fns, runs: int) -> list[tuple[float, float]]:
    """(median, min) milliseconds of each function, runs alternating between them so a
    load change on the shared machine hits both alike."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(runs):
        for fn, t in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [(1000 * statistics.median(t), 1000 * min(t)) for t in times]


def main() -> None:
    """Print monolib and ORT latency (median and min, interleaved runs) on the quantized
    cls at 1 and 2 threads."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--full-range", action="store_true", help="8-bit weights (no reduce_range)")
    ap.add_argument("--format", choices=sorted(EXTRA_OUTPUTS), default="qop")
    args = ap.parse_args()
    import monolib
    from monolib.compiler.testing import ort_session

    path = quantized_cls(reduce_range=not args.full_range, fmt=args.format)
    x = lines(["Hello World 2024"])[0]
    t0 = time.perf_counter()
    factory = monolib.compile(str(path), target="c", shapes={"x": SHAPE})
    print(f"quantized cls: {path.name}; monolib compile {time.perf_counter() - t0:.1f} s")
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    print("threads  monolib ms (median/min)   ORT ms (median/min)   ORT/monolib (medians)")
    for threads in (1, 2):
        monolib.set_num_threads(threads)
        sess = ort_session(path, threads=threads)
        (ml, ml_min), (ox, ox_min) = _interleaved_ms(
            [lambda: gm.run(x=x), lambda s=sess: s.run(None, {"x": x})], args.runs
        )
        print(f"{threads:7d}  {ml:8.3f} / {ml_min:6.3f}          {ox:8.3f} / {ox_min:6.3f}        {ox / ml:6.2f}")


if __name__ == "__main__":
    main()
