"""Chain a depthwise convolution with the 1x1 convolution before it and/or after it into
one ``band`` fused op (C backend only): they run together by bands of rows, so the
tensors between them stay in the caches (``ops/nn/conv_band.py`` decides which chains
qualify).

A chain is fused ops next to each other in run order where each reads the last one's
output and nothing else does (not another op, not a graph output): those outputs are
then never stored. The memory plan is made again from the result.
"""

from __future__ import annotations

import logging
from collections import Counter

from .fuse_elementwise import FusedOp, Fusion

__all__ = ["fuse_conv_bands"]

logger = logging.getLogger(__name__)


def fuse_conv_bands(fusion: Fusion) -> Fusion:
    """``fusion`` with each qualifying chain made one ``band`` op; the same object when
    there is none."""
    from ..ops.nn.conv_band import band_chain

    readers = Counter(v.uid for f in fusion.ops for v in f.reads())
    readers.update(v.uid for v in fusion.outputs)
    ops: list[FusedOp] = []
    i = 0
    def alone(v) -> bool:
        return readers[v.uid] == 1

    def saved(chain) -> int:  # bytes of the tensors a chain keeps in its bands
        return sum(4 * f.out.size for f in chain[:-1])

    while i < len(fusion.ops):
        chain = band_chain(fusion.ops, i, alone)
        # a depthwise + projection chain whose projection would rather start the next
        # chain (as its expansion) leaves it that when that keeps more bytes
        nxt = band_chain(fusion.ops, i + 1, alone) if chain else None
        if chain and nxt and nxt[0] is chain[-1] and saved(nxt) > saved(chain):
            chain = None
        if chain:
            ops.append(FusedOp("band", chain[0].anchor, out=chain[-1].out, parts=chain))
            i += len(chain)
            continue
        ops.append(fusion.ops[i])
        i += 1
    if len(ops) == len(fusion.ops):
        return fusion
    logger.info("%d ops in %d band chains", len(fusion.ops) - len(ops) + sum(
        1 for f in ops if f.kind == "band"), sum(1 for f in ops if f.kind == "band"))
    return Fusion(ops, fusion.inputs, fusion.outputs, fusion.symbols)
