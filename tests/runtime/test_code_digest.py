"""The code digest (runtime/integrity.py): export appends it, every load checks it
before dlopen, a damaged byte is an IntegrityError naming the section or tensor,
weights stay unhashed (O(1) load), older libraries still load, inspect shows it.

The model: the tiny hand-written library of tinylib.py with a 3 MiB params section
(above the container's 128 KiB check limit) whose last 4 KiB are an int64 tensor
"idx" (covered by the digest, like Gather indices) and the rest float/uint8 weights
(left out). Every damaged byte is caught before dlopen, so these loads run in
process; tests/runtime/test_fuzz_container.py fuzzes real code in a child.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from tinylib import W, reference, tiny_graph, tiny_source

from monolib.abi.binfmt import parse_binary
from monolib.export.csource import CSourceModule
from monolib.runtime import (
    ContainerError,
    GraphExecutorFactoryModule,
    GraphModule,
    IntegrityError,
    cpu,
    integrity,
    load_module,
)
from monolib.runtime.library import read_container
from monolib.tools.inspect import inspect_library, render_report

BIG = 3 << 20
IDX = 4096  # bytes of the int64 tensor at the end of the params


def idx_graph() -> tuple[dict, np.ndarray]:
    """tinylib's graph with BIG bytes of params, the last IDX of them int64 "idx"."""
    graph, params = tiny_graph(big_bytes=BIG)
    big = graph["params"][-1]
    big["nbytes"] = big["shape"][0] = BIG - IDX
    graph["params"].append(
        {"name": "idx", "shape": [IDX // 8], "dtype": "int64", "offset": 128 + BIG - IDX,
         "nbytes": IDX}
    )
    params[128 + BIG - IDX :] = np.frombuffer(np.arange(IDX // 8, dtype=np.int64), np.uint8)
    return graph, params


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> dict:
    """The exported library: path, bytes, section table, params file offset, trailer."""
    graph, params = idx_graph()
    factory = GraphExecutorFactoryModule(graph, params, CSourceModule(tiny_source(), "c"))
    path = str(tmp_path_factory.mktemp("digest") / "idx.so")
    factory.export_library(path)
    data = Path(path).read_bytes()
    container, info = read_container(path)
    sec = next(s for m in container.modules for s in m.sections if s.name == "params")
    doc, body = integrity.read_trailer(data)
    return {
        "path": path,
        "data": data,
        "elf": parse_binary(data),
        "params": info["section_offset"] + sec.offset,
        "doc": doc,
        "body": body,
    }


def _write(tmp_path: Path, data: bytes | bytearray, name: str = "bad.so") -> str:
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return str(path)


def _flipped(data: bytes, pos: int) -> bytearray:
    bad = bytearray(data)
    bad[pos] ^= 0x5A
    return bad


def _reseal(data: bytes, body: int, doc: dict) -> bytes:
    """``data`` with its trailer replaced by ``doc``, its own digest made right."""
    from _blake2 import blake2b

    blob = json.dumps(doc).encode()
    footer = struct.pack(
        "<8sIIQ8s32s", integrity.FOOTER_MAGIC, 1, len(blob), body, bytes(8),
        blake2b(blob, digest_size=32).digest(),
    )
    return data[:body] + blob + footer


def test_export_appends_a_verified_digest(lib):
    _, info = read_container(lib["path"], check_code=True)
    code = info["code_digest"]
    assert code.status == "verified" and code.algorithm == "blake2b-256"
    names = [e[0] for e in lib["doc"]["entries"]]
    for name in (".text", ".rodata", ".dynsym", ".monolib", "ELF header"):
        assert name in names
    assert "params tensor 'idx' (int64)" in names
    # everything but the float and uint8 weights is hashed, the int64 tensor included
    assert code.skipped == BIG + 128 - IDX
    assert code.covered + code.skipped == lib["body"]
    jsize = struct.unpack_from("<I", lib["data"], len(lib["data"]) - 52)[0]
    assert lib["body"] + jsize + integrity.FOOTER_SIZE == len(lib["data"])
    assert lib["data"][-64:-56] == integrity.FOOTER_MAGIC


@pytest.mark.parametrize(
    "where, named",
    [
        (".text", r"\.text \(file bytes"),
        (".rodata", r"\.rodata"),
        (".dynsym", r"\.dynsym"),
        (".eh_frame", r"\.eh_frame"),
        ("elf_header", "ELF header"),
        ("section_table", "bytes outside sections"),
        ("idx", r"params tensor 'idx' \(int64\)"),
    ],
)
def test_a_damaged_byte_is_refused_naming_where(lib, tmp_path, where, named):
    data, elf = lib["data"], lib["elf"]
    pos = {
        "elf_header": 0x31,  # e_flags (unused on x86-64): the headers still parse
        "section_table": struct.unpack_from("<Q", data, 0x28)[0] + 64 + 8,  # sh 1 flags
        "idx": lib["params"] + 128 + BIG - IDX + 17,
    }.get(where)
    if pos is None:
        sec = elf.section(where)
        pos = sec.offset + sec.size // 2
    with pytest.raises(IntegrityError, match=named):
        load_module(_write(tmp_path, _flipped(data, pos)))


def test_a_damaged_float_weight_loads_and_runs(lib, tmp_path):
    """Weights are values: a flipped bit gives other numbers, never an error (and
    never a hash of the weights: the load stays O(1) in their size)."""
    bad = _flipped(lib["data"], lib["params"] + 7)  # w[1]'s exponent
    bad[lib["params"] + 128 + 1000] ^= 1  # the uint8 "big"
    gm = GraphModule(load_module(_write(tmp_path, bad))["default"](cpu()))
    x = np.ones((2, 3), np.float32)
    gm.run(x=x)
    y = gm.get_output(0).numpy()
    assert y.flat[1] != reference(x).flat[1]
    want = np.delete(reference(x).ravel(), 1)
    np.testing.assert_allclose(np.delete(y.ravel(), 1), want, rtol=1e-6)


def test_load_from_bytes_checks_the_digest(lib):
    sec = lib["elf"].section(".text")
    with pytest.raises(IntegrityError, match=r"<bytes>: .*\.text"):
        load_module(bytes(_flipped(lib["data"], sec.offset + 3)))
    gm = GraphModule(load_module(lib["data"])["default"](cpu()))
    gm.run(x=np.ones((2, 3), np.float32))
    np.testing.assert_allclose(gm.get_output(0).numpy(), W + 0.25)


def test_signed_load_checks_the_signature_first_then_the_digest(lib, tmp_path):
    pytest.importorskip("cryptography")
    from monolib.tools import sign

    private, public = sign.generate_keypair(tmp_path / "k")
    path = _write(tmp_path, _flipped(lib["data"], lib["elf"].section(".text").offset + 9))
    sign.sign_file(path, private)  # signed after the damage: the signature is valid
    with pytest.raises(IntegrityError, match=r"\(verified\): .*\.text"):
        load_module(path, trusted_keys=[public])


def test_a_missing_digest_is_refused_an_older_library_loads_with_a_log_line(
    lib, tmp_path, caplog
):
    cut = lib["data"][: lib["body"]]
    with pytest.raises(IntegrityError, match="exported with a code digest, but the file ends"):
        load_module(_write(tmp_path, cut, "cut.so"))
    old = _write(tmp_path, integrity.without_digest(lib["data"]), "old.so")
    with caplog.at_level(logging.INFO, logger="monolib.runtime.integrity"):
        gm = GraphModule(load_module(old)["default"](cpu()))
    assert "old.so: no code digest" in caplog.text
    gm.run(x=np.ones((2, 3), np.float32))
    np.testing.assert_allclose(gm.get_output(0).numpy(), W + 0.25)


def test_a_damaged_or_forged_trailer_is_refused(lib, tmp_path):
    data, body, doc = lib["data"], lib["body"], lib["doc"]
    with pytest.raises(IntegrityError, match="fails its own digest"):
        load_module(_write(tmp_path, _flipped(data, body + 10), "json.so"))
    with pytest.raises(IntegrityError, match="reserved footer bytes"):
        load_module(_write(tmp_path, _flipped(data, len(data) - 36), "reserved.so"))
    # a trailer that leaves the code out: refused even with its own digest right
    text = next(e for e in doc["entries"] if e[0] == ".text")
    forged = dict(doc, entries=[e for e in doc["entries"] if e is not text])
    forged["skipped"] = doc["skipped"] + [[*text[1][0], "code"]]
    with pytest.raises(IntegrityError, match=r"skips bytes \[\d+, \d+\) \(code\), which are no"):
        load_module(_write(tmp_path, _reseal(data, body, forged), "skip.so"))
    holes = dict(doc, entries=doc["entries"][1:])
    with pytest.raises(IntegrityError, match="do not tile the file"):
        load_module(_write(tmp_path, _reseal(data, body, holes), "holes.so"))
    # the container's own checks come first: a damaged small section is theirs
    assert issubclass(IntegrityError, ContainerError)


def test_the_check_costs_about_a_millisecond_per_mib(lib, monkeypatch):
    """Only the covered bytes are hashed (never the weights), at BLAKE2b's speed:
    ~1.1 ms of CPU per MiB here (the 119 MB light ResNet-50 library: 0.27 MiB
    covered, 0.4 ms)."""
    hashed = []
    real = integrity._BLAKE2B

    def counting(*args, **kwargs):
        h = real(*args, **kwargs)

        class Counted:
            def update(self, data):
                hashed.append(memoryview(data).nbytes)
                h.update(data)

            def hexdigest(self):
                return h.hexdigest()

            def digest(self):
                return h.digest()

        if args:
            hashed.append(memoryview(args[0]).nbytes)
        return Counted()

    monkeypatch.setattr(integrity, "_BLAKE2B", counting)
    code = read_container(lib["path"], check_code=True)[1]["code_digest"]
    assert code.status == "verified"
    assert sum(hashed) < code.covered + 64 * 1024  # the trailer JSON besides
    assert sum(hashed) < BIG // 10
    monkeypatch.setattr(integrity, "_BLAKE2B", real)
    data = np.random.default_rng(0).integers(0, 256, 8 << 20, dtype=np.uint8).tobytes()
    best = min(_cpu_time(lambda: real(data).digest()) for _ in range(5))
    assert best / 8 < 20e-3, f"BLAKE2b took {best / 8 * 1e3:.1f} ms per MiB"


def _cpu_time(fn) -> float:
    t = time.thread_time()
    fn()
    return time.thread_time() - t


def test_inspect_shows_the_digest_and_never_loads(lib, tmp_path):
    report = inspect_library(lib["path"])
    assert report["code_digest"]["status"] == "verified"
    bad = _write(tmp_path, _flipped(lib["data"], lib["elf"].section(".text").offset + 1))
    report = inspect_library(bad)
    assert report["code_digest"]["status"] == "mismatch"
    assert report["code_digest"]["mismatches"][0].startswith(".text (file bytes [")
    lines = []

    class Console:
        def print(self, *args, **kwargs):
            lines.append(" ".join(str(a) for a in args))

    render_report(report, Console())
    assert any(line.startswith("code digest: MISMATCH in .text") for line in lines)
    old = inspect_library(_write(tmp_path, integrity.without_digest(lib["data"]), "old.so"))
    assert old["code_digest"]["status"] == "absent"


def test_which_params_tensors_are_covered():
    """int16-64 tensors always (indices, Slice bounds, shapes); 8-bit and bool ones up
    to 4 KiB (a small table or mask), not above (quantized weights); floats never."""
    from monolib.abi.container import pack_container

    graph, params = tiny_graph(big_bytes=BIG)
    table = {"i32": ("int32", 64), "i8": ("int8", 4096), "q8": ("uint8", 8192),
             "mask": ("bool", 100), "big_mask": ("bool", 5000), "f16": ("float16", 64)}
    offset, graph["params"] = 4096, graph["params"][:2]
    for name, (dtype, nbytes) in table.items():
        graph["params"].append(
            {"name": name, "shape": [nbytes], "dtype": dtype, "offset": offset, "nbytes": nbytes}
        )
        offset += nbytes + (-nbytes) % 64
    factory = GraphExecutorFactoryModule(graph, params)
    blob = pack_container([(factory.type_key, factory.save_sections())])
    trailer = integrity.make_trailer(blob, 0, None)
    doc, body = integrity.read_trailer(blob + trailer)
    assert body == len(blob)
    covered = {e[0] for e in doc["entries"] if e[0].startswith("params tensor")}
    assert covered == {
        "params tensor 'i32' (int32)", "params tensor 'i8' (int8)",
        "params tensor 'mask' (bool)",
    }
