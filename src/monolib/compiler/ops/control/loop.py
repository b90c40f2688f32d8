"""ONNX ``Loop`` (1, 11, 13, 16, 19, 21, 23, 24, 25): run-time trip count and
condition, loop-carried values, scan outputs. Spec:
https://onnx.ai/onnx/operators/onnx__Loop.html.

The body (:mod:`.subgraph`) is compiled into the library; the op's C function is::

    m = M (absent: no limit); c = cond (absent: true); carried slots = initial values
    for (i = 0; i < m && c; ++i) {
        body.iter_num = i; body.cond = c; run the body's ops
        c = body.cond_out; carried slots = carried outputs (memmove)
        scan output k [i] = body scan output k
    }
    final values = carried slots; the trip count written as a computed dim

Scan outputs ``[T, ...]`` are planned at a bound on the trip count ``T``: ``T`` itself
when it is known (a constant or run-time-dim ``M``, a condition that never turns
false), else a computed dim (issue 13) bounded by ``M``'s value or upper bound, or by
the user's ``max_trip_count={"node": N}`` (``--max-trips node=N``); a loop with scan
outputs and no bound is refused with that hint. A run that would pass the bound stops
there and ``monolib_run`` returns an error naming the node (never a write past the
buffer). A loop-carried tensor that grows (or shrinks) by a constant number of
elements along an axis per iteration (``Concat`` of a token to the ids so far) gets a
computed dim on that axis: its body input slot is planned at the size the trip-count
bound gives, the dim is written before each iteration and after the last
(:meth:`Loop.settle_body` retypes the body with it). A body output whose dim is
data-dependent (a run-time ``Slice``) where the carried value's is static is checked
each iteration (a run where it differs stops, naming the node); any other change of
shape per iteration is refused, naming the node. A carried sequence is a slot sized for the
elements it gains over the bound on the trip count (``ops/sequence/_carried.py``).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, Value
from ...symbolic import Dim, computed_symbol, is_computed, same, same_shape
from ..base import OpDef, OutType, register
from ..sequence._carried import body_type, copy_back, copy_in, settle_carried
from .status import fail_statement
from .subgraph import compile_subgraph, evaluate_subgraph

__all__ = ["Loop", "trip_count"]

logger = logging.getLogger(__name__)

INT64_MAX = (1 << 63) - 1


def _scalar(v: Value):
    x = v.const.reshape(-1)[0]
    return x if isinstance(x, Dim) else x.item() if hasattr(x, "item") else x


def trip_count(node: Node):
    """``(exact, bound)`` of ``node``'s number of iterations: ``exact`` an int or Dim
    when the count is known at compile time (else ``None``); ``bound`` an int upper
    bound (``None``: none known)."""
    body = node.attrs["body"]
    m_in, c_in = node.input(0), node.input(1)
    m = None if m_in is None else (_scalar(m_in) if m_in.is_const else "run")
    cond = True if c_in is None else (bool(_scalar(c_in)) if c_in.is_const else None)
    out0 = body.outputs[0]
    steady = out0 is body.inputs[1] or (out0.is_const and bool(out0.const.reshape(-1)[0]))
    bounds = []
    if isinstance(m, Dim):
        bounds.append(max(m.hi, 0))
    elif m not in (None, "run"):
        bounds.append(max(int(m), 0))
    user = node.attrs.get("_max_trip_count")
    if user is not None:
        bounds.append(int(user))
    bound = min(bounds) if bounds else None
    if cond is False:
        return 0, 0
    if cond and steady and m not in (None, "run"):
        return (m if isinstance(m, Dim) else max(int(m), 0)), bound
    return None, bound


def _nbytes_c(v: Value, sizes: dict[int, str]) -> str:
    """C expression of ``v``'s bytes with the dims of ``sizes`` (axis -> C) replaced."""
    dims = [f"(int64_t)({sizes.get(a, d)})" for a, d in enumerate(v.shape)]
    return " * ".join([*dims, str(v.dtype.itemsize)])


def _may_keep(shape, out) -> bool:
    """Whether a body output of shape ``out`` may be its carried value's ``shape`` at
    run time: the same rank, each dim the same or a data-dependent (computed) dim whose
    bounds include the static one (the Loop then checks it each iteration)."""
    if len(shape) != len(out):
        return False
    for x, y in zip(shape, out):
        if same(x, y):
            continue
        if not (isinstance(x, int) and isinstance(y, Dim) and y.symbols()
                and all(is_computed(t) for t in y.symbols()) and y.lo <= x <= y.hi):
            return False
    return True


def _shape_check(ctx, s: Value, o: Value) -> str:
    """Name of a C function ``int f(arena)``: whether body output ``o`` has its carried
    slot ``s``'s (static) dims this iteration. Its own function: it reads the computed
    dims the body wrote through ``S``, which the Loop's function never does."""
    from ...backends.c.generate import sym_prologue

    name = ctx.unique("cf_keeps_shape_")
    cond = " && ".join(f"(int64_t)({y}) == {x}" for x, y in zip(s.shape, o.shape)
                       if not same(x, y)) or "1"
    ctx.source.functions.append(
        f"static int {name}(uint8_t* restrict arena) {{\n{sym_prologue(ctx.plan)}\n"
        f"  return {cond};\n}}")
    return name


@register
class Loop(OpDef):
    """``Loop``: inputs ``M`` (optional), ``cond`` (optional), the initial loop-carried
    values, then the captured values; attribute ``body`` (:class:`~...ir.Graph`).

    Raises
    ------
    ShapeError
        A body whose outputs do not match the carried values (count, dtype, shape: a
        value whose shape changes per iteration is refused).
    UnsupportedOpError
        Scan outputs with no bound on the trip count (the hint names
        ``max_trip_count``).
    """

    op_type = "Loop"
    since_version = 1
    also_versions = (11, 13, 16, 19, 21, 23, 24, 25)

    def body_types(self, inputs, attrs, key: str):
        """Types of the body's formal inputs: ``iter_num`` (int64), ``cond`` (bool), the
        loop-carried values (as the node's initial values)."""
        carried = [body_type(v) if v.seq is not None else (v.shape, v.dtype)
                   for v in inputs[2:]]
        return [((), np.dtype(np.int64)), ((), np.dtype(bool)), *carried]

    def settle_body(self, name: str, inputs, attrs, key: str, graph) -> list | None:
        """Body input types for loop-carried tensors that grow by a constant step per
        iteration (``None`` when none does): such an axis becomes a computed dim bounded
        by the initial size plus the step times the trip-count bound; the frontend
        imports the body again with these types. Records ``attrs["_grown"]`` (carried
        index -> {axis: step}).

        Raises
        ------
        UnsupportedOpError
            A growing value and no bound on the trip count (the hint names
            ``max_trip_count``).
        """
        init = list(inputs[2:])
        exact, bound = trip_count(Node("Loop", name, list(inputs), [], {**attrs, key: graph}))
        trips = exact if isinstance(exact, int) else bound
        types = self.body_types(inputs, attrs, key)
        grown: dict[int, dict[int, int]] = {}
        for k, v in enumerate(init):
            s, o = graph.inputs[2 + k], graph.outputs[1 + k]
            if (v is None or v.seq is not None or o.dtype != v.dtype
                    or len(o.shape) != len(s.shape) or same_shape(s.shape, o.shape)):
                continue
            steps = {a: y - x for a, (x, y) in enumerate(zip(s.shape, o.shape)) if not same(x, y)}
            if not all(isinstance(s.shape[a], int) and isinstance(d, int)
                       for a, d in steps.items()):
                return None  # not a constant step: infer refuses it
            if trips is None:
                raise UnsupportedOpError(
                    f"Loop {name!r}: loop-carried value {k} grows per iteration and the trip "
                    "count has no bound monolib can derive to plan it at; give one with "
                    f"max_trip_count={{{name!r}: N}} (CLI: --max-trips {name}=N)")
            shape = list(v.shape)
            for a, d in steps.items():
                ends = (int(v.shape[a]), int(v.shape[a]) + d * trips)
                shape[a] = Dim.of(computed_symbol(f"{name}_carried{k}_d{a}", hi=max(ends),
                                                  lo=max(0, min(ends))))
            types[2 + k] = (tuple(shape), v.dtype)
            grown[k] = steps
        if not grown:
            return None
        attrs["_grown"] = grown
        return types

    def _grows(self, node: Node, k: int, s: Value, o: Value) -> bool:
        """Whether carried value ``k`` is one :meth:`settle_body` gave a growing dim and
        the body grows it by its step."""
        steps = node.attrs.get("_grown", {}).get(k)
        if not steps or len(s.shape) != len(o.shape):
            return False
        return all(same(y, x + steps[a]) if a in steps else same(x, y)
                   for a, (x, y) in enumerate(zip(s.shape, o.shape)))

    def infer(self, node: Node) -> list[OutType]:
        body = node.attrs["body"]
        formal = int(node.attrs.get("_formal", len(node.inputs)))
        init = node.inputs[2:formal]
        n_scan = len(body.outputs) - 1 - len(init)
        if n_scan < 0:
            raise ShapeError(f"Loop {node.name!r}: the body has {len(body.outputs)} outputs "
                             f"for {len(init)} loop-carried values")
        out: list[OutType] = []
        exact, bound = trip_count(node)
        seqs = settle_carried(node, body, list(init), exact if isinstance(exact, int) else bound)
        for k, (v, o) in enumerate(zip(init, body.outputs[1:])):
            if k in seqs:  # a sequence: the slot that holds it at every iteration
                node.outputs[k].seq = seqs[k]
                out.append(seqs[k].slot())
                continue
            if v.dtype == o.dtype and self._grows(node, k, body.inputs[2 + k], o):
                out.append((body.inputs[2 + k].shape, v.dtype))  # its final size
                continue
            if v.dtype == o.dtype and _may_keep(v.shape, o.shape):
                out.append((v.shape, v.dtype))  # a data-dependent dim: checked at run time
                continue
            if v.dtype != o.dtype or not same_shape(v.shape, o.shape):
                raise ShapeError(
                    f"Loop {node.name!r}: loop-carried value {k} enters as "
                    f"{v.dtype}{list(v.shape)} and leaves the body as {o.dtype}{list(o.shape)}; "
                    "monolib compiles loop-carried values of one fixed shape or growing by a "
                    "constant step per iteration")
            out.append((v.shape, v.dtype))
        grown = {s.name for k in node.attrs.get("_grown", {})
                 for d in body.inputs[2 + k].shape if isinstance(d, Dim) for s in d.symbols()}
        for o in body.outputs[1 + len(init):]:
            if any(s.name in grown for d in o.shape if isinstance(d, Dim) for s in d.symbols()):
                raise ShapeError(f"Loop {node.name!r}: scan output {o.name!r} changes shape "
                                 "per iteration (it follows a growing loop-carried value)")
        if n_scan:
            out += [((self._trips(node), *o.shape), o.dtype)
                    for o in body.outputs[1 + len(init):]]
        return out

    def _trips(self, node: Node):
        if "_trips" in node.attrs:
            return node.attrs["_trips"]
        exact, bound = trip_count(node)
        if exact is not None:
            node.attrs["_trips"] = exact
            return exact
        if bound is None:
            raise UnsupportedOpError(
                f"Loop {node.name!r}: its trip count has no bound monolib can derive and it "
                "has scan outputs, whose buffers are planned at that bound; give one with "
                f"max_trip_count={{{node.name!r}: N}} (CLI: --max-trips {node.name}=N)")
        node.attrs["_trips"] = Dim.of(computed_symbol(f"{node.name}_trips", hi=bound))
        return node.attrs["_trips"]

    def reference(self, node: Node, inputs):
        formal = int(node.attrs.get("_formal", len(inputs)))
        m = INT64_MAX if inputs[0] is None else int(np.asarray(inputs[0]).reshape(-1)[0])
        c = True if inputs[1] is None else bool(np.asarray(inputs[1]).reshape(-1)[0])
        carried = list(inputs[2:formal])
        captured = inputs[formal:]
        scans: list[list[np.ndarray]] = []
        i = 0
        while i < m and c:
            outs = evaluate_subgraph(node, "body", [np.array(i, np.int64), np.array(c)] + carried,
                                     captured)
            c = bool(np.asarray(outs[0]).reshape(-1)[0])
            carried = outs[1:1 + len(carried)]
            scans.append(outs[1 + len(carried):])
            i += 1
        n_scan = len(node.outputs) - len(carried)
        stacked = []
        for k in range(n_scan):
            body_out = node.attrs["body"].outputs[1 + len(carried) + k]
            if scans:
                stacked.append(np.stack([s[k] for s in scans]))
            else:
                stacked.append(np.zeros((0, *body_out.shape), body_out.dtype))
        return [*carried, *stacked]

    def emit(self, node: Node, ctx) -> str:
        body = compile_subgraph(node, "body", ctx.plan_symbols)
        base = ctx.scratch_base + ctx.scratch_used
        ctx.scratch(body.arena_bytes)
        em = body.emit(ctx, base, None, f"{node.name}_body")
        formal = int(node.attrs.get("_formal", len(node.inputs)))
        init = node.inputs[2:formal]
        n = len(init)
        it, cin, slots = body.formal[0], body.formal[1], body.formal[2:]
        cout, couts, souts = body.outputs[0], body.outputs[1:1 + n], body.outputs[1 + n:]
        exact, bound = trip_count(node)
        trips = node.attrs.get("_trips")
        m_in, c_in = node.input(0), node.input(1)
        m = "INT64_MAX" if m_in is None else f"(int64_t){ctx.ptr(m_in)}[0]"
        c = "1" if c_in is None else f"({ctx.ptr(c_in)}[0] != 0)"
        lines = ["  {", f"  int64_t m_ = {m}; int c_ = {c}; int64_t i_ = 0;"]
        # a growing carried value: its size kept in a local (g<k>_<axis>_), written to
        # its computed dim before each iteration and after the last (never read from S)
        grown = node.attrs.get("_grown", {})
        sizes = {k: {a: f"g{k}_{a}_" for a in steps} for k, steps in grown.items()}
        for k, names in sizes.items():
            lines += [f"  int64_t {g} = {int(init[k].shape[a])};" for a, g in names.items()]
        for v, s in zip(init, slots):
            lines.append(f"  {copy_in(ctx, em.ptr(s), s.seq, ctx.ptr(v), v.seq)}" if v.seq else
                         f"  memcpy({em.ptr(s)}, {ctx.ptr(v)}, {v.nbytes});")
        lines.append("  for (; i_ < m_ && c_; ++i_) {")
        if (souts or grown) and exact is None:
            lines.append(f"    if (i_ >= {bound}) {{ {fail_statement(ctx, node, 'trip count')}"
                         " break; }")
        for k, names in sizes.items():
            lines += [f"    {ctx.set_symbol(slots[k].shape[a], g)}" for a, g in names.items()]
        lines.append(f"    *{em.ptr(it)} = i_; *{em.ptr(cin)} = (uint8_t)c_;")
        lines.append(f"    {em.call}")
        lines.append(f"    c_ = ({em.ptr(cout)}[0] != 0);")
        for k, (s, o) in enumerate(zip(slots, couts)):
            if s.seq is None and k not in grown and not same_shape(s.shape, o.shape):
                lines.append(f"    if (!{_shape_check(ctx, s, o)}(arena)) {{ "
                             f"{fail_statement(ctx, node, 'carried shape')} break; }}")
        for k, (s, o) in enumerate(zip(slots, couts)):
            if k in grown:
                nbytes = _nbytes_c(o, {a: f"({g} + {grown[k][a]})" for a, g in sizes[k].items()})
                lines.append(f"    memmove({em.ptr(s)}, {em.ptr(o)}, {nbytes});")
            elif s.seq is not None and o is not s:
                lines.append(f"    {copy_back(ctx, node, em.ptr(s), s.seq, em.ptr(o), o.seq)}")
            elif em.offset(o) != em.offset(s):
                lines.append(f"    memmove({em.ptr(s)}, {em.ptr(o)}, {o.nbytes});")
        for o, y in zip(souts, node.outputs[n:]):
            lines.append(f"    memcpy((uint8_t*){ctx.ptr(y)} + i_ * (int64_t)({o.nbytes}), "
                         f"{em.ptr(o)}, {o.nbytes});")
        for k, names in sizes.items():
            lines += [f"    {g} += {grown[k][a]};" for a, g in names.items()]
        lines.append("  }")
        for k, (s, y) in enumerate(zip(slots, node.outputs[:n])):
            if k in grown:
                lines += [f"  {ctx.set_symbol(s.shape[a], g)}" for a, g in sizes[k].items()]
                lines.append(f"  memcpy({ctx.ptr(y)}, {em.ptr(s)}, {_nbytes_c(s, sizes[k])});")
                continue
            lines.append(f"  memcpy({ctx.ptr(y)}, {em.ptr(s)}, {y.nbytes});")
        if souts and exact is None:
            lines.append(f"  {ctx.set_symbol(trips, 'i_')}")
        lines.append("  }")
        return "\n".join(lines)
