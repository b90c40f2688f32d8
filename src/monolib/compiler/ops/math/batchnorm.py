"""ONNX ``BatchNormalization`` (versions 7, 9, 14, 15):
``y = (x - mean) / sqrt(var + epsilon) * scale + B`` per channel (dim 1).

With constant statistics (the usual case) the op is folded at compile time into one
multiply-add per element, ``y = x * a[c] + b[c]`` with ``a = scale / sqrt(var + eps)``
and ``b = B - mean * a`` (computed in float64, stored as the input type).

Training mode (``training_mode=1``, 14+): the statistics are the batch's own (mean and
population variance over every dim but the channel, in double), and the optional
outputs ``running_mean``/``running_var`` are ``input * momentum + current * (1 -
momentum)`` (ONNX spec).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from ..tensor.loops import flat_index_exprs
from .elementwise import cfn, is_float

__all__ = ["BatchNormalization", "batchnorm_coefficients"]

logger = logging.getLogger(__name__)


def batchnorm_coefficients(
    scale, bias, mean, var, eps: float, dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel ``(a, b)`` with ``bn(x) == x * a + b``; each ``[C]`` of ``dtype``."""
    a = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + float(eps))
    b = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * a
    return a.astype(dtype), b.astype(dtype)


@register
class BatchNormalization(OpDef):
    """``BatchNormalization`` (inference): X ``[N, C, D1...]``; scale, B, mean, var
    ``[C]``. Output 0 only.

    Raises
    ------
    UnsupportedOpError
        For training mode, ``spatial=0``, or the optional statistics outputs.
    ShapeError
        When a parameter is not ``[C]``.
    """

    op_type, since_version = "BatchNormalization", 7
    defaults = {"spatial": 1, "training_mode": 0}

    def _training(self, node: Node) -> bool:
        return bool(self.attr(node, "training_mode"))

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        where = f"BatchNormalization (node {node.name!r})"
        training = self._training(node)
        if (not training and len(node.outputs) > 1) or not self.attr(node, "spatial"):
            raise UnsupportedOpError(
                f"{where}: extra outputs need training_mode=1; spatial=0 is not supported"
            )
        if not is_float(x.dtype) or len(x.shape) < 2:
            raise ShapeError(
                f"{where}: X must be a float tensor [N, C, ...], got {x.dtype}{list(x.shape)}"
            )
        c = x.shape[1]
        for v in node.inputs[1:5]:
            if v is None or v.size != c:
                raise ShapeError(f"{where}: scale, B, mean and var must each have {c} elements")
        stats = [((c,), node.inputs[3].dtype), ((c,), node.inputs[4].dtype)]
        return ([(x.shape, x.dtype)] + stats)[: len(node.outputs)]

    def reference(self, node: Node, inputs):
        x, scale, bias, mean, var = inputs[:5]
        if self._training(node):
            axes = (0,) + tuple(range(2, x.ndim))
            cur_mean = x.astype(np.float64).mean(axis=axes)
            cur_var = x.astype(np.float64).var(axis=axes)
            a, b = batchnorm_coefficients(scale, bias, cur_mean, cur_var, node.attrs["epsilon"], np.float64)
            shape = (1, -1) + (1,) * (x.ndim - 2)
            y = (x * a.reshape(shape) + b.reshape(shape)).astype(x.dtype)
            mom = node.attrs["momentum"]
            run_mean = (mean * mom + cur_mean * (1 - mom)).astype(mean.dtype)
            run_var = (var * mom + cur_var * (1 - mom)).astype(var.dtype)
            return [y, run_mean, run_var][: len(node.outputs)]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = np.asarray(node.attrs["epsilon"], x.dtype)
        r = lambda v: v.reshape(shape).astype(x.dtype)
        y = (x - r(mean)) / np.sqrt(r(var) + eps) * r(scale) + r(bias)
        return [y.astype(x.dtype)]

    def epilogue_groups(self, node: Node):
        rank = len(node.outputs[0].shape)
        return [[0], [1], list(range(2, rank))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        n, c = x.shape[0], x.shape[1]
        inner = x.size // max(n * c, 1)
        ct = ctype(x.dtype)
        a_name, b_name = ctx.unique("bn_a"), ctx.unique("bn_b")
        lines = []
        # the coefficient pointers as expressions over params / arena, so a task
        # function of the thread pool can declare them again (None: locals, serial)
        shared = None
        if self._training(node):
            lines += self._emit_batch_stats(node, ctx, a_name, b_name)
        elif all(v.is_const for v in node.inputs[1:5]):
            a, b = batchnorm_coefficients(
                *(v.const.reshape(-1) for v in node.inputs[1:5]), node.attrs["epsilon"], x.dtype
            )
            shared = (ctx.param(a, "bn_a"), ctx.param(b, "bn_b"))
        else:
            sc, bi, me, va = (ctx.ptr(v) for v in node.inputs[1:5])
            k = ctx.unique("c")
            eps = c_literal(node.attrs["epsilon"], x.dtype)
            shared = (f"(({ct}*){ctx.scratch(c * x.dtype.itemsize)})",
                      f"(({ct}*){ctx.scratch(c * x.dtype.itemsize)})")
            lines += [
                f"{ct}* {a_name} = {shared[0]};",
                f"{ct}* {b_name} = {shared[1]};",
                (
                    f"for (int64_t {k} = 0; {k} < {c}; ++{k}) {{ {a_name}[{k}] = {sc}[{k}] / "
                    f"{cfn('sqrt', x.dtype)}({va}[{k}] + {eps}); {b_name}[{k}] = {bi}[{k}] - {me}[{k}] * {a_name}[{k}]; }}"
                ),
            ]
        if shared is None:
            i, j, s = ctx.unique("n"), ctx.unique("c"), ctx.unique("s")
            flat = f"({i}*{c} + {j})*{inner} + {s}"
            val = ctx.output_expr(
                f"({ctx.ptr(x)}[{flat}] * {a_name}[{j}] + {b_name}[{j}])",
                flat_index_exprs(flat, y.shape),
            )
            lines.append(
                f"for (int64_t {i} = 0; {i} < {n}; ++{i}) for (int64_t {j} = 0; {j} < {c}; ++{j})\n"
                f"for (int64_t {s} = 0; {s} < {inner}; ++{s}) {ctx.ptr(y)}[{flat}] = {val};"
            )
            return "{\n" + "\n".join(lines) + "\n}"
        # plane p = (n, c) by plane, the planes on the thread pool (issue 14: a
        # memory-bound op; the epilogue's indices from the loop variables, no per-element
        # division of a flat index); a float read and one written count 8 units of work
        p, s = ctx.unique("p"), ctx.unique("s")
        flat = f"{p}*{inner} + {s}"
        index = [f"({p} / {c})", f"({p} % {c})", *flat_index_exprs(s, y.shape[2:])]
        val = ctx.output_expr(f"({ctx.ptr(x)}[{flat}] * a_[{p} % {c}] + b_[{p} % {c}])", index)
        body = (
            f"  const {ct}* a_ = {shared[0]}; const {ct}* b_ = {shared[1]};\n"
            f"  for (int64_t {s} = 0; {s} < {inner}; ++{s}) {ctx.ptr(y)}[{flat}] = {val};"
        )
        lines.append(ctx.parallel_for(p, n * c, body, x.size * 8))
        return "{\n" + "\n".join(lines) + "\n}"

    def _emit_batch_stats(self, node: Node, ctx: EmitContext, a_name: str, b_name: str) -> list[str]:
        """Training mode: per-channel ``a``/``b`` from the batch statistics (double), and
        the running-statistics outputs."""
        x = node.inputs[0]
        n, c = x.shape[0], x.shape[1]
        inner = x.size // max(n * c, 1)
        ct = ctype(x.dtype)
        sc, bi, me, va = (ctx.ptr(v) for v in node.inputs[1:5])
        k, i, s = ctx.unique("c"), ctx.unique("n"), ctx.unique("s")
        xv = f"{ctx.ptr(x)}[({i}*{c} + {k})*{inner} + {s}]"
        mom = repr(float(node.attrs["momentum"]))
        cnt = n * inner
        body = [
            "double m = 0, v = 0;",
            f"for (int64_t {i} = 0; {i} < {n}; ++{i}) for (int64_t {s} = 0; {s} < {inner}; ++{s}) m += {xv};",
            f"m /= {cnt};",
            (
                f"for (int64_t {i} = 0; {i} < {n}; ++{i}) for (int64_t {s} = 0; {s} < {inner}; ++{s})"
                f" {{ double d = {xv} - m; v += d * d; }}"
            ),
            f"v /= {cnt};",
            f"const double a = (double){sc}[{k}] / sqrt(v + {float(node.attrs['epsilon'])!r});",
            f"{a_name}[{k}] = ({ct})a; {b_name}[{k}] = ({ct})((double){bi}[{k}] - m * a);",
        ]
        for out, inp, cur in ((1, me, "m"), (2, va, "v")):
            if len(node.outputs) > out:
                o = node.outputs[out]
                body.append(
                    f"{ctx.ptr(o)}[{k}] = ({ctype(o.dtype)})((double){inp}[{k}] * {mom} + {cur} * (1 - {mom}));"
                )
        return [
            f"{ct}* {a_name} = ({ct}*){ctx.scratch(c * x.dtype.itemsize)};",
            f"{ct}* {b_name} = ({ct}*){ctx.scratch(c * x.dtype.itemsize)};",
            f"for (int64_t {k} = 0; {k} < {c}; ++{k}) {{\n" + "\n".join(body) + "\n}",
        ]
