"""The table of backends: target kind -> :class:`~.base.Backend`, registered explicitly.

``monolib.compile`` parses the target string (:class:`~monolib.export.targets.Target`)
and looks its kind up here. Adding a backend: a :class:`~.base.Backend` subclass, its
kind and options in ``export/targets.py`` ``KINDS``, and a line below.
"""

from __future__ import annotations

import logging

from .base import Backend
from .c.backend import CBackend
from .device import CUDA_BACKEND, OPENCL_BACKEND

__all__ = ["BACKENDS"]

logger = logging.getLogger(__name__)

#: target kind -> backend
BACKENDS: dict[str, Backend] = {
    "c": CBackend(),
    "opencl": OPENCL_BACKEND,
    "cuda": CUDA_BACKEND,
}
