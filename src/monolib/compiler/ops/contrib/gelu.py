"""The ``com.microsoft`` GELU family: ``Gelu``, ``FastGelu``, ``BiasGelu``, ``QuickGelu``.

Semantics from ONNX Runtime's contrib op schemas (``docs/ContribOperators.md``):

* ``Gelu(X)``: ``0.5 x (1 + erf(x / sqrt 2))`` (the exact GELU);
* ``FastGelu(X, bias?)``: the tanh approximation
  ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` of ``x = X + bias``;
* ``BiasGelu(A, B)``: the exact GELU of ``A + B`` (``B`` 1-D, broadcast over the last dim);
* ``QuickGelu(X)``: ``x * sigmoid(alpha x)``, ``alpha`` 1.702 by default.

All are elementwise ops built on monolib's ONNX ``Gelu`` (20) and ``Swish`` (24)
expressions, so they fuse into the producer's epilogue or an elementwise chain like
any other activation. float32/float64.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ...ir import Node
from ..base import register
from ..math.activation import Gelu
from ..math.elementwise import Elementwise, bind
from ..math.swish import swish_expr

__all__ = ["BiasGelu", "FastGelu", "MsGelu", "QuickGelu"]

logger = logging.getLogger(__name__)

MS_DOMAIN = "com.microsoft"


class _BiasedGelu(Gelu):
    """A GELU of ``X + bias`` (bias optional, broadcast by ONNX rules); the variant
    (``approximate``) comes from the class's :attr:`defaults`."""

    domain = MS_DOMAIN
    since_version = 1

    def np_fn(self, node: Node, x, bias=None):
        if bias is not None:
            x = (x + bias).astype(x.dtype)
        return super().np_fn(node, x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        if len(args) > 1 and args[1]:
            dt = node.outputs[0].dtype
            # bind: the sum is evaluated once, then fed to the one-argument GELU
            return bind([f"({args[0]} + {args[1]})"], [dt], lambda s: super(_BiasedGelu, self).c_expr(node, [s]))
        return super().c_expr(node, args[:1])


@register
class MsGelu(_BiasedGelu):
    """``com.microsoft.Gelu`` (1): the exact (erf) GELU of X; float tensors, any shape."""

    op_type = "Gelu"
    defaults = {"approximate": "none"}


@register
class BiasGelu(_BiasedGelu):
    """``com.microsoft.BiasGelu`` (1): the exact GELU of ``A + B``; B (1-D, the size of
    A's last dim) broadcasts over A.

    Raises
    ------
    ShapeError
        When A and B do not broadcast.
    """

    op_type = "BiasGelu"
    defaults = {"approximate": "none"}


@register
class FastGelu(_BiasedGelu):
    """``com.microsoft.FastGelu`` (1): the tanh-approximated GELU of ``X + bias`` (bias
    optional, 1-D over the last dim).

    Raises
    ------
    ShapeError
        When X and bias do not broadcast.
    """

    op_type = "FastGelu"
    defaults = {"approximate": "tanh"}


@register
class QuickGelu(Elementwise):
    """``com.microsoft.QuickGelu`` (1): ``x * sigmoid(alpha * x)`` (``alpha`` default
    1.702, ONNX Runtime's schema); float tensors, any shape."""

    op_type, domain, since_version = "QuickGelu", MS_DOMAIN, 1
    float_only = True
    defaults = {"alpha": 1.702}

    def _alpha(self, node: Node) -> float:
        # float32, as ONNX stores the attribute and ORT's kernel reads it
        return float(np.float32(self.attr(node, "alpha")))

    def np_fn(self, node: Node, x):
        a = np.asarray(self._alpha(node), x.dtype)
        return x / (1 + np.exp(-a * x))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return bind(args[:1], [dt], lambda x: swish_expr(x, self._alpha(node), dt))
