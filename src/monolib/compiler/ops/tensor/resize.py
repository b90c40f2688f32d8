"""ONNX ``Resize`` (10, 11, 13, 18, 19) and ``Upsample`` (9), modes ``nearest`` and
``linear`` (n-linear).

Every output coordinate ``y`` along a resized axis maps to a source coordinate by
``coordinate_transformation_mode`` (ONNX spec): ``half_pixel`` ``(y + 0.5) / s - 0.5``,
``half_pixel_symmetric`` (19), ``pytorch_half_pixel`` (``-0.5`` when the output length
is 1), ``align_corners`` ``y (in - 1) / (out - 1)``, ``asymmetric`` ``y / s``. Nearest
rounds it by ``nearest_mode`` (``round_prefer_floor``, ``round_prefer_ceil``,
``floor``, ``ceil``) and clamps; linear blends the two neighbours of the coordinate
clamped to ``[0, in - 1]``. Resize-10 and Upsample use ``asymmetric`` with ``floor``
for nearest.

The output size is ``sizes`` or ``floor(in * scale)``; scales, sizes and roi must be
constant. Since shapes are static, the per-axis source indices (and weights) are
tables computed at compile time; the emitted loops only gather and blend. An axis
upsampled by an integer factor with ``asymmetric``/``floor`` indexes by division
instead of a table. ``cubic``, ``tf_crop_and_resize`` and ``antialias`` are not
supported (an :class:`UnsupportedOpError` names them).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ....runtime.errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, ctype, register
from .loops import contiguous_strides, emit_loops, has_epilogue, linear_offset, normalize_axis

__all__ = [
    "Resize10",
    "Resize11",
    "Resize18",
    "ResizePlan",
    "Upsample9",
    "resize_plan",
    "source_coords",
]

logger = logging.getLogger(__name__)


@dataclass
class ResizePlan:
    """What the emitter needs: output shape, mode, and per-axis tables.

    ``index[d]`` is ``None`` for an untouched axis. For nearest it is the int64 source
    index of each output position ``[out]``; for linear and cubic it is ``[out, T]``:
    the ``T`` (2 or 4) source taps of each output position, clamped into the input
    (edge padding), with ``weight[d]`` ``[out, T]`` float32 their weights.
    """

    shape: tuple[int, ...]
    mode: str
    index: list[np.ndarray | None]
    weight: list[np.ndarray | None]


def source_coords(mode: str, out_len: int, in_len: int, scale: float) -> np.ndarray:
    """Source coordinates of output positions ``0..out_len-1`` along one axis (ONNX
    ``coordinate_transformation_mode``), computed in float32 like ONNX Runtime so
    that rounding ties land on the same side.

    Raises
    ------
    UnsupportedOpError
        For ``tf_crop_and_resize`` or an unknown mode.
    """
    f = np.float32
    y = np.arange(out_len, dtype=f)
    s, half = f(scale), f(0.5)
    if mode == "asymmetric":
        return y / s
    if mode == "half_pixel":
        return (y + half) / s - half
    if mode == "pytorch_half_pixel":
        return (y + half) / s - half if out_len > 1 else np.zeros(out_len, f)
    if mode == "align_corners":
        return y * f(in_len - 1) / f(out_len - 1) if out_len > 1 else np.zeros(out_len, f)
    if mode == "half_pixel_symmetric":
        adjustment = f(out_len) / (s * f(in_len))
        offset = f(in_len) / f(2) * (f(1) - adjustment)
        return offset + (y + half) / s - half
    raise UnsupportedOpError(f"Resize: coordinate_transformation_mode {mode!r} is not supported")


def _nearest(x: np.ndarray, mode: str, in_len: int) -> np.ndarray:
    frac = x - np.floor(x)
    if mode == "round_prefer_floor":
        idx = np.where(frac == 0.5, np.floor(x), np.round(x))
    elif mode == "round_prefer_ceil":
        idx = np.where(frac == 0.5, np.ceil(x), np.round(x))
    elif mode == "floor":
        idx = np.floor(x)
    elif mode == "ceil":
        idx = np.ceil(x)
    else:
        raise UnsupportedOpError(f"Resize: nearest_mode {mode!r} is not supported")
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def resize_plan(
    in_shape,
    scales,
    sizes,
    *,
    mode: str,
    coord: str,
    nearest_mode: str,
    axes=None,
    policy: str = "stretch",
    cubic_a: float = -0.75,
    exclude_outside: bool = False,
    where: str = "Resize",
) -> ResizePlan:
    """The output shape and index/weight tables of a Resize.

    Raises
    ------
    ShapeError
        When neither or both of scales and sizes are given, or their length is wrong.
    UnsupportedOpError
        For modes other than nearest/linear.
    """
    rank = len(in_shape)
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank, where) for a in axes]
    if mode not in ("nearest", "linear", "cubic"):
        raise UnsupportedOpError(
            f"{where}: mode {mode!r} is not supported (nearest, linear, cubic)"
        )
    if (scales is None) == (sizes is None):
        raise ShapeError(f"{where}: exactly one of scales and sizes must be given")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise ShapeError(f"{where}: {len(given)} scales/sizes for {len(axes)} axes")
    scale = [1.0] * rank
    out = list(in_shape)
    if sizes is not None:
        ratios = [
            float(np.float32(sizes[i]) / np.float32(in_shape[a])) if in_shape[a] else 1.0
            for i, a in enumerate(axes)
        ]
        if policy in ("not_larger", "not_smaller"):
            s = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                scale[a], out[a] = s, int(np.float32(s) * np.float32(in_shape[a]) + np.float32(0.5))
        else:
            for i, a in enumerate(axes):
                scale[a], out[a] = ratios[i], int(sizes[i])
    else:
        for i, a in enumerate(axes):
            scale[a] = float(np.float32(scales[i]))
            if scale[a] <= 0:
                raise ShapeError(f"{where}: scale {scales[i]} must be positive")
            out[a] = int(np.floor(np.float32(in_shape[a]) * np.float32(scale[a])))
    index: list[np.ndarray | None] = [None] * rank
    weight: list[np.ndarray | None] = [None] * rank
    for d in range(rank):
        n_in, n_out = int(in_shape[d]), int(out[d])
        if n_in == n_out and scale[d] == 1.0 or n_out == 0 or n_in == 0:
            continue
        x = source_coords(coord, n_out, n_in, scale[d])
        if mode == "nearest":
            index[d] = _nearest(x, nearest_mode, n_in)
            if n_in == n_out and np.array_equal(index[d], np.arange(n_out)):
                index[d] = None
        elif mode == "linear":
            x = np.clip(x, 0, n_in - 1)
            i0 = np.floor(x).astype(np.int64)
            w1 = (x - i0).astype(np.float32)
            index[d] = np.stack([i0, np.minimum(i0 + 1, n_in - 1)], axis=1)
            weight[d] = np.stack([np.float32(1) - w1, w1], axis=1)
        else:
            if coord == "align_corners" and float(np.float32(n_in) * np.float32(scale[d])) != n_out:
                # ONNX Runtime divides by (n_out - 1) like the spec's text, ONNX's reference
                # by (n_in * scale - 1); linear follows ORT, cubic declines to choose
                raise UnsupportedOpError(
                    f"{where}: cubic align_corners with a fractional output length "
                    f"({n_in} * {scale[d]:g}) is ambiguous (ONNX Runtime and the ONNX reference differ)"
                )
            index[d], weight[d] = _cubic_taps(x, n_in, cubic_a, exclude_outside)
    return ResizePlan(tuple(out), mode, index, weight)


def _cubic_taps(x: np.ndarray, n_in: int, a: float, exclude: bool):
    """Cubic convolution taps ``floor(x) - 1 .. floor(x) + 2`` and their weights
    (Keys' kernel with coefficient ``a``, the ONNX spec's formula); with ``exclude``
    the taps outside the input get weight 0 and the rest are renormalized."""
    x64 = np.asarray(x, np.float64)
    i0 = np.floor(x64).astype(np.int64)
    t = x64 - i0
    d = np.stack([t + 1, t, 1 - t, 2 - t], axis=1)  # distances to the 4 taps
    w = np.where(
        d <= 1,
        ((a + 2) * d - (a + 3)) * d * d + 1,
        ((a * d - 5 * a) * d + 8 * a) * d - 4 * a,
    )
    taps = i0[:, None] + np.arange(-1, 3)[None, :]
    if exclude:
        w = np.where((taps < 0) | (taps >= n_in), 0.0, w)
        w = w / np.where(w.sum(axis=1, keepdims=True) == 0, 1, w.sum(axis=1, keepdims=True))
    return np.clip(taps, 0, n_in - 1), w.astype(np.float32)


def _apply_reference(x: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """Separable NumPy resize following ``plan`` (float math in x's dtype)."""
    for d, idx in enumerate(plan.index):
        if idx is None:
            continue
        if plan.mode == "nearest":
            x = np.take(x, idx, axis=d)
            continue
        shape = (-1,) + (1,) * (x.ndim - d - 1)
        acc = None
        for t in range(idx.shape[1]):
            term = np.take(x, idx[:, t], axis=d) * plan.weight[d][:, t].astype(x.dtype).reshape(
                shape
            )
            acc = term if acc is None else acc + term
        x = acc
    return np.array(x, order="C")


class _Resize(OpDef):
    """Shared by the Resize versions; subclasses say where scales and sizes come from."""

    fixed_coord: ClassVar[str | None] = None

    def _inputs(self, node: Node) -> tuple[list | None, list | None]:
        raise NotImplementedError

    def plan(self, node: Node) -> ResizePlan:
        where = f"{node.op_type} (node {node.name!r})"
        if node.attrs.get("antialias", 0):
            raise UnsupportedOpError(f"{where}: antialias is not supported")
        scales, sizes = self._inputs(node)
        coord = self.fixed_coord or node.attrs["coordinate_transformation_mode"]
        nearest = (
            "floor" if self.fixed_coord else node.attrs.get("nearest_mode", "round_prefer_floor")
        )
        return resize_plan(
            node.inputs[0].shape,
            scales,
            sizes,
            mode=node.attrs["mode"],
            coord=coord,
            nearest_mode=nearest,
            axes=node.attrs.get("axes"),
            policy=node.attrs.get("keep_aspect_ratio_policy", "stretch"),
            cubic_a=node.attrs.get("cubic_coeff_a", -0.75),
            exclude_outside=bool(node.attrs.get("exclude_outside", 0)),
            where=where,
        )

    def _const(self, node: Node, i: int, what: str) -> list | None:
        v = node.input(i)
        if v is None or v.size == 0:
            return None
        if v.const is None:
            raise ShapeError(
                f"{node.op_type} (node {node.name!r}): input {what!r} must be a compile-time constant"
            )
        return [x.item() for x in v.const.reshape(-1)]

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x.dtype.kind != "f" and node.attrs["mode"] != "nearest":
            raise UnsupportedOpError(
                f"{node.op_type} (node {node.name!r}): linear mode needs floats"
            )
        return [(self.plan(node).shape, x.dtype)]

    def reference(self, node: Node, inputs):
        return [_apply_reference(inputs[0], self.plan(node))]

    def epilogue_groups(self, node: Node):
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        plan = self.plan(node)
        ist = contiguous_strides(x.shape)
        ost = contiguous_strides(y.shape)
        epi = has_epilogue(ctx, len(y.shape))
        if not epi:
            fast = self._emit_integer_upsample(ctx, plan, x, y)
            if fast:
                return fast
        lin = [d for d, w in enumerate(plan.weight) if w is not None]
        taps = plan.index[lin[0]].shape[1] if lin else 1
        if taps ** len(lin) > 64:
            raise UnsupportedOpError(
                f"{node.op_type} (node {node.name!r}): {plan.mode} resize of {len(lin)} axes"
            )
        tables = {
            d: self._table(ctx, plan, d, x.shape[d])
            for d, t in enumerate(plan.index)
            if t is not None and d not in lin
        }
        tap_idx = {
            d: ctx.param(plan.index[d].astype(np.int32).reshape(-1), "resize_taps") for d in lin
        }
        tap_w = {d: ctx.param(plan.weight[d].reshape(-1), "resize_w") for d in lin}
        px = ctx.ptr(x)

        def body(o: list[str]) -> str:
            src = [tables[d](od) if d in tables else od for d, od in enumerate(o)]
            if plan.mode == "nearest":
                val = f"{px}[{linear_offset(src, ist)}]"
            else:
                terms = []
                for combo in itertools.product(range(taps), repeat=len(lin)):
                    idx, w = list(src), []
                    for d, t in zip(lin, combo):
                        k = f"{o[d]}*{taps} + {t}"
                        idx[d] = f"(int64_t){tap_idx[d]}[{k}]"
                        w.append(f"{tap_w[d]}[{k}]")
                    terms.append(" * ".join(w + [f"{px}[{linear_offset(idx, ist)}]"]))
                val = "(" + " + ".join(terms) + ")"
            if epi:
                val = ctx.output_expr(val, o)
            return f"{ctx.ptr(y)}[{linear_offset(o, ost)}] = {val};"

        return emit_loops(ctx, y.shape, body)

    def _emit_integer_upsample(self, ctx: EmitContext, plan: ResizePlan, x, y) -> str:
        """Nearest upsampling of the last two dims by integer factors (the FPN's 2x):
        each input row is widened once, then copied ``fy - 1`` times with ``memcpy``.
        ``""`` when the plan is not of that form."""
        rank = len(x.shape)
        if (
            plan.mode != "nearest"
            or rank < 2
            or any(plan.index[d] is not None for d in range(rank - 2))
        ):
            return ""
        f = []
        for d in (rank - 2, rank - 1):
            idx, n_in = plan.index[d], x.shape[d]
            if idx is None:
                f.append(1)
                continue
            n_out = len(idx)
            if (
                n_in == 0
                or n_out % n_in
                or not np.array_equal(idx, np.arange(n_out) // (n_out // n_in))
            ):
                return ""
            f.append(n_out // n_in)
        fy, fx = f
        h, w = x.shape[-2:]
        ow = w * fx
        outer = int(np.prod(x.shape[:-2], dtype=np.int64))
        ct = ctype(y.dtype)
        r, j, k, q = (ctx.unique(p) for p in ("r", "j", "k", "q"))
        orow, irow = ctx.unique("orow"), ctx.unique("irow")
        return (
            f"for (int64_t {r} = 0; {r} < {outer * h}; ++{r}) {{\n"
            f"{ct}* {orow} = {ctx.ptr(y)} + {r}*{fy * ow};\n"
            f"const {ct}* {irow} = {ctx.ptr(x)} + {r}*{w};\n"
            f"for (int64_t {j} = 0; {j} < {w}; ++{j}) for (int64_t {k} = 0; {k} < {fx}; ++{k}) "
            f"{orow}[{j}*{fx} + {k}] = {irow}[{j}];\n"
            f"for (int64_t {q} = 1; {q} < {fy}; ++{q}) "
            f"memcpy({orow} + {q}*{ow}, {orow}, {ow * y.dtype.itemsize});\n}}"
        )

    def _table(self, ctx: EmitContext, plan: ResizePlan, d: int, n_in: int):
        """A function from the output loop variable to the C source index."""
        idx = plan.index[d]
        n_out = len(idx)
        if plan.mode == "nearest" and n_out % n_in == 0:
            f = n_out // n_in
            if np.array_equal(idx, np.arange(n_out) // f):
                return lambda o: f"({o} / {f})"
        table = ctx.param(idx.astype(np.int32), "resize_idx")
        return lambda o: f"(int64_t){table}[{o}]"


@register
class Upsample9(_Resize):
    """ONNX ``Upsample`` 9: ``scales`` input, asymmetric coordinates, floor."""

    op_type, since_version, fixed_coord = "Upsample", 9, "asymmetric"

    def _inputs(self, node: Node):
        return self._const(node, 1, "scales"), None


@register
class Resize10(_Resize):
    """ONNX ``Resize`` 10: ``scales`` input, asymmetric coordinates, floor."""

    op_type, since_version, fixed_coord = "Resize", 10, "asymmetric"

    def _inputs(self, node: Node):
        return self._const(node, 1, "scales"), None


@register
class Resize11(_Resize):
    """ONNX ``Resize`` 11, 13: ``roi``, ``scales``, ``sizes`` inputs (roi unused: only
    ``tf_crop_and_resize`` reads it, which is not supported)."""

    op_type, since_version = "Resize", 11

    def _inputs(self, node: Node):
        return self._const(node, 2, "scales"), self._const(node, 3, "sizes")


@register
class Resize18(Resize11):
    """ONNX ``Resize`` 18, 19: adds ``axes``, ``keep_aspect_ratio_policy``,
    ``antialias`` (unsupported) and ``half_pixel_symmetric`` (19)."""

    since_version = 18
