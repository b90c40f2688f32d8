"""The process-wide thread settings of the model libraries (``set_num_threads``,
``set_spin``), the registry of loaded libraries and their executors, and the hand-over
of the cores from one library to the next (:func:`switch_to`).

Each loaded library has its own thread pool (``MONOLIB_NUM_THREADS`` and
``MONOLIB_SPIN_US`` when it is loaded, else the CPUs the process may use and a
300 us spin). :func:`set_num_threads` and :func:`set_spin` reach every library an
executor was made for: executors register their library (and themselves) here
(:func:`register_library`); ``Module.close`` takes a library out again
(:func:`unregister_library`) and closes the executors it had. The registry is filled
and read under one lock, so executors made in many threads while another sets the
count neither race nor miss the count.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..abi.names import SET_NUM_THREADS, SET_SPIN, SLEEP_THREADS
from ..errors import FunctionNotFoundError, InputError, ModuleClosedError
from .module import Module

__all__ = [
    "close_executor",
    "is_registered",
    "register_library",
    "set_num_threads",
    "set_spin",
    "switch_to",
    "unregister_library",
]

logger = logging.getLogger(__name__)

#: the most set_spin takes (threadpool.h's ML_SPIN_MAX_US): a second
MAX_SPIN_US = 1_000_000

_lock = threading.Lock()
_num_threads: int | None = None
_spin_us: int | None = None


class _Entry:
    """A registered library: its setters and ``monolib_sleep_threads`` (None: built
    before them) and executors."""

    __slots__ = ("__weakref__", "executors", "set_spin", "set_threads", "sleep")

    def __init__(self, set_threads: Callable, set_spin: Callable | None,
                 sleep: Callable | None) -> None:
        self.set_threads, self.set_spin, self.sleep = set_threads, set_spin, sleep
        self.executors: weakref.WeakSet = weakref.WeakSet()


#: the library whose executor ran last in this process (switch_to), held weakly
_last: Callable[[], _Entry | None] = lambda: None  # noqa: E731


def switch_to(entry: _Entry | None) -> None:
    """Note that ``entry``'s library runs next; if another library ran last, send that
    one's spinning workers to sleep (``monolib_sleep_threads``).

    Each library has its own pool, whose workers spin for a while (:func:`set_spin`)
    after each job. A process that runs two libraries in turns (PP-OCR's cls, then
    rec) would find the first one's workers still spinning on the cores the second
    one's workers need: at 2 threads on 2 cores, cls took 0.67-1.13 ms in turns
    against 0.47 alone. Executors call this before each run; it costs a comparison
    when the same library runs again. A heuristic without a lock: two threads running
    two libraries at once each send the other's idle workers to sleep, which only makes
    the next small op of each run serially. Results are the same bits either way.

    Parameters
    ----------
    entry : _Entry or None
        What :func:`register_library` returned for the library (None: nothing to do).
    """
    global _last
    last = _last()
    if last is entry or entry is None:
        return
    _last = weakref.ref(entry)
    if last is not None and last.sleep is not None:
        last.sleep()


# library module -> _Entry (weak: a library no executor uses goes)
_libraries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _checked(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise InputError(f"{what} must be an integer >= {least}, got {value!r}")
    return int(value)


def set_num_threads(n: int) -> int:
    """Run the ops of every loaded model library on ``n`` threads (its own thread pool).

    Applies to the libraries of existing executors and to those made later. Without a
    call, a library uses ``MONOLIB_NUM_THREADS`` (read when it is loaded) or the number
    of CPUs the process may run on (``sched_getaffinity``). Small ops always run on the
    calling thread. Calls ``monolib_set_num_threads`` (docs/ARCHITECTURE.md, "The
    generated C library"); libraries built before it existed are left alone.

    Parameters
    ----------
    n : int
        Threads, ``>= 1`` (a library caps it at its ``ML_MAX_THREADS``, 64).

    Returns
    -------
    int
        ``n``.

    Raises
    ------
    InputError
        ``n`` is not an integer ``>= 1``.
    """
    global _num_threads
    n = _checked(n, "set_num_threads: n", 1)
    with _lock:  # a library registered meanwhile gets n from register_library
        _num_threads = n
        for entry in list(_libraries.values()):
            entry.set_threads(n)
        return n


def set_spin(microseconds: int) -> int:
    """How long the thread pools' workers spin after a job before they sleep.

    A worker that spins takes the next op's tasks within a microsecond, but burns its
    core meanwhile; one that sleeps costs nothing between requests and some 10-50 us
    to wake (so while they sleep only ops of ~2M multiply-adds or more split). The
    default, 300 us, suits back-to-back runs; a server idle between requests wants 0
    (``monolib serve`` sets it). Applies to the libraries of existing executors and to
    those made later; without a call a library uses ``MONOLIB_SPIN_US`` (read when it
    is loaded), else 300. Calls ``monolib_set_spin``; libraries built before it
    existed keep 300 us. Results are the same bits whatever the spin.

    Parameters
    ----------
    microseconds : int
        ``>= 0``; 0: workers sleep as soon as a job is done. Capped at 10^6.

    Returns
    -------
    int
        The spin now set, in microseconds.

    Raises
    ------
    InputError
        ``microseconds`` is not an integer ``>= 0``.
    """
    global _spin_us
    us = min(_checked(microseconds, "set_spin: microseconds", 0), MAX_SPIN_US)
    with _lock:
        _spin_us = us
        for entry in list(_libraries.values()):
            if entry.set_spin is not None:
                entry.set_spin(us)
        return us


def _lookup(lib: Module, name: str, restype: Any, argtypes: list) -> Callable | None:
    try:
        fn = lib.get_function(name, query_imports=True)
    except FunctionNotFoundError:
        return None
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def register_library(lib: Module, executor: Any = None) -> _Entry | None:
    """Remember ``lib``'s thread setters, apply the chosen settings, track ``executor``.

    Called by every executor for its library (thread-safe; the setters are looked up
    once per library).

    Parameters
    ----------
    lib : Module
        The module holding the compiled code, or one that imports it. A library
        without ``monolib_set_num_threads`` (built before the thread pool) is left
        single-threaded; one without ``monolib_set_spin`` keeps its spin.
    executor : object, optional
        The executor made for ``lib``, closed (its ``close()``) when ``lib`` is
        closed (:func:`unregister_library`). Held weakly.

    Returns
    -------
    _Entry or None
        The library's entry, for :func:`switch_to` (None: a library from before the
        thread pool).
    """
    with _lock:
        entry = _libraries.get(lib)
    if entry is None:
        # outside the lock: a C source module compiles itself on first lookup
        set_threads = _lookup(lib, SET_NUM_THREADS, ctypes.c_int32, [ctypes.c_int32])
        if set_threads is None:
            return None  # a library from before the thread pool: single-threaded
        set_spin = _lookup(lib, SET_SPIN, ctypes.c_int32, [ctypes.c_int32])
        sleep = _lookup(lib, SLEEP_THREADS, ctypes.c_int32, [])
        with _lock:
            entry = _libraries.get(lib)
            if entry is None:
                entry = _libraries[lib] = _Entry(set_threads, set_spin, sleep)
                if _num_threads is not None:
                    set_threads(_num_threads)
                if _spin_us is not None and set_spin is not None:
                    set_spin(_spin_us)
    if executor is not None:
        with _lock:
            entry.executors.add(executor)
    return entry


def unregister_library(lib: Module) -> list[Any]:
    """Forget ``lib`` (its setters are no longer called) and return its live executors.

    ``Module.close`` calls it before unloading the library, then closes each executor.

    Parameters
    ----------
    lib : Module
        A library given to :func:`register_library` (any other: nothing happens).

    Returns
    -------
    list
        The executors registered for ``lib`` that are still alive.
    """
    with _lock:
        entry = _libraries.pop(lib, None)
        return [] if entry is None else list(entry.executors)


def is_registered(lib: Module) -> bool:
    """Whether ``lib`` is in the registry (an executor was made for it, not closed).

    Parameters
    ----------
    lib : Module
    """
    with _lock:
        return lib in _libraries


# what a closed executor answers with ModuleClosedError (GraphModule calls these)
_CLOSED_METHODS = (
    "run", "_run_shaped", "run_op", "profile", "input_view", "output_view",
    "set_input_shape", "load_params", "share_params",
)


def _keep(*_: Any) -> None:
    """weakref.finalize's callback that only holds its arguments until then."""


def close_executor(executor: Any) -> None:
    """Close a graph executor: its functions raise, its arena and params are dropped.

    A run already under way in another thread finishes: the arena and params stay
    alive until the function pointers it called go (``weakref.finalize``), and they
    keep the library loaded (:mod:`.dso`). Idempotent.

    Parameters
    ----------
    executor : GraphExecutor
        What ``factory["default"](dev)`` made.
    """
    own = vars(executor)
    if own.get("closed"):
        return
    keep = (own.get("arena"), own.get("params"))
    for fn in (own.get("_run"), own.get("_run_op")):
        if fn is not None:  # (not at exit: a daemon thread may still be running it)
            weakref.finalize(fn, _keep, keep).atexit = False
    graph = getattr(getattr(executor, "factory", None), "head", {}).get("name", "")

    def closed(*_: Any, **__: Any) -> None:
        raise ModuleClosedError(
            f"the executor of graph {graph!r} was closed with its library "
            "(Module.close): load the library again to run it"
        )

    for name in (*_CLOSED_METHODS, "_run", "_run_op"):
        setattr(executor, name, closed)
    # _args (two addresses) stays: a thread that took the old _run a moment ago still
    # calls it with them, on memory that finalize keeps alive while it does
    executor.arena = executor.params = executor.shapes = None
    executor._pool = None  # its functions hold the library
    executor._in_views, executor._out_views = [], []
    executor.closed = True
