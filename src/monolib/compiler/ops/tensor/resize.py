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

The output size is ``sizes`` or ``floor(in * scale)``; here scales, sizes and roi are
constant (run-time scales/sizes: :mod:`.resize_data`, bounded by ``max_sizes``). Since shapes are static, the per-axis source indices (and weights) are
tables computed at compile time; the emitted loops only gather and blend. An axis
upsampled by an integer factor with ``asymmetric``/``floor`` indexes by division
instead of a table.

``linear`` and ``cubic`` (Keys' kernel, ``cubic_coeff_a``, ``exclude_outside``) take
their taps and weights exactly as ONNX's reference implementation does
(:func:`reference_taps`, float64): with ``antialias`` the kernel is stretched by
``1 / scale`` when downsampling; ``tf_crop_and_resize`` maps into the constant ``roi``
and writes ``extrapolation_value`` where the source lies outside the input;
``align_corners`` divides by ``scale * in - 1`` (ONNX Runtime by ``out - 1``: the two
differ for fractional output lengths, and monolib follows ONNX).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ....errors import ShapeError, UndecidableDimError, UnsupportedOpError
from ...ir import Node, shape_size
from ...symbolic import Dim, is_dim
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from . import resize_data
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
    the ``T`` source taps of each output position (2 or 4; more with antialias),
    clamped into the input (edge padding), with ``weight[d]`` ``[out, T]`` float32
    their weights.
    """

    shape: tuple[int, ...]
    mode: str
    #: an ``int`` ``f`` for a run-time axis upsampled by the integer factor ``f``
    #: (nearest): source index ``o / f``
    index: list[np.ndarray | int | None]
    weight: list[np.ndarray | None]
    #: per axis, ``[out]`` bool: positions outside the input (``tf_crop_and_resize``),
    #: whose output is ``extrapolation_value``; ``None`` when there are none
    outside: list[np.ndarray | None] | None = None
    extrapolation_value: float = 0.0


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


#: coordinate modes whose nearest source index of an integer upsampling by f is o / f
#: whatever the length (round_prefer_floor/floor; align_corners depends on the length)
_FACTOR_COORDS = ("asymmetric", "half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn")


def _runtime_factor(
    where: str, mode: str, coord: str, nearest_mode: str, scale: float, axis: int
) -> int:
    """The integer factor of a nearest upsampling along a run-time axis.

    Raises
    ------
    UndecidableDimError
        Any other resize of a run-time axis (its tables depend on the length).
    """
    if mode == "nearest" and coord in _FACTOR_COORDS and scale >= 1 and scale.is_integer():
        f = int(scale)
        # these coordinate modes do not read the length: a few lengths check the rule
        if all(
            np.array_equal(
                _nearest(source_coords(coord, n * f, n, scale), nearest_mode, n),
                np.arange(n * f) // f,
            )
            for n in (1, 2, 7, 8, 33)
        ):
            return f
    raise UndecidableDimError(
        f"{where}: axis {axis} has a run-time length; only nearest upsampling by an "
        f"integer factor ({', '.join(_FACTOR_COORDS)}) takes one, not {mode} "
        f"({coord}, {nearest_mode}) by {scale}"
    )


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
    antialias: bool = False,
    roi=None,
    extrapolation_value: float = 0.0,
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
    if coord == "tf_crop_and_resize":
        if mode == "nearest":
            raise UnsupportedOpError(f"{where}: tf_crop_and_resize with nearest mode is not "
                                     "supported (linear and cubic are)")
        if roi is None or len(roi) != 2 * len(axes):
            raise ShapeError(f"{where}: tf_crop_and_resize needs a constant roi of "
                             f"{2 * len(axes)} values, got {roi}")
    crop = [(0.0, 1.0)] * rank
    if roi is not None and coord == "tf_crop_and_resize":
        for i, a in enumerate(axes):
            crop[a] = (float(roi[i]), float(roi[len(axes) + i]))
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
            if isinstance(in_shape[a], Dim):
                out[a] = in_shape[a] * _runtime_factor(
                    where, mode, coord, nearest_mode, scale[a], a
                )
                continue
            span = np.float32(crop[a][1] - crop[a][0])
            out[a] = int(np.floor(np.float32(in_shape[a]) * span * np.float32(scale[a])))
    index: list[np.ndarray | None] = [None] * rank
    weight: list[np.ndarray | None] = [None] * rank
    outside: list[np.ndarray | None] = [None] * rank
    for d in range(rank):
        if isinstance(in_shape[d], Dim):
            if d in axes and scale[d] != 1.0:
                index[d] = int(scale[d])  # checked by _runtime_factor
            continue
        n_in, n_out = int(in_shape[d]), int(out[d])
        if n_out == 0 or n_in == 0:
            continue
        if n_in == n_out and scale[d] == 1.0 and crop[d] == (0.0, 1.0):
            continue
        if mode != "nearest":
            # ONNX's reference in float64; sizes give the exact ratio out / in
            s64 = n_out / n_in if sizes is not None and policy == "stretch" else scale[d]
            index[d], weight[d], outside[d] = reference_taps(
                coord, n_out, n_in, s64, mode, a=cubic_a, exclude=exclude_outside,
                antialias=antialias, roi=crop[d])
            if outside[d] is not None and not outside[d].any():
                outside[d] = None
            continue
        x = source_coords(coord, n_out, n_in, scale[d])
        index[d] = _nearest(x, nearest_mode, n_in)
        if n_in == n_out and np.array_equal(index[d], np.arange(n_out)):
            index[d] = None
    has_outside = any(m is not None for m in outside)
    return ResizePlan(tuple(out), mode, index, weight, outside if has_outside else None,
                      float(extrapolation_value))


def _x_ori(coord: str, n_out: int, n_in: int, scale: float, roi) -> np.ndarray:
    """Source coordinates (float64) of the n-linear/cubic modes, ONNX's reference rule:
    ``align_corners`` divides by ``scale * in - 1`` (the unrounded output length)."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    if coord == "align_corners":
        return np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    if coord == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            return np.full(n_out, (hi - lo) * (n_in - 1) / 2) + lo * (n_in - 1)
        return y * (hi - lo) * (n_in - 1) / (width - 1) + lo * (n_in - 1)
    if coord == "pytorch_half_pixel" and width == 1:
        return np.full(n_out, -0.5)
    if coord in ("half_pixel", "pytorch_half_pixel"):
        return (y + 0.5) / scale - 0.5
    if coord == "asymmetric":
        return y / scale
    if coord == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    raise UnsupportedOpError(f"Resize: coordinate_transformation_mode {coord!r} is not supported")


def _keys(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a`` at distances ``d >= 0``."""
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                    np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))


def _coeffs(mode: str, ratio: float, scale: float, a: float, antialias: bool) -> np.ndarray:
    """Tap weights for the fraction ``ratio`` (ONNX reference): the linear or Keys'
    cubic kernel; with ``antialias`` the kernel is stretched by ``1 / scale`` when
    downsampling (more taps) and the weights normalized to sum 1."""
    if not antialias:
        if mode == "linear":
            return np.array([1 - ratio, ratio])
        return _keys(np.abs(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio])), a)
    s = min(scale, 1.0)
    start = int(np.floor(-(1 if mode == "linear" else 2) / s) + 1)
    d = np.abs((np.arange(start, 2 - start) - ratio) * s)
    w = np.clip(1 - d, 0, 1) if mode == "linear" else _keys(d, a)
    return w / w.sum()


def reference_taps(coord: str, n_out: int, n_in: int, scale: float, mode: str, *,
                   a: float = -0.75, exclude: bool = False, antialias: bool = False,
                   roi=None):
    """(taps ``[out, T]`` clamped into ``[0, in)``, weights ``[out, T]`` float32, outside
    mask ``[out]`` or None) of one linear/cubic axis, as ONNX's reference computes them
    (``onnx/reference/ops/op_resize.py``): the T inputs nearest the source coordinate
    (ties to the left), edge-padded."""
    x = _x_ori(coord, n_out, n_in, scale, roi)
    xi = np.floor(x)
    ratio = np.where(x == xi, 1.0, x - xi)
    w = np.stack([_coeffs(mode, float(r), scale, a, antialias) for r in ratio])
    n = w.shape[1]
    pad = (n + 1) // 2
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    taps = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude:
        w = np.where((taps < 0) | (taps >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    outside = ((x < 0) | (x > n_in - 1)) if coord == "tf_crop_and_resize" else None
    return np.clip(taps, 0, n_in - 1), w.astype(np.float32), outside


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
    if plan.outside is not None:
        mask = np.zeros(x.shape, bool)
        for d, m in enumerate(plan.outside):
            if m is not None:
                mask |= m.reshape((-1,) + (1,) * (x.ndim - d - 1))
        x = np.where(mask, np.asarray(plan.extrapolation_value, x.dtype), x)
    return np.array(x, order="C")


class _Resize(OpDef):
    """Shared by the Resize versions; subclasses say where scales and sizes come from."""

    fixed_coord: ClassVar[str | None] = None
    #: indices of the ``scales`` and ``sizes`` inputs (``None``: the version lacks it)
    scale_inputs: ClassVar[tuple[int | None, int | None]] = (2, 3)
    defaults = {
        "antialias": 0,
        "axes": None,
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
        "keep_aspect_ratio_policy": "stretch",
        "nearest_mode": "round_prefer_floor",
    }

    def _inputs(self, node: Node) -> tuple[list | None, list | None]:
        raise NotImplementedError

    def plan(self, node: Node) -> ResizePlan:
        where = f"{node.op_type} (node {node.name!r})"
        antialias = bool(self.attr(node, "antialias"))
        if antialias and node.attrs["mode"] == "nearest":
            raise UnsupportedOpError(f"{where}: antialias applies to linear and cubic modes, "
                                     "not nearest")
        scales, sizes = self._inputs(node)
        coord = self.fixed_coord or node.attrs["coordinate_transformation_mode"]
        roi = self._const(node, 1, "roi") if coord == "tf_crop_and_resize" else None
        nearest = (
            "floor" if self.fixed_coord else self.attr(node, "nearest_mode")
        )
        return resize_plan(
            node.inputs[0].shape,
            scales,
            sizes,
            mode=node.attrs["mode"],
            coord=coord,
            nearest_mode=nearest,
            axes=self.attr(node, "axes"),
            policy=self.attr(node, "keep_aspect_ratio_policy"),
            cubic_a=self.attr(node, "cubic_coeff_a"),
            exclude_outside=bool(self.attr(node, "exclude_outside")),
            antialias=antialias,
            roi=roi,
            extrapolation_value=self.attr(node, "extrapolation_value"),
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
        if resize_data.run_time_input(node, self):
            return resize_data.infer(node, self)
        if x.dtype.kind != "f" and node.attrs["mode"] != "nearest":
            raise UnsupportedOpError(
                f"{node.op_type} (node {node.name!r}): linear mode needs floats"
            )
        return [(self.plan(node).shape, x.dtype)]

    def reference(self, node: Node, inputs):
        return [_apply_reference(inputs[0], self.plan(node))]

    def epilogue_groups(self, node: Node):
        if resize_data.run_time_input(node, self):
            return None
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if resize_data.run_time_input(node, self):
            return resize_data.emit(node, ctx, self)
        x, y = node.inputs[0], node.outputs[0]
        plan = self.plan(node)
        ist = contiguous_strides(x.shape)
        ost = contiguous_strides(y.shape)
        epi = has_epilogue(ctx, len(y.shape))
        if not epi:
            fast = self._emit_integer_upsample(ctx, plan, x, y)
            if fast:
                return fast
        fast = self._emit_linear2(node, ctx, plan, x, y)
        if fast:
            return fast
        lin = [d for d, w in enumerate(plan.weight) if w is not None]
        taps = {d: plan.index[d].shape[1] for d in lin}
        unroll = int(np.prod(list(taps.values()), dtype=np.int64)) <= 64
        tables = {
            d: self._table(ctx, plan, d, x.shape[d])
            for d, t in enumerate(plan.index)
            if t is not None and d not in lin
        }
        tap_idx = {
            d: ctx.param(plan.index[d].astype(np.int32).reshape(-1), "resize_taps") for d in lin
        }
        tap_w = {d: ctx.param(plan.weight[d].reshape(-1), "resize_w") for d in lin}
        masks = {d: ctx.param(m.astype(np.uint8), "resize_outside")
                 for d, m in enumerate(plan.outside or []) if m is not None}
        px = ctx.ptr(x)
        ct = ctype(y.dtype)

        def body(o: list[str]) -> str:
            src = [tables[d](od) if d in tables else od for d, od in enumerate(o)]
            pre = ""
            if plan.mode == "nearest":
                val = f"{px}[{linear_offset(src, ist)}]"
            elif unroll:
                terms = []
                for combo in itertools.product(*(range(taps[d]) for d in lin)):
                    idx, w = list(src), []
                    for d, t in zip(lin, combo):
                        k = f"{o[d]}*{taps[d]} + {t}"
                        idx[d] = f"(int64_t){tap_idx[d]}[{k}]"
                        w.append(f"{tap_w[d]}[{k}]")
                    terms.append(" * ".join(w + [f"{px}[{linear_offset(idx, ist)}]"]))
                val = "(" + " + ".join(terms) + ")"
            else:  # long (antialias) filters: one tap loop per resized axis
                acc, tv, idx = ctx.unique("acc"), {d: ctx.unique("t") for d in lin}, list(src)
                for d in lin:
                    idx[d] = f"(int64_t){tap_idx[d]}[{o[d]}*{taps[d]} + {tv[d]}]"
                w = " * ".join(f"{tap_w[d]}[{o[d]}*{taps[d]} + {tv[d]}]" for d in lin)
                code = f"{acc} += {w} * {px}[{linear_offset(idx, ist)}];"
                for d in reversed(lin):
                    code = (f"for (int64_t {tv[d]} = 0; {tv[d]} < {taps[d]}; ++{tv[d]}) {{\n"
                            f"{code}\n}}")
                pre = f"float {acc} = 0.0f;\n{code}\n"
                val = f"(({ct}){acc})"
            if masks:
                cond = " || ".join(f"{masks[d]}[{o[d]}]" for d in masks)
                val = f"(({cond}) ? ({ct}){plan.extrapolation_value!r} : {val})"
            if epi:
                val = ctx.output_expr(val, o)
            return pre + f"{ctx.ptr(y)}[{linear_offset(o, ost)}] = {val};"

        return emit_loops(ctx, y.shape, body)

    def emit_device(self, node: Node, ctx: Any) -> Any:
        """Device Resize from the C path's :class:`ResizePlan` (constant scales, sizes
        and roi): one output element per work item. Nearest gathers through a source
        index table (division for an integer upsampling); linear and cubic loop over
        each resized axis's taps (weights and clamped indices from tables in the params
        blob, antialias filters included) in the order of the C path's sum;
        ``tf_crop_and_resize`` writes ``extrapolation_value`` where a mask says the
        source lies outside the input.

        Raises
        ------
        UnsupportedOpError
            Run-time scales or sizes, or a run-time axis length.
        """
        from ...backends.device.lowerings import decompose, element_kernel, flat_of

        where = f"device {node.op_type} (node {node.name!r})"
        if resize_data.run_time_input(node, self):
            raise UnsupportedOpError(f"{where}: run-time scales/sizes are not supported on "
                                     "devices (constant ones are)")
        x, y = node.inputs[0], node.outputs[0]
        if any(isinstance(n, Dim) for n in (*x.shape, *y.shape)):
            raise UnsupportedOpError(f"{where}: run-time axis lengths {x.shape} -> {y.shape}")
        plan = self.plan(node)
        ist = contiguous_strides(x.shape)
        T = ctype(y.dtype)
        i = [f"i{d}" for d in range(len(y.shape))]
        body = decompose("gid", y.shape, "i")
        lin = [d for d, w in enumerate(plan.weight) if w is not None]
        src = list(i)
        for d, idx in enumerate(plan.index):
            if idx is None or d in lin:
                continue
            n_out, n_in = len(idx), int(x.shape[d])
            f = n_out // n_in if n_in and n_out % n_in == 0 else 0
            if f and np.array_equal(idx, np.arange(n_out) // f):
                src[d] = f"({i[d]} / {f})"
            else:
                src[d] = f"(idx_t){ctx.table(idx.astype(np.int32), 'resize_idx')}[{i[d]}]"
        xp = ctx.ptr(x)
        if plan.mode == "nearest":
            val = f"{xp}[{flat_of(src, ist)}]"
        else:
            # one tap loop per resized axis, the last axis innermost (the C path's order)
            val, opened = "(" + T + ")s_", 0
            body.append("float s_ = 0.0f;")
            weights = []
            for d in lin:
                n = plan.index[d].shape[1]
                tab = ctx.table(plan.index[d].astype(np.int32), "resize_taps")
                wt = ctx.table(plan.weight[d].astype(np.float32), "resize_w")
                pad = "  " * opened
                body += [f"{pad}for (idx_t t{d} = 0; t{d} < {n}; ++t{d}) {{",
                         f"{pad}  const idx_t k{d} = {i[d]} * {n} + t{d};",
                         f"{pad}  const idx_t j{d} = (idx_t){tab}[k{d}];",
                         f"{pad}  const float w{d} = {wt}[k{d}];"]
                src[d], opened = f"j{d}", opened + 1
                weights.append(f"w{d}")
            body.append("  " * opened + f"s_ += {' * '.join(weights)} * {xp}[{flat_of(src, ist)}];")
            body += ["  " * k + "}" for k in reversed(range(opened))]
        if plan.outside is not None:
            masks = [f"{ctx.table(m.astype(np.uint8), 'resize_outside')}[{i[d]}]"
                     for d, m in enumerate(plan.outside) if m is not None]
            val = (f"(({' || '.join(masks)}) ? "
                   f"{c_literal(plan.extrapolation_value, y.dtype)} : {val})")
        body.append(f"const {T} acc = {val};")
        return element_kernel(node, ctx, body)

    def _emit_integer_upsample(self, ctx: EmitContext, plan: ResizePlan, x, y) -> str:
        """Nearest upsampling of the last two dims by integer factors (the FPN's 2x):
        each input row is widened once, then copied ``fy - 1`` times (``resize.h``,
        rows split over the thread pool when large). ``""`` when the plan is not of that
        form."""
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
            if isinstance(idx, int):  # a run-time axis upsampled by idx
                f.append(idx)
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
        outer = shape_size(x.shape[:-2])
        ctx.include("resize.h")
        return (
            f"ml_upsample_nearest({outer * h}, {w}, {fx}, {fy}, {y.dtype.itemsize}, "
            f"{ctx.ptr(x)}, {ctx.ptr(y)});"
        )

    def _emit_linear2(self, node: Node, ctx: EmitContext, plan: ResizePlan, x, y) -> str:
        """Linear mode resizing only the last two axes, two taps each (a U-Net's or FPN's
        bilinear 2x, any coordinate transformation) on float32: ``ml_resize_linear2`` of
        ``resize.h`` (separable, rows resized along W once and kept, split over the
        thread pool, the fused epilogue per output row). ``""`` otherwise."""
        rank = len(x.shape)
        if (
            plan.mode != "linear"
            or rank < 2
            or x.dtype != np.float32
            or plan.outside
            or any(plan.index[d] is not None for d in range(rank - 2))
            or any(is_dim(v) for v in (*x.shape, *y.shape))
        ):
            return ""
        tables = []
        for d in (rank - 2, rank - 1):
            idx, w = plan.index[d], plan.weight[d]
            n = y.shape[d]
            if idx is None:  # not resized: tap (i, i), weights (1, 0)
                idx = np.stack([np.arange(n)] * 2, axis=1)
                w = np.stack([np.ones(n), np.zeros(n)], axis=1)
            elif not isinstance(idx, np.ndarray) or w is None or idx.shape[1:] != (2,):
                return ""
            tables.append((ctx.param(np.ascontiguousarray(idx.T, np.int32).reshape(-1),
                                     "resize_taps"),
                           ctx.param(np.ascontiguousarray(w.T, np.float32).reshape(-1),
                                     "resize_w")))
        (iy, wy), (ix, wx) = tables
        h, w_in = x.shape[-2:]
        oh, ow = y.shape[-2:]
        planes = shape_size(x.shape[:-2])
        fn = ctx.tile_epilogue(self.epilogue_groups(node))
        if fn == "0" and has_epilogue(ctx, rank):  # one only expressible per element
            return ""
        epi = "(ml_resize_epi_fn)0" if fn == "0" else f"(ml_resize_epi_fn){fn}"
        ctx.include("resize.h")
        scratch = ctx.scratch(4 * 2 * ow)
        return (f"ml_resize_linear2({planes}, {h}, {w_in}, {oh}, {ow}, {iy}, {wy}, {ix}, "
                f"{wx}, {ctx.ptr(x)}, {ctx.ptr(y)}, (float*){scratch}, {epi}, "
                f"{ctx.ptr(y)});")

    def _table(self, ctx: EmitContext, plan: ResizePlan, d: int, n_in: int):
        """A function from the output loop variable to the C source index."""
        idx = plan.index[d]
        if isinstance(idx, int):  # a run-time axis upsampled by idx
            return lambda o: f"({o} / {idx})"
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
    scale_inputs = (1, None)

    def _inputs(self, node: Node):
        return self._const(node, 1, "scales"), None


@register
class Resize10(_Resize):
    """ONNX ``Resize`` 10: ``scales`` input, asymmetric coordinates, floor."""

    op_type, since_version, fixed_coord = "Resize", 10, "asymmetric"
    scale_inputs = (1, None)

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
