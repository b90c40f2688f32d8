"""Devices a graph executor runs on (TVM's ``Device``: a type name and an index)."""

from __future__ import annotations

import logging
from typing import NamedTuple

__all__ = ["Device", "cpu"]

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
