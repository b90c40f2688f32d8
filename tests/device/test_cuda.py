"""The CUDA target: CUDA C from the same emitter, PTX from NVRTC (no GPU needed), the
``cuda`` module exported under the library, shown by ``inspect``, round-tripped byte
for byte; without a GPU the executor is a clear error. The run on a GPU (vs ONNX
Runtime) is skipped where there is none."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import make_node_model, ort_run
from monolib.models import fetch_model
from monolib.errors import DeviceUnavailableError

CLS = ("ppocr_cls", (1, 3, 48, 192))


def _gpu_reason() -> str | None:
    try:
        from cuda.bindings import driver

        err, = driver.cuInit(0)
        err2, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or err2 != driver.CUresult.CUDA_SUCCESS or not count:
            return f"no CUDA GPU ({err}, {count} devices)"
    except Exception as exc:  # noqa: BLE001
        return f"no CUDA GPU ({type(exc).__name__}: {exc})"
    return None


@pytest.fixture(scope="module")
def cls_cuda(need_nvrtc, tmp_path_factory):
    factory = monolib.compile(str(fetch_model(CLS[0])), target="cuda -arch=sm_90",
                              shapes={"x": CLS[1]})
    path = factory.export_library(str(tmp_path_factory.mktemp("cuda") / "cls_cuda.so"))
    return factory, path


def test_cuda_kernels_compile_to_ptx_for_the_arch(cls_cuda):
    factory, _ = cls_cuda
    dev = factory.lib.imported_modules[0]
    assert dev.type_key == "cuda" and dev.meta["arch"] == "sm_90"
    assert dev.source.count('extern "C" __global__ void') == len(dev.functions)
    ptx = dev.binaries["sm_90"].decode()
    assert ".target sm_90" in ptx
    for f in dev.functions:  # every kernel of the function table is an entry of the PTX
        assert f".entry {f['name']}(" in ptx


def test_cuda_library_inspect_and_byte_round_trip(cls_cuda):
    from monolib.tools.inspect import inspect_library

    factory, path = cls_cuda
    report = inspect_library(path, verify=True)
    mods = report["modules"]
    lib = mods[mods[report["root"]]["imports"][0]]
    assert lib["type_key"] == "library"
    assert [mods[i]["type_key"] for i in lib["imports"]] == ["cuda"]
    assert mods[lib["imports"][0]]["device"]["binaries"] == ["sm_90"]
    loaded = monolib.load_module(path)
    dev = loaded.imported_modules[0].imported_modules[0]
    assert dev.save_to_bytes() == factory.lib.imported_modules[0].save_to_bytes()


def test_target_without_nvrtc_keeps_the_source(monkeypatch):
    from monolib.runtime import cuda_module as cuda

    monkeypatch.setattr(cuda, "nvrtc_available", lambda: False)
    model = make_node_model("Relu", {"x": np.zeros((2, 3), np.float32)})
    dev = monolib.compile(model, target="cuda").lib.imported_modules[0]
    assert dev.binaries == {} and "__global__" in dev.source and dev.meta["arch"] == "sm_80"


def test_bad_cuda_target_is_a_target_error():
    model = make_node_model("Relu", {"x": np.zeros((2, 3), np.float32)})
    with pytest.raises(monolib.TargetError, match="-arch=sm_XY"):
        monolib.compile(model, target="cuda -arch=90")
    with pytest.raises(monolib.TargetError, match="opencl takes none"):
        monolib.compile(model, target="opencl -mcpu=x")


def test_no_gpu_is_a_clear_error():
    if _gpu_reason() is None:
        pytest.skip("a GPU is here")
    model = make_node_model("Relu", {"x": np.zeros((2, 3), np.float32)})
    factory = monolib.compile(model, target="cuda")
    with pytest.raises(DeviceUnavailableError, match="CUDA"):
        factory["default"](monolib.cuda())


def test_cls_on_gpu_matches_onnxruntime(cls_cuda):
    reason = _gpu_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")
    from models.conftest import assert_matches

    _, path = cls_cuda
    x = np.random.default_rng(0).random(CLS[1], dtype=np.float32)
    gm = monolib.GraphModule(monolib.load_module(path)["default"](monolib.cuda()))
    gm.run(x=x)
    want = ort_run(fetch_model(CLS[0]), {"x": x})
    assert_matches([gm.get_output(0).numpy()], want, "PP-OCR cls on CUDA")


def test_bound_expressions_are_spelled_by_the_language(need_nvrtc):
    """An op expression that binds its argument (Elu uses x twice) is written by the
    language: a GNU statement expression in C and OpenCL C, a lambda called in place in
    CUDA C, which NVRTC compiles with no rewrite of the text."""
    from monolib.compiler.backends.cstyle import CUDA, HOST_C, OPENCL, rendering
    from monolib.compiler.frontend.onnx import import_model
    from monolib.compiler.ops import op_of
    from monolib.runtime.cuda_module import nvrtc_compile

    graph = import_model(make_node_model("Elu", {"x": np.zeros((4,), np.float32)}))
    node = graph.nodes[0]
    forms = {}
    for lang in (HOST_C, OPENCL, CUDA):
        with rendering(lang):
            forms[lang.name] = op_of(node).c_expr(node, ["ml_expf(v[gid])"])
    assert forms["c"] == forms["opencl"] and forms["c"].startswith("({ float ml_t0_")
    assert forms["cuda"].startswith("([&]() { float ml_t0_") and "({" not in forms["cuda"]
    source = (
        CUDA.prelude
        + "typedef int idx_t;\n"
        + f"{CUDA.signature('k0')} {{\n"
        + f"  const idx_t gid = {CUDA.gid};\n"
        + "  const float* v = (const float*)params; float* y = (float*)arena;\n"
        + f"  y[gid] = {forms['cuda']};\n}}\n"
    )
    assert ".entry k0(" in nvrtc_compile(source, "sm_80").decode()
