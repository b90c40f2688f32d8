"""The end-to-end detector of issue 13 (PP-OCRv4 det + box head + NonMaxSuppression +
Gather, :func:`monolib.models.detector.detector_with_nms`): monolib's one library
against ONNX Runtime, side by side, on rendered pages with 0, 1 and 3 text lines.

    python bench/detector_nms.py [--size 320] [--repeat 20] [--threads 1,2]
                                 [--out bench/DETECTOR_NMS.md]

Per page and thread count: the median latency (input in, run, both outputs out as
NumPy) of the monolib library and of an ONNX Runtime session (same threads), the ratio
monolib / ORT (target <= 1.0x), whether the selections are equal, and the geometric
mean of the ratios. Then NonMaxSuppression alone at a YOLO-like size (1 x 80 classes x
8400 boxes, at most 100 per class, IoU 0.5, score 0.25; random boxes) both ways.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import _ms, machine, median_time, parse_threads

import monolib
from monolib.compiler.testing import ort_session
from monolib.models import fetch_model, ocr
from monolib.models.detector import detector_with_nms

__all__ = ["main", "nms_only", "pages"]

logger = logging.getLogger(__name__)

PAGES = {0: [], 1: ["Hello monolib"], 3: ["one library", "NMS inside", "many lines"]}


def pages(size: int) -> dict[int, np.ndarray]:
    """Detector inputs ``[1, 3, size, size]`` of the 0-, 1- and 3-line pages."""
    out = {}
    for n, lines in PAGES.items():
        image, _ = ocr.render_page(lines, size=size, font_size=24 * size // 320,
                                   top=40 * size // 320, spacing=70 * size // 320)
        out[n] = ocr.det_preprocess(image)
    return out


def nms_only(threads: int, repeat: int) -> tuple[float, float, bool]:
    """(monolib s, ORT s, same selection) of NonMaxSuppression alone on 1x80x8400."""
    from onnx import TensorProto, helper, numpy_helper

    b, c, n = 1, 80, 8400
    inits = [numpy_helper.from_array(np.array([100], np.int64), "m"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.25], np.float32), "thr")]
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["b", "s", "m", "iou", "thr"], ["sel"])], "nms",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [b, n, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [b, c, n])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, ["k", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 640, (b, n, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(10, 80, (b, n, 2)).astype(np.float32)], -1)
    scores = (rng.random((b, c, n)) ** 4).astype(np.float32)
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    sess = ort_session(model, threads=threads)

    def ours():
        gm.run(b=boxes, s=scores)
        return gm.get_output(0).numpy()

    def theirs():
        return sess.run(None, {"b": boxes, "s": scores})[0]

    same = np.array_equal(ours(), theirs())
    return median_time(ours, repeat)[0], median_time(theirs, repeat)[0], same


def main() -> None:
    """Parse the arguments, time both sides, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=320)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args()
    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text)
        lines.append(text)

    threads = parse_threads(ap, args.threads)
    model = detector_with_nms(fetch_model("ppocr_det"), size=(args.size, args.size))
    lib = monolib.compile(model)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    inputs = pages(args.size)
    info = machine()
    emit(f"# detector + NMS, {args.size}x{args.size}, {info.get('cpu', '?')}")
    emit("| page | threads | K | monolib ms | ORT ms | monolib / ORT | same selection |")
    emit("|---|---|---|---|---|---|---|")
    ratios = []
    for t in threads:
        monolib.runtime.set_num_threads(t)
        sess = ort_session(model, threads=t)
        for n, x in inputs.items():
            def ours(x=x):
                gm.run(x=x)
                return [gm.get_output(i).numpy() for i in range(2)]

            def theirs(x=x, sess=sess):
                return sess.run(None, {"x": x})

            got, want = ours(), theirs()
            same = all(np.array_equal(a, b) for a, b in zip(got, want))
            m, _ = median_time(ours, args.repeat)
            o, _ = median_time(theirs, args.repeat)
            ratios.append(m / o)
            emit(f"| {n} lines | {t} | {len(got[0])} | {_ms(m)} | {_ms(o)} | "
                  f"{m / o:.3f}x | {same} |")
    geo = float(np.exp(np.mean(np.log(ratios))))
    emit(f"\ngeometric mean monolib / ORT: {geo:.3f}x (target <= 1.0x)")
    emit("\n| NMS alone, 1x80x8400 | threads | monolib ms | ORT ms | monolib / ORT | same |")
    emit("|---|---|---|---|---|---|")
    for t in threads:
        monolib.runtime.set_num_threads(t)
        m, o, same = nms_only(t, args.repeat)
        emit(f"| | {t} | {_ms(m)} | {_ms(o)} | {m / o:.3f}x | {same} |")
    if args.out is not None:
        load = os.getloadavg()[0]
        args.out.write_text(f"{chr(10).join(lines)}\n\nLoad average at the end: {load:.1f} "
                            f"(shared machine); onnxruntime {info.get('onnxruntime', '?')}.\n")


if __name__ == "__main__":
    main()
