"""Fuzz the container and library readers: ``python fuzz/fuzz_container.py CORPUS``.

An `atheris <https://github.com/google/atheris>`_ harness (libFuzzer, coverage
guided) run by hand; see ``fuzz/README.md``. Each input is a library file (ELF, PE,
Mach-O), a bare monolib container or a TVM container, after an optional fix-up chosen
by its first byte (so mutations reach past the SHA-256 checks):

* ``0``: the bytes as they are;
* ``1``: the container's manifest digest recomputed (the manifest JSON is then
  parsed whatever the mutation did to it);
* ``2``: every section digest and the manifest digest recomputed (the graph JSON and
  params table are then parsed too).

:func:`check_bytes` is the target: everything ``load_module`` reads before
``dlopen`` (:func:`monolib.abi.binfmt.find_container`, :class:`Container` with
every digest, each module's sections decoded, the graph executor factory's graph
JSON and params table checked), plus ``monolib inspect``'s TVM reader. It must end
in a :class:`MonolibError` or return; any other exception, a crash, a hang or an
allocation past the input's size is a finding. The same function runs in the test
suite (``tests/runtime/test_fuzz_container.py``), in a child process.
"""

from __future__ import annotations

import json
import os
import struct
import sys

__all__ = [
    "check_bytes",
    "fix_up",
    "make_macho",
    "make_pe",
    "reseal",
    "tvm_ffi_blob",
    "tvm_legacy_blob",
    "write_corpus",
]

_DIGEST_AT = 64  # the manifest SHA-256 in the 128-byte header (see container.py)


def _container_offset(data: bytes) -> int | None:
    from monolib.abi.binfmt import find_container
    from monolib.errors import MonolibError

    try:
        return find_container(data)[0]
    except MonolibError:
        return None


def reseal(data: bytes, sections: bool = False) -> bytes:
    """``data`` with its container's manifest SHA-256 recomputed (and, with
    ``sections``, each in-range section's digest rewritten into the manifest), so a
    mutation of the manifest or of a payload is parsed instead of refused at the
    digest check. Bytes that hold no recognizable container come back unchanged."""
    from monolib.abi.container import HEADER_SIZE, MAGIC, sha256

    off = _container_offset(data)
    if off is None or data[off : off + 8] != MAGIC or len(data) < off + HEADER_SIZE:
        return data
    out = bytearray(data)
    moff, msize = struct.unpack_from("<QQ", out, off + 24)
    start, end = off + moff, off + moff + msize
    if moff < HEADER_SIZE or end > len(out):
        return data
    if sections:
        try:
            manifest = json.loads(bytes(out[start:end]))
            for mod in manifest["modules"]:
                for sec in mod["sections"]:
                    lo = off + int(sec["offset"])
                    sec["sha256"] = sha256(
                        bytes(out[lo : lo + int(sec["stored_size"])])
                    ).hexdigest()
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, OverflowError):
            pass
        else:
            blob = json.dumps(manifest, separators=(",", ":")).encode()
            if len(blob) <= msize:  # same digest length: fits unless a value grew
                out[start:end] = blob + b" " * (msize - len(blob))
    out[off + _DIGEST_AT : off + _DIGEST_AT + 32] = sha256(bytes(out[start:end])).digest()
    return bytes(out)


def fix_up(data: bytes) -> bytes:
    """The fuzzer's input: first byte = fix-up mode (see the module docstring)."""
    if not data:
        return data
    mode, rest = data[0] % 3, data[1:]
    return rest if mode == 0 else reseal(rest, sections=mode == 2)


def check_bytes(data: bytes) -> str:
    """Read ``data`` as ``load_module`` does before ``dlopen``, and as ``monolib
    inspect`` does; returns ``"ok"`` or the name of the MonolibError raised.

    Raises
    ------
    Exception
        Anything that is not a MonolibError: a bug (the fuzzer reports it).
    """
    from monolib.abi.binfmt import find_container, parse_binary
    from monolib.abi.container import Container
    from monolib.errors import MonolibError
    from monolib.runtime.factory import load_factory

    try:
        try:
            off, size, _ = find_container(data, "fuzz")
        except MonolibError:
            _check_tvm(data, parse_binary)
            raise
        c = Container(memoryview(data)[off : off + size], source="fuzz", verify=True)
        for i, mod in enumerate(c.modules):
            sections = c.sections_of(i)
            if mod.type_key == "graph_executor_factory":
                load_factory(sections).param_infos()
        c.children(c.root)
        return "ok"
    except MonolibError as exc:
        return type(exc).__name__


def _check_tvm(data: bytes, parse_binary) -> None:
    from monolib.errors import MonolibError
    from monolib.tools.tvm_container import find_tvm, parse_tvm_blob

    try:
        find_tvm(data, parse_binary(data, "fuzz"), "fuzz")
    except MonolibError:
        pass
    for layout in ("ffi", "legacy"):  # the blob alone, as if it were the symbol's bytes
        try:
            parse_tvm_blob(data, layout, where="fuzz")
        except MonolibError:
            pass


def tiny_onnx_model():
    """A small real model (Conv, Relu, GlobalAveragePool, Flatten, Gemm) with
    deterministic weights: input ``x`` float32[1, 3, 8, 8], output ``y`` [1, 5]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "fuzz_tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def hand_built_containers() -> dict[str, bytes]:
    """Bare containers made with :func:`pack_container`: a factory with a graph JSON
    and params (raw, zlib, zstd), a legacy layout, a deep import tree."""
    import numpy as np

    from monolib.abi.container import pack_container

    graph = {
        "format": "monolib.graph",
        "version": 1,
        "name": "hand",
        "arena_bytes": 128,
        "params_bytes": 64,
        "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32", "offset": 0}],
        "outputs": [{"name": "y", "shape": [2, 3], "dtype": "float32", "offset": 64}],
        "nodes": [],
        "params": [{"name": "w", "shape": [2, 3], "dtype": "float32", "offset": 0, "nbytes": 24}],
    }
    sections = {
        "graph": json.dumps(graph).encode(),
        "params": np.arange(64, dtype=np.uint8).tobytes(),
    }
    factory = ("graph_executor_factory", sections)
    out = {}
    for codec in ("raw", "zlib", "zstd"):
        out[f"factory_{codec}.bin"] = pack_container(
            [factory, ("library", {})], import_tree=([0, 1, 1], [1]), compress=codec
        )
    out["legacy.bin"] = pack_container([("library", {}), factory])
    chain = [("blob", {"data": bytes([i]) * 100}) for i in range(6)]
    out["chain.bin"] = pack_container(chain, import_tree=([0, 1, 2, 3, 4, 5, 5], [1, 2, 3, 4, 5]))
    return out


# --------------------------------------------------------------------------- seeds
# Hand-built files from published layouts (also used by tests/tools/test_inspect_tvm.py):
# TVM containers (tvm-ffi's ProcessLibraryBin, TVM's legacy ProcessModuleBlob) and
# minimal PE / Mach-O files carrying a data symbol in their symbol tables.
def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def string(b: bytes | str) -> bytes:
    b = b.encode() if isinstance(b, str) else b
    return u64(len(b)) + b


def vec(values: list[int]) -> bytes:
    return u64(len(values)) + b"".join(u64(v) for v in values)


VM_BYTES = b"\x01relax-vm-executable" * 50
CUDA_BYTES = b"fatbin" * 7


def tvm_ffi_blob() -> bytes:
    """Current layout: 3 modules, the VM executable (root) imports _lib and cuda."""
    body = vec([0, 2, 2, 2]) + vec([1, 2])
    body += string("relax.VMExecutable") + string(VM_BYTES)
    body += string("_lib")
    body += string("cuda") + string(CUDA_BYTES)
    return u64(len(body)) + body


def tvm_legacy_blob(prefixed: bool = True, tree: bool = True) -> bytes:
    """Legacy layout: graph executor factory (root) imports _lib, _lib imports metal."""
    entries = [string("GraphExecutorFactory") + string(VM_BYTES), string("_lib")]
    entries.append(string("metal") + string(CUDA_BYTES))
    if tree:
        entries.append(string("_import_tree") + vec([0, 1, 2, 2]) + vec([1, 2]))
    body = u64(len(entries)) + b"".join(entries)
    return (u64(len(body)) + body) if prefixed else body


def make_pe(symbol: str, blob: bytes) -> bytes:
    """A PE32+ DLL with one .rdata section holding an export directory naming
    ``symbol`` and the symbol's bytes (Microsoft "PE Format")."""
    lfanew, opt_size, va, raw = 64, 240, 0x2000, 0x400
    name = symbol.encode() + b"\0"
    # section layout (RVAs): export dir 40 | functions 4 | names 4 | ordinals 2 | name | data
    ed_rva, f_rva = va, va + 40
    n_rva, o_rva, s_rva = f_rva + 4, f_rva + 8, f_rva + 10
    d_rva = (s_rva + len(name) + 15) // 16 * 16
    body = struct.pack("<IIHHIIIIIII", 0, 0, 0, 0, 0, 1, 1, 1, f_rva, n_rva, o_rva)
    body += struct.pack("<IIH", d_rva, s_rva, 0) + name
    body += bytes(d_rva - va - len(body)) + blob
    opt = bytearray(opt_size)
    struct.pack_into("<H", opt, 0, 0x20B)
    struct.pack_into("<III", opt, 108, 16, ed_rva, 40)  # NumberOfRvaAndSizes, export dir
    dos = b"MZ" + bytes(0x3A) + struct.pack("<I", lfanew)
    coff = b"PE\0\0" + struct.pack("<HHIIIHH", 0x8664, 1, 0, 0, 0, opt_size, 0x2022)
    sec = struct.pack(
        "<8sIIIIIIHHI", b".rdata", len(body), va, len(body), raw, 0, 0, 0, 0, 0x40000040
    )
    head = dos + coff + bytes(opt) + sec
    return head + bytes(raw - len(head)) + body


def make_macho(symbol: str, blob: bytes) -> bytes:
    """A 64-bit arm64 dylib: one __TEXT,__const section with the bytes and an
    LC_SYMTAB naming ``_symbol`` (Apple's <mach-o/loader.h>, <mach-o/nlist.h>)."""
    off, addr = 4096, 0x4000
    sect = struct.pack(
        "<16s16sQQIIIIIIII", b"__const", b"__TEXT", addr, len(blob), off, 4, 0, 0, 0, 0, 0, 0
    )
    seg = struct.pack(
        "<II16sQQQQiiII", 0x19, 72 + 80, b"__TEXT", addr, len(blob), off, len(blob), 5, 5, 1, 0
    )
    strings = b"\0_" + symbol.encode() + b"\0"
    symoff = off + len(blob)
    stroff = symoff + 16
    nlist = struct.pack("<IBBHQ", 1, 0x0F, 1, 0, addr)  # N_SECT | N_EXT, section 1
    symtab = struct.pack("<IIIIII", 0x2, 24, symoff, 1, stroff, len(strings))
    cmds = seg + sect + symtab
    head = struct.pack("<IiiIIIII", 0xFEEDFACF, 0x0100000C, 0, 6, 2, len(cmds), 0, 0) + cmds
    return head + bytes(off - len(head)) + blob + nlist + strings


def write_corpus(directory: str) -> list[str]:
    """Write the seed corpus: a real exported library (the tiny model, raw and zstd),
    the hand-built containers, TVM containers bare and in PE and Mach-O files, each
    with fix-up bytes 0, 1 and 2; returns the paths."""
    import tempfile

    import monolib

    os.makedirs(directory, exist_ok=True)
    seeds = dict(hand_built_containers())
    seeds["tvm_ffi.bin"], seeds["tvm_legacy.bin"] = tvm_ffi_blob(), tvm_legacy_blob()
    for make, suffix in ((make_pe, "dll"), (make_macho, "dylib")):
        seeds[f"tvm_ffi.{suffix}"] = make("__tvm_ffi__library_bin", tvm_ffi_blob())
        seeds[f"tvm_legacy.{suffix}"] = make("__tvm_dev_mblob", tvm_legacy_blob())
    factory = monolib.compile(tiny_onnx_model())
    with tempfile.TemporaryDirectory() as tmp:
        for codec in (None, "zstd"):
            name = os.path.join(tmp, f"tiny_{codec or 'raw'}.so")
            path = factory.export_library(name, compress=codec)
            with open(path, "rb") as f:
                seeds[os.path.basename(path)] = f.read()
    paths = []
    for name, data in seeds.items():
        for mode in (0, 1, 2):
            path = os.path.join(directory, f"{mode}_{name}")
            with open(path, "wb") as f:
                f.write(bytes([mode]) + data)
            paths.append(path)
    return paths


def main() -> None:
    """``fuzz_container.py --make-corpus DIR`` writes the seeds; otherwise the
    arguments go to libFuzzer (``fuzz_container.py CORPUS -max_total_time=300``)."""
    if len(sys.argv) == 3 and sys.argv[1] == "--make-corpus":
        print("\n".join(write_corpus(sys.argv[2])))
        return
    import atheris

    with atheris.instrument_imports():
        import monolib.abi.binfmt
        import monolib.abi.container
        import monolib.runtime.graph_executor
        import monolib.abi.macho
        import monolib.abi.pe
        import monolib.tools.tvm_container  # noqa: F401

    def one_input(data: bytes) -> None:
        check_bytes(fix_up(data))

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
