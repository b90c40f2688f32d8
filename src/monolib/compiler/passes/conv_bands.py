"""Pair a 1x1 convolution with the depthwise convolution that reads it into one ``band``
fused op (C backend only): the two run together by bands of rows, so the tensor between
them stays in the caches (``ops/nn/conv_band.py`` decides which pairs qualify).

A pair is two fused ops next to each other in run order where the second reads the
first's output and nothing else does (not another op, not a graph output): that output
is then never stored. The memory plan is made again from the result.
"""

from __future__ import annotations

import logging
from collections import Counter

from .fuse_elementwise import FusedOp, Fusion

__all__ = ["fuse_conv_bands"]

logger = logging.getLogger(__name__)


def fuse_conv_bands(fusion: Fusion) -> Fusion:
    """``fusion`` with each qualifying 1x1 + depthwise pair made one ``band`` op; the
    same object when there is none."""
    from ..ops.nn.conv_band import band_rows

    readers = Counter(v.uid for f in fusion.ops for v in f.reads())
    readers.update(v.uid for v in fusion.outputs)
    ops: list[FusedOp] = []
    i = 0
    while i < len(fusion.ops):
        f = fusion.ops[i]
        nxt = fusion.ops[i + 1] if i + 1 < len(fusion.ops) else None
        if (nxt is not None and f.kind == "op" and readers[f.out.uid] == 1
                and band_rows(f, nxt) is not None):
            ops.append(FusedOp("band", f.anchor, out=nxt.out, parts=[f, nxt]))
            i += 2
            continue
        ops.append(f)
        i += 1
    if len(ops) == len(fusion.ops):
        return fusion
    logger.info("%d 1x1 + depthwise pairs run by bands", len(fusion.ops) - len(ops))
    return Fusion(ops, fusion.inputs, fusion.outputs, fusion.symbols)
