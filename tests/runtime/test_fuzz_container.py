"""Random damage to the container region of a library never crashes the loader.

Every mutated file is loaded in ONE child process (a segfault there fails the test,
where it would kill pytest itself): each load either raises a MonolibError subclass
or succeeds with correct results. Since the code digest (issue 15) that includes the
code itself and the integer (index) tensors: 120 cases flip bytes of .text, of Gather
indices and of float weights (these load and run), zero crashes.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tinylib import HERE, PYTHON

from monolib.abi.binfmt import find_container
from monolib.abi.container import Container

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import monolib
    results = []
    x = np.ones((2, 3), np.float32)
    for path in sys.argv[1:]:
        try:
            root = monolib.load_module(path, verify=True)
            gm = monolib.GraphModule(root["default"](monolib.cpu()))
            gm.run(x=x)
            results.append(["ok", float(gm.get_output(0).numpy().sum())])
        except monolib.MonolibError as exc:
            results.append(["error", type(exc).__name__])
    print(json.dumps(results))
""")


def test_random_container_damage_is_caught(tiny_lib, tmp_path, subprocess_env):
    data = Path(tiny_lib).read_bytes()
    off, _, _ = find_container(data)
    total = Container(data[off:]).total_size
    rng = np.random.default_rng(1234)
    paths = []
    for i in range(120):
        bad = bytearray(data)
        if i % 3 == 0:  # one byte anywhere in the container
            bad[off + int(rng.integers(total))] ^= int(rng.integers(1, 256))
        elif i % 3 == 1:  # a burst in the header or the manifest
            pos = off + int(rng.choice([rng.integers(128), rng.integers(total - 400, total)]))
            bad[pos : pos + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        else:  # one byte in the ELF headers' first page (never the code)
            bad[int(rng.integers(0, 64))] ^= int(rng.integers(1, 256))
        path = tmp_path / f"m{i}.so"
        path.write_bytes(bad)
        paths.append(str(path))
    res = subprocess.run(
        [PYTHON, "-c", CHILD, *paths],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=300,
    )
    assert res.returncode == 0, f"loader crashed (rc {res.returncode}): {res.stderr[-2000:]}"
    results = json.loads(res.stdout)
    assert len(results) == len(paths)
    COUNTS["random"] = COUNTS.get("random", 0) + len(paths)
    expected = float(
        (np.ones((2, 3), np.float32) * 0 + np.arange(1, 7).reshape(2, 3) / 2 + 0.25).sum()
    )
    errors = [r for r in results if r[0] == "error"]
    assert len(errors) > len(results) // 2
    assert {r[1] for r in errors} <= {"ContainerError", "LibraryLoadError", "IntegrityError"}
    for r in results:
        if r[0] == "ok":
            assert abs(r[1] - expected) < 1e-5


# --------------------------------------------------------------------------- hypothesis
# Mutations and truncations of a REAL exported library (a small compiled model) and of
# hand-built containers, each case run in ONE long-lived child process (a crash or a
# hang there fails the case, naming it; it cannot take pytest down). The harness's
# target (fuzz/fuzz_container.py: check_bytes) is what the child runs on containers,
# so the atheris harness is tested here too.
FUZZ_DIR = str(Path(__file__).resolve().parents[2] / "fuzz")
sys.path.insert(0, FUZZ_DIR)
import fuzz_container

WORKER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import monolib
    from fuzz_container import check_bytes
    x = np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["kind"] == "load":
                root = monolib.load_module(req["path"], verify=True)
                gm = monolib.GraphModule(root["default"](monolib.cpu()))
                gm.run(x=x)
                reply = {"r": "ok", "y": gm.get_output(0).numpy().tobytes().hex()}
            else:
                with open(req["path"], "rb") as f:
                    reply = {"r": check_bytes(f.read())}
        except monolib.MonolibError as exc:
            reply = {"r": "error", "type": type(exc).__name__, "msg": str(exc)[:300]}
        print(json.dumps(reply), flush=True)
""")
CASE_TIMEOUT_S = 30  # a hang is a failure
MONOLIB_ERRORS = {
    "ContainerError",
    "IntegrityError",
    "LibraryLoadError",
    "UnknownTypeKeyError",
    "InputError",
    "FunctionNotFoundError",
}
#: Cases per hypothesis test: MONOLIB_FUZZ_SCALE=10 runs ten times as many (by hand).
SCALE = float(os.environ.get("MONOLIB_FUZZ_SCALE", "1"))
# CI replays the same cases every run (a suite that fails by chance blocks a landing);
# MONOLIB_FUZZ_RANDOM=1 explores new ones (as do the atheris harness in fuzz/)
DERANDOMIZE = os.environ.get("MONOLIB_FUZZ_RANDOM") != "1"
COUNTS: dict[str, int] = {}


class Worker:
    """The child process; ``ask`` sends one case and returns its reply."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.proc = None

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, "-c", WORKER, FUZZ_DIR],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def ask(self, kind: str, data: bytes, tmp: Path, what: str) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        # a new file each time: rewriting a dlopen'd file in place changes its mapped
        # pages under the child (SIGBUS), and dlopen of a known path reuses the handle
        path = tmp / f"case{sum(COUNTS.values())}_{kind}.bin"
        path.write_bytes(data)
        self.proc.stdin.write(json.dumps({"kind": kind, "path": str(path)}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CASE_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        COUNTS[kind] = COUNTS.get(kind, 0) + 1
        if not line:
            self.proc.kill()
            err = self.proc.stderr.read()[-3000:]
            self.proc = None
            kept = tmp.parent / f"crash_{kind}_{COUNTS[kind]}.bin"
            kept.write_bytes(data)
            raise AssertionError(f"child died or hung on {what} (case kept at {kept}): {err}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker(request):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")])
    w = Worker(env)
    yield w
    w.close()
    total = sum(COUNTS.values())
    line = f"container fuzz cases run: {total} ({', '.join(f'{k} {v}' for k, v in COUNTS.items())})"
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past the capture, even with -q
            reporter.write_line("\n" + line)
    if os.environ.get("MONOLIB_FUZZ_COUNT_FILE"):
        with open(os.environ["MONOLIB_FUZZ_COUNT_FILE"], "a", encoding="utf-8") as f:
            f.write(line + "\n")


@pytest.fixture(scope="module")
def real_lib(tmp_path_factory) -> dict:
    """A compiled and exported small model, its regions, and its output bytes."""
    pytest.importorskip("onnx")
    import monolib

    path = tmp_path_factory.mktemp("fuzzreal") / "tiny.so"
    monolib.compile(fuzz_container.tiny_onnx_model()).export_library(str(path))
    data = path.read_bytes()
    off, _, _ = find_container(data)
    c = Container(data[off:])
    moff, msize = struct.unpack_from("<QQ", data, off + 24)
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phnum = struct.unpack_from("<H", data, 0x38)[0]
    regions = {
        "elf_header": (0, 64),
        "program_headers": (phoff, phoff + 56 * phnum),
        "section_headers": (shoff, len(data)),
        "container_header": (off, off + 128),
        "manifest": (off + moff, off + moff + msize),
        "container": (off, off + c.total_size),
    }
    return {"data": data, "regions": regions}


def _mutate(data: bytes, edits, cut) -> bytes:
    out = bytearray(data)
    for (lo, hi), pos, byte in edits:
        p = lo + pos % max(hi - lo, 1)
        if p < len(out):
            out[p] ^= byte
    return bytes(out[:cut] if cut is not None else out)


def _edits(regions: dict):
    region = st.sampled_from(sorted(regions.values()))
    return st.lists(st.tuples(region, st.integers(0, 1 << 32), st.integers(1, 255)), max_size=4)


@settings(max_examples=int(150 * SCALE), deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=DERANDOMIZE)
@given(data=st.data())
def test_real_library_mutated_and_truncated(data, real_lib, worker, tmp_path_factory):
    """A mutated or truncated library loads and gives the SAME output bits, or
    raises a MonolibError; with digests resealed a valid (other) model may load."""
    lib = real_lib["data"]
    tmp = tmp_path_factory.mktemp("case", numbered=True)
    edits = data.draw(_edits(real_lib["regions"]), "edits")
    cut = data.draw(st.none() | st.integers(0, len(lib) - 1), "cut")
    mode = data.draw(st.sampled_from([0, 0, 1, 2]), "reseal")
    case = _mutate(lib, edits, cut)
    if mode:
        case = reseal_code(fuzz_container.reseal(case, sections=mode == 2))
    if "expected" not in real_lib:
        real_lib["expected"] = worker.ask("load", lib, tmp, "the unmodified library")["y"]
    reply = worker.ask("load", case, tmp, f"edits {edits}, cut {cut}, reseal {mode}")
    # an "error" reply is a MonolibError (any other exception kills the child); a
    # resealed manifest may well name a root without "default": FunctionNotFoundError
    if (
        reply["r"] == "ok" and mode == 0
    ):  # untouched digests: only padding changed, the model is the same
        assert reply["y"] == real_lib["expected"], f"edits {edits}, cut {cut}: wrong output"


def reseal_code(data: bytes) -> bytes:
    """``data`` with its code digest made again over its (damaged) bytes, as a forger
    would: the resealed manifest's values then still reach the checks behind the
    digest. Unchanged when the damage leaves no digest to make."""
    from monolib.runtime import integrity

    try:
        found = integrity.read_trailer(data)
        body = data[: found[1]] if found is not None else data
        off, _, info = find_container(body)
        return body + integrity.make_trailer(body, off, info)
    except Exception:  # noqa: BLE001  (a file too damaged to reseal is a case as is)
        return data


def _containers() -> dict[str, bytes]:
    return fuzz_container.hand_built_containers()


HAND_BUILT = _containers()

DEEP = "<deep>"
# values a hostile manifest may hold where a count, offset or name belongs
nasty = st.one_of(
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([1 << 63, (1 << 64) - 1, -1, 0, 2**31, float("inf"), float("nan"), 1e308]),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-3, 10), max_size=4),
    st.just(DEEP),  # becomes JSON nested 100,000 deep (past the interpreter's stack)
)


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    yield path


def _set(obj, path, value):
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


def repack(blob: bytes, manifest: dict) -> bytes:
    """``blob`` (a bare container) with its manifest replaced and resealed."""
    from monolib.abi.container import sha256

    moff = struct.unpack_from("<Q", blob, 24)[0]
    text = json.dumps(manifest, allow_nan=True).encode()
    text = text.replace(b'"' + DEEP.encode() + b'"', b"[" * 100_000 + b"]" * 100_000)
    header = bytearray(blob[:128])
    struct.pack_into("<QQQ", header, 16, moff + len(text), moff, len(text))
    header[64:96] = sha256(text).digest()
    return bytes(header) + blob[128:moff] + text


@settings(max_examples=int(200 * SCALE), deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=DERANDOMIZE)
@given(name=st.sampled_from(sorted(HAND_BUILT)), data=st.data())
def test_hand_built_manifest_values_are_checked(name, data, worker, tmp_path_factory):
    """Any value anywhere in a (resealed) manifest or graph JSON: a ContainerError or
    a correct parse, never another exception, a crash or an unbounded allocation."""
    blob = HAND_BUILT[name]
    moff, msize = struct.unpack_from("<QQ", blob, 24)
    manifest = json.loads(blob[moff : moff + msize])
    paths = list(_leaves(manifest))
    for _ in range(data.draw(st.integers(1, 3), "count")):
        path = data.draw(st.sampled_from(paths), "path")
        manifest = _set(manifest, path, data.draw(nasty, "value"))
        paths = list(_leaves(manifest))
    tmp = tmp_path_factory.mktemp("case", numbered=True)
    reply = worker.ask("check", repack(blob, manifest), tmp, f"{name}: manifest {manifest}")
    assert reply["r"] in MONOLIB_ERRORS | {"ok"}


@settings(max_examples=int(200 * SCALE), deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=DERANDOMIZE)
@given(name=st.sampled_from(sorted(HAND_BUILT)), data=st.data())
def test_hand_built_bytes_mutated_and_truncated(name, data, worker, tmp_path_factory):
    """Byte flips anywhere (header, payloads, manifest) and truncation, the digests
    resealed or not: a MonolibError or a parse, in the child."""
    blob = HAND_BUILT[name]
    regions = {"all": (0, len(blob)), "header": (0, 128)}
    edits = data.draw(_edits(regions), "edits")
    cut = data.draw(st.none() | st.integers(0, len(blob) - 1), "cut")
    mode = data.draw(st.sampled_from([0, 1, 2]), "reseal")
    case = fuzz_container.fix_up(bytes([mode]) + _mutate(blob, edits, cut))
    tmp = tmp_path_factory.mktemp("case", numbered=True)
    reply = worker.ask("check", case, tmp, f"{name}: edits {edits}, cut {cut}, reseal {mode}")
    assert reply["r"] in MONOLIB_ERRORS | {"ok"}


# --------------------------------------------------------------------------- code bytes
# Code and index tensors (issue 15): before the code digest, 1-2 random bytes flipped
# in .text of an exported library crashed the process loading and running it in 7 of
# 84 cases on this model (SIGSEGV 5, SIGBUS 1, SIGILL 1), 36 of 84 on ONNX's light
# ResNet-50 (SIGSEGV 29, SIGILL 6, SIGTRAP 1; 1 more hung). With it: 84 IntegrityErrors.
CODE_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import monolib
    results = []
    x = np.linspace(-1, 1, 96, dtype=np.float32).reshape(2, 48)
    for path in sys.argv[1:]:
        try:
            root = monolib.load_module(path)
            gm = monolib.GraphModule(root["default"](monolib.cpu()))
            gm.run(x=x)
            results.append(["ok", gm.get_output(0).numpy().tobytes().hex()])
        except monolib.MonolibError as exc:
            results.append(["error", type(exc).__name__, str(exc)[:300]])
        print(json.dumps(results[-1]), flush=True)
""")


def gather_onnx_model():
    """MatMul by 192 KiB of float weights (a params section past the container's
    128 KiB check) then Gather by 300 constant int64 indices: x [2, 48] -> y [2, 300]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((48, 1024)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.integers(0, 1024, 300).astype(np.int64), "idx"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Gather", ["h", "idx"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "gather_fuzz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 300])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def elf_section(data: bytes, wanted: bytes) -> tuple[int, int]:
    """(file offset, size) of a section of a 64-bit little-endian ELF file, read from
    its section table with struct (independent of monolib's reader)."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
    table = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    strings = table[names][4]
    for sh in table:
        start = strings + sh[0]
        if data[start : data.index(b"\0", start)] == wanted:
            return sh[4], sh[5]
    raise AssertionError(f"no section {wanted!r}")


@pytest.fixture(scope="module")
def gather_lib(tmp_path_factory) -> dict:
    """The exported Gather model, its .text, and the file ranges of its params."""
    pytest.importorskip("onnx")
    import monolib
    from monolib.runtime.library import read_container

    path = str(tmp_path_factory.mktemp("gather") / "gather.so")
    monolib.compile(gather_onnx_model()).export_library(path)
    data = Path(path).read_bytes()
    container, info = read_container(path)
    sec = next(s for m in container.modules for s in m.sections if s.name == "params")
    base = info["section_offset"] + sec.offset
    params = {p["name"]: p for p in monolib.load_module(path).get_graph_json()["params"]}
    ranges = {
        p["dtype"]: (base + p["offset"], p["nbytes"]) for p in params.values()
    }  # one float32 (the packed w) and one int64 (idx) tensor
    return {"path": path, "data": data, "text": elf_section(data, b".text"), **ranges}


def test_code_and_index_bytes_damage_is_caught(gather_lib, tmp_path, subprocess_env):
    """1-2 random bytes flipped in .text (60 cases), in the int64 Gather indices (30)
    and in the float weights (30): 120 cases, each loaded and run in a child process,
    zero crashes. Code and index damage is an IntegrityError naming .text or the
    tensor, before dlopen; float damage loads and runs (other numbers, no check)."""
    data = gather_lib["data"]
    rng = np.random.default_rng(15)
    cases = []
    for kind, n in (("text", 60), ("int64", 30), ("float32", 30)):
        lo, size = gather_lib[kind]
        for i in range(n):
            bad = bytearray(data)
            for _ in range(int(rng.integers(1, 3))):
                bad[lo + int(rng.integers(size))] ^= int(rng.integers(1, 256))
            path = tmp_path / f"{kind}{i}.so"
            path.write_bytes(bytes(bad))
            cases.append((kind, str(path)))
    res = subprocess.run(
        [PYTHON, "-c", CODE_CHILD, *(p for _, p in cases)],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=600,
    )
    done = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 0, (
        f"loader crashed (rc {res.returncode}) on case {len(done)} "
        f"({cases[len(done)] if len(done) < len(cases) else '?'}): {res.stderr[-2000:]}"
    )
    assert len(done) == len(cases)
    COUNTS["code"] = COUNTS.get("code", 0) + len(cases)
    for (kind, path), r in zip(cases, done):
        if kind == "float32":
            assert r[0] == "ok", f"{path}: {r}"
        else:
            assert r[:2] == ["error", "IntegrityError"], f"{path}: {r}"
            assert (".text" if kind == "text" else "params tensor 'idx' (int64)") in r[2]
