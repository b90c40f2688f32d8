"""The ``.wasm`` of a model (issue 17) run from JavaScript with ``monolib.mjs``.

PP-OCR's classifier and recognizer, compiled by ``monolib compile --target "c
-mtriple=wasm32-wasi"`` (fixtures of conftest.py), are loaded by the package's ES module
(``monolib js`` prints it) in Node and in headless Chromium (a page served from a
localhost ``http.server`` imports it and the model, and POSTs the outputs back), and
match ONNX Runtime; the recognizer still reads "Hello World 2024". Also: a bad input
shape is a JavaScript ``Error`` with the C API's message, a trap is a caught ``Error``
after which the module still runs, a detached signature is checked with WebCrypto
Ed25519 before the bytes are compiled (a modified file, another key and a forged
signature refused), and a module importing anything but WASI is refused at load.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import HERE, MJS, TEXT, run_chromium, serve_dir
from models.conftest import assert_matches

from monolib.models import fetch_model, ocr

#: the C API's message for the bad shape host_run.mjs gives (test_wasm_python checks it too)
BAD_SHAPE = 'monolib_set_input_shaped: input "x" axis 3 is 100, the model expects {}'


def _ort(key: str, x: np.ndarray, optimized: bool = True) -> list[np.ndarray]:
    from monolib.compiler.testing import ort_run

    pytest.importorskip("onnxruntime")
    return ort_run(fetch_model(key), {"x": x}, optimize=optimized)


def _outputs(report: dict) -> list[np.ndarray]:
    assert "loadError" not in report and "pageError" not in report, report
    out = []
    for t in report["result"].values():
        assert t["type"] == "float32"
        out.append(np.frombuffer(base64.b64decode(t["b64"]), np.float32).reshape(t["dims"]))
    return out


def _spec(model, x_file, dims, **extra) -> dict:
    return {"mjs": str(MJS), "model": str(model),
            "input": {"name": "x", "file": str(x_file), "dims": list(dims)}, **extra}


def _node(node, spec: dict, tmp_path, tag: str = "run") -> dict:
    spec_file, report_file = tmp_path / f"{tag}.spec.json", tmp_path / f"{tag}.report.json"
    spec_file.write_text(json.dumps(spec))
    res = subprocess.run([node, str(HERE / "node_driver.mjs"), str(spec_file), str(report_file)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(report_file.read_text())


def _chromium(files: dict, spec: dict, tmp_path, timeout: float = 300) -> dict:
    """Serve ``files`` (name -> path) + the page, monolib.mjs and spec.json (names in the
    spec are URLs relative to the page) and open the page in headless Chromium."""
    root = tmp_path / "www"
    root.mkdir(parents=True)
    for name, path in {**files, "monolib.mjs": MJS, "page.html": HERE / "page.html",
                       "host_run.mjs": HERE / "host_run.mjs"}.items():
        (root / name).symlink_to(path)
    (root / "spec.json").write_text(json.dumps(spec))
    reports, done = [], threading.Event()

    def on_post(path, body):
        if path == "/report":
            reports.append(json.loads(body))
            done.set()

    server = serve_dir(root, on_post)
    try:
        run_chromium(f"http://127.0.0.1:{server.server_port}/page.html", done, timeout,
                     tmp_path / "profile")
    finally:
        server.shutdown()
    (report,) = reports
    assert "pageError" not in report, report["pageError"]
    return report


@pytest.fixture(scope="module")
def cls_input(text_line, tmp_path_factory):
    """(upright line, its file), (rotated line, its file) for the classifier."""
    d = tmp_path_factory.mktemp("js-inputs")
    out = []
    for tag, image in (("up", text_line), ("rot", np.ascontiguousarray(text_line[::-1, ::-1]))):
        x = ocr.line_preprocess(image, 48, 192)
        (d / f"{tag}.bin").write_bytes(x.tobytes())
        out.append((x, d / f"{tag}.bin"))
    return out


@pytest.fixture(scope="module")
def rec_input(text_line, tmp_path_factory):
    x = ocr.line_preprocess(text_line, 48, 320)
    path = tmp_path_factory.mktemp("js-rec") / "x.bin"
    path.write_bytes(x.tobytes())
    return x, path


def _check_cls(report, x, upright: bool) -> None:
    got = _outputs(report)
    assert_matches(got, _ort("ppocr_cls", x), "PP-OCR cls through monolib.mjs")
    assert got[0][0].argmax() == (0 if upright else 1)


def _check_rec(report, x) -> None:
    got = _outputs(report)
    assert_matches(got, _ort("ppocr_rec", x), "PP-OCRv4 rec through monolib.mjs",
                   want_unopt=_ort("ppocr_rec", x, optimized=False))
    assert ocr.ctc_greedy_decode(got[0], ocr.load_charset(fetch_model("ppocr_rec"))) == TEXT


def test_monolib_js_prints_the_module(node, tmp_path):
    res = subprocess.run([sys.executable, "-m", "monolib.cli", "js"], capture_output=True,
                         check=True)
    assert res.stdout == MJS.read_bytes()
    (tmp_path / "monolib.mjs").write_bytes(res.stdout)
    probe = ("const m = await import(process.argv[1]);"
             "console.log(JSON.stringify(Object.keys(m).sort()));")
    out = subprocess.run([node, "--input-type=module", "-e", probe, str(tmp_path / "monolib.mjs")],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["MonolibError", "loadModel", "verifySignature"]


def test_node_cls_matches_onnxruntime_and_errors_are_js_errors(node, wasm_lib, cls_input, tmp_path):
    (up, up_file), (rot, rot_file) = cls_input
    report = _node(node, _spec(wasm_lib("cls"), up_file, up.shape,
                               checks=["bad_shape", "wrong_type", "short_data", "trap"]), tmp_path)
    assert report["inputs"][0] | {"name": "x", "type": "float32", "dims": [1, 3, 48, 192]} \
        == report["inputs"][0]
    _check_cls(report, up, upright=True)
    bad = report["checks"]["bad_shape"]
    assert bad["isError"] and bad["name"] == "MonolibError"
    assert bad["message"] == BAD_SHAPE.format(192)
    assert "is float32: give a Float32Array, got Int32Array" in report["checks"]["wrong_type"]["message"]
    assert report["checks"]["short_data"]["message"] == (
        'run: input "x": 110588 bytes of data for shape [1, 3, 48, 192] (110592 bytes of float32)')
    trap = report["checks"]["trap"]
    assert trap["isError"] and trap["ctor"] == "MonolibError"  # not a WebAssembly.RuntimeError
    assert trap["message"].startswith("monolib_run trapped: ") and "out of bounds" in trap["message"]
    assert report["afterTrap"] is True
    _check_cls(_node(node, _spec(wasm_lib("cls"), rot_file, rot.shape), tmp_path, "rot"), rot,
               upright=False)


def test_node_rec_reads_the_text(node, wasm_lib, rec_input, tmp_path):
    x, path = rec_input
    _check_rec(_node(node, _spec(wasm_lib("rec"), path, x.shape), tmp_path), x)


def test_node_checks_the_signature_before_compiling(node, wasm_lib, cls_input, tmp_path):
    pytest.importorskip("cryptography")
    from monolib.tools.sign import generate_keypair, sign_file

    (up, up_file), _ = cls_input
    lib = tmp_path / "cls.wasm"
    shutil.copyfile(wasm_lib("cls"), lib)
    _, pub = generate_keypair(str(tmp_path / "key"))
    _, other = generate_keypair(str(tmp_path / "other"))
    sig = sign_file(str(lib), str(tmp_path / "key"))
    pem = Path(pub).read_text()
    # default signature: model path + ".sig"; a PEM public key as `monolib keygen` writes
    _check_cls(_node(node, _spec(lib, up_file, up.shape, publicKey=pem), tmp_path, "ok"), up, True)
    doc = json.loads(Path(sig).read_text())
    raw_hex = doc["public_key"]  # the 32 raw bytes, hex, work too; node:crypto's WebCrypto
    # where there is no global one (Node 18)
    _check_cls(_node(node, _spec(lib, up_file, up.shape, publicKey=raw_hex, signature=sig,
                                 noGlobalCrypto=True), tmp_path, "raw"), up, True)
    refused = _node(node, _spec(lib, up_file, up.shape, publicKey=Path(other).read_text()), tmp_path,
                    "other")["loadError"]
    assert "which is not the trusted key" in refused["message"]
    forged = dict(doc, signature=base64.b64encode(bytes(64)).decode())
    (tmp_path / "forged.sig").write_text(json.dumps(forged))
    refused = _node(node, _spec(lib, up_file, up.shape, publicKey=pem,
                                signature=str(tmp_path / "forged.sig")), tmp_path, "forged")
    assert "INVALID signature" in refused["loadError"]["message"]
    # a modified module: refused on its bytes, before WebAssembly.compile sees them
    data = bytearray(lib.read_bytes())
    data[:4] = b"XXXX"  # not even wasm any more: compiling would name the magic number
    lib.write_bytes(bytes(data))
    refused = _node(node, _spec(lib, up_file, up.shape, publicKey=pem), tmp_path, "modified")
    assert "does not match its signature" in refused["loadError"]["message"]
    unsigned = _node(node, _spec(lib, up_file, up.shape), tmp_path, "unsigned")["loadError"]
    assert "not a valid WebAssembly module" in unsigned["message"]


def _wasm_importing(module: bytes, name: bytes) -> bytes:
    """A minimal module: one type ``() -> ()`` and one function import ``module.name``."""
    def sec(n, body):
        return bytes([n, len(body)]) + body

    imp = bytes([1, len(module)]) + module + bytes([len(name)]) + name + bytes([0, 0])
    return b"\0asm" + (1).to_bytes(4, "little") + sec(1, bytes([1, 0x60, 0, 0])) + sec(2, imp)


def test_node_refuses_a_module_importing_more_than_wasi(node, cls_input, tmp_path):
    (up, up_file), _ = cls_input
    for module, name, want in ((b"env", b"foo", "env.foo (function)"),
                               (b"wasi_snapshot_preview1", b"path_open",
                                "wasi_snapshot_preview1.path_open, which monolib.mjs")):
        lib = tmp_path / f"{name.decode()}.wasm"
        lib.write_bytes(_wasm_importing(module, name))
        err = _node(node, _spec(lib, up_file, up.shape), tmp_path, name.decode())["loadError"]
        assert err["name"] == "MonolibError" and want in err["message"], err


def test_chromium_cls_and_rec_match_onnxruntime(chromium, wasm_lib, cls_input, rec_input, tmp_path):
    pytest.importorskip("cryptography")
    from monolib.tools.sign import generate_keypair, sign_file

    (up, up_file), _ = cls_input
    x, rec_file = rec_input
    _, pub = generate_keypair(str(tmp_path / "key"))
    rec_copy = tmp_path / "rec.wasm"
    shutil.copyfile(wasm_lib("rec"), rec_copy)
    sig = sign_file(str(rec_copy), str(tmp_path / "key"))
    files = {"cls.wasm": wasm_lib("cls"), "rec.wasm": rec_copy, "rec.wasm.sig": sig,
             "up.bin": up_file, "rec.bin": rec_file}
    cls = _chromium(files, {**_spec("cls.wasm", "up.bin", up.shape, checks=["bad_shape", "trap"]),
                            "mjs": "./monolib.mjs"}, tmp_path / "cls")
    _check_cls(cls, up, upright=True)
    assert cls["checks"]["bad_shape"]["message"] == BAD_SHAPE.format(192)
    assert cls["checks"]["trap"]["message"].startswith("monolib_run trapped: ")
    assert cls["afterTrap"] is True
    # the recognizer, its signature checked by the browser's WebCrypto Ed25519 first
    rec = _chromium(files, {**_spec("rec.wasm", "rec.bin", x.shape), "mjs": "./monolib.mjs",
                            "publicKey": Path(pub).read_text()}, tmp_path / "rec")
    _check_rec(rec, x)


def test_node_gives_the_wasi_imports_a_module_asks_for(node, tmp_path):
    """A module importing fd_write, environ_*, random_get, clock_time_get, proc_exit...
    (wasi_probe.c, built with zig like a model) runs on monolib.mjs's WASI shim: its
    stderr reaches the console, an empty environment, random bytes, a ticking clock."""
    pytest.importorskip("ziglang")
    lib = tmp_path / "probe.wasm"
    exports = [f"-Wl,--export={s}" for s in ("monolib_open", "monolib_last_error",
                                              "monolib_run_model", "malloc", "free")]
    subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "wasm32-wasi", "-O3",
                    "-mexec-model=reactor", "-Wl,--strip-all", *exports, "-o", str(lib),
                    str(HERE / "wasi_probe.c")], check=True, capture_output=True, timeout=600)
    probe = ("const m = await import(process.argv[1]); const fs = await import('node:fs');"
             "const mod = new WebAssembly.Module(fs.readFileSync(process.argv[2]));"
             "console.log(WebAssembly.Module.imports(mod).map((i) => i.name).sort().join(' '));"
             "try { await m.loadModel(process.argv[2]); } catch (e) { console.log(e.name, e.message); }")
    res = subprocess.run([node, "--input-type=module", "-e", probe, str(MJS), str(lib)],
                         capture_output=True, text=True, timeout=120, check=True)
    imported, thrown = res.stdout.strip().split("\n")
    assert {"fd_write", "random_get", "clock_time_get", "environ_get"} <= set(imported.split())
    assert thrown == "MonolibError monolib_open: probe (HOME unset, random ok, clock ticks)"
    assert "wasi_probe: opening" in res.stderr


def _width_model(path) -> str:
    """Conv 1 -> 2 channels (3x3, pad 1) + Relu on x[1, 1, 4, W], W a run-time dim."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(5).standard_normal((2, 1, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "width",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, "W"])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def test_node_runs_run_time_shapes(node, tmp_path):
    """A width bounded to [8, 64] step 8: inputs report -1 with the bounds, each run's
    output has that run's shape, and a width off the bounds is the C API's error."""
    pytest.importorskip("ziglang")
    import monolib
    from monolib.compiler.testing import ort_run

    model = _width_model(tmp_path / "width.onnx")
    lib = monolib.compile(model, target="c -mtriple=wasm32-wasi",
                          shapes={"x": (1, 1, 4, (8, 64, 8))}).export_library(str(tmp_path / "w"))
    for width in (16, 40):
        x = np.random.default_rng(width).standard_normal((1, 1, 4, width)).astype(np.float32)
        (tmp_path / "x.bin").write_bytes(x.tobytes())
        report = _node(node, _spec(lib, tmp_path / "x.bin", x.shape, checks=["bad_shape"]),
                       tmp_path, f"w{width}")
        inp = report["inputs"][0]
        assert (inp["dims"], inp["lo"][3], inp["hi"][3], inp["step"][3]) == ([1, 1, 4, -1], 8, 64, 8)
        (got,) = _outputs(report)
        assert got.shape == (1, 2, 4, width)
        np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
        assert "outside its bounds [8, 64] step 8" in report["checks"]["bad_shape"]["message"]
