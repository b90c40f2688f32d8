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
    total = 0
    for tid in tids:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def test_no_spin_leaves_idle_workers_asleep(mm_lib):
    """After a run, a worker spinning 1 s burns CPU while the process idles; with spin
    0 it sleeps at once. Both give the same bits."""
    before = set(os.listdir("/proc/self/task"))
    with load_module(open(mm_lib, "rb").read()) as lib:
        gm, _ = _run(lib)
        workers = set(os.listdir("/proc/self/task")) - before
        assert len(workers) == 1  # 2 threads: the caller and one worker
        burnt = {}
        outputs = {}
        for spin in (10**6, 0, 10**6, 0):
            set_spin(spin)
            gm.set_input("x", X)
            gm.run()
            outputs[spin] = gm.get_output(0).numpy()
            t0 = _cpu_ns(workers)
            time.sleep(0.2)  # idle, as a server between requests
            burnt[spin] = min(burnt.get(spin, 1 << 62), _cpu_ns(workers) - t0)
        assert np.array_equal(outputs[0], outputs[10**6])
        assert burnt[0] < 3e6, burnt  # asleep: nothing but its wake-up
        assert burnt[10**6] > 10e6, burnt  # spinning (even with other processes about)
