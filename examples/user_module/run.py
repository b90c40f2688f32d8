"""Ship a user-defined module inside a compiled model library, then use it in a
FRESH process.

    python examples/user_module/run.py [--out DIR] [--model PATH]

Step 1 (this process): compile the PP-OCR direction classifier
(``ch_ppocr_mobile_v2.0_cls_infer.onnx``, input ``x: float32[1, 3, 48, 192]``), import a
:class:`~examples.user_module.postprocess.ClsPostprocessModule` into the factory and
export ONE library. Step 2 (a new Python process, ``--load``): import the module type's
Python module (which registers its loader), ``monolib.load_module`` the library, run the
model and decode its output with the shipped module's ``decode`` function. Step 3: a new
process that loads WITHOUT the import gets an UnknownTypeKeyError naming the type key
and the Python module to import. The last stdout line is JSON (used by the test).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:  # "examples.user_module" is importable from the repo root
    sys.path.insert(0, ROOT)

import monolib

logger = logging.getLogger(__name__)

MODEL = os.path.expanduser("~/.cache/monolib/models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
SHAPE = (1, 3, 48, 192)


def example_input(seed: int = 0) -> np.ndarray:
    """A deterministic normalized image batch ``float32[1, 3, 48, 192]`` in [-1, 1]."""
    return np.random.default_rng(seed).uniform(-1, 1, SHAPE).astype(np.float32)


def build(model: str, out_dir: str) -> str:
    """Compile ``model``, import the post-processing module, export; returns the path."""
    from examples.user_module.postprocess import ClsPostprocessModule

    factory = monolib.compile(model, shapes={"x": SHAPE})
    factory.import_module(ClsPostprocessModule(["0", "180"], threshold=0.9))
    return factory.export_library(os.path.join(out_dir, "cls_with_postprocess.so"))


def load_and_run(path: str) -> dict:
    """In a fresh process: register the loader, load, run, decode."""
    import examples.user_module.postprocess  # noqa: F401  (registers the loader)

    lib = monolib.load_module(path)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    gm.run(x=example_input())
    probs = gm.get_output(0).numpy()
    decode = lib.get_function("decode", query_imports=True)  # the shipped module's
    ((label, score),) = decode(probs)
    tree = [m.type_key for m in lib.imported_modules]
    return {"probs": probs.tolist(), "label": label, "score": score, "imports": tree}


def load_without_import(path: str) -> dict:
    """In a fresh process that did not import the module type: the error says what to do."""
    try:
        monolib.load_module(path)
    except monolib.UnknownTypeKeyError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}


def _fresh(flag: str, path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run(
        [sys.executable, os.path.abspath(__file__), flag, path],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="directory of the exported library")
    ap.add_argument("--model", default=MODEL, help="the classifier ONNX file")
    ap.add_argument("--load", metavar="LIB", help=argparse.SUPPRESS)
    ap.add_argument("--load-without-import", metavar="LIB", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.load:
        print(json.dumps(load_and_run(args.load)))
        return 0
    if args.load_without_import:
        print(json.dumps(load_without_import(args.load_without_import)))
        return 0
    path = build(args.model, args.out)
    print(f"step 1: exported {path}")
    ran = _fresh("--load", path)
    print(
        f"step 2 (fresh process): imports {ran['imports']}, label {ran['label']!r} "
        f"score {ran['score']:.4f}"
    )
    refused = _fresh("--load-without-import", path)
    print(f"step 3 (fresh process, no import): {refused['error']}: {refused['message']}")
    print(json.dumps({"library": path, "run": ran, "without_import": refused}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
