"""set_spin / MONOLIB_SPIN_US / monolib_set_spin: how long the pool's workers spin
after a job. With 0 an idle worker burns no CPU (measured per thread from
/proc/self/task/*/schedstat), with a long spin it does; results are the same bits."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from test_close import X, _dso, _run, mm_lib  # noqa: F401  (the fixture)

from monolib.runtime import InputError, load_module, set_num_threads, set_spin
from monolib.runtime import threads


@pytest.fixture(autouse=True)
def _restore():
    set_num_threads(2)
    yield
    set_spin(300)
    threads._spin_us = None  # libraries loaded later keep their own default again
    set_num_threads(len(os.sched_getaffinity(0)))


def _spin_of(lib) -> int:
    fn = _dso(lib).get_function("monolib_set_spin")
    return fn(-1)  # a query


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_bad_spin_is_an_input_error(bad):
    with pytest.raises(InputError, match="set_spin: microseconds must be an integer >= 0"):
        set_spin(bad)


def test_set_spin_reaches_every_library_and_later_ones(mm_lib):
    with load_module(mm_lib) as lib:
        assert _spin_of(lib) == 300  # the default
        _run(lib)  # an executor registers the library
        assert set_spin(0) == 0 and _spin_of(lib) == 0
        assert set_spin(10**9) == 10**6 and _spin_of(lib) == 10**6  # capped
        set_spin(123)
        assert _spin_of(lib) == 123
    with load_module(open(mm_lib, "rb").read()) as lib:  # a fresh copy: its own pool
        _run(lib)
        assert _spin_of(lib) == 123


def test_spin_env_is_read_at_load(mm_lib, monkeypatch):
    monkeypatch.setenv("MONOLIB_SPIN_US", "77")
    with load_module(open(mm_lib, "rb").read()) as lib:  # a fresh copy: constructor runs
        assert _spin_of(lib) == 77
    monkeypatch.setenv("MONOLIB_SPIN_US", "junk")
    with load_module(open(mm_lib, "rb").read()) as lib:
        assert _spin_of(lib) == 300


def _cpu_ns(tids: set[str]) -> int:
    """CPU time of the threads ``tids`` in ns (one that ended meanwhile counts 0)."""
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total


def test_no_spin_leaves_idle_workers_asleep(mm_lib):
    """After a run, a worker spinning 1 s burns CPU while the process idles; with spin
    0 it sleeps at once. Both give the same bits.

    The threads watched are all those started since the library was loaded, read again
    after each run (another thread of the process, Ray's for one, may start meanwhile:
    it only adds its own little CPU). Each setting is tried three times and the clearest
    try counts (most CPU spinning, least asleep): on a loaded machine a run may stay on
    the calling thread (the pool backs off from a worker another process delayed, and
    then gives its worker no job to spin after)."""
    before = set(os.listdir("/proc/self/task"))
    with load_module(open(mm_lib, "rb").read()) as lib:
        gm, _ = _run(lib)
        assert len(set(os.listdir("/proc/self/task")) - before) >= 1  # the pool's worker
        burnt: dict[int, list[int]] = {0: [], 10**6: []}
        outputs = {}
        for spin in (10**6, 0) * 3:
            set_spin(spin)
            gm.set_input("x", X)
            gm.run()
            outputs[spin] = gm.get_output(0).numpy()
            workers = set(os.listdir("/proc/self/task")) - before
            t0 = _cpu_ns(workers)
            time.sleep(0.2)  # idle, as a server between requests
            burnt[spin].append(_cpu_ns(workers) - t0)
        assert np.array_equal(outputs[0], outputs[10**6])
        assert min(burnt[0]) < 3e6, burnt  # asleep: nothing but its wake-up
        assert max(burnt[10**6]) > 10e6, burnt  # spinning (even with other processes about)


def test_running_another_library_sends_the_last_ones_spinning_workers_to_sleep(mm_lib):
    """Two libraries run in turns: each run sends the other library's workers, spinning
    for 1 s after its job, to sleep (monolib_sleep_threads through threads.switch_to),
    so they leave the cores to the library that runs. Running the same library again
    calls nothing. Results are the same bits."""
    set_spin(10**6)
    before = set(os.listdir("/proc/self/task"))
    with load_module(open(mm_lib, "rb").read()) as a, \
            load_module(open(mm_lib, "rb").read()) as b:  # two copies: two pools
        gm_a, _ = _run(a)
        workers_a = set(os.listdir("/proc/self/task")) - before
        gm_b, _ = _run(b)
        workers_b = set(os.listdir("/proc/self/task")) - before - workers_a
        assert len(workers_a) == len(workers_b) == 1
        entry_a, entry_b = gm_a.executor._pool, gm_b.executor._pool
        calls = []
        for name, entry in (("a", entry_a), ("b", entry_b)):
            entry.sleep = (lambda fn, n: lambda: calls.append(n) or fn())(entry.sleep, name)
        burnt: dict = {gm_a: [], gm_b: []}
        outs = []
        # three rounds, the clearest counts (test_no_spin_leaves_idle_workers_asleep)
        for _ in range(3):
            for gm, workers, other in ((gm_a, workers_a, workers_b),
                                       (gm_b, workers_b, workers_a)):
                gm.set_input("x", X)
                gm.run()
                outs.append(gm.get_output(0).numpy())
                t0, o0 = _cpu_ns(workers), _cpu_ns(other)
                time.sleep(0.2)
                burnt[gm].append((_cpu_ns(workers) - t0, _cpu_ns(other) - o0))
        assert calls == ["b", "a"] * 3  # b ran last before a's run, then a before b's
        gm_b.run()
        assert calls == ["b", "a"] * 3  # the same library again: nothing to hand over
        assert all(np.array_equal(outs[0], o) for o in outs)
        for gm in (gm_a, gm_b):
            assert max(own for own, _ in burnt[gm]) > 10e6, burnt  # the one that ran spins
            assert min(other for _, other in burnt[gm]) < 3e6, burnt  # the other sleeps
