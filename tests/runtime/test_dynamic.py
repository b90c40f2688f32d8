"""Run-time shapes in the runtime (issue 12): a hand-written library with run-time
dims ("dyn" of tinylib.py) run at many sizes, before and after export; the input
checks (bounds, step, rank, shared names) by type and message; get_input_info /
get_output_info; the debug executor; a format-1 library still loads; a device
executor refuses run-time dims."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from tinylib import dyn_factory, dyn_reference

import monolib
from monolib.abi.binfmt import find_container
from monolib.abi.container import FORMAT_VERSION, MAGIC
from monolib.errors import ExecutionError, InputError
from monolib.runtime import load_module
from monolib.runtime.debug_executor import GraphModuleDebug
from monolib.runtime.graph_module import GraphModule


def inputs(n: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=n).astype(np.float32),
        "v": rng.normal(size=n).astype(np.float32),
        "u": rng.normal(size=(2, k)).astype(np.float32),
    }


def check_run(gm: GraphModule, n: int, k: int) -> None:
    arrays = inputs(n, k, seed=n * 100 + k)
    gm.run(**arrays)
    want = dyn_reference(arrays["x"], arrays["v"], arrays["u"])
    for i, ref in enumerate(want):
        got = gm.get_output(i)
        assert got.shape == ref.shape, (i, n, k)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def dyn_lib(tmp_path_factory) -> str:
    return dyn_factory().export_library(str(tmp_path_factory.mktemp("dyn") / "dyn.so"))


SIZES = [(1, 4), (64, 32), (8, 16), (5, 12), (33, 4), (1, 32)]


def test_runs_at_every_size_within_bounds():
    gm = GraphModule(dyn_factory().default())
    for n, k in SIZES + SIZES[::-1]:  # growing and shrinking again
        check_run(gm, n, k)


def test_exported_library_runs_at_every_size(dyn_lib):
    mod = load_module(dyn_lib)
    gm = GraphModule(mod.default())
    for n, k in SIZES:
        check_run(gm, n, k)
    assert mod.graph_json["version"] == 2 and mod.head["symbols"][1]["step"] == 4


def test_specialization_is_reported():
    gm = GraphModule(dyn_factory().default())
    gm.run(**inputs(8, 16))
    assert gm.executor.shapes.specialized() == 0 and gm.get_output(3).numpy()[0] == 1
    gm.run(**inputs(8, 12))
    assert gm.executor.shapes.specialized() is None and gm.get_output(3).numpy()[0] == 0


def test_info_reports_bounded_dims():
    gm = GraphModule(dyn_factory().default())
    shapes, dtypes = gm.get_input_info()
    assert shapes == {"x": (("n", 1, 64),), "v": (("n", 1, 64),), "u": (2, ("k", 4, 32, 4))}
    assert dtypes == {"x": "float32", "v": "float32", "u": "float32"}
    shapes, _ = gm.get_output_info()
    assert shapes == {"y": (("n", 1, 64),), "z": ("2*n",), "t": (2, ("k", 4, 32, 4)), "q": (1,)}


def test_before_a_run_inputs_are_at_the_lower_bounds():
    gm = GraphModule(dyn_factory().default())
    assert gm.get_input("x").shape == (1,) and gm.get_input("u").shape == (2, 4)
    assert gm.get_output(0).shape == (0,) and gm.get_output(3).shape == (1,)
    gm.run()  # zeros of the smallest shapes
    assert gm.get_output(1).shape == (2,)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("x", np.zeros(65, np.float32), "input 'x' axis 0 (dim 'n') is 65, outside its bounds [1, 64]"),
        ("x", np.zeros(0, np.float32), "input 'x' axis 0 (dim 'n') is 0, outside its bounds [1, 64]"),
        ("u", np.zeros((2, 6), np.float32), "input 'u' axis 1 (dim 'k') is 6, outside its bounds [4, 32] step 4"),
        ("u", np.zeros((2, 36), np.float32), "(dim 'k') is 36, outside its bounds [4, 32] step 4"),
        ("u", np.zeros((3, 8), np.float32), "input 'u' axis 0 is 3, the model expects 2"),
        ("u", np.zeros(8, np.float32), "input 'u' has 1 dims [8], the model expects 2"),
        ("x", np.zeros(4, np.float64), "input 'x' has dtype float64"),
    ],
)  # fmt: skip
def test_bad_shapes_are_input_errors_before_anything_changes(name, value, message):
    gm = GraphModule(dyn_factory().default())
    good = inputs(4, 8)
    gm.set_input(**good)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):  # fmt: skip
        gm.set_input(**{**good, name: value})
    for key, arr in good.items():  # nothing was copied: the executor runs as it was
        np.testing.assert_array_equal(gm.get_input(key).numpy(), arr)
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), dyn_reference(**good)[0], rtol=1e-6)


def test_shared_dim_disagreeing_is_an_input_error_at_run():
    gm = GraphModule(dyn_factory().default())
    gm.set_input(**inputs(4, 8))
    gm.set_input(v=np.ones(5, np.float32))  # alone, in bounds
    with pytest.raises(InputError, match=r"inputs 'x' \(axis 0\) and 'v' \(axis 0\) share "
                       r"dim 'n' \[1, 64\] but are 4 and 5"):  # fmt: skip
        gm.run()
    gm.set_input(x=np.ones(5, np.float32))
    gm.run()
    assert gm.get_output(0).shape == (5,)


def test_a_symbol_repeated_within_one_input():
    from tinylib import DYN_C, dyn_graph

    from monolib.export.csource import CSourceModule
    from monolib.runtime import GraphExecutorFactoryModule

    graph, params = dyn_graph()
    graph["inputs"][2]["shape"] = ["k", "k"]
    graph["inputs"][2]["max_nbytes"] = 32 * 32 * 4
    graph["arena_bytes"] += 32 * 32 * 4
    graph["inputs"][2]["offset"] = 1984
    lib = CSourceModule(DYN_C, "c")
    gm = GraphModule(GraphExecutorFactoryModule(graph, params, lib).default())
    with pytest.raises(InputError, match=r"input 'u' axes 0 and 1 share dim 'k' \[4, 32\] "
                       r"step 4 but are 4 and 8"):  # fmt: skip
        gm.set_input(u=np.zeros((4, 8), np.float32))


def test_output_shape_the_slot_cannot_hold_is_an_execution_error():
    from tinylib import DYN_C, dyn_graph

    from monolib.export.csource import CSourceModule
    from monolib.runtime import GraphExecutorFactoryModule

    graph, params = dyn_graph()
    bad = DYN_C.replace("s[1] = 2 * SYM(0);", "s[1] = 1000;")
    gm = GraphModule(GraphExecutorFactoryModule(graph, params, CSourceModule(bad, "c")).default())
    with pytest.raises(ExecutionError, match=r"output 'z': the library wrote shape \[1000\]"):
        gm.run(**inputs(3, 4))


def test_debug_executor_evaluates_node_shapes():
    dbg = GraphModuleDebug(dyn_factory().default())
    arrays = inputs(6, 20)
    dbg.set_input(**arrays)
    y = dbg.debug_get_output("Mul_0").numpy()
    np.testing.assert_allclose(y, dyn_reference(**arrays)[0], rtol=1e-6)
    t = dbg.debug_get_output(1).numpy()
    assert t.shape == (2, 20)
    rows = dbg.profile(repeat=1)
    assert [r.shape for r in rows] == [("n",), (2, "k")]


def test_format_1_library_still_loads(tiny_lib, tmp_path):
    """A library written before format 2 (its header says 1) loads and runs."""
    from tinylib import reference

    from monolib.runtime.integrity import without_digest

    data = bytearray(open(tiny_lib, "rb").read())
    start = find_container(bytes(data))[0]
    assert data[start : start + 8] == MAGIC
    assert struct.unpack_from("<I", data, start + 8)[0] == FORMAT_VERSION == 2
    struct.pack_into("<I", data, start + 8, 1)
    old = tmp_path / "format1.so"
    old.write_bytes(without_digest(bytes(data)))  # nor had it a code digest
    mod = load_module(str(old))
    gm = GraphModule(mod.default())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)


def test_device_executor_refuses_run_time_dims():
    from tinylib import dyn_graph

    from monolib.runtime import GraphExecutorFactoryModule

    pytest.importorskip("monolib.runtime.device_executor")
    graph, params = dyn_graph()
    graph["device"] = "opencl"
    factory = GraphExecutorFactoryModule(graph, params)
    with pytest.raises(ExecutionError, match=r"graph 'dyn' has run-time dims \(n, k\): the opencl"):
        factory.default(monolib.opencl())
