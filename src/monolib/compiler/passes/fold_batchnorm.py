"""Fold inference BatchNormalization (and per-channel Mul/Add/Sub by a constant)
into the preceding Conv / ConvTranspose.

ONNX BatchNormalization (opsets 9, 14, 15; inference mode) computes, per channel c,
``y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]``, i.e.
``y = x * s[c] + t[c]`` with ``s = scale / sqrt(var + eps)`` and ``t = B - mean * s``.
When ``x`` is a convolution ``x = W * input + b`` whose output feeds nothing else,
``y = (W * s) * input + (b * s + t)``: the BN disappears and the conv gets new
constant weight and bias (a bias is created when the conv had none). The same holds
for ``Mul``/``Add``/``Sub`` by a constant that varies only along the channel axis.

Conv weights are ``[M, C/group, k...]`` (output channel on axis 0); ConvTranspose
weights are ``[C, M/group, k...]`` (output channel ``g * M/group + j`` on axis 1
within group ``g``). Arithmetic is done in float64 and cast back.
"""

from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, Value
from .base import Pass, PassResult
from .node_eval import make_const

__all__ = ["FoldBatchNorm", "channel_affine"]

logger = logging.getLogger(__name__)

_CONVS = ("Conv", "ConvTranspose")


def _const(v: Value | None) -> np.ndarray | None:
    return None if v is None else v.const


def _bn_affine(node: Node, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(s, t)`` of an inference BatchNormalization, or None when it cannot fold."""
    if node.attrs.get("training_mode", 0):
        return None
    arrays = [_const(node.input(i)) for i in range(1, 5)]
    if any(a is None or a.shape != (channels,) for a in arrays):
        return None
    scale, bias, mean, var = (a.astype(np.float64) for a in arrays)
    s = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
    return s, bias - mean * s


def _channel_vector(c: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """``c`` as a length-M vector when it broadcasts to ``out_shape`` ([N, M, ...])
    varying only along axis 1 (or not at all), else None."""
    if c.ndim > len(out_shape):
        return None
    padded = c.reshape((1,) * (len(out_shape) - c.ndim) + c.shape)
    m = out_shape[1]
    for axis, d in enumerate(padded.shape):
        if d != 1 and not (axis == 1 and d == m):
            return None
    return np.broadcast_to(padded.reshape(-1), (m,)).astype(np.float64)


def channel_affine(node: Node, x: Value) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel ``(s, t)`` with ``node(x) == x * s[c] + t[c]``, when ``node`` is an
    inference BatchNormalization of ``x`` or a Mul/Add/Sub of ``x`` by a per-channel
    constant; None otherwise. ``x`` has shape ``[N, M, ...]``."""
    m = x.shape[1]
    if node.op_type == "BatchNormalization" and node.input(0) is x:
        return _bn_affine(node, m)
    if node.op_type not in ("Mul", "Add", "Sub") or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a is x and b is not None and b.is_const:
        c = b.const
    elif b is x and a is not None and a.is_const and node.op_type != "Sub":
        c = a.const
    else:
        return None
    if node.outputs[0].shape != x.shape or c.dtype != x.dtype:
        return None
    vec = _channel_vector(c, x.shape)
    if vec is None:
        return None
    ones, zeros = np.ones(m), np.zeros(m)
    if node.op_type == "Mul":
        return vec, zeros
    return ones, (vec if node.op_type == "Add" else -vec)


def _scaled_weight(conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The conv weight with output channel ``c`` scaled by ``s[c]``."""
    w64 = w.astype(np.float64)
    if conv.op_type == "Conv":
        return w64 * s.reshape((-1,) + (1,) * (w.ndim - 1))
    group = int(conv.attrs.get("group", 1))
    cin, mg = w.shape[0], w.shape[1]
    grouped = w64.reshape((group, cin // group, mg) + w.shape[2:])
    grouped = grouped * s.reshape((group, 1, mg) + (1,) * (w.ndim - 2))
    return grouped.reshape(w.shape)


class FoldBatchNorm(Pass):
    """Fold inference BatchNormalization and per-channel Mul/Add/Sub constants into
    the Conv/ConvTranspose (constant weights) that feeds them and nothing else."""

    def call(self, graph: Graph) -> PassResult:
        producers = graph.producers()
        consumers = graph.consumers()
        out_uids = {v.uid for v in graph.outputs}
        names = {v.name for v in graph.values()}
        removed: set[int] = set()
        for node in graph.nodes:
            x = next((v for v in node.inputs if v is not None and not v.is_const), None)
            conv = producers.get(x.uid) if x is not None else None
            if conv is None or conv.op_type not in _CONVS or conv.domain != "":
                continue
            if x is not conv.outputs[0] or x.uid in out_uids or len(consumers.get(x.uid, [])) != 1:
                continue
            # BatchNormalization's optional extra outputs (training statistics) must be unused
            if any(o.uid in out_uids or consumers.get(o.uid) for o in node.outputs[1:]):
                continue
            if not _fold_into(conv, node, x, names):
                continue
            removed.add(id(node))
            producers[conv.outputs[0].uid] = conv
        if removed:
            graph.nodes = [n for n in graph.nodes if id(n) not in removed]
            logger.info(
                "folded %d BatchNormalization/Mul/Add nodes into convolutions", len(removed)
            )
        return PassResult(graph, bool(removed))


def _unique(name: str, names: set[str]) -> str:
    candidate, k = name, 0
    while candidate in names:
        k += 1
        candidate = f"{name}.{k}"
    names.add(candidate)
    return candidate


def _fold_into(conv: Node, node: Node, x: Value, names: set[str]) -> bool:
    """Rewrite ``conv`` to compute ``node(conv(...))``; False when it cannot."""
    w, b = conv.input(1), conv.input(2)
    if w is None or not w.is_const or (b is not None and not b.is_const):
        return False
    if x.dtype.kind != "f" or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        return False
    affine = channel_affine(node, x)
    if affine is None:
        return False
    s, t = affine
    bias = np.zeros(x.shape[1]) if b is None else b.const.astype(np.float64)
    new_w = _scaled_weight(conv, w.const, s).astype(w.dtype)
    new_b = (bias * s + t).astype(x.dtype)
    b_name = b.name if b is not None else f"{w.name}.bias"
    conv.inputs = [
        conv.inputs[0],
        make_const(_unique(f"{w.name}.folded", names), new_w),
        make_const(_unique(f"{b_name}.folded", names), new_b),
    ]
    conv.outputs[0] = node.outputs[0]
    logger.debug("folded %s %r into %s %r", node.op_type, node.name, conv.op_type, conv.name)
    return True
