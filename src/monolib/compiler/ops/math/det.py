"""``Det`` (ONNX 11, 22): determinants of the square matrices in the last two dims of
X ``[*, M, M]``, by LU decomposition with partial pivoting (in double, one scratch
copy of the matrix). A singular matrix gives 0."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype

__all__ = ["Det"]

logger = logging.getLogger(__name__)


@register
class Det(OpDef):
    """ONNX ``Det`` (11; 22 adds bfloat16 only): float32/float64.

    Raises
    ------
    ShapeError
        X of rank below 2 or with non-square last dims.
    UnsupportedOpError
        Non-float X.
    """

    op_type, since_version = "Det", 11
    also_versions = (22,)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x.dtype not in (np.float32, np.float64):
            raise UnsupportedOpError(f"Det (node {node.name!r}): {x.dtype}")
        if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
            raise ShapeError(f"Det (node {node.name!r}): X {list(x.shape)} is not [*, M, M]")
        return [(tuple(x.shape[:-2]), x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        return [np.asarray(np.linalg.det(x.astype(np.float64)), dtype=x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        m = x.shape[-1]
        count = int(np.prod(x.shape[:-2], dtype=np.int64))
        if count == 0:
            return ""
        a = ctx.unique("lu")
        bi = ctx.unique("bi")
        return "\n".join(
            [
                f"double* {a} = (double*){ctx.scratch(8 * max(m * m, 1))};",
                f"for (int64_t {bi} = 0; {bi} < {count}; ++{bi}) {{",
                f"  for (int64_t i = 0; i < {m * m}; ++i) {a}[i] = {ctx.ptr(x)}[{bi}*{m * m} + i];",
                "  double det = 1;",
                f"  for (int64_t c = 0; c < {m} && det != 0; ++c) {{",
                "    int64_t p = c;",
                f"    for (int64_t r = c + 1; r < {m}; ++r) if (fabs({a}[r*{m} + c]) > fabs({a}[p*{m} + c])) p = r;",
                f"    if ({a}[p*{m} + c] == 0) {{ det = 0; break; }}",
                (
                    f"    if (p != c) {{ det = -det; for (int64_t k = 0; k < {m}; ++k) {{"
                    f" double t = {a}[p*{m} + k]; {a}[p*{m} + k] = {a}[c*{m} + k]; {a}[c*{m} + k] = t; }} }}"
                ),
                f"    det *= {a}[c*{m} + c];",
                (
                    f"    for (int64_t r = c + 1; r < {m}; ++r) {{ double f = {a}[r*{m} + c] / {a}[c*{m} + c];"
                    f" for (int64_t k = c; k < {m}; ++k) {a}[r*{m} + k] -= f * {a}[c*{m} + k]; }}"
                ),
                "  }",
                f"  {ctx.ptr(y)}[{bi}] = ({ctype(x.dtype)})det;",
                "}",
            ]
        )
