"""NDArray: what a graph executor hands out (TVM's ``tvm.nd.NDArray``, host only)."""

from __future__ import annotations

import logging

import numpy as np

from .device import Device, cpu

__all__ = ["NDArray"]

logger = logging.getLogger(__name__)


class NDArray:
    """A tensor living in an executor's memory (a view, not a copy).

    The data changes when the executor runs again; :meth:`numpy` returns a copy that
    does not. Supports the NumPy array protocol and DLPack (``np.from_dlpack(nd)``),
    both as read-only views of the executor's memory.

    Parameters
    ----------
    data : np.ndarray
        The view of the executor's buffer (shape and dtype of the tensor).
    device : Device
        Where the data lives (the host CPU).
    """

    def __init__(self, data: np.ndarray, device: Device | None = None) -> None:
        self._data = data
        self.device = device or cpu()

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape (tuple of ints)."""
        return tuple(self._data.shape)

    @property
    def dtype(self) -> str:
        """The tensor's dtype name (``"float32"``, ``"int64"``...)."""
        return str(self._data.dtype)

    def numpy(self) -> np.ndarray:
        """A copy of the data as a NumPy array (safe to keep across runs)."""
        return self._data.copy()

    asnumpy = numpy

    def __array__(self, dtype=None, copy=None):
        arr = self._data if dtype is None else self._data.astype(dtype)
        return arr.copy() if copy else arr

    def __dlpack__(self, **kwargs):
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __repr__(self) -> str:
        return f"NDArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"
