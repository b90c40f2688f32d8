"""Generator ops of signal processing (ONNX 17): HannWindow, HammingWindow,
BlackmanWindow and MelWeightMatrix.

Their outputs depend only on scalar inputs that fix the output shape, so those inputs
must be compile-time constants; the values are computed here (float64, then cast to
``output_datatype``, the ONNX reference's order) and the emitted code copies them from
the params blob.

Windows of length ``N``: with ``periodic=1`` (default) the denominator is ``N``, else
``N - 1``; ``Hann = sin^2(pi n / D)``, ``Hamming = 25/46 - 21/46 cos(2 pi n / D)``,
``Blackman = 0.42 - 0.5 cos(2 pi n / D) + 0.08 cos(4 pi n / D)``.
MelWeightMatrix ``[dft_length // 2 + 1, num_mel_bins]``: triangular filters between
mel-spaced edges (``mel = 2595 log10(1 + f / 700)``), as ONNX's reference builds them.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np
import onnx

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype

__all__ = ["BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix", "mel_weights"]

logger = logging.getLogger(__name__)


def _scalar(node: Node, i: int, what: str) -> float:
    v = node.input(i)
    if v is None or v.const is None or np.asarray(v.const).size != 1:
        raise ShapeError(f"{node.op_type} (node {node.name!r}): input {what!r} must be a "
                         "compile-time constant scalar (it fixes the output shape)")
    return np.asarray(v.const).reshape(-1)[0].item()


def _out_dtype(node: Node) -> np.dtype:
    dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["output_datatype"])))
    ctype(dt)  # refuses types without a C type
    return dt


class _Generated(OpDef):
    """An op whose output is a compile-time table: ``values(node)`` -> array."""

    def values(self, node: Node) -> np.ndarray:
        raise NotImplementedError

    def infer(self, node: Node) -> list[OutType]:
        v = self.values(node)
        return [(v.shape, v.dtype)]

    def reference(self, node: Node, inputs):
        return [self.values(node)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        v = self.values(node)
        if v.size == 0:
            return ""
        src = ctx.param(v, node.op_type.lower())
        return f"memcpy({ctx.ptr(node.outputs[0])}, {src}, {v.nbytes});"


class _Window(_Generated):
    since_version: ClassVar[int] = 17

    def terms(self, ph: np.ndarray) -> np.ndarray:
        """The window at phases ``ph = 2 pi n / D``."""
        raise NotImplementedError

    def values(self, node: Node) -> np.ndarray:
        size = int(_scalar(node, 0, "size"))
        if size < 0:
            raise ShapeError(f"{self.op_type} (node {node.name!r}): size {size} < 0")
        den = size if node.attrs["periodic"] else size - 1
        n = np.arange(size, dtype=np.float64)
        ph = 2 * np.pi * n / den if den > 0 else np.zeros(size)
        return self.terms(ph).astype(_out_dtype(node))


@register
class HannWindow(_Window):
    """ONNX ``HannWindow``: ``sin^2(pi n / D)``, n in [0, size)."""

    op_type = "HannWindow"

    def terms(self, ph):
        return np.sin(ph / 2) ** 2


@register
class HammingWindow(_Window):
    """ONNX ``HammingWindow``: ``25/46 - 21/46 cos(2 pi n / D)``."""

    op_type = "HammingWindow"

    def terms(self, ph):
        return 25 / 46 - (1 - 25 / 46) * np.cos(ph)


@register
class BlackmanWindow(_Window):
    """ONNX ``BlackmanWindow``: ``0.42 - 0.5 cos(2 pi n / D) + 0.08 cos(4 pi n / D)``."""

    op_type = "BlackmanWindow"

    def terms(self, ph):
        return 0.42 - 0.5 * np.cos(ph) + 0.08 * np.cos(2 * ph)


def mel_weights(bins: int, dft_length: int, rate: float, low: float, high: float) -> np.ndarray:
    """``[dft_length // 2 + 1, bins]`` float64 triangular mel filters (ONNX reference)."""
    mel_lo = 2595 * np.log10(1 + low / 700)
    mel_hi = 2595 * np.log10(1 + high / 700)
    edges = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    hz = 700 * (10 ** (edges / 2595) - 1)
    points = (((dft_length + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, bins))
    for i in range(bins):
        lo, mid, hi = points[i : i + 3]
        if mid == lo:
            out[mid, i] = 1
        else:
            j = np.arange(lo, mid + 1)
            out[j, i] = (j - lo) / (mid - lo)
        if hi > mid:
            j = np.arange(mid, hi)
            out[j, i] = (hi - j) / (hi - mid)
    return out


@register
class MelWeightMatrix(_Generated):
    """ONNX ``MelWeightMatrix``: constant num_mel_bins, dft_length, sample_rate,
    lower_edge_hertz, upper_edge_hertz -> ``[dft_length // 2 + 1, num_mel_bins]``."""

    op_type, since_version = "MelWeightMatrix", 17

    def values(self, node: Node) -> np.ndarray:
        names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                 "upper_edge_hertz")
        bins, dft, rate, low, high = (_scalar(node, i, n) for i, n in enumerate(names))
        if bins < 0 or dft < 0 or rate <= 0:
            raise ShapeError(f"MelWeightMatrix (node {node.name!r}): num_mel_bins {bins}, "
                             f"dft_length {dft}, sample_rate {rate} out of range")
        return mel_weights(int(bins), int(dft), rate, float(low), float(high)).astype(
            _out_dtype(node))
