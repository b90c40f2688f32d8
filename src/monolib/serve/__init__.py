"""Serving monolib libraries on Ray (``pip install monolib[serve]``), speaking the Open
Inference Protocol v2 (KServe v2 / Triton's HTTP API, so ``tritonclient`` works).

* :func:`deployment` (``app.py``): the Ray Serve application for one or more libraries;
* :func:`run` (``runner.py``): start or join Ray, deploy it at ``host:port``, and with
  ``blocking=True`` serve until stopped, redeploying a library whose file is replaced;
  ``monolib serve`` is this;
* :class:`Predictor` (``predictor.py``): a callable class for Ray Data's ``map_batches``.

``protocol.py`` (requests, responses, errors), ``batching.py`` and ``backend.py`` import no
Ray. Nothing here is imported by :mod:`monolib.runtime`; the attributes above import Ray
on first use.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

__all__ = ["Predictor", "deployment", "run"]

logger = logging.getLogger(__name__)

_LAZY = {"deployment": ".app", "run": ".runner", "Predictor": ".predictor"}


def __getattr__(name: str) -> Any:
    """``deployment``, ``run`` and ``Predictor``, imported (with Ray) on first use."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'monolib.serve' has no attribute {name!r}")
    return getattr(importlib.import_module(where, __name__), name)
