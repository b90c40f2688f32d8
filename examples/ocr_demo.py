"""Read the text of an image with PP-OCRv4, each model compiled to ONE library.

    python examples/ocr_demo.py ["text line" ...] [--keep DIR]

Fetches the PP-OCRv4 detector and recognizer (from the ``rapidocr-onnxruntime`` wheel,
SHA-256 checked, cached), compiles each with ``monolib.compile`` and exports it to one
shared library, renders the text lines on a 640x640 page, finds the text boxes with
the detector library (threshold the probability map, box each band of text rows),
crops each box, reads it with the recognizer library (greedy CTC decoding), and prints
the text with the time of every step.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import monolib
from monolib.models import fetch_model, ocr

DET_SHAPE = (1, 3, 640, 640)
REC_SHAPE = (1, 3, 48, 320)


class Timer:
    """Collects named wall times (seconds)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def __call__(self, name: str):
        timer = self

        class _Span:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.times[name] = timer.times.get(name, 0.0) + time.perf_counter() - self.t0

        return _Span()


def build(key: str, shape: tuple, out: Path, timer: Timer, label: str) -> Path:
    """Compile the model ``key`` for input ``x`` of ``shape`` and export it to ``out``."""
    model = fetch_model(key)
    with timer(f"compile {label}"):
        factory = monolib.compile(str(model), target="c", shapes={"x": shape})
    with timer(f"export {label}"):
        factory.export_library(str(out))
    return out


def load(path: Path, timer: Timer, label: str) -> monolib.GraphModule:
    with timer(f"load {label}"):
        return monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))


def read_page(lines: list[str], work: Path) -> list[str]:
    """The whole job: returns the text read from the rendered ``lines``."""
    timer = Timer()
    det_lib = build("ppocr_det", DET_SHAPE, work / "ppocr_det.so", timer, "det")
    rec_lib = build("ppocr_rec", REC_SHAPE, work / "ppocr_rec.so", timer, "rec")
    charset = ocr.load_charset(fetch_model("ppocr_rec"))

    det = load(det_lib, timer, "det")
    rec = load(rec_lib, timer, "rec")

    def run(gm: monolib.GraphModule, label: str):
        def call(x):
            with timer(label):
                gm.run(x=x)
                return gm.get_output(0).numpy()
        return call

    image, _ = ocr.render_page(lines)
    found = ocr.read_page(image, run(det, "det first run"), run(rec, "rec (all lines)"),
                          charset, REC_SHAPE[3])
    run(det, "det second run")(ocr.det_preprocess(image))  # warm: the steady-state latency
    for (x0, y0, x1, y1), text in found:
        print(f"  box ({x0:3d},{y0:3d})-({x1:3d},{y1:3d}): {text!r}")
    texts = [text for _, text in found]
    print("\ntimings:")
    for name, t in timer.times.items():
        print(f"  {name:18s} {t * 1e3:9.1f} ms")
    for label, lib in (("det", det_lib), ("rec", rec_lib)):
        print(f"  {label} library      {lib.stat().st_size / 1e6:9.2f} MB  ({lib.name})")
    return texts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lines", nargs="*", default=["Hello World 2024", "monolib compiles ONNX"])
    ap.add_argument("--keep", metavar="DIR", help="write the two libraries here (default: a "
                    "temporary directory, removed at the end)")
    args = ap.parse_args()
    print(f"rendering {args.lines} on a 640x640 page; compiling PP-OCRv4 det + rec ...")
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        texts = read_page(args.lines, Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="monolib-ocr-") as tmp:
            texts = read_page(args.lines, Path(tmp))
    ok = texts == args.lines
    print(f"\nread {texts}: {'all lines read exactly' if ok else 'MISMATCH with ' + repr(args.lines)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
