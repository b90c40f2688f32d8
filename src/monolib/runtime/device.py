"""Devices a graph executor runs on (TVM's ``Device``: a type name and an index)."""

from __future__ import annotations

import logging
from typing import NamedTuple

__all__ = ["Device", "cpu", "cuda", "opencl"]

logger = logging.getLogger(__name__)


class Device(NamedTuple):
    """A device: ``device_type`` (``"cpu"``, ``"opencl"``, ``"cuda"``) and ``device_id``.

    Follows TVM's ``Device`` (``tvm.cpu(0)``): a plain value, compared by fields.
    """

    device_type: str = "cpu"
    device_id: int = 0

    def __str__(self) -> str:
        return f"{self.device_type}({self.device_id})"


def cpu(dev_id: int = 0) -> Device:
    """The host CPU, ``Device("cpu", dev_id)``.

    Parameters
    ----------
    dev_id : int
        Device index (only 0 is meaningful on the host).
    """
    return Device("cpu", int(dev_id))


def opencl(dev_id: int = 0) -> Device:
    """OpenCL device ``dev_id`` (counted over every platform's devices), for models
    compiled with ``target="opencl"``; see docs/devices.md."""
    return Device("opencl", int(dev_id))


def cuda(dev_id: int = 0) -> Device:
    """CUDA GPU ``dev_id``, for models compiled with ``target="cuda"``."""
    return Device("cuda", int(dev_id))
