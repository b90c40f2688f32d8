"""C text for fused elementwise chains: composed expressions, loops, tile epilogues.

A chain (see :mod:`monolib.compiler.passes.fuse_elementwise`) is a list of elementwise
nodes, each reading the previous chain value plus *leaves* (side inputs). Its C form is
a list of typed locals, one per node (``const float t1 = <c_expr>;``), so an argument
used twice by an op's expression is computed once and each intermediate has the
node's own C type.

Three shapes of code use it:

* :func:`elementwise_loop` -- a chain headed by an elementwise node: one loop nest over
  the output with coalesced dims, each leaf indexed by its broadcast strides (0 on
  broadcast dims), the innermost loop contiguous so gcc vectorizes it.
* :func:`tile_epilogue_function` -- ``static void f(void* out, int64_t b, int64_t m0,
  int64_t m1, int64_t n0, int64_t n1)``: the chain applied in place to a tile of the
  anchor's output seen as ``[B, M, N]``.
* :func:`value_function` -- ``static inline T f(T x, params, arena, i0, ..., ik)``: the
  final value of one element, for :meth:`EmitContext.output_expr`.

Leaves are resolved by a caller-given ``pointer(value) -> str`` (a typed C pointer
expression valid in the function being written); scalar constants become literals.
Extents and strides may be run-time :class:`~...symbolic.Dim` s: they are written as
C through :func:`~...symbolic.c_rendering` (the caller's), and the functions written
here start with the caller's ``prologue`` (``S``, the symbol values, read from the
arena).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ....errors import CompileError
from ...ir import Value
from ...passes.fuse_elementwise import ChainStep, broadcast_strides, group_strides, is_scalar_const
from ...symbolic import is_one, same
from ..cstyle import c_literal, ctype

__all__ = [
    "band_fits",
    "coalesce",
    "compose",
    "elementwise_loop",
    "leaves_of",
    "outer_extent",
    "scalar_literal",
    "tile_epilogue_function",
    "value_function",
]

logger = logging.getLogger(__name__)

Pointer = Callable[[Value], str]


def scalar_literal(v: Value) -> str:
    """The C literal of a one-element constant."""
    return c_literal(v.const.reshape(-1)[0], v.dtype)


def leaves_of(steps: Sequence[ChainStep]) -> list[Value]:
    """Distinct side inputs of a chain that need memory (scalar constants excluded)."""
    seen: set[int] = set()
    out = []
    for s in steps:
        for v in s.side_inputs():
            if not is_scalar_const(v) and v.uid not in seen:
                seen.add(v.uid)
                out.append(v)
    return out


def compose(
    steps: Sequence[ChainStep],
    x: tuple[Value, str] | None,
    leaf: Callable[[Value], str],
    indent: str,
) -> tuple[list[str], str]:
    """C lines computing the chain, and the name of the final local.

    Parameters
    ----------
    steps : list of ChainStep
        In order; an input at one of a step's ``positions`` is the entering value or
        the output of an earlier step.
    x : (Value, str) or None
        The value entering the chain and its C expression (``None`` when ``steps[0]``
        is a head whose inputs are all leaves).
    leaf : callable
        ``leaf(value) -> str``: C expression of the current element of a side input.
    indent : str
        Prefix of each line.
    """
    local = {x[0].uid: x[1]} if x is not None else {}
    lines: list[str] = []
    name = x[1] if x is not None else ""
    for k, s in enumerate(steps):
        args = []
        for i, v in enumerate(s.node.inputs):
            if i in s.positions:
                args.append(local[v.uid])
            elif v is None:
                args.append("")
            elif is_scalar_const(v):
                args.append(scalar_literal(v))
            else:
                args.append(leaf(v))
        expr = s.op.c_expr(s.node, args)
        out = s.node.outputs[0]
        name = f"t{k}"
        T = ctype(out.dtype)
        # bool is uint8_t holding exactly 0 or 1, whatever the expression yields
        value = f"({T})(({expr}) != 0)" if out.dtype.kind == "b" else f"({T})({expr})"
        lines.append(f"{indent}const {T} {name} = {value};")
        local[out.uid] = name
    return lines, name


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]):
    """Merge output dims that every operand walks with consistent strides.

    Parameters
    ----------
    shape : tuple of int
        Output shape.
    strides : list of list of int
        Per operand, element strides per output dim.

    Returns
    -------
    (dims, strides)
        The merged extents and, per operand, the merged strides. Unit dims are dropped.
    """
    keep = [d for d in range(len(shape)) if not is_one(shape[d])]
    dims = [shape[d] for d in keep]
    sts = [[st[d] for d in keep] for st in strides]
    k = len(dims) - 2
    while k >= 0:
        if all(same(st[k], st[k + 1] * dims[k + 1]) for st in sts):
            dims[k : k + 2] = [dims[k] * dims[k + 1]]
            for st in sts:
                st[k : k + 2] = [st[k + 1]]
        k -= 1
    return dims, sts


def _index(vars_: Sequence[str], strides: Sequence[int]) -> str:
    terms = [v if same(s, 1) else f"{v} * {s}" for v, s in zip(vars_, strides) if not same(s, 0)]
    return " + ".join(terms) if terms else "0"


def elementwise_loop(
    steps: Sequence[ChainStep],
    out: Value,
    pointer: Pointer,
    out_ptr: str,
    in_place: frozenset[int] = frozenset(),
    outer: tuple[str, str] | None = None,
) -> str:
    """C statements computing a chain headed by an elementwise node into ``out``.

    ``steps[0]`` is the head (``positions == ()``); every input of every step is a leaf
    (or the chain value). ``out_ptr`` is the typed pointer expression of the output.
    Leaves whose uid is in ``in_place`` share the output's storage (same shape and
    dtype): they are read through ``out`` itself, so ``restrict`` stays truthful.
    ``outer`` = (lo, hi) C expressions: compute only indices lo..hi-1 (hi clamped to the
    extent) of the outermost coalesced loop (:func:`outer_extent`), one thread's share.
    """
    leaves = leaves_of(steps)
    shape = out.shape
    leaf_strides = [broadcast_strides(v.shape, shape) for v in leaves]
    out_strides = broadcast_strides(shape, shape)
    dims, sts = coalesce(shape, [out_strides, *leaf_strides])
    T = ctype(out.dtype)
    lines = [f"  {T}* restrict out = {out_ptr};"]
    names = {}
    for j, v in enumerate(leaves):
        if v.uid in in_place:
            names[v.uid] = ("out", sts[j + 1])
            continue
        names[v.uid] = (f"in{j}", sts[j + 1])
        lines.append(f"  const {ctype(v.dtype)}* restrict in{j} = {pointer(v)};")
    vars_ = [f"i{d}" for d in range(len(dims))]
    indent = "  "
    for d, n in enumerate(dims):
        v = vars_[d]
        if d == 0 and outer is not None:
            lo, hi = outer
            lines.append(
                f"{indent}for (int64_t {v} = {lo}; {v} < (({hi}) < {n} ? ({hi}) : {n}); ++{v}) {{"
            )
        else:
            lines.append(f"{indent}for (int64_t {v} = 0; {v} < {n}; ++{v}) {{")
        indent += "  "

    def leaf(v: Value) -> str:
        name, st = names[v.uid]
        return f"{name}[{_index(vars_, st)}]"

    body, final = compose(steps, None, leaf, indent)
    lines += body
    lines.append(f"{indent}out[{_index(vars_, sts[0])}] = {final};")
    for _ in dims:
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    return "\n".join(lines)


def outer_extent(steps: Sequence[ChainStep], out: Value) -> tuple[int, int]:
    """(extent of the outermost loop of :func:`elementwise_loop`, number of loops); (0, 0)
    for a single element."""
    leaves = leaves_of(steps)
    shape = out.shape
    strides = [broadcast_strides(shape, shape)] + [broadcast_strides(v.shape, shape) for v in leaves]
    dims, _ = coalesce(shape, strides)
    return (dims[0], len(dims)) if dims else (0, 0)


def _bmn(shape: Sequence[int], groups) -> tuple[int, int, int]:
    size = [1, 1, 1]
    for g, dims in enumerate(groups):
        for d in dims:
            size[g] *= shape[d]
    return size[0], size[1], size[2]


def tile_epilogue_function(
    name: str,
    steps: Sequence[ChainStep],
    out: Value,
    groups: Sequence[Sequence[int]],
    out_offset: int,
    pointer: Pointer,
    prologue: str = "",
    band_ld: int | None = None,
) -> str:
    """A C function applying the chain in place on a tile of the ``[B, M, N]`` view.

    Signature ``static void name(void* out, int64_t b, int64_t m0, int64_t m1, int64_t
    n0, int64_t n1)``. Inside it ``arena`` is recovered as ``out - out_offset`` (the
    kernel passes output 0's base, which is ``arena + out_offset``), so ``pointer`` may
    return ``arena``-relative expressions for side inputs in the arena.

    With ``band_ld`` the tile is a band of rows in scratch (``conv_band.h``): ``out`` is
    row ``b`` of the band, rows ``band_ld`` elements apart, ``n`` counts from the band's
    start; every side input must be a constant or scalar that does not vary along ``N``
    or ``B`` (:func:`band_fits`).

    Raises
    ------
    CompileError
        When a side input does not fit ``groups`` (the emitter asked for a view the
        fusion pass did not check), or does not fit a band.
    """
    shape = out.shape
    _, M, N = _bmn(shape, groups)
    leaves = leaves_of(steps)
    T = ctype(out.dtype)
    if band_ld is not None and not band_fits(steps, out, groups):
        raise CompileError(f"epilogue of {out.name!r} reads data that varies along a band")
    base = (f"({T}*)out_ - b * {band_ld}" if band_ld is not None
            else f"({T}*)out_ + b * {M * N}")
    head = [
        f"static void {name}(void* out_, int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {{",
        f"  uint8_t* arena = (uint8_t*)out_ - {out_offset};",
        "  (void)arena;",
        *([prologue] if prologue else []),
        f"  {T}* restrict out = {base};",
    ]
    if band_ld is not None:
        N = band_ld
    rows, names, row_strides = [], {}, []
    for j, v in enumerate(leaves):
        gs = group_strides(broadcast_strides(v.shape, shape), shape, groups)
        if gs is None:
            raise CompileError(f"side input {v.name!r} does not fit epilogue groups {list(groups)}")
        Tj = ctype(v.dtype)
        head.append(f"  const {Tj}* restrict s{j} = {pointer(v)} + b * {0 if band_ld else gs[0]};")
        rows.append(f"    const {Tj}* restrict r{j} = s{j} + m * {gs[1]};")
        row_strides.append(gs[1])
        names[v.uid] = (
            f"r{j}[n * {gs[2]}]"
            if not (same(gs[2], 0) or same(gs[2], 1))
            else (f"r{j}[n]" if same(gs[2], 1) else f"r{j}[0]")
        )
    x = steps[0].node.inputs[steps[0].positions[0]]
    if same(N, 1):  # [B, M, 1] (squeeze-excite vectors...): walk m, the contiguous dim
        single = {v.uid: f"s{j}[m * {gs}]" for j, (v, gs) in enumerate(zip(leaves, row_strides))}
        body, final = compose(steps, (x, "x"), lambda v: single[v.uid], "    ")
        lines = head + [
            "  if (n0 >= n1) return;",
            "  for (int64_t m = m0; m < m1; ++m) {",
            f"    const {T} x = out[m];",
            *body,
            f"    out[m] = {final};",
            "  }",
            "}",
        ]
        return "\n".join(lines)
    body, final = compose(steps, (x, "x"), lambda v: names[v.uid], "      ")
    lines = head + [
        "  for (int64_t m = m0; m < m1; ++m) {",
        f"    {T}* restrict row = out + m * {N};",
        *rows,
        "    for (int64_t n = n0; n < n1; ++n) {",
        f"      const {T} x = row[n];",
        *body,
        f"      row[n] = {final};",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines)


def band_fits(steps: Sequence[ChainStep], out: Value, groups) -> bool:
    """Whether a chain can run on a band of rows in scratch (``tile_epilogue_function``'s
    ``band_ld``): every side input a constant (nothing read from the arena) that is the
    same for every image and every column of the ``[B, M, N]`` view."""
    for v in leaves_of(steps):
        gs = group_strides(broadcast_strides(v.shape, out.shape), out.shape, groups)
        if not v.is_const or v.is_symbolic_const or gs is None or gs[0] or gs[2]:
            return False
    return True


def value_function(
    name: str, steps: Sequence[ChainStep], out: Value, pointer: Pointer, prologue: str = ""
) -> str:
    """``static inline T name(T x, const uint8_t* params, uint8_t* arena, int64_t i0,
    ...)``: the chain applied to one element ``x`` of output 0 at index ``(i0, ...)``.
    """
    shape = out.shape
    T = ctype(out.dtype)
    idx = [f"i{d}" for d in range(len(shape))]
    sig = ", ".join(
        [f"{T} x", "const uint8_t* params", "uint8_t* arena", *(f"int64_t {i}" for i in idx)]
    )
    lines = [f"static inline {T} {name}({sig}) {{", "  (void)params; (void)arena;"]
    if prologue:
        lines.append(prologue)
    for i in idx:
        lines.append(f"  (void){i};")
    names = {}
    for j, v in enumerate(leaves_of(steps)):
        st = broadcast_strides(v.shape, shape)
        lines.append(f"  const {ctype(v.dtype)}* s{j} = {pointer(v)};")
        names[v.uid] = f"s{j}[{_index(idx, st)}]"
    x = steps[0].node.inputs[steps[0].positions[0]]
    body, final = compose(steps, (x, "x"), lambda v: names[v.uid], "  ")
    lines += body + [f"  return {final};", "}"]
    return "\n".join(lines)
