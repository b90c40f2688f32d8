"""Which tensors the C backend stores channel-blocked (NCHW16c) instead of NCHW.

Every tensor in the arena is NCHW, except where two convolutions that both work on
16-channel blocks meet: a pixels-as-rows conv (``ops/nn/conv_pixel_rows.py``) sums a
``[pixels, channels]`` tile and a channel-blocked depthwise conv
(``ops/nn/conv_dw_blocked.py``) works on ``[pixels][16 channels]`` vectors. Between them an
NCHW tensor costs a transpose on each side (the producer's out of its tile, the
consumer's into its blocks: a third of a stride-2 depthwise conv alone). Stored as
``[C/16][H][W][16]`` (ONNX Runtime's NCHWc, TVM's ``NCHW16c``) the producer copies 16
floats per pixel and the consumer reads them as one vector.

A value is stored so when all of these hold (checked here, before the C is emitted, so
that both emitters see the same answer through ``EmitContext.blocked``):

* it is the output of a fused op anchored by a Conv whose picked algorithm can write the
  blocked layout (:func:`~..ops.nn.conv.blocked_roles`), and the chain fused after the
  Conv has no side inputs (it then runs on a block's flat run of floats as it would on
  NCHW planes: the same elements, the same function);
* exactly one fused op reads it: a Conv whose picked algorithm reads the blocked layout,
  as its input X only;
* float32, 4-D, static, channels a multiple of 16, more than one pixel, and not a graph
  output (the runtime and the debug executor see NCHW; the graph JSON marks the others,
  ``"layout": "NCHW16c"`` on the node entry, for ``debug_get_output``).

The channel count being a multiple of 16 keeps the tensor's size what NCHW's is, so the
memory plan does not change.
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import is_static
from ...passes.fuse_elementwise import FusedOp, Fusion
from .epilogue import leaves_of

__all__ = ["BLOCK", "BLOCKED", "blocked_values"]

logger = logging.getLogger(__name__)

#: channels per block
BLOCK = 16
#: the graph JSON's name of the layout
BLOCKED = "NCHW16c"


def _conv_op(f: FusedOp) -> bool:
    return f.kind == "op" and f.anchor is not None and f.anchor.op_type == "Conv"


def blocked_values(fusion: Fusion) -> frozenset[int]:
    """The uids of the values stored channel-blocked (see the module docstring).

    Each Conv's algorithm is picked as its emitter will pick it: knowing that a
    neighbour keeps the tensor between them blocked (``conv.rule_costs``' ``blocked``:
    a 1x1 conv then leans to pixels-as-rows, whose transpose out becomes a copy;
    ``blocked_in``: the conv before it copies out blocks) where one of its tensors ends
    up blocked, as it did here. A pick made so only ever turns to pixels-as-rows, which
    keeps every edge decided with it valid. The active tuning
    selection is asked in the order the emitter asks it (a recording keeps the last).
    """
    from ...ops.nn.conv import blocked_roles

    roles: dict[int, tuple[bool, bool]] = {}
    for i, f in enumerate(fusion.ops):
        if _conv_op(f):
            # Each role is picked with the discounts it would bring: reading a blocked
            # input, the credit of the conv before it copying out blocks, with its own
            # output priced blocked only where it can be (a chain with side inputs, a
            # residual Add, keeps it NCHW: ResNet-50's 512 -> 2048 1x1 convs at 7x7 were
            # pixels-as-rows priced with a copy out they never got, 2.6 ms alone against
            # the GEMM's 2.0); writing one, its output's copy. The emitter picks with the
            # same flags where an edge is blocked (ops/nn/conv.py), and a discount only
            # ever turns a pick to pixels-as-rows, so with both edges blocked it stays.
            free = not leaves_of(f.steps)
            reads = blocked_roles(f.anchor, bool(f.steps), blocked=free, blocked_in=True)[0]
            writes = blocked_roles(f.anchor, bool(f.steps), blocked=True)[1]
            roles[i] = (reads, writes)
    readers: dict[int, list[int]] = {}
    for i, f in enumerate(fusion.ops):
        for v in f.reads():
            readers.setdefault(v.uid, []).append(i)
    outputs = {v.uid for v in fusion.outputs}
    out: set[int] = set()
    for i, f in enumerate(fusion.ops):
        if not roles.get(i, (False, False))[1] or leaves_of(f.steps):
            continue
        v = f.out
        if v.uid in outputs or v.dtype != np.float32 or len(v.shape) != 4:
            continue
        if not is_static(v.shape) or v.shape[1] % BLOCK or v.shape[2] * v.shape[3] < 2:
            continue
        users = readers.get(v.uid, [])
        if len(users) != 1 or not roles.get(users[0], (False, False))[0]:
            continue
        g = fusion.ops[users[0]]
        # X only: not also a weight, nor a side input of the chain fused after it
        # (reads() lists a value once)
        if g.anchor.inputs[0] is not v or any(u is v for u in g.anchor.inputs[1:]):
            continue
        if any(u is v for step in g.steps for u in step.side_inputs()):
            continue
        out.add(v.uid)
    if out:
        logger.debug("%d values channel-blocked", len(out))
    return frozenset(out)
