"""The instruction set a library needs (issue 15): recorded at export from the
compiler's own macros, shown by inspect, checked against the running CPU before
``dlopen``: a library built for more than this CPU has is a CPUFeatureError naming the
missing features, never a SIGILL. The qemu tests run Python under ``qemu-x86_64 -cpu
Nehalem`` (SSE4.2, no AVX): an x86-64-v2 library runs there and matches, a native
AVX library is refused cleanly."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tinylib import B, W, tiny_graph, tiny_source

import monolib
from monolib.errors import CPUFeatureError
from monolib.export.csource import CSourceModule
from monolib.export.toolchain import cpu_flags, isa_record
from monolib.runtime import GraphExecutorFactoryModule, isa, load_module
from monolib.runtime import library as runtime_library
from monolib.tools.inspect import _PlainConsole, inspect_library, render_report

X86_64 = platform.machine().lower() in ("x86_64", "amd64")
needs_x86 = pytest.mark.skipif(not X86_64, reason="x86-64 levels need an x86-64 host")
# What a Nehalem (x86-64-v2) has of the features monolib records.
NEHALEM = frozenset({"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf"})


def _tiny(tmp_path, target: str, name: str) -> str:
    graph, params = tiny_graph()
    factory = GraphExecutorFactoryModule(graph, params, CSourceModule(tiny_source(), target))
    return factory.export_library(str(tmp_path / name))


def _run_tiny(path: str) -> np.ndarray:
    gm = monolib.GraphModule(load_module(path)["default"](monolib.cpu()))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gm.set_input("x", x)
    gm.run()
    return gm.get_output(0).numpy()


def test_macros_give_features_and_levels():
    v3 = {"__SSE3__", "__SSSE3__", "__SSE4_1__", "__SSE4_2__", "__POPCNT__", "__LAHF_SAHF__",
          "__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16", "__AVX__", "__AVX2__", "__FMA__", "__BMI__",
          "__BMI2__", "__F16C__", "__LZCNT__", "__MOVBE__", "__XSAVE__", "__x86_64__"}
    feats = isa.features_from_macros("x86_64", v3)
    assert "avx2" in feats and "fma" in feats and "avx512f" not in feats
    assert isa.level_of("x86_64", feats) == "x86-64-v3"
    assert isa.level_of("x86_64", set(feats) - {"movbe"}) == "x86-64-v2"
    assert isa.level_of("x86_64", []) == "x86-64"
    arm = isa.features_from_macros("aarch64", {"__ARM_NEON", "__ARM_FEATURE_DOTPROD"})
    assert arm == ["dotprod", "neon"] and isa.level_of("aarch64", arm) is None


def test_cpuinfo_is_parsed_per_architecture(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu sse2 pni ssse3 sse4_1 sse4_2 popcnt avx2\n"
                   "\nprocessor\t: 1\nflags\t\t: fpu avx512f\n")
    got = isa.host_features.__wrapped__("x86", str(x86))  # 32-bit x86: no CPUID mixed in
    assert got == {"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx2"}  # first CPU only
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 asimddp sve\n")
    assert isa.host_features.__wrapped__("aarch64", str(arm)) == {"neon", "crc", "dotprod",
                                                                   "sve"}


@needs_x86
def test_this_cpu_has_what_native_records():
    rec = isa_record("c")
    assert rec["flags"] == ["-march=native"] and rec["features"] is not None
    assert isa.missing_features(rec) == []  # this very CPU built it: nothing missing
    assert set(rec["features"]) <= isa.host_features()


@needs_x86
def test_x86_64_v2_library_records_no_avx_and_runs(tmp_path):
    path = _tiny(tmp_path, "c -mcpu=x86-64-v2", "v2.so")
    rec = inspect_library(path)["isa"]
    assert rec["level"] == "x86-64-v2" and rec["flags"] == ["-march=x86-64-v2"]
    assert set(rec["features"]) == NEHALEM
    assert not {"avx", "avx2", "fma", "avx512f"} & set(rec["features"])
    assert rec["missing_here"] == []
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(_run_tiny(path), x * W + B, rtol=1e-6)


def _lacking(monkeypatch, have: frozenset) -> None:
    """Make this CPU look like one with only ``have``; fail if dlopen is reached."""
    monkeypatch.setattr(isa, "host_features", lambda arch=None, cpuinfo=None: have)

    def no_dlopen(*args, **kwargs):
        raise AssertionError("dlopen reached despite a missing CPU feature")

    monkeypatch.setattr(runtime_library, "open_library", no_dlopen)


@needs_x86
def test_library_needing_more_than_the_cpu_refuses_before_dlopen(tmp_path, monkeypatch,
                                                                 capsys):
    path = _tiny(tmp_path, "c -mcpu=x86-64-v3", "v3.so")
    _lacking(monkeypatch, NEHALEM)
    with pytest.raises(CPUFeatureError) as info:
        load_module(path)
    msg = str(info.value)
    assert path in msg and "x86-64-v3" in msg and "avx2" in msg and "fma" in msg, msg
    assert "sse4.2" not in msg  # only what is missing is named
    with pytest.raises(CPUFeatureError, match="avx2"):
        load_module(open(path, "rb").read())  # bytes (memfd) go through the same check
    report = inspect_library(path)  # inspect reads, never loads: it says what is missing
    assert "avx2" in report["isa"]["missing_here"]
    render_report(report, _PlainConsole())
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("ISA:"))
    assert "x86-64-v3 (-march=x86-64-v3)" in line and "this CPU LACKS" in line, line
    assert "avx2" in line.split("LACKS", 1)[1], line


def test_record_check_and_unknowns():
    rec = isa.make_record("x86_64", ["sse3", "avx2"], ["-march=haswell"])
    with pytest.raises(CPUFeatureError, match=r"lib\.so: built for .*needs CPU feature\(s\) avx2"):
        isa.check(rec, "lib.so", host={"sse3"})
    isa.check(rec, "lib.so", host={"sse3", "avx2", "avx512f"})  # more is fine
    isa.check(isa.make_record("x86_64", None), "lib.so", host=set())  # unknown: not checked
    isa.check(None, "old.so", host=set())  # a library from before the record: loads
    with pytest.raises(CPUFeatureError, match="malformed"):
        isa.parse_record(b'{"arch": 3}', "lib.so")


def test_unknown_os_skips_with_a_log_line(monkeypatch, caplog):
    monkeypatch.setattr(sys, "platform", "plan9")
    caplog.set_level("INFO", logger=isa.__name__)
    assert isa.host_features.__wrapped__("x86_64", "/nonexistent/cpuinfo") is None
    assert "ISA check skipped" in caplog.text
    monkeypatch.setattr(isa, "host_features", lambda arch=None, cpuinfo=None: None)
    rec = isa.make_record("x86_64", ["avx2"])
    assert isa.missing_features(rec) is None
    isa.check(rec, "lib.so")  # nothing known about this CPU: loads (and logs)


def test_zig_gets_cpu_names_with_underscores():
    zig = [sys.executable, "-m", "ziglang", "cc", "-target", "aarch64-linux-gnu"]
    assert cpu_flags(zig, ["-O3", "-mcpu=cortex-a76+sve"]) == ["-O3", "-mcpu=cortex_a76+sve"]
    assert cpu_flags(["zig", "cc"], ["-march=x86-64-v2"]) == ["-march=x86_64_v2"]
    assert cpu_flags(["gcc"], ["-march=x86-64-v2"]) == ["-march=x86-64-v2"]


@pytest.mark.slow
def test_aarch64_cross_build_records_its_features(tmp_path):
    pytest.importorskip("ziglang")
    assert isa_record("c -mtriple=aarch64-linux-gnu")["features"] == ["neon"]
    path = _tiny(tmp_path, "c -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "a76.so")
    rec = inspect_library(path)["isa"]
    assert rec["arch"] == "aarch64" and rec["flags"] == ["-mcpu=cortex-a76"]
    assert {"neon", "dotprod", "fp16"} <= set(rec["features"]) and "sve" not in rec["features"]
    host = {"neon", "crc", "lse"}  # a Cortex-A72-like CPU: no dotprod, no fp16
    with pytest.raises(CPUFeatureError, match="dotprod, fp16"):
        isa.check(rec, path, host=host)


# ------------------------------------------------------------------ under qemu
QEMU = shutil.which("qemu-x86_64")
DRIVER = textwrap.dedent("""
    import sys
    import numpy as np
    import monolib
    print("READY", flush=True)
    try:
        mod = monolib.load_module(sys.argv[1])
    except monolib.MonolibError as exc:
        print("REFUSED", type(exc).__name__, exc, flush=True)
        sys.exit(3)
    gm = monolib.GraphModule(mod["default"](monolib.cpu()))
    gm.set_input("x", np.load(sys.argv[2]))
    gm.run()
    np.save(sys.argv[3], gm.get_output(0).numpy())
    print("RAN", flush=True)
""")


def _under_nehalem(tmp_path, lib: str, x: np.ndarray) -> tuple[subprocess.CompletedProcess, str]:
    (tmp_path / "driver.py").write_text(DRIVER)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "y.npy")
    res = subprocess.run([QEMU, "-cpu", "Nehalem", sys.executable, str(tmp_path / "driver.py"),
                          lib, str(tmp_path / "x.npy"), out],
                         capture_output=True, text=True, timeout=300)
    if "READY" not in res.stdout:
        pytest.skip(f"Python does not start under qemu-x86_64 -cpu Nehalem: {res.stderr[-300:]}")
    return res, out


def _conv_gemm_model():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.normal(size=(8 * 5 * 7, 11)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "s")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "s"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 11])], [w, m, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow
@needs_x86
@pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 not installed (apt-get install qemu-user)")
def test_v2_library_runs_under_nehalem_and_native_one_refuses(tmp_path):
    from monolib.compiler.testing import ort_run

    model = _conv_gemm_model()
    x = np.random.default_rng(1).normal(size=(1, 3, 5, 7)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    v2 = monolib.compile(model, target="c -mcpu=x86-64-v2").export_library(
        str(tmp_path / "v2.so"))
    res, out = _under_nehalem(tmp_path, v2, x)
    assert res.returncode == 0 and "RAN" in res.stdout, res.stdout + res.stderr[-2000:]
    np.testing.assert_allclose(np.load(out), want, rtol=1e-4, atol=1e-4)

    native = _tiny(tmp_path, "c", "native.so")
    needs = set(inspect_library(native)["isa"]["features"])
    if needs <= NEHALEM:
        pytest.skip("this host's native build needs nothing a Nehalem lacks")
    res, _ = _under_nehalem(tmp_path, native, x)
    # an error and exit 3 from the driver; a SIGILL would be returncode -4 (or 132)
    assert res.returncode == 3, (res.returncode, res.stdout, res.stderr[-2000:])
    assert "REFUSED CPUFeatureError" in res.stdout and "avx" in res.stdout, res.stdout


@pytest.mark.slow
@needs_x86
def test_avx512_kernels_build_with_clang(tmp_path, monkeypatch):
    """The kernel headers' AVX-512 paths (masked loads and stores: the im2col packing, the
    half-width GEMM tail) compile under clang as under gcc, whose builtins take other
    pointer types: a conv and a GEMM built for x86-64-v4 by zig cc record that level."""
    pytest.importorskip("ziglang")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (20, 8, 3, 3)), ("b", (20,)), ("m", (20 * 14 * 14, 10)))]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Flatten", ["r"], ["f"]),
         helper.make_node("MatMul", ["f", "m"], ["y"])],
        "v4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    monkeypatch.setenv("CC", f"{sys.executable} -m ziglang cc")
    lib = monolib.compile(model, target="c -mtriple=x86_64-linux-gnu -mcpu=x86-64-v4")
    path = lib.export_library(str(tmp_path / "v4.so"))
    assert inspect_library(path)["isa"]["level"] == "x86-64-v4"
