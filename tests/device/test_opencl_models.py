"""PP-OCR classifier and recognizer compiled for ``opencl``, each exported to ONE
library (host code, OpenCL kernels, weights), loaded in a fresh process, run on the
OpenCL device (PoCL in CI) and compared with ONNX Runtime with the CPU model tests'
bound (1e-4 of the output's range); the recognizer reads "Hello World 2024". Also:
the module tree in ``monolib inspect``, the byte-for-byte round trip of the opencl
module, and the error on a machine without OpenCL."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from models.conftest import TEXT, assert_matches

import monolib
from monolib.compiler.testing import ort_run
from monolib.models import fetch_model, ocr

pytestmark = pytest.mark.slow

MODELS = {"cls": ("ppocr_cls", (1, 3, 48, 192)), "rec": ("ppocr_rec", (1, 3, 48, 320))}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``{name: (factory, library path)}``: compiled for opencl and exported."""
    out = tmp_path_factory.mktemp("opencl-libs")
    result = {}
    for name, (key, shape) in MODELS.items():
        factory = monolib.compile(str(fetch_model(key)), target="opencl", shapes={"x": shape})
        result[name] = (factory, factory.export_library(str(out / f"{name}.so")))
    return result


@pytest.fixture(scope="module")
def line():
    pytest.importorskip("PIL")
    return ocr.render_line(TEXT)


def _ort(key: str, x: np.ndarray, optimized: bool = True) -> list[np.ndarray]:
    return ort_run(fetch_model(key), {"x": x}, optimize=optimized)


def test_every_op_is_a_kernel(built):
    for name, (factory, _) in built.items():
        graph = factory.get_graph_json()
        dev = factory.lib.imported_modules[0]
        assert graph["device"] == "opencl" and dev.type_key == "opencl"
        assert len(dev.functions) == len(graph["nodes"]) > 20, name
        assert [f["node"] for f in dev.functions] == list(range(len(graph["nodes"])))
        assert dev.source.count("__kernel void") == len(dev.functions)


def test_cls_matches_onnxruntime_and_tells_rotated_lines(built, line, need_opencl, fresh_device_run):
    x = ocr.line_preprocess(line, 48, 192)
    got, info = fresh_device_run(built["cls"][1], {"x": x})
    assert info["heavy"] == [], "the run imported the compiler / onnx"
    assert info["last_build"] == "source"
    assert_matches(got, _ort("ppocr_cls", x), "PP-OCR cls on OpenCL")
    assert got[0][0].argmax() == 0  # upright
    # the same line upside down (a second process: PoCL's kernel cache is warm now)
    x = ocr.line_preprocess(np.ascontiguousarray(line[::-1, ::-1]), 48, 192)
    got, _ = fresh_device_run(built["cls"][1], {"x": x})
    assert_matches(got, _ort("ppocr_cls", x), "PP-OCR cls on OpenCL (rotated)")
    assert got[0][0].argmax() == 1  # rotated 180 degrees


def test_rec_matches_onnxruntime_and_reads_the_text(built, line, need_opencl, fresh_device_run):
    x = ocr.line_preprocess(line, 48, 320)
    got, _ = fresh_device_run(built["rec"][1], {"x": x})
    assert_matches(got, _ort("ppocr_rec", x), "PP-OCRv4 rec on OpenCL",
                   want_unopt=_ort("ppocr_rec", x, optimized=False))
    charset = ocr.load_charset(fetch_model("ppocr_rec"))
    assert ocr.ctc_greedy_decode(got[0], charset) == TEXT


def test_inspect_shows_the_device_module_under_the_library(built):
    from monolib.tools.inspect import inspect_library

    report = inspect_library(built["cls"][1], verify=True)
    mods = report["modules"]
    root = mods[report["root"]]
    assert root["type_key"] == "graph_executor_factory"
    (lib,) = [mods[i] for i in root["imports"]]
    assert lib["type_key"] == "library"
    assert [mods[i]["type_key"] for i in lib["imports"]] == ["opencl"]
    n = len(built["cls"][0].lib.imported_modules[0].functions)
    assert mods[lib["imports"][0]]["device"] == {"kernels": n, "binaries": []}
    text = subprocess.run([sys.executable, "-m", "monolib.cli", "inspect", built["cls"][1]],
                          capture_output=True, text=True, check=True).stdout
    assert text.index("library") < text.index(f"opencl ({n} kernels, binaries: none)")


def test_opencl_module_round_trips_byte_for_byte(built):
    factory, path = built["rec"]
    original = factory.lib.imported_modules[0]
    loaded = monolib.load_module(path)
    (dso,) = loaded.imported_modules
    (dev,) = dso.imported_modules
    assert type(dev).__name__ == "OpenCLModule"
    assert dev.save_to_bytes() == original.save_to_bytes()
    assert dev.source == original.source and dev.functions == original.functions


def test_no_opencl_is_a_clear_error_at_executor_not_import(built, tmp_path):
    empty = tmp_path / "no-icds"
    empty.mkdir()
    env = {**os.environ, "OCL_ICD_VENDORS": str(empty), "OPENCL_VENDOR_PATH": str(empty)}
    code = (
        "import sys, monolib\n"
        "from monolib.errors import DeviceUnavailableError\n"
        f"mod = monolib.load_module({str(built['cls'][1])!r})\n"
        "try:\n"
        "    mod['default'](monolib.opencl())\n"
        "except DeviceUnavailableError as e:\n"
        "    assert isinstance(e, monolib.MonolibError)\n"
        "    print('ERROR', e)\n"
        "else:\n"
        "    sys.exit('no error')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR" in proc.stdout and "OpenCL" in proc.stdout


def test_cpu_device_on_an_opencl_model_names_the_device(built):
    factory, _ = built["cls"]
    with pytest.raises(monolib.InputError, match=r"compiled for opencl.*monolib\.opencl\(\)"):
        factory["default"](monolib.cpu())


def test_det_matches_onnxruntime_and_finds_the_text_bands(need_opencl):
    """PP-OCRv4 det (its FPN's nearest 2x Resizes and DB head's stride-2 ConvTransposes
    as device kernels) on a rendered page: ONNX Runtime's map within 3e-4 of its range
    (ORT's optimized and plain runs differ by 2.7e-4 here; the device's per-element
    sums take another order than the CPU's GEMMs) and both text bands found."""
    from models.conftest import PAGE

    image, bands = ocr.render_page(PAGE)
    x = ocr.det_preprocess(image)
    factory = monolib.compile(str(fetch_model("ppocr_det")), target="opencl",
                              shapes={"x": x.shape})
    ops = {n["op"] for n in factory.get_graph_json()["nodes"]}
    assert {"Resize", "ConvTranspose"} <= ops
    gm = monolib.GraphModule(factory["default"](monolib.opencl()))
    gm.run(x=x)
    got = [gm.get_output(0).numpy()]
    assert_matches(got, _ort("ppocr_det", x), "PP-OCRv4 det on OpenCL", rel=3e-4,
                   want_unopt=_ort("ppocr_det", x, optimized=False))
    m = got[0][0, 0]
    for y0, y1 in bands:
        assert m[y0:y1].mean() > 0.1, f"text band {y0}:{y1} mean {m[y0:y1].mean():.3f}"
    assert len(ocr.text_boxes(m)) == len(PAGE)
