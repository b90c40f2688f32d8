"""Building a ``.wasm`` (issue 17): the target's spellings, flags and toolchain, the
``"monolib"`` custom section written after linking and read back (on hand-built
modules: no zig needed), and run-time shapes in a module built from a small model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from monolib.abi.binfmt import find_container, parse_binary
from monolib.abi.binfmt.wasm import find_wasm_container, parse_wasm, wasm_exports, wasm_globals
from monolib.abi.container import MAGIC
from monolib.errors import ExportError, InputError, LibraryLoadError
from monolib.export.targets import Target
from monolib.export.wasm import EXPORTS, add_container_section, container_pointer


@pytest.mark.parametrize("triple", ["wasm32-wasi", "wasm32-unknown-wasi", "wasm32-wasip1"])
def test_wasm_triples_are_one_target(triple):
    t = Target(f"c -mtriple={triple}")
    assert (t.arch, t.os, t.lib_suffix, t.is_wasm, t.is_host) == ("wasm32", "wasi", ".wasm",
                                                                   True, False)
    assert t.cflags() == ["-O3", "-msimd128"] == t.cflags("glue")  # 128-bit vector paths
    assert "-msimd128" not in Target(f"c -mtriple={triple} -mattr=-simd128").cflags()
    assert not Target("c -mtriple=aarch64-linux-gnu").is_wasm


def test_wasm_builds_with_zig_whatever_cc_says(monkeypatch):
    pytest.importorskip("ziglang")
    from monolib.export.toolchain import find_compiler

    monkeypatch.setenv("CC", "gcc")  # a host compiler cannot target WASI
    cmd = find_compiler("c -mtriple=wasm32-unknown-wasi")
    assert cmd[-3:] == ["cc", "-target", "wasm32-wasi"] and "ziglang" in cmd


def _leb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _sleb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        done = (n == 0 and not byte & 0x40) or (n == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)


def _section(sid: int, body: bytes) -> bytes:
    return bytes([sid]) + _leb(len(body)) + body


def _name(text: str) -> bytes:
    return _leb(len(text)) + text.encode()


def _module(blob: bytes, at: int = 8192, pad: bytes = b"\x07" * 100) -> bytes:
    """A module as wasm-ld lays one out: memory, the container bounds as const globals
    (exported), one data segment of ``pad`` then ``blob`` at address ``at - len(pad)``."""
    start, end = at, at + len(blob)
    glob = b"".join(b"\x7f\x00\x41" + _sleb(v) + b"\x0b" for v in (start, end))
    exports = [("memory", 2, 0), ("__monolib_container_start", 3, 0),
               ("__monolib_container_end", 3, 1)]
    seg = b"\x00\x41" + _sleb(at - len(pad)) + b"\x0b" + _leb(len(pad) + len(blob)) + pad + blob
    return (b"\x00asm\x01\x00\x00\x00" + _section(5, b"\x01\x00\x01")
            + _section(6, _leb(2) + glob)
            + _section(7, _leb(len(exports)) + b"".join(_name(n) + bytes([k]) + _leb(i)
                                                         for n, k, i in exports))
            + _section(11, b"\x01" + seg))


BLOB = MAGIC + b"\x00" * 200  # only the magic is looked at when writing the pointer


def test_container_section_is_written_after_linking_and_read_back(tmp_path):
    path = tmp_path / "m.wasm"
    data = _module(BLOB)
    path.write_bytes(data)
    with pytest.raises(LibraryLoadError, match="no 'monolib' custom section"):
        find_wasm_container(data, "m.wasm")
    info = parse_wasm(data)
    assert wasm_globals(data, info) == {0: 8192, 1: 8192 + len(BLOB)}
    assert wasm_exports(data, info)["__monolib_container_end"] == ("global", 1)
    record = add_container_section(str(path))
    out = path.read_bytes()
    assert out[: len(data)] == data  # appended: no offset moved
    offset, size, info, rec = find_wasm_container(out, "m.wasm")
    assert rec == record == {"version": 1, "offset": data.index(MAGIC), "size": len(BLOB),
                             "address": 8192}
    assert out[offset : offset + size] == BLOB
    assert find_container(out)[:2] == (offset, size)  # the dispatcher takes .wasm too
    assert parse_binary(out).format == "wasm"
    assert "malloc" in EXPORTS and "monolib_open" in EXPORTS


def _with_pointer(data: bytes, record: dict) -> bytes:
    body = _name("monolib") + json.dumps(record).encode()
    return data + _section(0, body)


def test_a_pointer_that_disagrees_with_the_data_is_refused():
    data = _module(BLOB)
    good = {"version": 1, "offset": data.index(MAGIC), "size": len(BLOB), "address": 8192}
    assert find_wasm_container(_with_pointer(data, good))[0] == good["offset"]
    for bad in ({**good, "address": 8200}, {**good, "size": len(BLOB) + 10},
                {**good, "offset": 3}):
        with pytest.raises(LibraryLoadError, match="which no data segment holds"):
            find_wasm_container(_with_pointer(data, bad), "m.wasm")
    with pytest.raises(LibraryLoadError, match="malformed 'monolib' custom section"):
        find_wasm_container(_with_pointer(data, {"version": 1}), "m.wasm")
    whole = _with_pointer(data, good)
    for cut in (9, len(whole) // 2, len(whole) - 3):
        with pytest.raises(LibraryLoadError, match="truncated WebAssembly module"):
            find_wasm_container(whole[:cut], "m.wasm")


def test_no_container_at_the_exported_address_is_an_export_error(tmp_path):
    data = bytearray(_module(BLOB))
    data[data.index(MAGIC)] ^= 0xFF  # not a container there any more
    with pytest.raises(ExportError, match="no data segment holds the container"):
        container_pointer(bytes(data), "m.wasm")


def _width_model(path):
    """Conv 1 -> 4 channels (3x3, pad 1) + Relu on x[1, 1, 8, W]: W a run-time dim."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(3).standard_normal((4, 1, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "width",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, "W"])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_run_time_shapes_in_a_wasm(tmp_path, ort_run):
    pytest.importorskip("ziglang")
    pytest.importorskip("wasmtime")
    import monolib

    model = _width_model(str(tmp_path / "width.onnx"))
    factory = monolib.compile(model, target="c -mtriple=wasm32-wasip1",
                              shapes={"x": (1, 1, 8, (8, 64, 8))})
    path = factory.export_library(str(tmp_path / "width"))
    assert path.endswith(".wasm")
    gm = monolib.GraphModule(monolib.load_module(path))
    for width in (16, 40, 64):
        x = np.random.default_rng(width).standard_normal((1, 1, 8, width)).astype(np.float32)
        gm.run(x=x)
        got = gm.get_output(0).numpy()
        (want,) = ort_run(model, {"x": x})
        assert got.shape == (1, 4, 8, width)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match=r"outside its bounds \[8, 64\] step 8"):
        gm.executor.set_input_checked("x", np.zeros((1, 1, 8, 12), np.float32))
    x = np.ones((1, 1, 8, 24), np.float32)
    gm.executor.set_input_checked("x", x)  # the C API's copy and the shape it gives
    gm.run()
    assert gm.get_output(0).numpy().shape == (1, 4, 8, 24)
    np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)
