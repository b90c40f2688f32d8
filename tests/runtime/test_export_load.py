"""export_library -> load_module -> GraphModule on the hand-written tiny library."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tinylib import B, W, reference, tiny_factory, tiny_graph, tiny_source

import monolib
from monolib.export.csource import CSourceModule
from monolib.runtime import (
    ContainerError,
    DSOModule,
    ExecutionError,
    ExportError,
    FunctionNotFoundError,
    GraphExecutorFactoryModule,
    GraphModule,
    InputError,
    LibraryLoadError,
    Module,
    UnknownTypeKeyError,
    cpu,
    load_module,
)
from monolib.abi.binfmt import find_container
from monolib.abi.container import Container, pack_container
from monolib.abi.names import CONTAINER_END, CONTAINER_START

RNG = np.random.default_rng(0)


def x_input() -> np.ndarray:
    return RNG.standard_normal((2, 3)).astype(np.float32)


def run(mod: Module, x: np.ndarray) -> np.ndarray:
    gm = GraphModule(mod["default"](cpu()))
    gm.set_input("x", x)
    gm.run()
    return gm.get_output(0).numpy()


def test_runs_before_export_from_csource():
    x = x_input()
    np.testing.assert_allclose(run(tiny_factory(), x), reference(x), rtol=1e-6)


def test_export_then_load_returns_factory_root(tiny_lib):
    mod = load_module(tiny_lib)
    assert mod.type_key == "graph_executor_factory"
    (lib,) = mod.imported_modules
    assert isinstance(lib, DSOModule) and lib.type_key == "library"
    x = x_input()
    np.testing.assert_allclose(run(mod, x), reference(x), rtol=1e-6)
    assert mod["get_graph_json"]()["name"] == "tiny"


def test_nothing_written_beside_the_output(tmp_path):
    out = tiny_factory().export_library(str(tmp_path / "model"))
    assert out == str(tmp_path / "model.so")
    assert sorted(os.listdir(tmp_path)) == ["model.so"]


def test_get_params_are_read_only_views_of_the_mapping(tiny_lib):
    mod = load_module(tiny_lib)
    params = mod.get_params()
    np.testing.assert_array_equal(params["w"], W)
    np.testing.assert_array_equal(params["b"], [B])
    dso = mod.imported_modules[0]
    start = dso.symbol_address(CONTAINER_START)
    end = dso.symbol_address(CONTAINER_END)
    for arr in (mod.params, params["w"]):
        assert start <= arr.ctypes.data < end, "params were copied at load"
        assert not arr.flags.writeable
    with pytest.raises(ValueError):
        params["w"][0, 0] = 1.0  # would segfault if the view were writeable
    assert mod.params.ctypes.data % 4096 == 0


def test_big_params_in_place_and_verify(big_lib):
    mod = load_module(big_lib, verify=True)
    big = mod.get_params()["big"]
    assert big.nbytes == 3 << 20
    np.testing.assert_array_equal(big[:300], np.arange(300).astype(np.uint8))
    start = mod.imported_modules[0].symbol_address(CONTAINER_START)
    assert big.ctypes.data - start < (4 << 20)


def corrupt(path: str, out: str, where: str, delta: int = 0) -> str:
    data = bytearray(Path(path).read_bytes())
    off, _, _ = find_container(data, path)
    c = Container(bytes(data[off:]))
    if where == "manifest":
        pos = off + int.from_bytes(data[off + 24 : off + 32], "little") + 5
    else:
        mod, name = where.split(":")
        sec = next(s for s in c.modules[int(mod)].sections if s.name == name)
        pos = off + sec.offset + delta
    data[pos] ^= 0xFF
    with open(out, "wb") as f:
        f.write(data)
    return out


def test_flipped_byte_in_manifest_or_small_section(tiny_lib, tmp_path):
    bad = corrupt(tiny_lib, str(tmp_path / "m.so"), "manifest")
    with pytest.raises(ContainerError, match=r"m\.so.*manifest.*SHA-256"):
        load_module(bad)
    bad = corrupt(tiny_lib, str(tmp_path / "g.so"), "0:graph", 3)
    with pytest.raises(ContainerError, match=r"g\.so.*'graph'.*SHA-256"):
        load_module(bad)


def test_flipped_byte_in_large_section_found_by_verify(big_lib, tmp_path):
    bad = corrupt(big_lib, str(tmp_path / "p.so"), "0:params", 200_000)
    load_module(bad)  # plain load is O(1) in the weights: not hashed
    with pytest.raises(ContainerError, match=r"'params'.*SHA-256"):
        load_module(bad, verify=True)


def test_foreign_and_broken_files(tiny_lib, tmp_path):
    text = tmp_path / "notes.so"
    text.write_text("just some text\n")
    ls = tmp_path / "ls.so"
    ls.write_bytes(Path("/bin/ls").read_bytes())
    plain = tmp_path / "plain.so"
    from monolib.export.toolchain import link_shared

    src = tmp_path / "p.c"
    src.write_text("int f(void) { return 1; }\n")
    link_shared([str(src)], str(plain))
    trunc = tmp_path / "trunc.so"
    trunc.write_bytes(Path(tiny_lib).read_bytes()[:5000])
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    cases = [
        (tmp_path / "missing.so", "cannot open"),
        (text, "not a shared library"),
        (ls, "no .monolib section"),
        (plain, "no .monolib section"),
        (trunc, "truncated"),
        (empty, "empty"),
        (tmp_path, "not a regular file"),
    ]
    for path, message in cases:
        with pytest.raises(LibraryLoadError, match=message) as err:
            load_module(str(path))
        assert str(path) in str(err.value)


def test_truncated_anywhere_never_crashes(tiny_lib, tmp_path):
    data = Path(tiny_lib).read_bytes()
    for cut in (16, 63, 64, 200, 4096, 8192 + 100, len(data) // 2, len(data) - 1):
        path = tmp_path / f"cut{cut}.so"
        path.write_bytes(data[:cut])
        with pytest.raises(monolib.MonolibError):
            load_module(str(path))


def test_load_from_bytes(tiny_lib):
    mod = load_module(Path(tiny_lib).read_bytes())
    x = x_input()
    np.testing.assert_allclose(run(mod, x), reference(x), rtol=1e-6)
    with pytest.raises(LibraryLoadError, match="<bytes>"):
        load_module(b"garbage" * 10)


def test_atomic_export_on_compile_failure(tmp_path):
    graph, params = tiny_graph()
    broken = GraphExecutorFactoryModule(graph, params, CSourceModule("this is not C;"))
    target = tmp_path / "out.so"
    with pytest.raises(monolib.ToolchainError, match="failed"):
        broken.export_library(str(target))
    assert os.listdir(tmp_path) == []


def test_atomic_export_keeps_previous_file(tmp_path):
    target = tmp_path / "out.so"
    target.write_bytes(b"old")
    graph, params = tiny_graph()
    broken = GraphExecutorFactoryModule(graph, params, CSourceModule("not C"))
    with pytest.raises(monolib.ToolchainError):
        broken.export_library(str(target))
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.so"]


def test_missing_compiler_is_a_toolchain_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(monolib.ToolchainError, match="apt-get install gcc"):
        tiny_factory().export_library(str(tmp_path / "a.so"))
    monkeypatch.setenv("CC", "no-such-cc-xyz")
    with pytest.raises(monolib.ToolchainError, match="no-such-cc-xyz"):
        tiny_factory().export_library(str(tmp_path / "a.so"))
    assert os.listdir(tmp_path) == []


def test_fcompile_hook_and_progress(tmp_path):
    calls, steps = [], []

    def fcompile(output, files, target):
        from monolib.export.toolchain import link_shared

        calls.append((os.path.basename(output), [os.path.splitext(f)[1] for f in files]))
        link_shared(files, output, target)

    out = tiny_factory().export_library(
        str(tmp_path / "f.so"), fcompile=fcompile, progress=steps.append
    )
    assert calls and calls[0][1] == [".c", ".s"]
    assert "compile and link" in steps and steps[0] == "collect modules"
    assert steps[-1] == "finish"
    x = x_input()
    np.testing.assert_allclose(run(load_module(out), x), reference(x), rtol=1e-6)


def test_two_library_modules_is_an_export_error(tmp_path):
    f = tiny_factory()
    f.import_module(CSourceModule(tiny_source()))
    with pytest.raises(ExportError, match="2 modules that compile to the library"):
        f.export_library(str(tmp_path / "two.so"))
    assert os.listdir(tmp_path) == []


def test_reexporting_a_loaded_library_is_an_export_error(tiny_lib, tmp_path):
    with pytest.raises(ExportError, match="cannot be re-exported"):
        load_module(tiny_lib).export_library(str(tmp_path / "again.so"))


def test_legacy_container_without_import_tree(tmp_path):
    """A hand-built legacy container: the DSO is the root, every module its import."""
    from monolib.export.embed import write_embed_asm
    from monolib.export.toolchain import link_shared

    graph, params = tiny_graph()
    factory = GraphExecutorFactoryModule(graph, params)
    blob = pack_container(
        [("library", {}), (factory.type_key, factory.save_sections())], import_tree=None
    )
    (tmp_path / "container.bin").write_bytes(blob)
    (tmp_path / "lib.c").write_text(tiny_source())
    asm = write_embed_asm(str(tmp_path), "container.bin")
    link_shared([str(tmp_path / "lib.c"), asm], str(tmp_path / "legacy.so"), cwd=str(tmp_path))
    root = load_module(str(tmp_path / "legacy.so"))
    assert isinstance(root, DSOModule)
    (fac,) = root.imported_modules
    assert fac.type_key == "graph_executor_factory"
    assert fac.lib is root  # the loader hands the DSO to the factory, without a cycle
    x = x_input()
    np.testing.assert_allclose(run(fac, x), reference(x), rtol=1e-6)


def test_unknown_type_key_names_it(tmp_path):
    class Odd(Module):
        type_key = "odd_unregistered_kind"

        def save_to_bytes(self):
            return b"x"

    f = tiny_factory()
    f.import_module(Odd())
    out = f.export_library(str(tmp_path / "odd.so"))
    with pytest.raises(UnknownTypeKeyError, match="odd_unregistered_kind"):
        load_module(out)


def test_input_errors_list_what_the_model_expects():
    gm = GraphModule(tiny_factory()["default"](cpu()))
    with pytest.raises(InputError, match=r"unknown input 'z'.*x: float32\[2, 3\]"):
        gm.set_input("z", x_input())
    with pytest.raises(InputError, match=r"shape \[3, 2\].*expects \[2, 3\]"):
        gm.set_input("x", np.zeros((3, 2), np.float32))
    with pytest.raises(InputError, match="dtype float64.*float32"):
        gm.set_input("x", np.zeros((2, 3)))
    with pytest.raises(InputError, match="index 5 out of range"):
        gm.set_input(5, x_input())
    with pytest.raises(InputError, match="output index 1"):
        gm.get_output(1)


def test_graph_module_api():
    gm = GraphModule(tiny_factory()["default"](cpu()))
    assert gm.get_num_inputs() == 1 and gm.get_num_outputs() == 1
    assert gm.get_input_info() == ({"x": (2, 3)}, {"x": "float32"})
    x = x_input()
    gm.run(x=x)
    out = gm.get_output(0)
    assert out.shape == (2, 3) and out.dtype == "float32"
    first = out.numpy()
    gm.run()  # inputs are not overwritten: same result
    np.testing.assert_array_equal(gm.get_output(0).numpy(), first)
    gm.set_input(0, [[1, 2, 3], [4, 5, 6]])  # a list takes the model's dtype
    gm.run()
    want = reference(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(gm.get_input("x")), np.arange(1, 7).reshape(2, 3))


def test_dlpack_input():
    class OnlyDLPack:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    gm = GraphModule(tiny_factory()["default"](cpu()))
    x = x_input()
    gm.set_input("x", OnlyDLPack(x))
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)
    assert np.from_dlpack(gm.get_output(0)).shape == (2, 3)


def test_executors_have_their_own_arena(tiny_lib):
    mod = load_module(tiny_lib)
    a, b = GraphModule(mod["default"](cpu())), GraphModule(mod["default"](cpu()))
    assert a.executor.arena.ctypes.data != b.executor.arena.ctypes.data
    assert a.executor.arena.ctypes.data % 64 == 0
    xa, xb = x_input(), x_input()
    a.run(x=xa)
    b.run(x=xb)
    np.testing.assert_allclose(a.get_output(0).numpy(), reference(xa), rtol=1e-6)
    np.testing.assert_allclose(b.get_output(0).numpy(), reference(xb), rtol=1e-6)


def test_nonzero_status_is_an_execution_error():
    gm = GraphModule(tiny_factory(status=7)["default"](cpu()))
    with pytest.raises(ExecutionError, match="returned 7"):
        gm.run(x=x_input())


def test_run_op_and_functions():
    f = tiny_factory()
    ex = f["default"](cpu())
    ex.input_view(0)[:] = 2.0
    ex.run_op(0)
    np.testing.assert_allclose(ex.output_view(0), 2.0 * W + B)
    with pytest.raises(InputError, match="op index 3"):
        ex.run_op(3)
    num_ops = f.get_function("monolib_num_ops", query_imports=True)
    num_ops.restype = ctypes.c_int32
    assert num_ops() == 1
    with pytest.raises(FunctionNotFoundError, match="no function 'nope'"):
        f["nope"]


def test_bad_graph_json_is_rejected():
    graph, params = tiny_graph()
    graph["outputs"][0]["offset"] = 120
    with pytest.raises(ContainerError, match="'y'.*outside the arena"):
        GraphExecutorFactoryModule(graph, params)
    graph, params = tiny_graph()
    graph["format"] = "other"
    with pytest.raises(ContainerError, match="format"):
        GraphExecutorFactoryModule(graph, params)


def test_unaligned_params_are_aligned():
    graph, params = tiny_graph()
    raw = np.zeros(params.nbytes + 1, np.uint8)
    raw[1:] = params
    f = GraphExecutorFactoryModule(graph, raw[1:])
    assert f.params.ctypes.data % 64 == 0
    np.testing.assert_array_equal(f.get_params()["w"], W)


def test_benchmark_and_profile(tiny_lib):
    gm = GraphModule(load_module(tiny_lib)["default"](cpu()))
    gm.set_input("x", x_input())
    res = gm.benchmark(repeat=5, number=3)
    assert len(res.results) == 5 and 0 < res.min <= res.median <= res.max
    assert "median" in str(res)
    (op,) = gm.executor.profile(repeat=2)
    assert (op["index"], op["name"], op["op"], op["fused"]) == (0, "Mul_0", "Mul", ["Add"])
    assert op["time_ms"] >= 0


@pytest.mark.parametrize("codec", ["zlib", "zstd"])
def test_compressed_container_round_trip(tmp_path, codec):
    path = tiny_factory(big_bytes=1 << 16).export_library(str(tmp_path / "z.so"), compress=codec)
    mod = load_module(path, verify=True)
    assert mod.params.ctypes.data % 64 == 0
    big = mod.get_params()["big"]
    np.testing.assert_array_equal(big, np.arange(1 << 16).astype(np.uint8))
    x = x_input()
    np.testing.assert_allclose(run(mod, x), reference(x), rtol=1e-6)


def test_import_cycle_is_an_export_error(tmp_path):
    f = tiny_factory()
    f.imported_modules[0].import_module(f)
    with pytest.raises(FunctionNotFoundError):
        f.get_function("nope", query_imports=True)  # the search terminates
    with pytest.raises(ExportError, match="import cycle"):
        f.export_library(str(tmp_path / "cyc.so"))
    assert os.listdir(tmp_path) == []


def test_tar_export_links_later(tmp_path):
    import tarfile

    from monolib.export.toolchain import link_shared

    out = tiny_factory().export_library(str(tmp_path / "model.tar"))
    assert out.endswith("model.tar") and os.listdir(tmp_path) == ["model.tar"]
    with pytest.raises(LibraryLoadError, match="tar archive of object files"):
        load_module(out)
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["container.o", "lib.o"]
        tar.extractall(tmp_path / "objs", filter="data")
    objs = [str(tmp_path / "objs" / n) for n in ("lib.o", "container.o")]
    link_shared(objs, str(tmp_path / "linked.so"))
    x = x_input()
    y = run(load_module(str(tmp_path / "linked.so")), x)
    np.testing.assert_allclose(y, reference(x), rtol=1e-6)


def test_io_failure_is_an_export_error(tmp_path, monkeypatch):
    import errno

    import monolib.export.library as export

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "write_container", full)
    with pytest.raises(ExportError, match=r"full\.so: export failed.*No space left"):
        tiny_factory().export_library(str(tmp_path / "full.so"))
    assert os.listdir(tmp_path) == []


def test_load_params_swaps_weights_per_executor(tiny_lib, tmp_path):
    from monolib.errors import ParamsInputError
    from monolib.runtime.params import save_params

    mod = load_module(tiny_lib)
    a, b = GraphModule(mod["default"](cpu())), GraphModule(mod["default"](cpu()))
    w2 = np.full((2, 3), 3.0, np.float32)
    path = str(tmp_path / "w2.safetensors")
    save_params({"w": w2}, path)
    b.load_params(path)
    x = x_input()
    a.run(x=x)
    b.run(x=x)
    np.testing.assert_allclose(a.get_output(0).numpy(), reference(x), rtol=1e-6)
    np.testing.assert_allclose(b.get_output(0).numpy(), x * w2 + B, rtol=1e-6)
    b.load_params({"b": np.array([1.0], np.float32)})  # the others keep their values (TVM)
    b.run()
    np.testing.assert_allclose(b.get_output(0).numpy(), x * w2 + 1.0, rtol=1e-6)
    with pytest.raises(ParamsInputError, match="'w': got"):
        b.load_params({"w": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(mod.get_params()["w"], W)  # the mapping is untouched


def test_relative_path_is_the_file_not_a_library_search(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tiny_factory().export_library("rel") == "rel.so"
    assert os.listdir(".") == ["rel.so"]
    x = x_input()
    np.testing.assert_allclose(run(load_module("rel.so"), x), reference(x), rtol=1e-6)


def test_separate_artifacts_create_and_devices():
    from monolib.runtime.graph_executor import create

    graph, params = tiny_graph()
    gm = create(graph, CSourceModule(tiny_source()), cpu(), params=params)
    x = x_input()
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)
    gm2 = GraphModule(tiny_factory())  # a factory runs on cpu()
    assert gm2.executor.device == monolib.Device("cpu", 0) and str(gm2.executor.device) == "cpu(0)"
    with pytest.raises(InputError, match="runs on cpu, not opencl"):
        tiny_factory().default(monolib.Device("opencl", 0))
    with pytest.raises(TypeError, match="GraphExecutor"):
        GraphModule(object())


def _mode_of_new_file(path: Path, mode: int) -> int:
    """The mode the kernel gives a new file created with ``mode`` under the umask."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    try:
        return path.stat().st_mode & 0o7777
    finally:
        path.unlink()


def test_exported_file_mode_follows_the_umask(tmp_path):
    out = Path(tiny_factory().export_library(str(tmp_path / "m.so")))
    assert out.stat().st_mode & 0o7777 == _mode_of_new_file(tmp_path / "probe", 0o755)


def test_exported_file_mode_under_a_strict_umask(tmp_path):
    # a fresh process with umask 077: the library is the owner's only
    script = (
        "import sys; sys.path.insert(0, sys.argv[2]); from tinylib import tiny_factory; "
        "tiny_factory().export_library(sys.argv[1])"
    )
    out = tmp_path / "strict.so"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run(
        [sys.executable, "-c", script, str(out), str(Path(__file__).parent)],
        check=True, env=env, timeout=300, preexec_fn=lambda: os.umask(0o077),
    )
    assert out.stat().st_mode & 0o7777 == 0o700


def test_no_umask_call_in_the_source():
    # os.umask(0) to learn the umask makes every file another thread creates meanwhile
    # world-writable: the source learns a mode from a file it creates instead
    src = Path(monolib.__file__).parent
    hits = [str(p) for p in src.rglob("*.py") if "umask(" in p.read_text(encoding="utf-8")]
    assert hits == []


def test_export_without_a_registered_exporter_is_an_export_error(tmp_path, monkeypatch):
    from monolib.runtime import module

    monkeypatch.setattr(module, "_EXPORTER", None)
    with pytest.raises(ExportError, match="no exporter registered; import monolib.export"):
        tiny_factory().export_library(str(tmp_path / "m.so"))
    assert os.listdir(tmp_path) == []
