"""GridSample (ONNX 16, 20, 22) and AffineGrid (20).

GridSample: X ``[N, C, D1..Dr]``, grid ``[N, O1..Or, r]`` of normalized coordinates in
``[-1, 1]`` (the last grid axis lists them innermost dim first: x, y, z) -> Y
``[N, C, O1..Or]``. Per the ONNX spec and its reference implementation: a coordinate
is denormalized (``align_corners``: -1 and 1 are the centers of the corner pixels, else
their outer edges); ``nearest`` rounds half to even; a coordinate outside the border
(``[-0.5, D-0.5]``, or ``[0, D-1]`` with align_corners) is clamped to ``[0, D-1]``
(``border``) or reflected (``reflection``) first; then ``linear`` (2 taps per dim) or
``cubic`` (4 taps, Keys' kernel with a = -0.75) interpolates the tensor product of
taps, each tap index padded again per ``padding_mode`` (``zeros``: 0 outside).
Version 16 names the modes ``bilinear``/``bicubic`` and takes 2-D only; 20 added N-D
and the names ``linear``/``cubic``; 22 only added element types.

Emitted per output point: the taps' offsets and weights are computed once (at most
4^r of them) and reused for every channel.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype
from ..tensor.loops import const_ints

__all__ = ["AffineGrid", "GridSample", "grid_taps"]

logger = logging.getLogger(__name__)

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
          "bicubic": "cubic", "cubic": "cubic"}
_A = -0.75  # Keys' cubic kernel parameter used by ONNX's GridSample


def _attrs(node: Node) -> tuple[str, str, bool]:
    where = f"GridSample (node {node.name!r})"
    mode = _MODES.get(node.attrs["mode"])
    pad = node.attrs["padding_mode"]
    if mode is None:
        raise UnsupportedOpError(f"{where}: mode {node.attrs['mode']!r}")
    if pad not in ("zeros", "border", "reflection"):
        raise UnsupportedOpError(f"{where}: padding_mode {pad!r}")
    return mode, pad, bool(node.attrs["align_corners"])


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect ``x`` by the nearer border until it lies in ``[lo, hi]``."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = lo - x, x - hi
    out = x.copy()
    for mask, d, near, far in ((below > 0, below, lo, hi), (above > 0, above, hi, lo)):
        n = np.floor(d[mask] / rng)
        r = d[mask] - n * rng
        sign = 1 if near == lo else -1
        out[mask] = np.where(n % 2 == 0, near + sign * r, far - sign * r)
    return out


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    """Keys' weights of the 4 taps at offsets -1, 0, 1, 2 for fraction ``t``."""
    def near(x):
        return ((_A + 2) * x - (_A + 3)) * x * x + 1

    def far(x):
        return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_taps(coord: np.ndarray, size: int, mode: str, pad: str, align: bool):
    """Per-dim taps of denormalized coordinates: ``(indices, weights)``, lists of
    arrays shaped like ``coord``; an index of -1 reads as 0 (zeros padding)."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    x = coord.astype(np.float32)
    if mode == "nearest":
        x = np.rint(x)
    out = (x < lo) | (x > hi)
    if pad == "border":
        x = np.where(out, np.clip(x, 0, size - 1), x)
    elif pad == "reflection":
        x = np.where(out, _reflect(x, lo, hi), x)

    def fix(i):
        if pad == "zeros":
            return np.where((i >= 0) & (i < size), i, -1)
        if pad == "border":
            return np.clip(i, 0, size - 1)
        return np.clip(np.trunc(_reflect(i.astype(np.float32), lo, hi)).astype(np.int64),
                       0, size - 1)

    if mode == "nearest":
        return [fix(np.trunc(x).astype(np.int64))], [np.ones_like(x)]
    base = np.floor(x)
    t = (x - base).astype(np.float32)
    b = base.astype(np.int64)
    if mode == "linear":
        return [fix(b), fix(b + 1)], [1 - t, t]
    return [fix(b + k) for k in (-1, 0, 1, 2)], _cubic(t)


def _denormalize(g: np.ndarray, size: int, align: bool) -> np.ndarray:
    if align:
        return (g + 1) / 2 * (size - 1)
    return ((g + 1) * size - 1) / 2


@register
class GridSample(OpDef):
    """ONNX ``GridSample``: X ``[N, C, *S]`` (float), grid ``[N, *O, r]`` (float) ->
    Y ``[N, C, *O]``.

    Raises
    ------
    ShapeError
        When grid is not ``[N, *O, r]`` with r the spatial rank of X.
    UnsupportedOpError
        An unknown mode or padding_mode, cubic on other than 2-D.
    """

    op_type, since_version = "GridSample", 16
    also_versions = (20, 22)  # 20: N-D and the mode names linear/cubic; 22: types

    def infer(self, node: Node) -> list[OutType]:
        x, g = node.inputs[0], node.inputs[1]
        r = len(x.shape) - 2
        if r < 1 or len(g.shape) != r + 2 or g.shape[0] != x.shape[0] or g.shape[-1] != r:
            raise ShapeError(f"GridSample (node {node.name!r}): grid {list(g.shape)} does not "
                             f"match X {list(x.shape)} (expected [N, *O, {max(r, 0)}])")
        if x.dtype.kind != "f" or g.dtype.kind != "f":
            raise UnsupportedOpError(f"GridSample (node {node.name!r}): X {x.dtype} and grid "
                                     f"{g.dtype} must be float")
        mode, _, _ = _attrs(node)
        if mode == "cubic" and r != 2:
            raise UnsupportedOpError(f"GridSample (node {node.name!r}): cubic mode is only "
                                     f"defined for 4-D X, got {list(x.shape)}")
        return [((*x.shape[:2], *g.shape[1:-1]), x.dtype)]

    def reference(self, node: Node, inputs):
        x, g = inputs
        mode, pad, align = _attrs(node)
        n, c, *sizes = x.shape
        r = len(sizes)
        pts = g.reshape(n, -1, r)  # [N, P, r]
        taps = [grid_taps(_denormalize(pts[..., r - 1 - i], s, align), s, mode, pad, align)
                for i, s in enumerate(sizes)]
        y = np.zeros((n, c, pts.shape[1]), np.float64)
        planes = x.reshape(n, c, -1)
        for combo in np.ndindex(*(len(t[0]) for t in taps)):
            flat = np.zeros(pts.shape[:2], np.int64)
            w = np.ones(pts.shape[:2], np.float64)
            valid = np.ones(pts.shape[:2], bool)
            for i, k in enumerate(combo):
                idx, wt = taps[i][0][k], taps[i][1][k]
                valid &= idx >= 0
                flat = flat * sizes[i] + np.maximum(idx, 0)
                w = w * wt
            vals = np.take_along_axis(planes, flat[:, None, :], 2)
            y += np.where(valid[:, None, :], vals * w[:, None, :], 0)
        return [y.astype(x.dtype).reshape(n, c, *g.shape[1:-1])]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, g = node.inputs[0], node.inputs[1]
        mode, pad, align = _attrs(node)
        n, c, *sizes = (int(v) for v in x.shape)
        r = len(sizes)
        pts = int(np.prod(g.shape[1:-1], dtype=np.int64))
        plane = int(np.prod(sizes, dtype=np.int64))
        if n * c * pts == 0:
            return ""
        k = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
        ty, gt = ctype(x.dtype), ctype(g.dtype)
        f = "" if x.dtype == np.float64 else "f"
        ctx.helper(_helpers(ty, f))
        dims = []
        for i, s in enumerate(sizes):
            lo, hi = (0.0, s - 1.0) if align else (-0.5, s - 0.5)
            scale = f"(v + 1) * {(s - 1) / 2!r}" if align else f"((v + 1) * {s} - 1) / 2"
            fix = {"zeros": f"(t >= 0 && t < {s} ? t : -1)",
                   "border": f"(t < 0 ? 0 : (t > {s - 1} ? {s - 1} : t))",
                   "reflection": f"ml_gs_reflect_idx_{ty}(t, {lo!r}, {hi!r}, {s})"}[pad]
            outside = {"zeros": "",
                       "border": f"if (x < {lo!r} || x > {hi!r}) x = x < 0 ? 0 : (x > {s - 1} ? {s - 1} : x);",
                       "reflection": f"if (x < {lo!r} || x > {hi!r}) x = ml_gs_reflect_{ty}(x, {lo!r}, {hi!r});"}[pad]
            rnd = f"x = rint{f}(x);" if mode == "nearest" else ""
            if mode == "nearest":
                taps = f"{{ int64_t t = (int64_t)x; ix[{i}][0] = {fix}; wx[{i}][0] = 1; }}"
            else:
                first = 0 if mode == "linear" else -1
                wfn = "ml_gs_linear" if mode == "linear" else "ml_gs_cubic"
                taps = (f"{{ {ty} b = floor{f}(x); {wfn}_{ty}(x - b, wx[{i}]); "
                        f"for (int64_t q = 0; q < {k}; ++q) {{ int64_t t = (int64_t)b + q + ({first}); "
                        f"ix[{i}][q] = {fix}; }} }}")
            dims.append(f"    {{ {ty} v = ({ty})gp[{r - 1 - i}]; {ty} x = {scale}; {rnd} {outside}\n"
                        f"      {taps} }}\n")
        # the tensor product of taps: offsets and weights, one per combination
        combos = k ** r
        prod = ""
        for i in range(r):
            prod += (f"      {{ int64_t q = (j / {k ** (r - 1 - i)}) % {k}; int64_t t = ix[{i}][q]; "
                     f"if (t < 0) ok = 0; off = off * {sizes[i]} + (t < 0 ? 0 : t); w *= wx[{i}][q]; }}\n")
        return (
            "{\n"
            f"  const {ty}* xs = {ctx.ptr(x)};\n"
            f"  const {gt}* gs = {ctx.ptr(g)};\n"
            f"  {ty}* ys = {ctx.ptr(node.outputs[0])};\n"
            f"  for (int64_t n = 0; n < {n}; ++n)\n"
            f"  for (int64_t p = 0; p < {pts}; ++p) {{\n"
            f"    const {gt}* gp = gs + (n * {pts} + p) * {r};\n"
            f"    int64_t ix[{r}][{k}]; {ty} wx[{r}][{k}];\n"
            + "".join(dims)
            + f"    int64_t offs[{combos}]; {ty} ws[{combos}]; int64_t m = 0;\n"
            f"    for (int64_t j = 0; j < {combos}; ++j) {{\n"
            f"      int64_t off = 0; {ty} w = 1; int ok = 1;\n"
            + prod
            + "      if (ok) { offs[m] = off; ws[m] = w; ++m; }\n"
            "    }\n"
            f"    for (int64_t ch = 0; ch < {c}; ++ch) {{\n"
            f"      const {ty}* xp = xs + (n * {c} + ch) * {plane};\n"
            f"      {ty} acc = 0;\n"
            "      for (int64_t j = 0; j < m; ++j) acc += ws[j] * xp[offs[j]];\n"
            f"      ys[(n * {c} + ch) * {pts} + p] = acc;\n"
            "    }\n"
            "  }\n"
            "}"
        )


def _helpers(ty: str, f: str) -> str:
    """C helpers of GridSample for element type ``ty`` (``f``: the float suffix)."""
    return (
        f"static inline {ty} ml_gs_reflect_{ty}({ty} x, {ty} lo, {ty} hi) {{\n"
        f"  {ty} rng = hi - lo;\n"
        "  if (rng <= 0) return lo;\n"
        f"  if (x < lo) {{ {ty} d = lo - x; int64_t n = (int64_t)(d / rng); {ty} r = d - n * rng;\n"
        "    return n % 2 == 0 ? lo + r : hi - r; }\n"
        f"  if (x > hi) {{ {ty} d = x - hi; int64_t n = (int64_t)(d / rng); {ty} r = d - n * rng;\n"
        "    return n % 2 == 0 ? hi - r : lo + r; }\n"
        "  return x;\n"
        "}\n"
        f"static inline int64_t ml_gs_reflect_idx_{ty}(int64_t t, {ty} lo, {ty} hi, int64_t size) {{\n"
        f"  int64_t i = (int64_t)ml_gs_reflect_{ty}(({ty})t, lo, hi);\n"
        "  return i < 0 ? 0 : (i >= size ? size - 1 : i);\n"
        "}\n"
        f"static inline void ml_gs_linear_{ty}({ty} t, {ty}* w) {{ w[0] = 1 - t; w[1] = t; }}\n"
        f"static inline void ml_gs_cubic_{ty}({ty} t, {ty}* w) {{\n"
        f"  const {ty} a = {_A}{f};\n"
        f"  {ty} x0 = t + 1, x1 = t, x2 = 1 - t, x3 = 2 - t;\n"
        "  w[0] = ((a * x0 - 5 * a) * x0 + 8 * a) * x0 - 4 * a;\n"
        "  w[1] = ((a + 2) * x1 - (a + 3)) * x1 * x1 + 1;\n"
        "  w[2] = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1;\n"
        "  w[3] = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a;\n"
        "}\n"
    )


@register
class AffineGrid(OpDef):
    """ONNX ``AffineGrid``: theta ``[N, 2, 3]`` (or ``[N, 3, 4]``) and the constant
    size ``[N, C, H, W]`` (or ``[N, C, D, H, W]``) -> grid ``[N, H, W, 2]`` (or
    ``[N, D, H, W, 3]``): ``theta[n] @ (x, y[, z], 1)`` over the base grid of
    normalized pixel coordinates (centers of the corner pixels at +-1 with
    ``align_corners``, else the pixel centers of ``[-1, 1]`` split in equal cells).

    Raises
    ------
    ShapeError
        When size is not a constant of length 4 or 5 matching theta.
    """

    op_type, since_version = "AffineGrid", 20

    def _size(self, node: Node) -> list[int]:
        size = const_ints(node, 1, "size")
        theta = node.inputs[0]
        r = len(size) - 2 if size else 0
        if r not in (2, 3) or tuple(theta.shape) != (size[0], r, r + 1):
            raise ShapeError(f"AffineGrid (node {node.name!r}): theta {list(theta.shape)} and "
                             f"size {size} must be [N, 2, 3] and 4 values, or [N, 3, 4] and 5")
        return size

    def infer(self, node: Node) -> list[OutType]:
        n, _, *sp = self._size(node)
        return [((n, *sp, len(sp)), node.inputs[0].dtype)]

    def _base(self, node: Node) -> np.ndarray:
        """``[prod(S), r + 1]``: (x, y[, z], 1) per output point, row-major over S."""
        _, _, *sp = self._size(node)
        align = bool(node.attrs["align_corners"])
        axes = []
        for s in sp:
            i = np.arange(s, dtype=np.float64)
            axes.append(i * 2 / (s - 1) - 1 if align and s > 1 else
                        (np.zeros(1) if align else (2 * i + 1) / s - 1))
        mesh = np.meshgrid(*axes, indexing="ij")
        cols = [m.reshape(-1) for m in reversed(mesh)]  # x (innermost dim) first
        return np.stack(cols + [np.ones_like(cols[0])], axis=1)

    def reference(self, node: Node, inputs):
        theta = inputs[0]
        n, _, *sp = self._size(node)
        base = self._base(node)
        grid = np.einsum("pk,njk->npj", base, theta.astype(np.float64))
        return [grid.astype(theta.dtype).reshape(n, *sp, len(sp))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        theta = node.inputs[0]
        n, _, *sp = self._size(node)
        r = len(sp)
        pts = math.prod(sp)
        ty = ctype(theta.dtype)
        base = ctx.param(self._base(node).astype(theta.dtype), "affine_grid_base")
        return (
            "{\n"
            f"  const {ty}* th = {ctx.ptr(theta)};\n"
            f"  {ty}* out = {ctx.ptr(node.outputs[0])};\n"
            f"  for (int64_t n = 0; n < {n}; ++n)\n"
            f"  for (int64_t p = 0; p < {pts}; ++p)\n"
            f"  for (int64_t j = 0; j < {r}; ++j) {{\n"
            f"    {ty} acc = 0;\n"
            f"    for (int64_t q = 0; q <= {r}; ++q) acc += th[(n * {r} + j) * {r + 1} + q] * "
            f"{base}[p * {r + 1} + q];\n"
            f"    out[(n * {pts} + p) * {r} + j] = acc;\n"
            "  }\n"
            "}"
        )
