"""Executor arenas (runtime/arena.py arena_empty): zero-filled, writable,
64-byte aligned; large ones on 2 MiB boundaries (transparent huge pages)."""

import numpy as np
import pytest

from monolib.runtime.arena import HUGE_ARENA_BYTES, arena_empty


@pytest.mark.parametrize("nbytes", [1, 4096 + 3, HUGE_ARENA_BYTES - 1, HUGE_ARENA_BYTES,
                                    HUGE_ARENA_BYTES * 3 + 17])
def test_arena_is_zeroed_writable_and_aligned(nbytes):
    a = arena_empty(nbytes)
    assert a.dtype == np.uint8 and a.shape == (nbytes,) and a.flags.writeable
    assert a.ctypes.data % 64 == 0
    if nbytes >= HUGE_ARENA_BYTES:
        import mmap

        if hasattr(mmap, "MADV_HUGEPAGE"):
            assert a.ctypes.data % (2 << 20) == 0
    assert not a.any()
    a[:] = 7  # every byte of the range is ours to write
    assert int(a[-1]) == 7 and int(a[0]) == 7


def test_arenas_are_independent():
    a, b = arena_empty(HUGE_ARENA_BYTES), arena_empty(HUGE_ARENA_BYTES)
    a[:] = 1
    assert not b.any()


def _mapping_of(address: int) -> str:
    """The /proc/self/maps line of the mapping holding ``address``."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return line
    raise AssertionError(f"{address:#x} is in no mapping")


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="Linux only")
def test_large_arena_is_a_private_mapping():
    # A shared anonymous mapping is shmem, which THP's "madvise" mode never backs with
    # huge pages: det's 36 MB arena took ~9,000 4 KiB faults (~20 ms) on its first run.
    a = arena_empty(HUGE_ARENA_BYTES * 2)
    perms = _mapping_of(a.ctypes.data).split()[1]
    assert perms == "rw-p", perms
