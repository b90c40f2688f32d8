"""The frame shared by the 8-bit convolution and matrix product (``qconv``,
``qmatmul``): the integer form (ConvInteger, MatMulInteger) outputs the int32 sums as
they are; the QLinear form (QLinearConv, QLinearMatMul, inputs ``x/a, x/a_scale,
x/a_zero_point, w/b, w/b_scale, w/b_zero_point, y_scale, y_zero_point``) requantizes
them with ``scale 1 * scale 4 / scale 6`` to ``y_zero_point``'s type (``_qcommon``)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef
from ._qcommon import mult_c, out_fields, zp_c

__all__ = ["QuantOp", "check_float_scales", "requantized_out"]

logger = logging.getLogger(__name__)


def check_float_scales(node: Node) -> None:
    """Check that the QLinear scales (inputs 1, 4 and 6) are float32.

    Raises
    ------
    UnsupportedOpError
        Naming the op, the node and the first other scale type.
    """
    for i in (1, 4, 6):
        if node.inputs[i].dtype != np.float32:
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: scale input {i} is {node.inputs[i].dtype}, not float32"
            )


def requantized_out(
    ctx: EmitContext, node: Node, dtype: np.dtype, per_vector_mode: str
) -> tuple[dict[str, str], str, bool]:
    """``ml_qout`` members (``y``/``ld`` left to fill) that requantize to ``dtype`` with
    ``scale 1 * scale 4 / scale 6`` and zero point input 7, the C that computes the
    multipliers, and whether input 4 is a vector (then ``per_vector_mode``:
    ``ML_QMULT_ROW`` per output channel, ``ML_QMULT_COL`` per column)."""
    mult, code = mult_c(ctx, node.inputs[1], node.inputs[4], node.inputs[6])
    per_vector = node.inputs[4].size > 1
    yzp, _, _ = zp_c(ctx, node, 7, 1)
    mode = per_vector_mode if per_vector else "ML_QMULT_TENSOR"
    return out_fields(dtype, "0", "0", mult, mode, yzp), code, per_vector


class QuantOp(OpDef):
    """An 8-bit op with int32 accumulation; as it stands, the integer form: the int32
    sums (:meth:`_acc`) are the output. The QLinear form overrides :meth:`_out_dtype`,
    :meth:`_out` and ``reference`` to requantize."""

    def _out_dtype(self, node: Node) -> np.dtype:
        return np.dtype(np.int32)

    def _acc(self, node: Node, inputs: list) -> np.ndarray:
        """The int32 sums, computed in NumPy."""
        raise NotImplementedError

    def _out(self, node: Node, ctx: EmitContext) -> tuple[dict[str, str], str, bool]:
        """(ml_qout members with ``y``/``ld`` left to fill, code, per-vector mult)."""
        return out_fields(np.int32, "0", "0"), "", False

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        return [self._acc(node, inputs)]
