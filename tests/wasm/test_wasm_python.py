"""The ``.wasm`` of a model (issue 17) run from Python through wasmtime.

PP-OCR's classifier and recognizer compiled with ``--target "c -mtriple=wasm32-wasi"``
(``monolib compile``, no suffix: the target gives ``.wasm``) match ONNX Runtime through
``load_module`` + ``GraphModule`` (and ``monolib run``); the recognizer still reads
"Hello World 2024". Also: ``inspect`` reads the file without instantiating it (wasmtime
never imported), a bad input shape / a trap / an arena past the memory limit are
``MonolibError``s carrying the C API's messages, the ``monolib_tensor_info`` layout
docs/wasm.md gives to JavaScript hosts is what the module fills, a damaged file is a
load error, sign + verify + a trusted load work on a ``.wasm``, and the file holds at
most the weights + 400 KB.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from models.conftest import assert_matches

import monolib
from monolib.cli import main
from monolib.errors import ExecutionError, InputError, LibraryLoadError, SignatureError
from monolib.models import fetch_model, ocr

pytest.importorskip("wasmtime")

#: issue 17: a .wasm holds at most its model's weights plus this many bytes
SIZE_SLACK = 400 * 1024


def _ort(key: str, x: np.ndarray, optimized: bool = True) -> list[np.ndarray]:
    from monolib.compiler.testing import ort_run

    pytest.importorskip("onnxruntime")
    return ort_run(fetch_model(key), {"x": x}, optimize=optimized)


def _gm(path) -> monolib.GraphModule:
    return monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))


def test_cls_matches_onnxruntime_and_tells_rotated_lines(wasm_lib, text_line):
    gm = _gm(wasm_lib("cls"))
    assert type(gm.executor).__name__ == "WasmExecutor"
    for image, upright in ((text_line, True), (np.ascontiguousarray(text_line[::-1, ::-1]), False)):
        x = ocr.line_preprocess(image, 48, 192)
        gm.set_input("x", x)
        gm.run()
        got = [gm.get_output(0).numpy()]
        assert_matches(got, _ort("ppocr_cls", x), "PP-OCR cls in wasm")
        assert got[0][0].argmax() == (0 if upright else 1)


def test_rec_matches_onnxruntime_and_reads_the_text(wasm_lib, text_line):
    from models.conftest import TEXT

    x = ocr.line_preprocess(text_line, 48, 320)
    gm = _gm(wasm_lib("rec"))
    gm.run(x=x)
    got = [gm.get_output(0).numpy()]
    assert_matches(got, _ort("ppocr_rec", x), "PP-OCRv4 rec in wasm",
                   want_unopt=_ort("ppocr_rec", x, optimized=False))
    assert ocr.ctc_greedy_decode(got[0], ocr.load_charset(fetch_model("ppocr_rec"))) == TEXT


def test_monolib_run_on_a_wasm(wasm_lib, text_line, tmp_path):
    x = ocr.line_preprocess(text_line, 48, 192)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    res = subprocess.run([sys.executable, "-m", "monolib.cli", "run", str(wasm_lib("cls")),
                          "--input", f"x={tmp_path / 'x.npy'}", "--output", str(out)],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    (got,) = np.load(out).values()
    assert_matches([got], _ort("ppocr_cls", x), "monolib run cls.wasm")


def test_profile_of_a_wasm(wasm_lib, capsys):
    """`monolib run --profile` times a wasm's ops one at a time; inside runs it cannot
    (no clock in the module): a clear error, exit 1."""
    lib = str(wasm_lib("cls"))
    assert main(["run", lib, "--random", "--repeat", "2", "--profile"]) == 0
    assert "slowest ops (of" in capsys.readouterr().out
    assert main(["run", lib, "--random", "--profile-in-run"]) == 1
    assert "cannot time its ops inside runs" in capsys.readouterr().err


def test_inspect_reads_the_wasm_without_running_it(wasm_lib):
    code = ("import json, sys\n"
            "from monolib.tools.inspect import inspect_library\n"
            f"r = inspect_library({str(wasm_lib('cls'))!r}, verify=True)\n"
            "print(json.dumps({'r': r, 'wasmtime': 'wasmtime' in sys.modules}))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    doc = json.loads(res.stdout)
    report = doc["r"]
    assert doc["wasmtime"] is False  # nothing was compiled or instantiated
    assert report["binary"].startswith("wasm32")
    (graph,) = report["graphs"].values()
    assert graph["inputs"] == [{"name": "x", "shape": [1, 3, 48, 192], "dtype": "float32"}]
    from monolib.abi.names import CAPI_SYMBOLS

    assert set(CAPI_SYMBOLS) <= set(report["exports"]["symbols"])
    assert report["exports"]["abi_complete"]
    wasm = report["wasm"]
    assert wasm["imports"] == []  # PP-OCR needs no WASI function at all
    assert wasm["arena_bytes"] == graph["arena_bytes"] > 0
    assert wasm["memory_after_open"] == wasm["initial_memory"] + graph["arena_bytes"]
    assert wasm["initial_memory"] > report["container"]["size"]  # the data segment
    text = subprocess.run([sys.executable, "-m", "monolib.cli", "inspect", str(wasm_lib("cls"))],
                          capture_output=True, text=True, check=True).stdout
    assert "WebAssembly: code validated by the host" in text and "imports: none" in text


def test_without_wasmtime_a_load_says_what_to_install(wasm_lib):
    code = ("import sys\n"
            "sys.modules['wasmtime'] = None  # not installed\n"
            "import monolib\n"
            "from monolib.tools.inspect import inspect_library\n"
            f"p = {str(wasm_lib('cls'))!r}\n"
            "assert inspect_library(p)['graphs']  # reading needs no wasmtime\n"
            "try:\n"
            "    monolib.load_module(p)\n"
            "except monolib.errors.LibraryLoadError as e:\n"
            "    print('ERROR', e)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ERROR" in res.stdout and "pip install monolib[wasm]" in res.stdout


def test_bad_input_shape_is_an_error_with_the_c_api_message(wasm_lib):
    gm = _gm(wasm_lib("cls"))
    bad = np.zeros((1, 3, 48, 100), np.float32)
    with pytest.raises(InputError, match=r"input 'x' has shape \[1, 3, 48, 100\]"):
        gm.set_input("x", bad)
    with pytest.raises(InputError, match=r'monolib_set_input_shaped: input "x" axis 3 is 100, '
                                         r"the model expects 192"):
        gm.executor.set_input_checked("x", bad)
    with pytest.raises(InputError, match=r'input "x" has 4 dims, got 3'):
        gm.executor.set_input_checked("x", bad[0])
    x = np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)
    gm.executor.set_input_checked("x", x)  # through the C API: the same run
    gm.run()
    via_capi = gm.get_output(0).numpy().copy()
    gm.set_input("x", x)
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0).numpy(), via_capi)


def test_a_trap_is_an_error_and_the_module_still_runs(wasm_lib):
    mod = monolib.load_module(str(wasm_lib("cls")))
    gm = monolib.GraphModule(mod)
    gm.run()
    want = gm.get_output(0).numpy().copy()
    lib = mod.lib
    with pytest.raises(ExecutionError, match=r"monolib_run trapped: .*out of bounds"):
        lib["monolib_run"](0xFFFFFF00, 0xFFFFFF00)  # params and arena past linear memory
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0).numpy(), want)
    assert lib["monolib_set_num_threads"](4) == 1  # single-threaded build


def test_close_keeps_views_readable_and_refuses_calls(wasm_lib):
    from monolib.errors import ModuleClosedError

    mod = monolib.load_module(str(wasm_lib("cls")))
    gm = monolib.GraphModule(mod)
    gm.run(x=np.ones((1, 3, 48, 192), np.float32))
    out = gm.get_output(0).numpy()
    want = out.copy()
    mod.close()
    np.testing.assert_array_equal(out, want)  # the memory stays mapped under the view
    with pytest.raises(ModuleClosedError):
        gm.run()


def test_arena_past_the_memory_limit_is_the_c_api_out_of_memory(wasm_lib):
    from monolib.runtime.wasm_module import load_wasm
    from monolib.tools.inspect import inspect_library

    path = str(wasm_lib("cls"))
    initial = inspect_library(path)["wasm"]["initial_memory"]
    factory = load_wasm(path, max_memory=initial + 65536)
    with pytest.raises(ExecutionError, match=r"monolib_open: out of memory"):
        factory["default"](monolib.cpu())
    gm = monolib.GraphModule(load_wasm(path))  # no limit: the same arena fits
    gm.run()


def test_tensor_info_layout_of_the_docs(wasm_lib):
    """docs/wasm.md's wasm32 layout of monolib_tensor_info (what a JavaScript host reads)."""
    mod = monolib.load_module(str(wasm_lib("rec")))
    lib = mod.lib
    h = lib["monolib_open"]()
    info = lib["malloc"](48)
    for fn, i, want in (("monolib_input_info", 0, mod.head["inputs"][0]),
                        ("monolib_output_info", 0, mod.head["outputs"][0])):
        assert lib[fn](h, i, info) == 0
        mem = lib.buffer()
        raw = bytes(mem[info:info + 48])
        name, dtype_name = (lib.read_cstring(int.from_bytes(raw[k:k + 4], "little")) for k in (0, 4))
        code, bits, lanes = raw[8], raw[9], int.from_bytes(raw[10:12], "little")
        ndim = int.from_bytes(raw[12:16], "little")
        shape_at, lo_at, hi_at = (int.from_bytes(raw[k:k + 4], "little") for k in (16, 32, 36))
        nbytes = int.from_bytes(raw[24:32], "little")
        shape = mem[shape_at:shape_at + 8 * ndim].view(np.int64).tolist()
        assert (name, dtype_name, code, bits, lanes) == (want["name"], "float32", 2, 32, 1)
        assert shape == list(want["shape"]) == mem[lo_at:lo_at + 8 * ndim].view(np.int64).tolist()
        assert shape == mem[hi_at:hi_at + 8 * ndim].view(np.int64).tolist()
        assert nbytes == 4 * int(np.prod(shape))
    assert lib["monolib_input_index"](h, 0) == -1  # name NULL
    assert "name is NULL" in lib.last_error()
    lib["free"](info)
    lib["monolib_close"](h)


def test_damaged_or_truncated_wasm_is_a_load_error(wasm_lib, tmp_path):
    from monolib.abi.binfmt.wasm import parse_wasm

    data = bytearray(wasm_lib("cls").read_bytes())
    code = next(s for s in parse_wasm(bytes(data)).sections if s.name == "code")
    bad = tmp_path / "bad.wasm"
    data[code.offset + 1 : code.offset + 64] = b"\xff" * 63  # garbage function bodies
    bad.write_bytes(bytes(data))
    with pytest.raises(LibraryLoadError, match="cannot instantiate the WebAssembly module"):
        monolib.load_module(str(bad))
    short = tmp_path / "short.wasm"
    short.write_bytes(wasm_lib("cls").read_bytes()[:50_000])
    with pytest.raises(LibraryLoadError, match="truncated WebAssembly module"):
        monolib.load_module(str(short))


def test_sign_verify_and_trusted_load_of_a_wasm(wasm_lib, tmp_path):
    pytest.importorskip("cryptography")
    from monolib.runtime.trust import verify_file
    from monolib.tools.sign import generate_keypair, sign_file

    lib = tmp_path / "cls.wasm"
    shutil.copyfile(wasm_lib("cls"), lib)
    priv, pub = generate_keypair(str(tmp_path / "key"))
    sig = sign_file(str(lib), priv)
    assert sig == str(lib) + ".sig"
    info = verify_file(str(lib), [pub])
    assert info.size == lib.stat().st_size
    res = subprocess.run([sys.executable, "-m", "monolib.cli", "verify", str(lib), "--key", pub],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-2000:]
    factory = monolib.load_module(str(lib), trusted_keys=[pub])
    monolib.GraphModule(factory).run()
    data = bytearray(lib.read_bytes())
    data[-100] ^= 1  # one bit of the custom section
    lib.write_bytes(bytes(data))
    with pytest.raises(SignatureError):
        monolib.load_module(str(lib), trusted_keys=[pub])


@pytest.mark.parametrize("name", ["cls", "rec"])
def test_size_is_the_weights_plus_at_most_400_kb(wasm_lib, name, capsys):
    from monolib.tools.inspect import inspect_library

    path = wasm_lib(name)
    report = inspect_library(str(path))
    (graph,) = report["graphs"].values()
    size, weights = path.stat().st_size, graph["params_bytes"]
    with capsys.disabled():
        print(f"\n{name}.wasm: {size} bytes, weights {weights} bytes, "
              f"+{(size - weights) / 1024:.1f} KiB")
    assert size <= weights + SIZE_SLACK
