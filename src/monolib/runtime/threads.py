"""The process-wide thread count of the model libraries (``set_num_threads``).

Each loaded library has its own thread pool (``MONOLIB_NUM_THREADS`` when it is
loaded, else the CPUs the process may use). :func:`set_num_threads` reaches every
library an executor was made for: executors register their library here
(:func:`register_library`). The registry is filled and read under one lock, so
executors made in many threads while another sets the count neither race nor
miss the count.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import weakref

import numpy as np

from ..abi.names import SET_NUM_THREADS
from ..errors import FunctionNotFoundError, InputError
from .module import Module

__all__ = ["register_library", "set_num_threads"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_num_threads: int | None = None
# library module -> its monolib_set_num_threads (weak: a library no executor uses goes)
_setters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"set_num_threads: n must be an integer >= 1, got {n!r}")
    with _lock:  # a library registered meanwhile gets n from register_library
        _num_threads = int(n)
        for setter in list(_setters.values()):
            setter(_num_threads)
        return _num_threads


def register_library(lib: Module) -> None:
    """Remember ``lib``'s ``monolib_set_num_threads`` and apply the chosen count.

    Called by every executor for its library (thread-safe; once per library).

    Parameters
    ----------
    lib : Module
        The module holding the compiled code, or one that imports it. A library
        without ``monolib_set_num_threads`` (built before the thread pool) is left
        single-threaded.
    """
    with _lock:
        if lib in _setters:
            return
    try:  # outside the lock: a C source module compiles itself on first lookup
        fn = lib.get_function(SET_NUM_THREADS, query_imports=True)
    except FunctionNotFoundError:
        return  # a library from before the thread pool: single-threaded
    fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_int32]
    with _lock:
        if lib in _setters:
            return
        _setters[lib] = fn
        if _num_threads is not None:
            fn(_num_threads)
