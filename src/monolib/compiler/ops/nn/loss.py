"""NegativeLogLikelihoodLoss (ONNX 12, 13, 22) and SoftmaxCrossEntropyLoss (12, 13).

Both view the scores as ``[N, C, D]`` (``D`` = product of the dims after C) and the
target as ``[N, D]`` (int32/int64). Per element ``w = 0`` when ``target ==
ignore_index``, else ``weight[target]`` (1 without weights), and ``loss = -w *
x[n, target, d]``, where ``x`` is the input (NLL) or its log-softmax over C (SCE).
``reduction``: ``none`` -> loss shaped like the target, ``sum`` -> sum(loss),
``mean`` -> sum(loss) / sum(w) (the ONNX spec: a weighted mean over the elements not
ignored). SCE's optional second output is the log-softmax ``[N, C, ...]``.

A target outside ``[0, C)`` that is not ``ignore_index`` is clamped into range in C
(the spec leaves it undefined; C must not read out of bounds).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype

__all__ = ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "nll_reference"]

logger = logging.getLogger(__name__)


def _check(node: Node) -> tuple[int, int, int]:
    """``(N, C, D)`` of the node's scores; checks the target and weight shapes."""
    x, t = node.inputs[0], node.inputs[1]
    w = node.input(2)
    where = f"{node.op_type} (node {node.name!r})"
    if x.dtype.kind != "f":
        raise UnsupportedOpError(f"{where}: scores must be float, got {x.dtype}")
    if t.dtype not in (np.int32, np.int64):
        raise ShapeError(f"{where}: target must be int32 or int64, got {t.dtype}")
    if len(x.shape) < 2 or tuple(t.shape) != (x.shape[0], *x.shape[2:]):
        raise ShapeError(f"{where}: scores {list(x.shape)} and target {list(t.shape)} "
                         "must be [N, C, d1...] and [N, d1...]")
    if w is not None and tuple(w.shape) != (x.shape[1],):
        raise ShapeError(f"{where}: weight {list(w.shape)} must be [C] = [{x.shape[1]}]")
    reduction = node.attrs["reduction"]
    if reduction not in ("none", "sum", "mean"):
        raise ShapeError(f"{where}: reduction {reduction!r} is not none, sum or mean")
    n, c = x.shape[:2]
    return int(n), int(c), int(np.prod(x.shape[2:], dtype=np.int64))


def _loss_type(node: Node) -> OutType:
    x, t = node.inputs[0], node.inputs[1]
    shape = tuple(t.shape) if node.attrs["reduction"] == "none" else ()
    return shape, x.dtype


def nll_reference(node: Node, logp: np.ndarray, target: np.ndarray,
                  weight: np.ndarray | None) -> np.ndarray:
    """The loss of log-probabilities ``logp`` ``[N, C, ...]`` (NumPy, the ONNX spec)."""
    n, c, d = _check(node)
    ii = node.attrs.get("ignore_index")
    x = logp.reshape(n, c, d)
    t = target.reshape(n, d).astype(np.int64)
    keep = np.ones(t.shape, bool) if ii is None else t != ii
    tc = np.clip(t, 0, c - 1)
    w = np.ones(t.shape, x.dtype) if weight is None else weight[tc]
    w = np.where(keep, w, 0).astype(x.dtype)
    picked = np.take_along_axis(x, tc[:, None, :], 1)[:, 0, :]
    loss = -w * picked
    red = node.attrs["reduction"]
    if red == "none":
        return loss.reshape(target.shape).astype(x.dtype)
    if red == "sum":
        return np.asarray(loss.sum(dtype=np.float64), x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss.sum(dtype=np.float64) / w.sum(dtype=np.float64), x.dtype)


def _emit_nll(node: Node, ctx: EmitContext, logp: str) -> str:
    """C that reduces the log-probabilities at ``logp`` (``[N, C, D]``) into output 0."""
    n, c, d = _check(node)
    t, w = node.inputs[1], node.input(2)
    ty = ctype(node.inputs[0].dtype)
    ii = node.attrs.get("ignore_index")
    red = node.attrs["reduction"]
    out = ctx.ptr(node.outputs[0])
    skip = f"tv == {c_literal(ii, np.int64)}" if ii is not None else "0"
    wexpr = f"(double){ctx.ptr(w)}[tc]" if w is not None else "1.0"
    store = f"{out}[nd] = ({ty})loss;" if red == "none" else ""
    final = {"none": "",
             "sum": f"{out}[0] = ({ty})num;",
             "mean": f"{out}[0] = ({ty})(num / den);"}[red]
    return (
        "{\n"
        f"  const {ctype(t.dtype)}* tg = {ctx.ptr(t)};\n"
        "  double num = 0.0, den = 0.0;\n"
        f"  for (int64_t nd = 0; nd < {n * d}; ++nd) {{\n"
        f"    int64_t n = nd / {d}, d = nd % {d};\n"
        "    int64_t tv = (int64_t)tg[nd];\n"
        "    double loss = 0.0, w = 0.0;\n"
        f"    if (!({skip})) {{\n"
        f"      int64_t tc = tv < 0 ? 0 : (tv >= {c} ? {c - 1} : tv);\n"
        f"      w = {wexpr};\n"
        f"      loss = -w * (double){logp}[(n * {c} + tc) * {d} + d];\n"
        "    }\n"
        f"    {store}\n"
        "    num += loss; den += w;\n"
        "  }\n"
        f"  (void)den; {final}\n"
        "}"
    )


@register
class NegativeLogLikelihoodLoss(OpDef):
    """ONNX ``NegativeLogLikelihoodLoss``: input ``[N, C, d...]`` (float), target
    ``[N, d...]`` (int32/int64), optional weight ``[C]`` -> loss (``[N, d...]`` for
    ``reduction="none"``, else a scalar).

    Raises
    ------
    ShapeError
        Shapes that do not match, an unknown reduction.
    """

    op_type, since_version = "NegativeLogLikelihoodLoss", 12
    also_versions = (22,)  # 22 only added element types

    def infer(self, node: Node) -> list[OutType]:
        _check(node)
        return [_loss_type(node)]

    def reference(self, node: Node, inputs):
        return [nll_reference(node, inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        return _emit_nll(node, ctx, ctx.ptr(node.inputs[0]))


@register
class SoftmaxCrossEntropyLoss(OpDef):
    """ONNX ``SoftmaxCrossEntropyLoss``: the NLL loss of ``log_softmax(scores, axis=1)``;
    optional output 1 is that log-softmax (``[N, C, d...]``, same dtype as scores).

    Raises
    ------
    ShapeError
        Shapes that do not match, an unknown reduction.
    """

    op_type, since_version = "SoftmaxCrossEntropyLoss", 12

    def infer(self, node: Node) -> list[OutType]:
        _check(node)
        outs = [_loss_type(node)]
        if len(node.outputs) > 1:
            x = node.inputs[0]
            outs.append((tuple(x.shape), x.dtype))
        return outs

    def reference(self, node: Node, inputs):
        x = inputs[0]
        m = x.max(axis=1, keepdims=True)
        logp = (x - m) - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
        logp = logp.astype(x.dtype)
        loss = nll_reference(node, logp, inputs[1], inputs[2] if len(inputs) > 2 else None)
        return [loss, logp][: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        n, c, d = _check(node)
        x = node.inputs[0]
        ty = ctype(x.dtype)
        if len(node.outputs) > 1 and node.outputs[1] is not None:
            lp = ctx.ptr(node.outputs[1])
        else:
            lp = f"(({ty}*){ctx.scratch(max(1, n * c * d) * x.dtype.itemsize)})"
        exp, log = ("exp", "log") if x.dtype == np.float64 else ("ml_expf", "logf")
        # log-softmax over C, columns of one n processed together so loops stay contiguous
        head = (
            "{\n"
            f"  const {ty}* xs = {ctx.ptr(x)};\n"
            f"  {ty}* lp = {lp};\n"
            f"  for (int64_t n = 0; n < {n}; ++n) {{\n"
            f"    const {ty}* xn = xs + n * {c * d};\n"
            f"    {ty}* ln = lp + n * {c * d};\n"
            f"    for (int64_t d = 0; d < {d}; ++d) {{\n"
            f"      {ty} m = xn[d];\n"
            f"      for (int64_t c = 1; c < {c}; ++c) m = xn[c * {d} + d] > m ? xn[c * {d} + d] : m;\n"
            f"      {ty} s = 0;\n"
            f"      for (int64_t c = 0; c < {c}; ++c) s += {exp}(xn[c * {d} + d] - m);\n"
            f"      {ty} lse = m + {log}(s);\n"
            f"      for (int64_t c = 0; c < {c}; ++c) ln[c * {d} + d] = xn[c * {d} + d] - lse;\n"
            "    }\n"
            "  }\n"
            "}\n"
        )
        return head + _emit_nll(node, ctx, lp)
