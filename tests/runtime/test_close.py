"""Module.close: a library loaded, run and closed many times (from a file and from
bytes) leaks no file descriptor, mapping or thread; a closed module and its executors
raise ModuleClosedError; the library stays loaded while something still points into
it (a view of its weights, a function pointer, a run under way in another thread)
and is unloaded when that goes."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import monolib
from monolib.runtime import GraphModule, ModuleClosedError, cpu, load_module, set_num_threads
from monolib.runtime import threads
from monolib.runtime.dso import DSOModule

N = 192  # a MatMul of N^3 = 7M multiply-adds: split over 2 threads


def _model():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(W, "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, N])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, N])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def mm_lib(tmp_path_factory) -> str:
    """A compiled library whose one MatMul (7M multiply-adds) splits over threads."""
    pytest.importorskip("onnx")
    return monolib.compile(_model()).export_library(str(tmp_path_factory.mktemp("mm") / "mm.so"))


@pytest.fixture(autouse=True)
def _two_threads():
    set_num_threads(2)
    yield
    set_num_threads(len(os.sched_getaffinity(0)))


X = np.random.default_rng(1).standard_normal((N, N)).astype(np.float32)
W = np.random.default_rng(0).standard_normal((N, N)).astype(np.float32)


def _counts() -> tuple[int, int, int]:
    """Open descriptors, mappings, threads of this process."""
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return len(os.listdir("/proc/self/fd")), maps, len(os.listdir("/proc/self/task"))


def _dso(root) -> DSOModule:
    return next(m for m in root._tree() if isinstance(m, DSOModule))


def _run(root) -> tuple[GraphModule, np.ndarray]:
    gm = GraphModule(root["default"](cpu()))
    gm.set_input("x", X)
    gm.run()
    return gm, gm.get_output(0).numpy()


def _expected(path: str) -> np.ndarray:
    with load_module(path) as lib:
        return _run(lib)[1]


@pytest.mark.parametrize("source", ["path", "bytes"])
def test_load_run_close_200_times_leaks_nothing(mm_lib, source):
    src = mm_lib if source == "path" else open(mm_lib, "rb").read()
    want = _expected(mm_lib)
    np.testing.assert_allclose(want, np.maximum(X @ W, 0), rtol=1e-4, atol=1e-3)
    tasks_running = 0

    def once() -> None:
        nonlocal tasks_running
        lib = load_module(src)
        gm, y = _run(lib)
        assert np.array_equal(y, want)
        tasks_running = max(tasks_running, _counts()[2])
        dso = _dso(lib)
        lib.close()
        assert dso.unloaded and lib.closed and dso.closed
        with pytest.raises(ModuleClosedError):
            gm.run()

    once()  # the first load imports and maps what every later one shares
    gc.collect()
    before = _counts()
    # libraries other tests of this worker process still hold keep their memfds
    memfds = {fd for fd in os.listdir("/proc/self/fd") if "memfd" in _link(fd)}
    for _ in range(200):
        once()
    gc.collect()
    fds, maps, tasks = _counts()
    # the pool's worker ran (other tests' threads in this worker process may come and go)
    assert tasks_running >= before[2] + 1
    assert (fds, tasks) == (before[0], before[2])
    assert maps <= before[1] + 4  # 200 leaked loads would add ~1000 lines
    assert not [fd for fd in os.listdir("/proc/self/fd")
                if "memfd" in _link(fd) and fd not in memfds]


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _weights(path: str) -> np.ndarray:
    """The first param of the library, copied."""
    with load_module(path) as lib:
        return next(iter(lib.get_params().values())).copy()


def test_a_closed_module_and_its_executors_raise(mm_lib):
    lib = load_module(mm_lib)
    gm, _ = _run(lib)
    ex = lib["default"](cpu())
    dso = _dso(lib)
    assert threads.is_registered(dso)
    lib.close()
    lib.close()  # idempotent
    assert not threads.is_registered(dso)  # set_num_threads / set_spin no longer reach it
    set_num_threads(1)
    for call in (
        lambda: lib["default"],
        lambda: lib.default(),
        lambda: dso.get_function("monolib_run"),
        lambda: lib.get_function("monolib_run", query_imports=True),
        lambda: gm.run(),
        lambda: gm.set_input("x", X),
        lambda: ex.run(),
        lambda: ex.run_op(0),
    ):
        with pytest.raises(ModuleClosedError, match="closed"):
            call()
    assert ex.closed and ex.arena is None and ex.params is None  # the arena is released
    assert lib.graph_json["name"]  # what describes the graph is still readable


def test_with_statement_closes(mm_lib):
    with load_module(mm_lib) as lib:
        _run(lib)
        dso = _dso(lib)
    assert lib.closed and dso.unloaded


def test_a_view_of_the_weights_keeps_the_library_until_it_goes(mm_lib):
    fds = _counts()[0]
    lib = load_module(open(mm_lib, "rb").read())
    w = next(iter(lib.get_params().values()))  # a view into the mapped library
    dso = _dso(lib)
    lib.close()
    assert lib.closed and not dso.unloaded
    assert _counts()[0] == fds + 1  # the memfd is kept while the library is mapped
    assert np.array_equal(w, _weights(mm_lib))  # still readable: still mapped
    del w
    assert dso.unloaded and _counts()[0] == fds


def test_a_function_pointer_keeps_the_library_until_it_goes(mm_lib):
    lib = load_module(mm_lib)
    dso = _dso(lib)
    fn = dso.get_function("monolib_num_ops")
    lib.close()
    assert not dso.unloaded
    assert fn() == 1  # still callable: still loaded
    del fn
    gc.collect()  # a ctypes function pointer refers to itself: freed by a collection
    assert dso.unloaded


def test_close_while_another_thread_runs(mm_lib):
    """The runs under way finish on a live arena, the next raise, and the library is
    unloaded when the last run returns."""
    want = _expected(mm_lib)
    before = _counts()
    lib = load_module(open(mm_lib, "rb").read())
    gm, _ = _run(lib)
    dso = _dso(lib)
    started, outcome = threading.Event(), []

    def loop() -> None:
        try:
            while True:
                gm.run()
                started.set()
                outcome.append(np.array_equal(gm.get_output(0).numpy(), want))
        except ModuleClosedError:
            outcome.append("closed")

    t = threading.Thread(target=loop)
    t.start()
    assert started.wait(30)
    lib.close()
    t.join(30)
    assert outcome[-1] == "closed" and all(o is True for o in outcome[:-1])
    del gm
    gc.collect()
    assert dso.unloaded
    assert (_counts()[0], _counts()[2]) == (before[0], before[2])


def test_closing_one_of_two_loads_of_one_file_leaves_the_other(mm_lib):
    """dlopen counts the loads of one path: the other module (and the pool they share,
    whose workers close joined) keeps working, and is unloaded by its own close."""
    want = _expected(mm_lib)
    first, second = load_module(mm_lib), load_module(mm_lib)
    gm2, _ = _run(second)
    _run(first)
    first.close()
    assert _dso(first).unloaded  # its reference given back...
    gm2.run()  # ...the library stays for the other, its workers start again
    assert np.array_equal(gm2.get_output(0).numpy(), want)
    second.close()
    assert _dso(second).unloaded


def test_stop_threads_joins_the_workers_and_the_next_split_restarts_them(mm_lib):
    want = _expected(mm_lib)
    tasks = _counts()[2]
    with load_module(mm_lib) as lib:
        gm, _ = _run(lib)
        assert _counts()[2] == tasks + 1
        stop = _dso(lib).get_function("monolib_stop_threads")
        assert stop() == 0 and _counts()[2] == tasks
        gm.run()
        assert _counts()[2] == tasks + 1
        assert np.array_equal(gm.get_output(0).numpy(), want)
        del stop
    assert _counts()[2] == tasks
