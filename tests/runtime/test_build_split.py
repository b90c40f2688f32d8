"""Split builds and the object cache (issue 15, build time): the generated C cut into
translation units compiled side by side gives the same library behaviour, bit for bit,
as one file; a rebuild takes its objects from the cache without running the compiler; a
damaged entry is rebuilt; the key follows the text, the compiler and the flags."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.export import csource, toolchain
from monolib.export.csource import GLUE_MARK, HELPERS_MARK, UNIT_MARK, split_source
from monolib.export.objcache import ObjectCache
from monolib.runtime import GraphModule, cpu, load_module, set_num_threads

RNG = np.random.default_rng(15)


def _model() -> onnx.ModelProto:
    """Conv -> Relu -> depthwise Conv -> MaxPool -> Flatten -> Gemm -> Softmax: kernels
    of several headers (gemm, depthwise, pool, softmax), so the ops form several groups."""
    w1 = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2
    w2 = RNG.standard_normal((16, 1, 3, 3)).astype(np.float32) * 0.3
    w3 = RNG.standard_normal((10, 16 * 5 * 7)).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3"], ["g"], transB=1),
        helper.make_node("Softmax", ["g"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 11, 15])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def factory():
    return monolib.compile(_model())


@pytest.fixture
def always_split(monkeypatch):
    """Split even this small file in two op units."""
    monkeypatch.setattr(csource, "SPLIT_MIN_CHARS", 0)
    monkeypatch.setenv("MONOLIB_BUILD_JOBS", "2")


def _compiles(monkeypatch) -> list[list[str]]:
    """Spy on the toolchain's runs: the list fills with each command."""
    calls: list[list[str]] = []
    real = toolchain.run_tool

    def spy(cmd, cwd=None):
        calls.append(list(cmd))
        return real(cmd, cwd=cwd)

    monkeypatch.setattr(toolchain, "run_tool", spy)
    return calls


def _c_compiles(calls) -> list[str]:
    return [c[-1] for c in calls if "-c" in c and c[-1].endswith(".c")]


def _n_units(factory) -> int:
    (lib,) = [m for m in factory.imported_modules if isinstance(m, csource.CSourceModule)]
    return len(split_source(lib.source, 2))


def _run(path: str, x: np.ndarray, threads: int) -> np.ndarray:
    set_num_threads(threads)
    try:
        gm = GraphModule(load_module(path)["default"](cpu()))
        gm.set_input("x", x)
        gm.run()
        return gm.get_output(0).numpy().copy()
    finally:
        set_num_threads(1)


def test_split_units_are_op_units_and_glue(factory, always_split):
    (lib,) = [m for m in factory.imported_modules if isinstance(m, csource.CSourceModule)]
    units = split_source(lib.source, 2)
    kinds = [u.split(" of a build")[0].split("monolib: ")[1] for u in units]
    assert kinds[:2] == ["op unit 1", "op unit 2"] and kinds[-1] == "glue unit"
    assert set(kinds[2:-1]) == {"kernel unit"} and len(kinds) >= 5  # gemm, depthwise...
    glue = units[-1]
    assert "#define ML_SPLIT_GLUE 1" in glue and "monolib_run(" in glue
    assert "ml_sgemm" not in glue  # no op kernels in the glue
    for unit in units[:-1]:
        assert "#define ML_SPLIT_UNIT 1" in unit and "monolib_run(" not in unit
    op_parts = [u.split("#undef ML_OP_FN")[1] for u in units[:2]]
    n_ops = lib.source.count("ML_OP_FN void op_")
    for i in range(n_ops):  # every op function in exactly one op unit
        assert sum(f"ML_OP_FN void op_{i}(" in p for p in op_parts) == 1
    # a kernel group is not cut: one unit calls the depthwise kernel, one the GEMM
    assert sum("ml_dwconv2d(" in p for p in op_parts) == 1
    assert sum("ml_gemm_defaults(" in p for p in op_parts) == 1
    # the GEMM entry point is compiled in its kernel unit (no model helpers there), the
    # op units call its wrapper
    gemm = next(u for u in units[2:-1] if "ml_sgemm_par_k(" in u)
    assert "ML_UNIT_HIDDEN void ml_sgemm_par_k(const ml_gemm_args* g) { ml_sgemm_par(g); }" in gemm
    assert HELPERS_MARK not in gemm and "@ml-unit" not in gemm
    for p in op_parts:
        assert "#define ml_sgemm_par ml_sgemm_par_k" in p


def test_kernel_entry_points_are_pointer_only():
    sig = csource._entry_signature
    head = "ML_UNUSED static void ml_f(const ml_args* g, void (*task)(void*, int64_t)) {"
    assert sig(head, "ml_f") == ("void", "const ml_args* g, void (*task)(void*, int64_t)",
                                 "g, task")
    assert sig("static int64_t ml_g(const float* a, float* b) {", "ml_g") == (
        "int64_t", "const float* a, float* b", "a, b")
    assert sig("static void ml_h(const float* a, int64_t n, ml_epi_fn epi) {", "ml_h") == (
        "void", "const float* a, int64_t n, ml_epi_fn epi", "a, n, epi")
    # a struct by value or an unknown type: left with the ops
    assert sig("static void ml_k(ml_gemm_args g) {", "ml_k") is None
    assert sig("static inline void ml_i(const float* a) {", "ml_i") is None  # meant inline
    assert sig("static void ml_j(void) {", "ml_j") is None
    # a head that _DEF_RE took across a directive (mt19937.h's ml_rng_gauss): left too
    head = ('__attribute__((optimize("fp-contract=off")))\n#endif\n'
            "static double ml_g2(ml_rng_state* st) {")
    assert sig(head, "ml_g2") is None


def test_kernel_calling_an_entry_point_compiled_elsewhere_places_its_ops():
    """A kernel (ml_helper) that calls another unit's entry point (ml_entry) is grouped
    with the ops that reach it, and the entry point pins nobody (it raised KeyError)."""
    common = ("/* ---- threadpool.h ---- */\nint x;\n/* ---- k.h ---- */\n"
              "static void ml_entry(float* a) {\n  a[0] = 1;\n}\n"
              "static void ml_helper(float* a) {\n  ml_entry(a);\n}\n")
    texts = {"op_0": "static void op_0(void) {\n ml_helper(0);\n}\n",
             "op_1": "static void op_1(void) {\n ml_entry(0);\n}\n",
             "op_2": "static void op_2(void) {\n ml_helper(0);\n}\n"}
    unit = csource._share_out(common, texts, 2, frozenset({"ml_entry"}))
    assert unit["op_0"] == unit["op_2"] != unit["op_1"], unit


def test_kernel_unit_is_the_same_text_for_two_models(always_split):
    """The gemm kernel unit holds no model's helpers: two models share its object."""
    def units_of(model):
        (lib,) = [m for m in monolib.compile(model).imported_modules
                  if isinstance(m, csource.CSourceModule)]
        return [u for u in split_source(lib.source, 2) if "ml_sgemm_par_k(" in u
                and "kernel unit" in u[:80]]

    other = _model()
    other.graph.node[1].op_type = "Sigmoid"  # another epilogue, other helpers
    assert units_of(_model()) == units_of(other) and len(units_of(other)) == 1


def _gemm_alone() -> onnx.ModelProto:
    w = RNG.standard_normal((10, 560)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 560])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_kernel_unit_is_the_same_text_whatever_headers_the_model_has(always_split):
    """The gemm kernel unit of a lone Gemm and of a model that pasted conv, depthwise,
    pool and softmax headers too is one text (one cached object for both): the prelude,
    gemm.h and its wrappers, no header gemm.h does not need."""
    def gemm_unit(model):
        (lib,) = [m for m in monolib.compile(model).imported_modules
                  if isinstance(m, csource.CSourceModule)]
        return [u for u in split_source(lib.source, 2) if "ml_sgemm_par_k(" in u
                and "kernel unit" in u[:80]]

    alone, mixed = gemm_unit(_gemm_alone()), gemm_unit(_model())
    assert alone == mixed and len(alone) == 1
    assert "/* ---- gemm.h ---- */" in alone[0]
    for other in ("pool.h", "softmax.h", "conv.h", "conv_depthwise.h"):
        assert f"/* ---- {other} ---- */" not in alone[0]


def test_kernel_unit_takes_the_headers_it_needs_in_one_order():
    """conv_band.h's unit takes gemm.h, conv.h and conv_depthwise.h (named by what it
    uses, comments aside), each after those it needs, whatever order they came in."""
    sections = {
        "gemm.h": "#define ML_VW 8\nstatic void ml_g(float* a) {\n}\n",
        "pool.h": "/* ml_g is not used here: a comment */\n#define ML_P 1\n",
        "conv.h": "static void ml_c(float* a) {\n  ml_g(a);\n}\n",
        "conv_depthwise.h": "typedef struct { int n; } ml_dw_job;\n"
                            "static void ml_d(float* a) {\n  ml_c(a);\n}\n",
        "conv_band.h": "static void ml_b(ml_dw_job* j, float* a) {\n  ml_d(a);\n}\n",
    }
    needs = csource._header_needs("#define ML_MIN(a, b) a\n", sections)
    assert needs["pool.h"] == set() and needs["conv.h"] == {"gemm.h"}
    assert needs["conv_band.h"] == {"conv_depthwise.h"}
    assert csource._in_order("conv_band.h", needs) == ["gemm.h", "conv.h", "conv_depthwise.h"]
    # two headers neither needs: by name
    assert csource._in_order("x.h", {"x.h": {"b.h", "a.h"}, "a.h": set(), "b.h": set()}) == [
        "a.h", "b.h"]


def test_wrapper_of_a_conditional_entry_point_is_under_its_conditions():
    """An entry point defined only under ``#if`` (pool.h's sixteen-wide kernels: AVX-512)
    gets its wrapper under the same lines, the include guard aside, so a unit compiled
    without it does not call a function that is not there."""
    text = ("#ifndef MONOLIB_K_H\n#define MONOLIB_K_H\n#if defined(__AVX__)\n"
            "#if defined(__AVX512F__) && \\\n    defined(__GNUC__)\n"
            "static void ml_a(float* x) {\n}\n#else\nstatic void ml_b(float* x) {\n}\n"
            "#endif\n#endif\nstatic void ml_c(float* x) {\n}\n#endif\n")
    at = csource._conditions(text)
    assert at(text.index("ml_a")) == (
        "#if defined(__AVX__)\n#if defined(__AVX512F__) && \\\n    defined(__GNUC__)\n",
        "#endif\n#endif\n")
    assert at(text.index("ml_b")) == (
        "#if defined(__AVX__)\n#if defined(__AVX512F__) && \\\n    defined(__GNUC__)\n#else\n",
        "#endif\n#endif\n")
    assert at(text.index("ml_c")) == ("", "")


def test_unmarked_or_small_source_is_one_unit(always_split):
    src = "int f(void) { return 1; }\n"
    assert split_source(src, 4) == [src]
    assert split_source(src, 1) == [src]


def test_thread_local_state_is_shared(always_split, monkeypatch):
    monkeypatch.setattr(csource, "KERNEL_UNITS", False)
    common = ("/* prelude */\nstatic _Thread_local int32_t ml_status; /* ML_STATUS */\n"
              "static int k(void) { return 2; }\n")
    ops = "".join(f"{UNIT_MARK.format(f'op_{i}')}\nML_OP_FN void op_{i}(const uint8_t* restrict "
                  f"params, uint8_t* restrict arena) {{ ml_status = {i}; }}\n" for i in range(4))
    src = common + ops + "\n" + GLUE_MARK + "\nint32_t monolib_num_ops(void) { return 4; }\n"
    units = split_source(src, 2)
    assert len(units) == 3
    for unit in units[:-1]:
        assert "extern ML_UNIT_HIDDEN _Thread_local int32_t ml_status;" in unit
    assert "\nML_UNIT_HIDDEN _Thread_local int32_t ml_status;" in units[-1]
    assert all(f"ML_OP_FN void op_{i}(const uint8_t* restrict params" in units[-1]
               for i in range(4))  # prototypes for the op table


def test_split_build_is_bit_identical_to_one_file(factory, tmp_path, monkeypatch,
                                                  always_split):
    monkeypatch.setenv("MONOLIB_OBJECT_CACHE", "off")
    calls = _compiles(monkeypatch)
    split = factory.export_library(str(tmp_path / "split.so"))
    assert len(_c_compiles(calls)) == _n_units(factory) >= 5  # op, kernel, glue units
    monkeypatch.setenv("MONOLIB_BUILD_JOBS", "1")
    del calls[:]
    one = factory.export_library(str(tmp_path / "one.so"))
    assert len(_c_compiles(calls)) == 1
    x = RNG.standard_normal((1, 8, 11, 15)).astype(np.float32)
    want = _run(one, x, 1)
    assert want.shape == (1, 10) and abs(float(want.sum()) - 1.0) < 1e-5
    for threads in (1, 2):
        np.testing.assert_array_equal(_run(split, x, threads), want)


def test_rebuild_takes_objects_from_cache(factory, tmp_path, monkeypatch, always_split):
    monkeypatch.setenv("MONOLIB_OBJECT_CACHE", str(tmp_path / "cache"))
    calls = _compiles(monkeypatch)
    first = factory.export_library(str(tmp_path / "a.so"))
    assert len(_c_compiles(calls)) == _n_units(factory)
    del calls[:]
    again = factory.export_library(str(tmp_path / "b.so"))
    assert _c_compiles(calls) == []  # no compiler run for a C unit: all from the cache
    x = RNG.standard_normal((1, 8, 11, 15)).astype(np.float32)
    np.testing.assert_array_equal(_run(again, x, 1), _run(first, x, 1))


def test_damaged_entry_is_rebuilt(factory, tmp_path, monkeypatch, always_split):
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("MONOLIB_OBJECT_CACHE", str(cache_dir))
    calls = _compiles(monkeypatch)
    first = factory.export_library(str(tmp_path / "a.so"))
    entries = sorted(cache_dir.rglob("*.o"))
    assert len(entries) == _n_units(factory)
    data = bytearray(entries[0].read_bytes())
    data[len(data) // 2] ^= 0x40  # one flipped bit in the object
    entries[0].write_bytes(bytes(data))
    del calls[:]
    again = factory.export_library(str(tmp_path / "b.so"))
    assert len(_c_compiles(calls)) == 1  # only the damaged unit compiled again
    assert entries[0].read_bytes() != bytes(data)  # and stored whole again
    x = RNG.standard_normal((1, 8, 11, 15)).astype(np.float32)
    np.testing.assert_array_equal(_run(again, x, 1), _run(first, x, 1))


def test_cache_key_follows_the_native_cpu(factory, tmp_path, monkeypatch, always_split):
    """The same flags on another CPU (``-march=native`` predefines other macros) miss."""
    monkeypatch.setenv("MONOLIB_OBJECT_CACHE", str(tmp_path / "cache"))
    calls = _compiles(monkeypatch)
    factory.export_library(str(tmp_path / "a.so"))
    real = toolchain._predefined_macros(("cc",)) or frozenset()
    monkeypatch.setattr(toolchain, "_predefined_macros",
                        lambda cmd: frozenset({"__AVX512F__"}) ^ real)
    del calls[:]
    factory.export_library(str(tmp_path / "b.so"))
    assert len(_c_compiles(calls)) == _n_units(factory)


def test_cache_key_follows_text_compiler_and_flags(tmp_path):
    cache = ObjectCache(str(tmp_path))
    cc = toolchain.find_compiler("c")
    base = cache.key("int x;", cc, ["-O3", "-march=native"])
    assert base == cache.key("int x;", cc, ["-O3", "-march=native"])
    assert base != cache.key("int x;", cc, ["-O2", "-march=native"])
    assert base != cache.key("int x;", cc, ["-O3", "-march=x86-64-v2"])
    assert base != cache.key("int y;", cc, ["-O3", "-march=native"])
    assert base != cache.key("int x;", [*cc, "-fno-fast"], ["-O3", "-march=native"])


def test_cache_stores_atomically_and_keeps_under_cap(tmp_path):
    cache = ObjectCache(str(tmp_path / "c"), cap_bytes=3000)
    for k in range(5):
        obj = tmp_path / f"{k}.o"
        obj.write_bytes(bytes([k]) * 1000)
        key = f"{k:02d}" + "0" * 62
        cache.put(key, str(obj))
        os.utime(cache._path(key), (k, k))  # last use: k seconds after the epoch
    kept = sorted(p.name[:2] for p in (tmp_path / "c").rglob("*.o"))
    assert kept == ["03", "04"]  # the least recently used went first
    assert not list((tmp_path / "c").rglob("*.tmp"))
    out = tmp_path / "out.o"
    assert cache.get("04" + "0" * 62, str(out)) and out.read_bytes() == bytes([4]) * 1000
    assert not cache.get("00" + "0" * 62, str(out))
