"""Read the text of pages of any size with PP-OCRv4: ONE detector library for every page
size and ONE recognizer library for every line width.

    python examples/ocr_demo.py ["text line" ...] [--page HxW ...] [--opt HxW|none]
                                [--keep DIR]

Fetches the PP-OCRv4 detector and recognizer (from the ``rapidocr-onnxruntime`` wheel,
SHA-256 checked, cached) and compiles each ONCE with run-time dims (``monolib.compile``
with ``(lo, hi[, step])`` bounds, issue 12): the detector for any page of 32..1280 x
32..1280 pixels in multiples of 32, the recognizer for any line width 32..1280 (each
line at its natural width, no padding). The detector library also holds a static,
specialized path for one hot page size (``opt_shapes``; ``--opt``, default 640x640,
``none`` for none). Then, for each ``--page`` size (default 736x960 and 480x640: sizes
the library was not specialized for, run by its generic path), renders the text
lines on the page, finds the text boxes with the detector (threshold the probability
map, box each band of text rows), reads each box with the recognizer (greedy CTC), and
prints the text with the time of every step.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import monolib
from monolib.models import fetch_model, ocr

#: Any page of 32..1280 x 32..1280 pixels in multiples of 32 (the detector's strides).
DET_SHAPES = {"x": (1, 3, (32, 1280, 32), (32, 1280, 32))}
#: Any line 48 pixels high and 32..1280 wide.
REC_SHAPES = {"x": (1, 3, 48, (32, 1280))}
PAGES = ["736x960", "480x640"]


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


def build(key: str, shapes: dict, out: Path, timer: Timer, label: str,
          opt_shapes: dict | None = None) -> Path:
    """Compile the model ``key`` with the run-time dims of ``shapes`` (and the static
    ``opt_shapes``) and export it to the one library ``out``."""
    model = fetch_model(key)
    with timer(f"compile {label}"):
        factory = monolib.compile(str(model), target="c", shapes=shapes, opt_shapes=opt_shapes)
    with timer(f"export {label}"):
        factory.export_library(str(out))
    return out


def load(path: Path, timer: Timer, label: str) -> monolib.GraphModule:
    with timer(f"load {label}"):
        return monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))


def page_size(text: str) -> tuple[int, int] | None:
    """``"736x960"`` -> (736, 960): height x width, multiples of 32 within 32..1280;
    ``"none"`` -> None."""
    if text.lower() == "none":
        return None
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"page size HxW, got {text!r}") from None
    if not all(32 <= v <= 1280 and v % 32 == 0 for v in (h, w)):
        raise argparse.ArgumentTypeError(
            f"page {h}x{w}: each side a multiple of 32 in 32..1280 (the detector's bounds)")
    return h, w


def read_pages(lines: list[str], pages: list[tuple[int, int]], work: Path,
               opt: tuple[int, int] | None = None) -> list[list[str]]:
    """The whole job: returns the text read from the rendered ``lines`` on each page."""
    timer = Timer()
    det_opt = {"x": [(1, 3, *opt)]} if opt else None
    det_lib = build("ppocr_det", DET_SHAPES, work / "ppocr_det.so", timer, "det", det_opt)
    rec_lib = build("ppocr_rec", REC_SHAPES, work / "ppocr_rec.so", timer, "rec")
    charset = ocr.load_charset(fetch_model("ppocr_rec"))
    det = load(det_lib, timer, "det")
    rec = load(rec_lib, timer, "rec")
    widths: list[int] = []

    def run(gm: monolib.GraphModule, label: str):
        def call(x):
            if gm is rec:
                widths.append(x.shape[3])
            with timer(label):
                gm.run(x=x)
                return gm.get_output(0).numpy()
        return call

    texts = []
    for k, (h, w) in enumerate(pages):
        image, _ = ocr.render_page(lines, size=(h, w))
        where = f"page {h}x{w}"
        det_label = f"det {where}" + (" (first run)" if k == 0 else "")
        found = ocr.read_page(image, run(det, det_label), run(rec, f"rec {where} (all lines)"),
                              charset)
        spec = " (specialized)" if opt == (h, w) else " (not specialized: generic path)"
        print(f"{where}{spec}:")
        for ((x0, y0, x1, y1), text), width in zip(found, widths[-len(found):] if found else []):
            print(f"  box ({x0:3d},{y0:3d})-({x1:3d},{y1:3d}), line 48x{width}: {text!r}")
        texts.append([text for _, text in found])
    h, w = pages[0]
    run(det, f"det page {h}x{w} again")(ocr.det_preprocess(ocr.render_page(lines, (h, w))[0]))
    print("\ntimings:")
    for name, t in timer.times.items():
        print(f"  {name:34s} {t * 1e3:9.1f} ms")
    for label, lib in (("det", det_lib), ("rec", rec_lib)):
        print(f"  {label} library {'':24s}{lib.stat().st_size / 1e6:9.2f} MB  ({lib.name})")
    return texts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lines", nargs="*", default=["Hello World 2024", "monolib compiles ONNX"])
    ap.add_argument("--page", action="append", type=page_size, metavar="HxW",
                    help=f"a page size to read (repeatable; default {' and '.join(PAGES)})")
    ap.add_argument("--opt", type=page_size, default=(640, 640), metavar="HxW",
                    help="the page size also compiled statically into the detector library "
                    "(default 640x640; none: no specialization)")
    ap.add_argument("--keep", metavar="DIR", help="write the two libraries here (default: a "
                    "temporary directory, removed at the end)")
    args = ap.parse_args()
    pages = [p for p in args.page or [page_size(p) for p in PAGES] if p]
    if not pages:
        ap.error("--page: give a size HxW")
    print(f"rendering {args.lines} on pages of {', '.join(f'{h}x{w}' for h, w in pages)}; "
          "compiling PP-OCRv4 det (any page 32..1280 x 32..1280, multiples of 32"
          + (f"; a static path for {args.opt[0]}x{args.opt[1]}" if args.opt else "")
          + ") and rec (any line width 32..1280) ...")
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        texts = read_pages(args.lines, pages, Path(args.keep), args.opt)
    else:
        with tempfile.TemporaryDirectory(prefix="monolib-ocr-") as tmp:
            texts = read_pages(args.lines, pages, Path(tmp), args.opt)
    ok = all(t == args.lines for t in texts)
    print(f"\nread {texts}: "
          f"{'all lines read exactly' if ok else 'MISMATCH with ' + repr(args.lines)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
