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

from .conftest import check_outputs_vs_ort, gpu_reason

CLS = ("ppocr_cls", (1, 3, 48, 192))


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
    if gpu_reason() is None:
        pytest.skip("a GPU is here")
    model = make_node_model("Relu", {"x": np.zeros((2, 3), np.float32)})
    factory = monolib.compile(model, target="cuda")
    with pytest.raises(DeviceUnavailableError, match="CUDA"):
        factory["default"](monolib.cuda())


def test_cls_on_gpu_matches_onnxruntime(cls_cuda, need_gpu):
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


def test_every_kernel_on_gpu_matches_onnxruntime(need_gpu, need_nvrtc):
    """The OpenCL op model (every device lowering, fused epilogues) on the GPU, run
    twice on other inputs: nothing stale in the device arena."""
    from .test_opencl_ops import FEEDS, ops_model

    model = ops_model()
    factory = monolib.compile(model, target="cuda")
    gm = monolib.GraphModule(factory["default"](monolib.cuda()))
    check_outputs_vs_ort(gm, model, (FEEDS, {**FEEDS, "x": -FEEDS["x"]}))


def test_rec_on_gpu_reads_the_text_in_a_fresh_process(need_gpu, need_nvrtc, fresh_device_run,
                                                      tmp_path):
    """PP-OCRv4 rec exported for the GPU found, loaded in a fresh process that never
    imports the compiler, matches ONNX Runtime and reads the rendered line."""
    from models.conftest import TEXT, assert_matches
    from monolib.models import ocr

    from monolib.runtime.cuda_module import CUDAModule

    major_minor = _gpu_arch()
    path = str(fetch_model("ppocr_rec"))
    factory = monolib.compile(path, target=f"cuda -arch={major_minor}",
                              shapes={"x": (1, 3, 48, 320)})
    lib = factory.export_library(str(tmp_path / "rec_cuda.so"))
    assert isinstance(factory.lib.imported_modules[0], CUDAModule)
    x = ocr.line_preprocess(ocr.render_line(TEXT), 48, 320)
    got, info = fresh_device_run(lib, {"x": x}, "cuda")
    assert info["heavy"] == [] and info["last_build"] == "binary"
    want = ort_run(path, {"x": x})
    assert_matches(got, want, "PP-OCRv4 rec on CUDA")
    assert ocr.ctc_greedy_decode(got[0], ocr.load_charset(path)) == TEXT


def _gpu_arch() -> str:
    from cuda.bindings import driver

    driver.cuInit(0)
    dev = driver.cuDeviceGet(0)[1]
    attr = driver.CUdevice_attribute
    major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
    minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
    return f"sm_{major}{minor}"


def test_det_on_gpu_matches_onnxruntime(need_gpu, need_nvrtc):
    """PP-OCRv4 det (nearest 2x Resizes, stride-2 ConvTransposes) on the GPU for its
    arch, on a rendered page: ONNX Runtime's map within 3e-4 of its range (ORT's
    optimized and plain runs differ by 2.7e-4 here), both text bands found."""
    from models.conftest import PAGE, assert_matches
    from monolib.models import ocr

    path = str(fetch_model("ppocr_det"))
    image, bands = ocr.render_page(PAGE)
    x = ocr.det_preprocess(image)
    factory = monolib.compile(path, target=f"cuda -arch={_gpu_arch()}", shapes={"x": x.shape})
    gm = monolib.GraphModule(factory["default"](monolib.cuda()))
    gm.run(x=x)
    got = [gm.get_output(0).numpy()]
    assert_matches(got, ort_run(path, {"x": x}), "PP-OCRv4 det on CUDA", rel=3e-4,
                   want_unopt=ort_run(path, {"x": x}, optimize=False))
    m = got[0][0, 0]
    for y0, y1 in bands:
        assert m[y0:y1].mean() > 0.1, f"text band {y0}:{y1} mean {m[y0:y1].mean():.3f}"
    assert len(ocr.text_boxes(m)) == len(PAGE)
