"""``Resize`` / ``Upsample`` with run-time ``scales`` or ``sizes`` (issue 13; ONNX
operator spec "Resize" 10, 11, 13, 18, 19 and "Upsample" 9): ``resize._Resize``
delegates here when the input giving the output sizes is not a compile-time constant.

The resized axes' output lengths are computed dims with no bound of their own: the
user gives ``max_sizes={"node": N}`` (:mod:`.bounded`), ``N`` bounding the product of
the resized axes' output lengths. When the op runs, the kernel

1. reads ``sizes`` (``scale = (float)size / (float)in``; ``keep_aspect_ratio_policy``
   ``not_larger``/``not_smaller`` takes the min/max ratio, the length
   ``(int64)(s * in + 0.5)``) or ``scales`` (the length ``floor((float)in * scale)``,
   as ONNX Runtime computes it), checks them (a nonpositive scale, lengths past ``N``,
   or an output from an empty input set ``ml_status``: ``monolib_run`` fails naming the
   node) and writes the dims;
2. builds per-axis tables in scratch (planned at ``N`` positions per axis), by the rules
   of the compile-time path (:mod:`.resize`): nearest from float32 coordinates
   (``source_coords``' arithmetic) rounded by ``nearest_mode``; linear and cubic taps
   and weights from ONNX's reference coordinates in double (``reference_taps``: the
   taps around ``floor(x)``, edge-clamped, Keys' kernel, ``exclude_outside``);
3. walks the output, gathering (nearest) or summing the taps' products (weights in the
   element type).

Not supported here (refused naming the node): ``antialias``, ``tf_crop_and_resize``,
``tf_half_pixel_for_nn``.
"""

from __future__ import annotations

import logging

from ....errors import UnsupportedOpError
from ...backends.cstyle import ctype
from ...ir import Node
from ...symbolic import Dim
from ..base import EmitContext, OutType
from ..control.status import fail_statement
from .bounded import bounded_dims, check_sizes, require_bound
from .loops import contiguous_strides, normalize_axis

__all__ = ["emit", "infer", "run_time_input"]

logger = logging.getLogger(__name__)

_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
           "asymmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

#: Keys' cubic kernel with coefficient a at distance d >= 0 (resize._keys)
_KEYS = """static double ml_keys(double d, double a) { /* ML_KEYS */
  if (d <= 1.0) return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
  if (d < 2.0) return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
  return 0.0;
}"""


def run_time_input(node: Node, op) -> tuple[str, int] | None:
    """``("scales" | "sizes", input index)`` of the run-time input setting the output
    sizes, or None (both compile-time or absent: the table path)."""
    names = (("scales", op.scale_inputs[0]), ("sizes", op.scale_inputs[1]))
    for what, i in names:
        v = node.input(i) if i is not None else None
        if v is not None and v.const is None and not (isinstance(v.size, int) and v.size == 0):
            return what, i
    return None


def _attrs(node: Node, op) -> dict:
    """The attributes the kernel reads, checked.

    Raises
    ------
    UnsupportedOpError
        A mode this path lacks (the message names the node).
    """
    where = f"{node.op_type} (node {node.name!r})"
    rank = len(node.inputs[0].shape)
    axes = op.attr(node, "axes")
    a = {
        "mode": node.attrs["mode"],
        "coord": op.fixed_coord or node.attrs.get("coordinate_transformation_mode",
                                                  "half_pixel"),
        "nearest": "floor" if op.fixed_coord else op.attr(node, "nearest_mode"),
        "axes": (list(range(rank)) if axes is None
                 else [normalize_axis(int(x), rank, where) for x in axes]),
        "policy": op.attr(node, "keep_aspect_ratio_policy"),
        "cubic_a": float(op.attr(node, "cubic_coeff_a")),
        "exclude": bool(op.attr(node, "exclude_outside")),
    }
    bad = []
    if a["mode"] not in ("nearest", "linear", "cubic"):
        bad.append(f"mode {a['mode']!r}")
    if a["coord"] not in _COORDS:
        bad.append(f"coordinate_transformation_mode {a['coord']!r}")
    if a["mode"] == "nearest" and a["nearest"] not in _NEAREST:
        bad.append(f"nearest_mode {a['nearest']!r}")
    if op.attr(node, "antialias"):
        bad.append("antialias")
    if bad:
        raise UnsupportedOpError(f"{where}: with run-time scales/sizes, {', '.join(bad)} is not "
                                 "supported (make them compile-time constants)")
    if node.inputs[0].dtype.kind != "f" and a["mode"] != "nearest":
        raise UnsupportedOpError(f"{where}: {a['mode']} mode needs floats")
    return a


def infer(node: Node, op) -> list[OutType]:
    """The output type: the resized axes' lengths computed, jointly at most ``N``.

    Raises
    ------
    UnsupportedOpError
        No ``max_sizes`` bound, an unsupported mode, or a wrong number of scales/sizes.
    """
    what, i = run_time_input(node, op)
    bound = require_bound(node, f"input {what!r}")
    a = _attrs(node, op)
    v = node.inputs[i]
    if len(v.shape) != 1 or v.shape[0] != len(a["axes"]):
        raise UnsupportedOpError(f"{node.op_type} (node {node.name!r}): {what} of shape "
                                 f"{list(v.shape)} for {len(a['axes'])} axes")
    x = node.inputs[0]
    return [(bounded_dims(node, a["axes"], x.shape, bound, "out"), x.dtype)]


def _lengths(ctx, node, a, what, i, ins, outs, scs) -> list[str]:
    """C computing each resized axis' output length ``outs[k]`` and float scale
    ``scs[k]`` (in ``ins[k]``)."""
    src = ctx.ptr(node.inputs[i])
    fail = f"{{ {fail_statement(ctx, node, 'scale')} return; }}"
    lines = []
    if what == "scales":
        for k, (n, o, s) in enumerate(zip(ins, outs, scs)):
            p = ctx.unique("p")
            lines += [f"  float {s} = (float){src}[{k}];",
                      f"  if (!({s} > 0.0f)) {fail}",
                      f"  float {p} = floorf((float){n} * {s});",  # ORT: float product
                      f"  int64_t {o} = {p} > 9.0e18f ? INT64_MAX : (int64_t){p};"]
        return lines
    for k, (n, o, s) in enumerate(zip(ins, outs, scs)):
        lines += [f"  int64_t {o} = (int64_t){src}[{k}];",
                  f"  float {s} = {n} ? (float){o} / (float){n} : 1.0f;"]
    if a["policy"] in ("not_larger", "not_smaller"):
        pick, r = ("<" if a["policy"] == "not_larger" else ">"), ctx.unique("r")
        lines.append(f"  float {r} = {scs[0]};")
        lines += [f"  if ({s} {pick} {r}) {r} = {s};" for s in scs[1:]]
        for n, o, s in zip(ins, outs, scs):
            lines += [f"  {s} = {r};", f"  {o} = (int64_t)({r} * (float){n} + 0.5f);"]
    return lines


def _nearest_table(ctx, a, n, o, s, idx) -> list[str]:
    """C filling ``idx[j]`` (int64) with the nearest source index of output ``j``."""
    j, y, x, f = (ctx.unique(p) for p in ("j", "y", "x", "f"))
    coord = {
        "asymmetric": f"{y} / {s}",
        "half_pixel": f"({y} + 0.5f) / {s} - 0.5f",
        "pytorch_half_pixel": f"{o} > 1 ? ({y} + 0.5f) / {s} - 0.5f : 0.0f",
        "align_corners": f"{o} > 1 ? {y} * (float)({n} - 1) / (float)({o} - 1) : 0.0f",
        "half_pixel_symmetric": (f"(float){n} / 2.0f * (1.0f - (float){o} / ({s} * (float){n})) "
                                 f"+ (({y} + 0.5f) / {s} - 0.5f)"),
    }[a["coord"]]
    rnd = {
        "round_prefer_floor": f"({x} - {f} == 0.5f ? {f} : roundf({x}))",
        "round_prefer_ceil": f"({x} - {f} == 0.5f ? {f} + 1.0f : roundf({x}))",
        "floor": f,
        "ceil": f"ceilf({x})",
    }[a["nearest"]]
    return [f"  for (int64_t {j} = 0; {j} < {o}; ++{j}) {{",
            f"    float {y} = (float){j}; float {x} = {coord}; float {f} = floorf({x});",
            f"    double {f}_r = (double){rnd};",
            (f"    {idx}[{j}] = {f}_r < 0.0 ? 0 : ({f}_r > (double)({n} - 1) ? {n} - 1 "
             f": (int64_t){f}_r);"),
            "  }"]


def _tap_table(ctx, a, n, o, sc, idx, w, T: int, wt: str) -> list[str]:
    """C filling ``idx[j*T + t]`` and ``w[j*T + t]`` with the ``T`` linear/cubic taps of
    output ``j`` (ONNX's reference, in double; ``sc`` the double scale)."""
    j, y, x, i0, r, t, tot, wd = (ctx.unique(p) for p in
                                  ("j", "y", "x", "i", "r", "t", "tot", "wd"))
    width = f"({sc} * (double){n})"
    coord = {
        "asymmetric": f"{y} / {sc}",
        "half_pixel": f"({y} + 0.5) / {sc} - 0.5",
        "pytorch_half_pixel": f"{width} == 1.0 ? -0.5 : ({y} + 0.5) / {sc} - 0.5",
        "align_corners": f"{width} == 1.0 ? 0.0 : {y} * (double)({n} - 1) / ({width} - 1.0)",
        "half_pixel_symmetric": (f"(double){n} / 2.0 * (1.0 - (double){o} / {width}) "
                                 f"+ (({y} + 0.5) / {sc} - 0.5)"),
    }[a["coord"]]
    if a["mode"] == "linear":
        coef = [f"1.0 - {r}", r]
        first = "0"
    else:
        ctx.helper(_KEYS)
        ca = repr(a["cubic_a"])
        coef = [f"ml_keys(fabs({r} + 1.0), {ca})", f"ml_keys(fabs({r}), {ca})",
                f"ml_keys(fabs(1.0 - {r}), {ca})", f"ml_keys(fabs(2.0 - {r}), {ca})"]
        first = "1"
    lines = [f"  for (int64_t {j} = 0; {j} < {o}; ++{j}) {{",
             f"    double {y} = (double){j}; double {x} = {coord};",
             f"    double {i0} = floor({x}); double {r} = {x} - {i0};",
             f"    double {wd}[{T}] = {{{', '.join(coef)}}}; double {tot} = 0.0;",
             f"    for (int {t} = 0; {t} < {T}; ++{t}) {{",
             f"      int64_t p_ = (int64_t){i0} - {first} + {t};"]
    if a["exclude"]:
        lines.append(f"      if (p_ < 0 || p_ >= {n}) {wd}[{t}] = 0.0;")
    lines += [f"      {tot} += {wd}[{t}];",
              f"      {idx}[{j} * {T} + {t}] = p_ < 0 ? 0 : (p_ > {n} - 1 ? {n} - 1 : p_);",
              "    }"]
    norm = f" / ({tot} == 0.0 ? 1.0 : {tot})" if a["exclude"] else ""
    lines += [(f"    for (int {t} = 0; {t} < {T}; ++{t}) "
               f"{w}[{j} * {T} + {t}] = ({wt})({wd}[{t}]{norm});"),
              "  }"]
    return [line.replace("p_", f"{j}_p") for line in lines]


def emit(node: Node, ctx: EmitContext, op) -> str:
    """C: lengths, checks and dims, the per-axis tables, the output walk."""
    what, i = run_time_input(node, op)
    bound = require_bound(node, f"input {what!r}")
    a = _attrs(node, op)
    x, y = node.inputs[0], node.outputs[0]
    axes = a["axes"]
    T = {"nearest": 1, "linear": 2, "cubic": 4}[a["mode"]]
    wt = ctype(y.dtype) if y.dtype.kind == "f" else "float"
    ins = [ctx.unique("in") for _ in axes]
    outs = [ctx.unique("out") for _ in axes]
    scs = [ctx.unique("sc") for _ in axes]
    lines = ["{"]
    lines += [f"  int64_t {n} = (int64_t)({x.shape[ax]});" for n, ax in zip(ins, axes)]
    lines += _lengths(ctx, node, a, what, i, ins, outs, scs)
    lines.append(check_sizes(ctx, node, outs, bound))
    empty = f"{{ {fail_statement(ctx, node, 'empty input')} return; }}"
    lines += [f"  if ({n} == 0 && {o} > 0) {empty}" for n, o in zip(ins, outs)]
    lines += [f"  {ctx.set_symbol(y.shape[ax], o)}" for ax, o in zip(axes, outs)
              if isinstance(y.shape[ax], Dim)]
    idx, wts = {}, {}
    for ax, n, o, s in zip(axes, ins, outs, scs):
        idx[ax] = ctx.unique("ix")
        lines.append(f"  int64_t* restrict {idx[ax]} = (int64_t*){ctx.scratch(bound * T * 8)};")
        if a["mode"] == "nearest":
            lines += _nearest_table(ctx, a, n, o, s, idx[ax])
            continue
        wts[ax] = ctx.unique("w")
        size = bound * T * (8 if wt == "double" else 4)
        lines.append(f"  {wt}* restrict {wts[ax]} = ({wt}*){ctx.scratch(size)};")
        sc = ctx.unique("sd")
        # the reference's scale: the exact out/in for sizes (stretch), else the float
        exact = what == "sizes" and a["policy"] not in ("not_larger", "not_smaller")
        lines.append(f"  double {sc} = {f'{n} ? (double){o} / (double){n} : 1.0' if exact else f'(double){s}'};")
        lines += _tap_table(ctx, a, n, o, sc, idx[ax], wts[ax], T, wt)
    lines += _walk(ctx, x, y, axes, dict(zip(axes, outs)), idx, wts, T)
    lines.append("}")
    return "\n".join(line for line in lines if line)


def _walk(ctx, x, y, axes, outs, idx, wts, T) -> list[str]:
    """Nested loops over the output (sizes: ``outs`` on resized axes), each element
    gathered (nearest) or the sum over the taps of every resized axis."""
    rank = len(y.shape)
    ist = contiguous_strides(x.shape)
    o = [ctx.unique("o") for _ in range(rank)]
    k = ctx.unique("k")
    lines = [f"  int64_t {k} = 0;"]
    for d in range(rank):
        n = outs.get(d, f"(int64_t)({y.shape[d]})")
        lines.append(f"  {'  ' * d}for (int64_t {o[d]} = 0; {o[d]} < {n}; ++{o[d]})")
    pad = "  " * (rank + 1)
    px, py = ctx.ptr(x), ctx.ptr(y)
    if not wts:  # nearest
        src = " + ".join((f"{idx[d]}[{o[d]}]" if d in idx else o[d]) + f" * ({ist[d]})"
                         for d in range(rank)) or "0"
        lines.append(f"{pad}{py}[{k}++] = {px}[{src}];")
        return lines
    wt = ctype(y.dtype)
    acc = ctx.unique("acc")
    t = {d: ctx.unique("t") for d in axes}
    body = [f"{pad}{{ {wt} {acc} = 0;"]
    for d in axes:
        body.append(f"{pad}  for (int {t[d]} = 0; {t[d]} < {T}; ++{t[d]})")
    src = " + ".join((f"{idx[d]}[{o[d]} * {T} + {t[d]}]" if d in idx else o[d]) + f" * ({ist[d]})"
                     for d in range(rank)) or "0"
    wprod = " * ".join(f"{wts[d]}[{o[d]} * {T} + {t[d]}]" for d in axes)
    body.append(f"{pad}    {acc} += {wprod} * {px}[{src}];")
    body.append(f"{pad}  {py}[{k}++] = {acc}; }}")
    return lines + body
