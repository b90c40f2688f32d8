"""ONNX ``Scatter`` (9, deprecated in 11): the same operator as ``ScatterElements`` 11
without ``reduction`` (a model at opset 9 or 10 reaches the frontend converted by
``onnx.version_converter``, which renames it; this registration lets ``Scatter`` nodes
kept as they are compile too)."""

from __future__ import annotations

import logging

from ..base import register
from .scatter import ScatterElements

__all__ = ["Scatter"]

logger = logging.getLogger(__name__)


@register
class Scatter(ScatterElements):
    """``Scatter``: data, indices, updates -> data with ``updates`` written at
    ``indices`` along ``axis`` (ScatterElements' implementation)."""

    op_type, since_version = "Scatter", 9
