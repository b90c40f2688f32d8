"""Executor memory: 64-byte aligned buffers, and the arena (huge pages when large).

Every tensor of the graph JSON lies at a 64-byte aligned offset of the arena or of
the params blob (see "The graph JSON" in ``docs/ARCHITECTURE.md``), so both bases
are 64-byte aligned here; a large arena is backed by transparent huge pages.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

__all__ = ["ALIGN", "HUGE_ARENA_BYTES", "aligned_blob", "aligned_empty", "arena_empty"]

logger = logging.getLogger(__name__)

#: Alignment of the arena, the params blob and every tensor in them (bytes).
ALIGN = 64


def aligned_empty(nbytes: int, align: int = ALIGN, zero: bool = True) -> np.ndarray:
    """A 1-D uint8 array of ``nbytes`` whose data pointer is ``align``-byte aligned.

    Parameters
    ----------
    nbytes : int
        Size in bytes.
    align : int
        Alignment of the data pointer, in bytes.
    zero : bool
        Zero-filled (else uninitialised).
    """
    raw = (np.zeros if zero else np.empty)(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip : skip + nbytes]


#: Arenas at least this large are mapped with transparent huge pages where the OS
#: offers them (Linux ``madvise`` mode): a first run touches a 35 MB arena with 18
#: faults instead of 9,000, and the kernels' scattered reads miss the TLB less. From
#: 512 KiB up one zeroed 2 MiB page (~0.15 ms) beats 128+ faults of 4 KiB (~2.5 us
#: each on a VM): Silero's 0.7 MB arena, Magika's 2 MB one.
HUGE_ARENA_BYTES = 512 << 10
_HUGE_PAGE = 2 << 20


def arena_empty(nbytes: int) -> np.ndarray:
    """A zero-filled 1-D uint8 array of ``nbytes`` for an executor's arena, 64-byte
    aligned; from ``HUGE_ARENA_BYTES`` up, an anonymous mapping aligned to 2 MiB and
    advised ``MADV_HUGEPAGE`` (pages are zeroed by the OS on first touch).

    Raises
    ------
    MemoryError, OSError
        The memory cannot be had.
    """
    import mmap  # built in, imported only for large arenas

    if nbytes < HUGE_ARENA_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return aligned_empty(nbytes)
    # MAP_PRIVATE: a shared anonymous mapping is shmem, which THP's "madvise" mode
    # never backs with huge pages (that takes shmem_enabled); a private one it does.
    # whole huge pages only: a 2 MiB page needs its aligned block inside the mapping
    whole = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
    mapping = mmap.mmap(-1, whole + _HUGE_PAGE,
                        flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # THP off or unsupported: plain pages serve as well
        pass
    raw = np.frombuffer(mapping, dtype=np.uint8)  # keeps the mapping alive
    skip = (-raw.ctypes.data) % _HUGE_PAGE
    return raw[skip : skip + nbytes]


def aligned_blob(params: Any) -> np.ndarray:
    """``params`` as a 1-D uint8 array with a 64-byte aligned base (copied if not).

    Parameters
    ----------
    params : array-like
        A params blob (1-D uint8), or any array whose bytes are the blob.

    Returns
    -------
    np.ndarray of uint8, 1-D
        ``params`` itself when it is already 1-D uint8, contiguous and aligned.
    """
    params = np.asarray(params)
    if params.dtype != np.uint8 or params.ndim != 1:
        params = np.ascontiguousarray(params).reshape(-1).view(np.uint8)
    if params.ctypes.data % ALIGN or not params.flags.c_contiguous:
        aligned = aligned_empty(params.nbytes, zero=False)
        aligned[:] = params
        params = aligned
    return params
