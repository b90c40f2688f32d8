"""PP-OCRv4 detector and recognizer, PP-OCR line classifier: compiled, exported, loaded
in a fresh process, compared with ONNX Runtime, and checked for meaning (the text is
read, the text band is found, the upside-down line is recognized as such)."""

import re

import numpy as np
import pytest

from monolib.models import fetch_model, ocr

from .conftest import PAGE, TEXT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def det_outputs(model_lib, fresh_run, ort_session, page):
    image, _ = page
    x = ocr.det_preprocess(image)
    got = fresh_run(model_lib("det"), {"x": x})
    want = ort_session("ppocr_det").run(None, {"x": x})
    unopt = ort_session("ppocr_det", optimized=False).run(None, {"x": x})
    return got, want, unopt


def test_det_matches_onnxruntime(det_outputs, matches):
    got, want, unopt = det_outputs
    matches(got, want, "PP-OCRv4 det", want_unopt=unopt)


def test_det_map_finds_the_text_band(det_outputs, page):
    (prob,), _, _ = det_outputs
    _, bands = page
    m = prob[0, 0]
    for y0, y1 in bands:
        assert m[y0:y1].mean() > 0.1, f"text band {y0}:{y1} mean {m[y0:y1].mean():.3f}"
    assert m[:150].mean() < 0.01 and m[450:].mean() < 0.01
    boxes = ocr.text_boxes(m)
    assert len(boxes) == len(PAGE), boxes


@pytest.fixture(scope="module")
def rec_io(model_lib, fresh_run, ort_session, text_line):
    x = ocr.line_preprocess(text_line, 48, 320)
    got = fresh_run(model_lib("rec"), {"x": x})
    want = ort_session("ppocr_rec").run(None, {"x": x})
    unopt = ort_session("ppocr_rec", optimized=False).run(None, {"x": x})
    return got, want, unopt


def test_rec_matches_onnxruntime(rec_io, matches):
    got, want, unopt = rec_io
    matches(got, want, "PP-OCRv4 rec", want_unopt=unopt)


def test_rec_reads_the_text(rec_io):
    (probs,), _, _ = rec_io
    charset = ocr.load_charset(fetch_model("ppocr_rec"))
    assert probs.shape == (1, 40, len(charset))
    assert ocr.ctc_greedy_decode(probs, charset) == TEXT


@pytest.fixture(scope="module")
def cls_io(model_lib, fresh_run, ort_session, text_line):
    upright = ocr.line_preprocess(text_line, 48, 192)
    rotated = ocr.line_preprocess(np.ascontiguousarray(text_line[::-1, ::-1]), 48, 192)
    lib = model_lib("cls")
    sess = ort_session("ppocr_cls")
    return {name: (fresh_run(lib, {"x": x}), sess.run(None, {"x": x}))
            for name, x in (("upright", upright), ("rotated", rotated))}


def test_cls_matches_onnxruntime(cls_io, matches):
    for name, (got, want) in cls_io.items():
        matches(got, want, f"PP-OCR cls ({name})")


def test_cls_tells_upright_from_rotated(cls_io):
    up = cls_io["upright"][0][0]
    down = cls_io["rotated"][0][0]
    assert up.shape == (1, 2)
    assert up[0, 0] > 0.9 and up[0, 1] < 0.1, up
    assert down[0, 1] > 0.9 and down[0, 0] < 0.1, down


def test_detect_then_read_the_page(model_lib, page):
    """The README's main job: boxes from the det library, lines read by the rec library."""
    import monolib

    def runner(name):
        gm = monolib.GraphModule(monolib.load_module(str(model_lib(name)))["default"](monolib.cpu()))

        def call(x):
            gm.run(x=x)
            return gm.get_output(0).numpy()
        return call

    image, bands = page
    charset = ocr.load_charset(fetch_model("ppocr_rec"))
    found = ocr.read_page(image, runner("det"), runner("rec"), charset, rec_width=320)
    assert [text for _, text in found] == PAGE
    for ((_, y0, _, y1), _), (b0, b1) in zip(found, bands):
        assert b0 < (y0 + y1) / 2 < b1, (found, bands)  # each box sits on its line


def test_readme_ocr_demo(monkeypatch, capsys, tmp_path):
    """examples/ocr_demo.py end to end (the README's main job): ONE detector library with
    a run-time page size and ONE recognizer library with a run-time line width, both
    compiled by the demo, read two pages of sizes no library was specialized for."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "ocr_demo.py"
    spec = importlib.util.spec_from_file_location("ocr_demo", path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    monkeypatch.setattr("sys.argv", ["ocr_demo.py", *PAGE, "--page", "736x960",
                                     "--page", "1280x608", "--keep", str(tmp_path)])
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "all lines read exactly" in out
    assert "page 736x960 (not specialized" in out and "page 1280x608 (not specialized" in out
    widths = {int(w) for w in re.findall(r"line 48x(\d+)", out)}
    assert len(widths) > 1 and 320 not in widths, out  # each line at its natural width
    assert sorted(p.name for p in tmp_path.glob("*.so")) == ["ppocr_det.so", "ppocr_rec.so"]
