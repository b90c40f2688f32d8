"""The process-wide thread count (``set_num_threads``): its registry of libraries is
filled and read under a lock, so executors made in many threads while another thread
sets the count neither raise nor miss the count. And the other registry an executor
meets: the executor class by the graph's device."""

from __future__ import annotations

import os
import threading

import pytest

from monolib.runtime import GraphModule, InputError, Module, cpu, load_module, set_num_threads
from monolib.runtime import threads


class _Setter:
    """Stands in for a library's ``monolib_set_num_threads`` (records its calls)."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.restype = self.argtypes = None

    def __call__(self, n: int) -> int:
        self.calls.append(n)
        return 0


class _FakeLibrary(Module):
    type_key = "test_fake_library"

    def __init__(self) -> None:
        super().__init__()
        self.setter = _Setter()

    def _get_own_function(self, name):
        return self.setter if name == "monolib_set_num_threads" else None


@pytest.fixture(autouse=True)
def _restore_thread_count():
    yield
    set_num_threads(len(os.sched_getaffinity(0)))


def _hammer(register, rounds: int = 300, workers: int = 8) -> list[BaseException]:
    """``workers`` threads each call ``register(i)`` ``rounds`` times while one more
    thread keeps calling set_num_threads; the exceptions any of them raised."""
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001  (collected for the assert)
                errors.append(exc)

        return run

    def setter():
        n = 0
        while not done.is_set():
            set_num_threads(1 + n % 4)
            n += 1

    def worker():
        for i in range(rounds):
            register(i)

    turner = threading.Thread(target=guarded(setter))
    pool = [threading.Thread(target=guarded(worker)) for _ in range(workers)]
    turner.start()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    done.set()
    turner.join()
    return errors


def test_registering_libraries_while_setting_the_count_is_safe():
    libs: list[_FakeLibrary] = []
    lock = threading.Lock()

    def register(_):
        lib = _FakeLibrary()
        with lock:
            libs.append(lib)  # kept alive: the registry holds libraries weakly
        threads.register_library(lib)

    assert _hammer(register) == []
    assert len(libs) == 8 * 300
    set_num_threads(3)
    # every library registered got the last count: none was missed by the loop
    assert all(lib.setter.calls[-1] == 3 for lib in libs)


def test_a_library_registered_after_a_count_gets_it():
    set_num_threads(2)
    lib = _FakeLibrary()
    threads.register_library(lib)
    threads.register_library(lib)  # once per library
    assert lib.setter.calls == [2]


def test_making_executors_in_threads_while_setting_the_count(tiny_lib):
    factory = load_module(tiny_lib)
    assert _hammer(lambda _: GraphModule(factory["default"](cpu())), rounds=50) == []


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_count_is_an_input_error(bad):
    with pytest.raises(InputError, match="integer >= 1"):
        set_num_threads(bad)


def test_executors_are_found_by_the_graphs_device():
    from tinylib import tiny_factory

    from monolib.runtime import ExecutionError, GraphExecutor, GraphExecutorFactoryModule
    from monolib.runtime.device_executor import DeviceGraphExecutor
    from monolib.runtime.factory import _EXECUTORS

    assert _EXECUTORS == {"cpu": GraphExecutor, "opencl": DeviceGraphExecutor,
                          "cuda": DeviceGraphExecutor}
    factory = tiny_factory()
    graph = factory.get_graph_json()
    graph["device"] = "vulkan"
    with pytest.raises(ExecutionError, match="'vulkan', which has no registered executor"):
        GraphExecutorFactoryModule(graph, factory.params, factory.lib).default()
