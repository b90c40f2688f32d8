"""Device modules: the byte format (round trip, corrupt payloads), the stored OpenCL
program binary that lets a second load skip the build, lazy imports of the device
APIs, and the error for an op without a device kernel."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import make_node_model
from monolib.runtime.cuda_module import CUDAModule
from monolib.runtime.opencl_module import OpenCLModule

RNG = np.random.default_rng(3)
X = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)


def conv_model():
    return make_node_model("Conv", {"x": X, "w": W}, {"pads": [1, 1, 1, 1]},
                           constant_inputs=["w"])


def conv_reference() -> np.ndarray:
    pad = np.pad(X, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(pad, (3, 3), axis=(2, 3))  # 1,3,8,8,3,3
    return np.einsum("nchwij,ocij->nohw", win, W)


@pytest.mark.parametrize("cls", [OpenCLModule, CUDAModule])
def test_round_trip_byte_for_byte(cls):
    funcs = [{"name": "k0", "node": 0, "items": 12}, {"name": "k1", "node": 1, "items": 3}]
    mod = cls("kernel text \u00e9", funcs, {"b|dev": b"\x00\x01bin", "a|dev": b"xyz"}, arch="sm_80")
    data = mod.save_to_bytes()
    back = cls.load(data)
    assert back.save_to_bytes() == data
    assert (back.source, back.functions, back.binaries, back.meta) == (
        mod.source, funcs, {"a|dev": b"xyz", "b|dev": b"\x00\x01bin"}, {"arch": "sm_80"})


def test_corrupt_payloads_are_container_errors():
    data = OpenCLModule("src", [{"name": "k0", "node": 0, "items": 1}]).save_to_bytes()
    with pytest.raises(monolib.ContainerError, match="not a monolib device module"):
        OpenCLModule.load(b"XXXXXXXX" + data[8:])
    with pytest.raises(monolib.ContainerError, match="truncated"):
        OpenCLModule.load(data[:5])
    with pytest.raises(monolib.ContainerError, match="outside"):
        OpenCLModule.load(data[:-1])  # the source blob runs past the end
    with pytest.raises(monolib.ContainerError, match="type 'opencl'"):
        CUDAModule.load(data)


def test_runtime_import_loads_no_device_api():
    code = ("import sys, monolib, monolib.runtime\n"
            "bad = [m for m in sys.modules if m.startswith(('pyopencl', 'cuda.bindings'))]\n"
            "assert not bad, bad\n"
            "assert monolib.opencl(1) == monolib.Device('opencl', 1)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_op_without_a_kernel_is_named():
    model = make_node_model("Gather", {"x": X, "i": np.array([2, 0], np.int64)}, {"axis": 1},
                            constant_inputs=["i"])
    with pytest.raises(monolib.UnsupportedOpError, match=r"Gather .*no opencl kernel.*Conv"):
        monolib.compile(model, target="opencl")


def test_stored_binary_skips_the_build(need_opencl, tmp_path, fresh_device_run):
    factory = monolib.compile(conv_model(), target="opencl")
    dev = factory.lib.imported_modules[0]
    key = dev.build_binary()
    assert list(dev.binaries) == [key] and dev.last_build == "source"
    path = factory.export_library(str(tmp_path / "conv.so"))
    (y,), info = fresh_device_run(path, {"x": X})
    assert info["last_build"] == "binary"
    np.testing.assert_allclose(y, conv_reference(), rtol=0, atol=1e-4)


def test_refused_binary_falls_back_to_source(need_opencl):
    factory = monolib.compile(conv_model(), target="opencl")
    dev = factory.lib.imported_modules[0]
    dev.binaries[dev.build_binary()] = b"not a program binary"
    gm = monolib.GraphModule(factory["default"](monolib.opencl()))
    gm.run(x=X)
    assert dev.last_build == "source"
    np.testing.assert_allclose(gm.get_output(0).numpy(), conv_reference(), rtol=0, atol=1e-4)


def test_missing_device_index_is_named(need_opencl):
    from monolib.errors import DeviceUnavailableError

    factory = monolib.compile(conv_model(), target="opencl")
    with pytest.raises(DeviceUnavailableError, match="no OpenCL device 99"):
        factory["default"](monolib.opencl(99))


def test_params_given_later_are_uploaded_again(need_opencl):
    factory = monolib.compile(conv_model(), target="opencl")
    bare = factory.remove_params()
    gm = monolib.GraphModule(bare["default"](monolib.opencl()))
    with pytest.raises(monolib.InputError, match="no weights"):
        gm.run(x=X)
    weights = factory.get_params()
    gm.load_params(weights)
    gm.run(x=X)
    np.testing.assert_allclose(gm.get_output(0).numpy(), conv_reference(), rtol=0, atol=1e-4)
    gm.load_params({k: np.zeros_like(v) for k, v in weights.items()})
    gm.run(x=X)
    assert not gm.get_output(0).numpy().any()


def test_debug_executor_reads_each_op_on_the_device(need_opencl):
    from monolib.runtime.debug_executor import GraphModuleDebug

    model = make_node_model("Conv", {"x": X, "w": W}, {"pads": [1, 1, 1, 1]},
                            constant_inputs=["w"])
    factory = monolib.compile(model, target="opencl")
    dbg = GraphModuleDebug(factory["default"](monolib.opencl()))
    dbg.set_input(x=X)
    np.testing.assert_allclose(dbg.debug_get_output(0).numpy(), conv_reference(), rtol=0,
                               atol=1e-4)
    table = dbg.profile(repeat=2)
    assert [r.ops[0] for r in table] == ["Conv"] and table[0].time_ms > 0


def test_separate_artifacts_run_on_the_device(need_opencl, tmp_path):
    from monolib.runtime import graph_executor

    factory = monolib.compile(conv_model(), target="opencl")
    graph = factory.save_graph_json(tmp_path / "conv.json")
    lib_path = factory.remove_params().export_library(str(tmp_path / "conv.so"))
    lib = monolib.load_module(lib_path).imported_modules[0]  # the library module
    monolib.save_params(factory.get_params(), str(tmp_path / "conv.safetensors"))
    with open(graph, encoding="utf-8") as f:
        text = f.read()
    gm = graph_executor.create(text, lib, monolib.opencl(),
                               params=str(tmp_path / "conv.safetensors"))
    gm.run(x=X)
    np.testing.assert_allclose(gm.get_output(0).numpy(), conv_reference(), rtol=0, atol=1e-4)
