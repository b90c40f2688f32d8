"""PP-OCRv4 rec quantized with ``onnxruntime.quantization.quantize_dynamic``, and
monolib's latency on it beside ONNX Runtime's running the same file.

    python bench/quantized_dynamic.py [--runs 30] [--variant dynamic|fused]

The recipe (:func:`quantized_rec`) is shared with
``tests/models/test_ppocr_quantized_dynamic.py``:

* ``"dynamic"``: the float model (its ``Constant`` weights made initializers, converted
  to opset 17, the input fixed to ``[1, 3, 48, 320]``) through ``quantize_dynamic`` with
  ``op_types_to_quantize=["MatMul"]``, int8 weights in 7 bits (``reduce_range``: ORT's
  uint8 x int8 AVX2 kernel saturates int16 pair sums with full-range weights): every
  MatMul with a weight becomes DynamicQuantizeLinear + MatMulInteger + Cast + Mul.
* ``"fused"``: that file as ONNX Runtime's own graph optimizer rewrites it
  (``ORT_ENABLE_EXTENDED``, saved with ``optimized_model_filepath``; its conv-activation
  fusion is turned off, FusedConv being outside this work): the quantized MatMuls become
  ``com.microsoft`` DynamicQuantizeMatMul, beside QuickGelu, FusedMatMul and
  SkipLayerNormalization.

Quantizing the convolutions too is not part of the recipe: with int8 weights ORT's own
ConvInteger run of the result reads no text at all; with uint8 weights it reads, but its
38 dynamic re-quantizations turn one-ulp float differences between runtimes into
probabilities up to 0.19 apart. Files go to the model cache (``$MONOLIB_CACHE`` or
``~/.cache/monolib/models``, subfolder ``quantized``), keyed by the source model's SHA-256
and the onnxruntime version; never into the repository.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# the PaddleOCR exports hold their weights in Constant nodes: the same conversion as
# bench/quantized.py's recipe
from quantized import _constants_as_initializers

SHAPE = (1, 3, 48, 320)
VARIANTS = ("dynamic", "fused")


def _float17(src: Path, dst: Path) -> None:
    """The float rec with initializer weights, a fixed input shape, at opset 17 (ORT's
    LayerNormalization fusion needs an opset that has the op)."""
    import onnx
    import onnx.version_converter

    model = _constants_as_initializers(onnx.load(str(src)))
    for d, v in zip(model.graph.input[0].type.tensor_type.shape.dim, SHAPE):
        d.ClearField("dim_param")
        d.dim_value = v
    onnx.save(onnx.version_converter.convert_version(model, 17), str(dst))


def quantized_rec(variant: str = "dynamic", cache: Path | None = None) -> Path:
    """Path of the dynamically quantized PP-OCRv4 rec (built on first use, cached).

    Parameters
    ----------
    variant : {"dynamic", "fused"}
        ``quantize_dynamic``'s output, or that file after ONNX Runtime's extended graph
        optimizations (module docstring).
    cache : Path, optional
        Folder of the cached files (default: the model cache's ``quantized``).

    Returns
    -------
    Path
        The ``.onnx`` file (written atomically: never a partial file under its name).

    Raises
    ------
    ValueError
        For another ``variant``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from monolib.models import fetch_model
    from monolib.models.fetch import cache_dir, sha256_of

    src = fetch_model("ppocr_rec")
    cache = Path(cache or cache_dir()) / "quantized"
    cache.mkdir(parents=True, exist_ok=True)
    tag = f"{sha256_of(src)[:16]}_ort{ort.__version__}"
    out = cache / f"ppocr_rec_qdyn_{variant}_{tag}.onnx"
    if out.exists():
        return out
    pid = os.getpid()
    fixed, tmp = cache / f".rec17.{pid}.onnx", cache / f".{variant}.{pid}.onnx"
    try:
        if variant == "dynamic":
            _float17(src, fixed)
            quantize_dynamic(
                str(fixed),
                str(tmp),
                op_types_to_quantize=["MatMul"],
                weight_type=QuantType.QInt8,
                reduce_range=True,
            )
        else:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            opts.optimized_model_filepath = str(tmp)
            opts.log_severity_level = 3
            ort.InferenceSession(
                str(quantized_rec("dynamic", cache.parent)),
                opts,
                providers=["CPUExecutionProvider"],
                disabled_optimizers=["ConvActivationFusion"],
            )
        os.replace(tmp, out)
    finally:
        for p in (fixed, tmp):
            p.unlink(missing_ok=True)
    return out


def quantized_vad_sequence(cache: Path | None = None) -> Path:
    """Path of Silero VAD's sequence model (``silero_vad_sequence``, one LSTM at the top
    level) through ``quantize_dynamic`` with ``op_types_to_quantize=["LSTM"]`` and int8
    weights: the LSTM becomes ``com.microsoft`` DynamicQuantizeLSTM. Cached as
    :func:`quantized_rec` is.
    """
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from monolib.models import fetch_model
    from monolib.models.fetch import cache_dir, sha256_of

    src = fetch_model("silero_vad_sequence")
    cache = Path(cache or cache_dir()) / "quantized"
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"silero_vad_sequence_qdyn_{sha256_of(src)[:16]}_ort{ort.__version__}.onnx"
    if not out.exists():
        tmp = cache / f".vad_seq.{os.getpid()}.onnx"
        try:
            quantize_dynamic(
                str(src), str(tmp), op_types_to_quantize=["LSTM"], weight_type=QuantType.QInt8
            )
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return out


def lines(texts: list[str]) -> list[np.ndarray]:
    """Each text rendered and preprocessed for rec (``[1, 3, 48, 320]`` float32)."""
    from monolib.models import ocr

    return [ocr.line_preprocess(ocr.render_line(t), SHAPE[2], SHAPE[3]) for t in texts]


def _block_ms(fn, runs: int) -> tuple[float, float]:
    """(median, min) milliseconds of ``fn`` over ``runs`` calls after a warm-up."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), 1000 * min(times)


def main() -> None:
    """Print monolib and ORT latency (median/min) on the quantized rec at 1 and 2
    threads, and ORT/monolib (of the medians; above 1: monolib faster)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--variant", choices=VARIANTS, default="fused")
    args = ap.parse_args()
    import monolib
    from monolib.compiler.testing import ort_session

    path = quantized_rec(args.variant)
    x = lines(["Hello World 2024"])[0]
    t0 = time.perf_counter()
    factory = monolib.compile(str(path), target="c", shapes={"x": SHAPE})
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    gm.run(x=x)
    print(f"{args.variant}: {path.name}; monolib compile + build {time.perf_counter() - t0:.1f} s")
    print("threads  monolib ms (median/min)   ORT ms (median/min)   ORT/monolib (medians)")
    for threads in (1, 2):
        monolib.set_num_threads(threads)
        sess = ort_session(path, threads=threads)
        ml, ml_min = _block_ms(lambda: gm.run(x=x), args.runs)
        ox, ox_min = _block_ms(lambda s=sess: s.run(None, {"x": x}), args.runs)
        print(
            f"{threads:7d}  {ml:8.3f} / {ml_min:6.3f}          {ox:8.3f} / {ox_min:6.3f}        {ox / ml:6.2f}"
        )


if __name__ == "__main__":
    main()
