"""Training-mode ``Dropout`` (ONNX 12, 13, 22) as C in the library.

The frontend resolves inference Dropout itself (the identity, an all-true mask); a
Dropout whose ``training_mode`` is a constant true or a run-time value becomes this
node. Per the ONNX spec and its reference (``onnx/reference/ops/op_dropout.py``): the
mask is ``uniform(0, 1) >= ratio`` element by element, ``y = mask * x * (1 / (1 -
ratio))`` in x's type, the mask (output 1, optional) bool. The uniform draws are NumPy's
legacy ``RandomState(seed).random_sample`` (``mt19937.h``, seed semantics as the random
ops in :mod:`.random`), which is how ONNX's Dropout test data were made. A run-time
``training_mode`` that is false at run gives ``y = x`` and an all-true mask.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import UnsupportedOpError
from ...backends.cstyle import ctype
from ...ir import Node, shape_size
from ..base import EmitContext, OpDef, OutType, register
from .random import STATE_BYTES, begin_rng, rng_seed

__all__ = ["TrainingDropout"]

logger = logging.getLogger(__name__)

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@register
class TrainingDropout(OpDef):
    """ONNX ``Dropout`` (12; 13 and 22 add types only) with ``training_mode`` not a
    constant false: inputs ``x``, ``ratio`` (scalar, default 0.5, read at run time),
    ``training_mode`` (bool scalar); outputs ``y`` (x's shape and type) and the optional
    bool ``mask``.

    Raises
    ------
    UnsupportedOpError
        An x type other than float32/float64.
    CompileError
        A seed outside ``[0, 2**32)``.
    """

    op_type, since_version = "Dropout", 12
    also_versions = (13, 22)
    foldable = False
    defaults = {"seed": None}

    def state_bytes(self, node: Node) -> int:
        return STATE_BYTES

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x.dtype not in _FLOATS:
            raise UnsupportedOpError(f"Dropout (node {node.name!r}): training mode on "
                                     f"{x.dtype} is not supported (float32, float64 are)")
        out = [(tuple(x.shape), x.dtype)]
        if len(node.outputs) > 1:
            out.append((tuple(x.shape), np.dtype(bool)))
        return out

    def reference(self, node: Node, inputs):
        x = inputs[0]
        ratio = inputs[1] if len(inputs) > 1 and inputs[1] is not None else np.float32(0.5)
        training = bool(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else False
        ratio = np.asarray(ratio).reshape(())[()]
        if training:
            u = np.random.RandomState(rng_seed(self, node)).random_sample(x.shape)
            mask = u >= ratio
            y = (mask * x * (1.0 / (1.0 - ratio))).astype(x.dtype)
        else:
            mask, y = np.ones(x.shape, bool), x.copy()
        return [y, mask][: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        r = node.inputs[1] if len(node.inputs) > 1 else None
        t = node.inputs[2] if len(node.inputs) > 2 else None
        mask = node.outputs[1] if len(node.outputs) > 1 else None
        ct = ctype(x.dtype)
        code, st = begin_rng(self, node, ctx)
        # the scale is computed in the ratio's type, as 1 / (1 - ratio) in NumPy
        rt = ctype(r.dtype) if r is not None else ct
        ratio = f"{ctx.ptr(r)}[0]" if r is not None else "0.5"
        n = shape_size(x.shape)
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        mp = ctx.ptr(mask) if mask is not None else None
        keep = f" {mp}[i] = keep;" if mp else ""
        train = (
            f"{{ const {rt} ratio = ({rt}){ratio};\n"
            f"  const {rt} scale = ({rt})1 / (({rt})1 - ratio);\n"
            f"  for (int64_t i = 0; i < {n}; ++i) {{\n"
            f"    const int keep = ml_rng_double({st}) >= (double)ratio;\n"
            f"    {yp}[i] = ({ct})(({ct})keep * {xp}[i]) * ({ct})scale;{keep}\n  }}\n}}"
        )
        if t is None or t.is_const:  # a constant true (the frontend keeps a false one)
            return code + train
        ident = (f"{{ for (int64_t i = 0; i < {n}; ++i) {{ {yp}[i] = {xp}[i];"
                 + (f" {mp}[i] = 1;" if mp else "") + " } }")
        return code + f"if ({ctx.ptr(t)}[0]) {train}\nelse {ident}"
