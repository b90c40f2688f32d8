"""The optimizer update rules of the ``ai.onnx.preview.training`` domain (version 1):
Adagrad, Momentum and Adam. Each takes the learning rate R (float scalar) and the
update count T (int64 scalar), then n tensors X, their gradients G and their optimizer
states, and returns the updated X and states (ONNX spec formulas; ``g = norm_coefficient
* X + G`` is the regularized gradient):

- Adagrad: ``r = R / (1 + T * decay_factor)``, ``H' = H + g^2``, ``X' = X - r g /
  (sqrt(H') + epsilon)``.
- Momentum: ``V' = alpha V + (T > 0 ? beta : 1) g``; standard ``X' = X - R V'``,
  nesterov ``X' = X - R (g + alpha V')``.
- Adam: ``V' = alpha V + (1 - alpha) g``, ``H' = beta H + (1 - beta) g^2``, ``r = T > 0
  ? R sqrt(1 - beta^T) / (1 - alpha^T) : R``, ``X' = (1 - norm_coefficient_post) (X - r
  V' / (sqrt(H') + epsilon))``.

One elementwise loop per tensor, in float32 with the scalar factors computed once.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal

__all__ = ["Adagrad", "Adam", "Momentum"]

logger = logging.getLogger(__name__)

TRAINING = "ai.onnx.preview.training"


def _f(node: Node, name: str, default: float) -> float:
    v = node.attrs.get(name)
    return float(default if v is None else v)


class _Optimizer(OpDef):
    """Shared checks and emission; ``states`` optimizer states per tensor."""

    domain = TRAINING
    since_version = 1
    states: ClassVar[int] = 1

    def _n(self, node: Node) -> int:
        k = 2 + self.states
        rest = len(node.inputs) - 2
        where = f"{self.op_type} (node {node.name!r})"
        if rest <= 0 or rest % k or len(node.outputs) != rest // k * (1 + self.states):
            raise ShapeError(f"{where}: {len(node.inputs)} inputs and {len(node.outputs)} "
                             f"outputs do not form R, T and groups of {k} tensors")
        n = rest // k
        for i in range(n):
            shapes = {tuple(node.inputs[2 + j * n + i].shape) for j in range(k)}
            if len(shapes) != 1 or node.inputs[2 + i].dtype != np.float32:
                raise ShapeError(f"{where}: tensor {i}: X, G and states must share one "
                                 f"float32 shape, got {sorted(shapes)}")
        return n

    def infer(self, node: Node) -> list[OutType]:
        n = self._n(node)
        x = [node.inputs[2 + i] for i in range(n)]
        return [(tuple(v.shape), v.dtype) for v in x] * (1 + self.states)

    def reference(self, node: Node, inputs):
        n = self._n(node)
        r = float(np.asarray(inputs[0]).reshape(-1)[0])
        t = int(np.asarray(inputs[1]).reshape(-1)[0])
        outs: list[list[np.ndarray]] = [[] for _ in range(1 + self.states)]
        for i in range(n):
            xs = [np.asarray(inputs[2 + j * n + i], np.float64) for j in range(2 + self.states)]
            for k, v in enumerate(self.update(node, r, t, *xs)):
                outs[k].append(np.asarray(v).astype(np.float32))
        return [a for group in outs for a in group]

    def update(self, node: Node, r: float, t: int, x, g, *state):
        raise NotImplementedError

    def scalars(self, node: Node) -> str:
        """C statements defining the step's scalar factors from ``r`` and ``t``."""
        return ""

    def body(self, node: Node) -> str:
        """C statements of one element: reads ``x, g, s0 (, s1)``, writes ``xo, so0
        (, so1)``."""
        raise NotImplementedError

    def emit(self, node: Node, ctx: EmitContext) -> str:
        n = self._n(node)
        k = 2 + self.states
        code = ["{", f"  const float r = (float){ctx.ptr(node.inputs[0])}[0];",
                f"  const int64_t t = (int64_t){ctx.ptr(node.inputs[1])}[0];",
                "  (void)t;", self.scalars(node)]
        for i in range(n):
            ins = [ctx.ptr(node.inputs[2 + j * n + i]) for j in range(k)]
            outs = [ctx.ptr(node.outputs[j * n + i]) for j in range(1 + self.states)]
            size = node.inputs[2 + i].size
            loads = "; ".join(f"const float {nm} = {p}[e]"
                              for nm, p in zip(["x", "g", "s0", "s1"], ins))
            stores = " ".join(f"{p}[e] = {nm};" for nm, p in zip(["xo", "so0", "so1"], outs))
            code.append(f"  for (int64_t e = 0; e < {size}; ++e) {{ {loads};\n"
                        f"    {self.body(node)}\n    {stores} }}")
        return "\n".join(code + ["}"])


@register
class Adagrad(_Optimizer):
    """``Adagrad`` (ai.onnx.preview.training 1): R, T, X..., G..., H... -> X'..., H'..."""

    op_type = "Adagrad"

    def update(self, node, r, t, x, g, h):
        rr = r / (1 + t * _f(node, "decay_factor", 0.0))
        gr = _f(node, "norm_coefficient", 0.0) * x + g
        h2 = h + gr * gr
        return x - rr * gr / (np.sqrt(h2) + _f(node, "epsilon", 1e-6)), h2

    def scalars(self, node):
        return f"  const float rr = r / (1.0f + (float)t * {c_literal(_f(node, 'decay_factor', 0.0), np.float32)});"

    def body(self, node):
        return (f"float gr = {c_literal(_f(node, 'norm_coefficient', 0.0), np.float32)} * x + g; "
                "float so0 = s0 + gr * gr; "
                f"float xo = x - rr * gr / (sqrtf(so0) + {c_literal(_f(node, 'epsilon', 1e-6), np.float32)});")


@register
class Momentum(_Optimizer):
    """``Momentum`` (ai.onnx.preview.training 1): R, T, X..., G..., V... -> X'..., V'..."""

    op_type = "Momentum"
    defaults = {"mode": "standard"}

    def update(self, node, r, t, x, g, v):
        a, b = _f(node, "alpha", 0.9), _f(node, "beta", 1.0)
        gr = _f(node, "norm_coefficient", 0.0) * x + g
        v2 = a * v + (b if t > 0 else 1.0) * gr
        if self.attr(node, "mode") == "nesterov":
            return x - r * (gr + a * v2), v2
        return x - r * v2, v2

    def scalars(self, node):
        return f"  const float bt = t > 0 ? {c_literal(_f(node, 'beta', 1.0), np.float32)} : 1.0f;"

    def body(self, node):
        a = f"{c_literal(_f(node, 'alpha', 0.9), np.float32)}"
        step = "(gr + " + a + " * so0)" if self.attr(node, "mode") == "nesterov" \
            else "so0"
        return (f"float gr = {c_literal(_f(node, 'norm_coefficient', 0.0), np.float32)} * x + g; "
                f"float so0 = {a} * s0 + bt * gr; float xo = x - r * {step};")


@register
class Adam(_Optimizer):
    """``Adam`` (ai.onnx.preview.training 1): R, T, X..., G..., V..., H... -> X'...,
    V'..., H'..."""

    op_type = "Adam"
    states = 2

    def update(self, node, r, t, x, g, v, h):
        a, b = _f(node, "alpha", 0.9), _f(node, "beta", 0.999)
        gr = _f(node, "norm_coefficient", 0.0) * x + g
        v2 = a * v + (1 - a) * gr
        h2 = b * h + (1 - b) * gr * gr
        rr = r * np.sqrt(1 - b ** t) / (1 - a ** t) if t > 0 else r
        x2 = x - rr * v2 / (np.sqrt(h2) + _f(node, "epsilon", 1e-6))
        return (1 - _f(node, "norm_coefficient_post", 0.0)) * x2, v2, h2

    def scalars(self, node):
        a, b = _f(node, "alpha", 0.9), _f(node, "beta", 0.999)
        return (f"  const float rr = t > 0 ? (float)(r * sqrt(1.0 - pow({b!r}, (double)t)) / "
                f"(1.0 - pow({a!r}, (double)t))) : r;")

    def body(self, node):
        a, b = _f(node, "alpha", 0.9), _f(node, "beta", 0.999)
        return (f"float gr = {c_literal(_f(node, 'norm_coefficient', 0.0), np.float32)} * x + g; "
                f"float so0 = {c_literal(a, np.float32)} * s0 + {c_literal(1 - a, np.float32)} * gr; "
                f"float so1 = {c_literal(b, np.float32)} * s1 + {c_literal(1 - b, np.float32)} * gr * gr; "
                f"float xo = {c_literal(1 - _f(node, 'norm_coefficient_post', 0.0), np.float32)} * "
                f"(x - rr * so0 / (sqrtf(so1) + {c_literal(_f(node, 'epsilon', 1e-6), np.float32)}));")
