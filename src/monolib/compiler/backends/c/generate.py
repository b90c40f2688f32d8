"""The C code generator: fused ops -> one self-contained C source file.

:func:`generate` turns a graph, its :class:`~..passes.fuse_elementwise.Fusion` and its
:class:`~..passes.plan_memory.MemoryPlan` into

* the C source (ABI of docs/ARCHITECTURE.md, "The generated C library"): one
  ``static void op_<i>(const uint8_t* restrict params, uint8_t* restrict arena)`` per
  fused op that has code, and the exported ``monolib_run``, ``monolib_run_op``,
  ``monolib_num_ops``, ``monolib_set_num_threads`` (``kernels/threadpool.h``: large
  Conv/Gemm/MatMul calls run on the library's own thread pool);
* the graph JSON (ARCHITECTURE.md, "The graph JSON");
* the params blob (``uint8`` array; every tensor 64-byte aligned).

The C is written in :data:`~..cstyle.HOST_C` (prelude, headers, pointer types, op
function heads). Each op's ``emit(node, ctx)`` gets a :class:`CEmitContext` (the
``EmitContext`` protocol of ``ops/base.py``). Elementwise chains are written by
:mod:`.epilogue`. Per-op scratch buffers go where the plan put them
(:func:`scratch_sizes` measures them for :func:`~..passes.plan_memory.plan_memory`);
an op whose scratch was not planned gets it after the planned arena.

Run-time dims (issue 12): every function that sizes something starts with
``const int64_t* restrict S = (const int64_t*)(arena + SYM_OFFSET);`` (:func:`sym_prologue`),
every dim is written as :meth:`~..symbolic.Dim.c_expr` over the graph's symbols (an
f-string of a Dim inside :func:`~..symbolic.c_rendering`), and ``monolib_run`` writes the
shape of each output at ``shape_offset`` before returning. An emitter that cannot take a
run-time dim (``int(dim)``, ``range(dim)``, a comparison with no single answer raise
:class:`~monolib.errors.UndecidableDimError`) fails the compile with one error naming
the node, the op and the dim, before any C is compiled.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ....abi.graph_spec import dtype_name
from ....errors import CompileError, MonolibError, UndecidableDimError
from ....export.csource import GLUE_MARK, HELPERS_MARK, UNIT_MARK
from ...ir import Graph, Value, shape_size
from ...ops.base import op_of
from ...passes.fuse_elementwise import FusedOp, Fusion
from ...passes.plan_memory import MemoryPlan, align
from ...symbolic import Dim, SymbolTable, c_rendering, is_computed, size_hint
from ..cstyle import HOST_C, c_literal, ctype, rendering, string_typedefs, tensor_pointer
from ..graph_json import graph_json_of, node_json
from . import epilogue, specialize
from .headers import kernel_header
from .layout import BLOCKED
from .timed_run import timed_run

__all__ = [
    "CEmitContext",
    "ParamsBuilder",
    "emit_ops",
    "generate",
    "host_prelude",
    "scratch_sizes",
    "sym_prologue",
]

logger = logging.getLogger(__name__)

@functools.cache
def host_prelude() -> str:
    """The top of every generated C file: :data:`~..cstyle.HOST_C`'s prelude, then its
    headers (``vmath.h``: float32 ``ml_expf``; ``types.h``: storage-type conversions;
    ``threadpool.h``: the pool behind ``monolib_set_num_threads``). Op kernels pasted by
    ``ctx.include`` come after it."""
    pasted = (f"/* ---- {h} ---- */\n" + kernel_header(h).strip("\n") for h in HOST_C.headers)
    return "\n\n".join([HOST_C.prelude.strip("\n"), *pasted])


def sym_prologue(plan: MemoryPlan) -> str:
    """The C line giving a function ``S``, the run-time symbol values in the arena
    (``""`` for a graph without run-time dims); the function must have ``arena``."""
    if plan.sym_offset is None:
        return ""
    return (
        f"  const int64_t* restrict S = (const int64_t*)(arena + {plan.sym_offset}); (void)S;"
    )


class ParamsBuilder:
    """The params blob under construction: tensors at 64-byte aligned offsets."""

    def __init__(self, dedupe: bool = False) -> None:
        self.entries: list[dict[str, Any]] = []
        self.arrays: list[np.ndarray] = []
        self.size = 0
        self.by_uid: dict[int, int] = {}
        self.names: set[str] = set()
        #: store equal arrays once (the specializations' copies of the weights)
        self.dedupe = dedupe
        self._by_content: dict[tuple, int] = {}

    def add(self, array: np.ndarray, name: str) -> int:
        """Append ``array`` (C-contiguous copy) and return its byte offset (with
        ``dedupe``, the offset of an equal array already added)."""
        array = np.ascontiguousarray(array)
        if array.dtype.kind == "S":  # strings: their bytes (safetensors has no string type)
            array = np.frombuffer(array.tobytes(), np.uint8).reshape(*array.shape,
                                                                    array.dtype.itemsize)
        if self.dedupe:
            key = (array.dtype.str, array.shape,
                   hashlib.sha256(array.reshape(-1).view(np.uint8)).hexdigest())
            off = self._by_content.get(key)
            if off is not None:
                return off
            off = self._add(array, name)
            self._by_content[key] = off
            return off
        return self._add(array, name)

    def _add(self, array: np.ndarray, name: str) -> int:
        base, k = name or "param", 1
        while name in self.names or not name:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        off = align(self.size)
        self.entries.append(
            {
                "name": name,
                "shape": list(array.shape),
                "dtype": dtype_name(array.dtype),  # "S<n>" for strings
                "offset": off,
                "nbytes": array.nbytes,
            }
        )
        self.arrays.append(array)
        self.size = off + array.nbytes
        return off

    def value(self, v: Value) -> int:
        """Byte offset of constant ``v`` (added on first use, deduplicated by value)."""
        off = self.by_uid.get(v.uid)
        if off is None:
            if v.is_symbolic_const:
                raise UndecidableDimError(
                    f"value {v.name!r} is computed from run-time dims: it has no place in the "
                    "params blob"
                )
            off = self.by_uid[v.uid] = self.add(v.const, v.name)
        return off

    def blob(self) -> np.ndarray:
        """The params blob, ``uint8``, length a multiple of 64."""
        out = np.zeros(align(self.size), np.uint8)
        for e, a in zip(self.entries, self.arrays):
            # a byte view of the (C-contiguous) array: one copy, straight into the blob
            out[e["offset"] : e["offset"] + e["nbytes"]] = a.reshape(-1).view(np.uint8)
        return out


class _Source:
    """Top-level pieces of the C file, each emitted once, in order of first use."""

    def __init__(self) -> None:
        self.headers: list[str] = []
        self.helpers: list[str] = []
        self._seen: set[str] = set()
        self.functions: list[str] = []
        self.counter = 0
        #: constants baked into static arrays for epilogues, by Value.uid
        self.baked: dict[int, str] = {}
        #: index in ``functions`` -> the top-level op function that asked for it (the
        #: translation unit it goes to when export splits the file: UNIT_MARK)
        self.owner: dict[int, str] = {}
        self.emitting = False

    def once(self, bucket: list[str], text: str) -> None:
        key = hashlib.sha256(text.encode()).hexdigest()
        if key not in self._seen:
            self._seen.add(key)
            bucket.append(text)

    def unique(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"


class CEmitContext:
    """The :class:`~..ops.base.EmitContext` of one fused op.

    Parameters
    ----------
    fused : FusedOp
        The op being emitted.
    plan : MemoryPlan
    params : ParamsBuilder
    source : _Source
        Shared top-level pieces of the file.
    scratch_base : int
        Arena offset where scratch buffers start.
    """

    def __init__(
        self,
        fused: FusedOp,
        plan: MemoryPlan,
        params: ParamsBuilder,
        source: _Source,
        scratch_base: int,
    ):
        self.fused = fused
        self.plan = plan
        self.params = params
        self.source = source
        self.scratch_base = scratch_base
        self.scratch_used = 0
        #: arena offset of this op's kept region (``plan.keep``; None while sizing)
        self.keep_base: int | None = None
        #: bytes of kept region asked for (:meth:`once_buffer`)
        self.keep_used = 0
        #: this op is itself run-once (``plan.init_ops``): nothing to keep
        self.is_init = False
        self._tile: dict[str, str] = {}
        self._value_fn: str | None = None
        #: the emitter asked for the epilogue (tile function or output expression)
        self.epilogue_used = False
        #: the graph's run-time dims (Dims in f-strings render as C over them)
        self.plan_symbols = SymbolTable()
        #: declarations the op function starts with (materialised symbolic constants)
        self.preamble: list[str] = []
        self._materialised: dict[int, str] = {}
        #: uids of the values stored channel-blocked (``Fusion.blocked``, layout.py)
        self.blocked_uids: frozenset[int] = frozenset()

    # -- pointers ------------------------------------------------------------------
    def ptr(self, value: Value) -> str:
        """Typed pointer expression of ``value``'s data (see ``EmitContext.ptr``)."""
        f = self.fused
        if f.kind == "op" and f.steps and value is f.anchor.outputs[0]:
            value = f.out
        root = self.plan.root(value)
        if value.is_symbolic_const or root.is_symbolic_const:
            return self._materialise(value if value.is_symbolic_const else root)
        return tensor_pointer(HOST_C, value, self.plan, self.params)

    def blocked(self, value: Value) -> bool:
        """Whether ``value`` is stored channel-blocked, NCHW16c (``layout.py``); the
        anchor's output 0 stands for the chain's final value, as in :meth:`ptr`."""
        f = self.fused
        if f.kind == "op" and f.steps and value is f.anchor.outputs[0]:
            value = f.out
        return value.uid in self.blocked_uids

    def side_inputs(self) -> bool:
        """Whether the fused chain reads tensors besides its own value (``leaves_of``)."""
        f = self.fused
        return f.kind == "op" and bool(epilogue.leaves_of(f.steps))

    def _materialise(self, value: Value) -> str:
        """A constant computed from run-time dims, read as data: a local array of the
        op function, filled from the symbol values ``S`` when the op runs."""
        name = self._materialised.get(value.uid)
        if name is None:
            name = self._materialised[value.uid] = self.unique("symc")
            flat = value.const.reshape(-1)
            items = ", ".join(f"({ctype(value.dtype)})({x})" for x in flat.tolist()) or "0"
            self.preamble.append(
                f"  const {ctype(value.dtype)} {name}[{max(flat.size, 1)}] = {{{items}}};"
            )
        return f"(({HOST_C.pointer(ctype(value.dtype), True)}){name})"

    def param(self, array: np.ndarray, hint: str) -> str:
        """Add ``array`` to the params blob; a typed ``const`` pointer expression."""
        array = np.asarray(array)
        off = self.params.add(array, f"{self.fused.name}.{hint}")
        return f"(({HOST_C.pointer(ctype(array.dtype), True)})(params + {off}))"

    def set_symbol(self, dim: Any, c_value: str) -> str:
        """The C statement writing computed symbol ``dim`` (a ``ComputedSymbol`` or the
        Dim of one; issue 13) into its slot of ``S``: ops after this one read it as any
        run-time dim. This op must not read that symbol through ``S`` after writing it
        (``S`` is ``restrict``): it keeps its own count.

        Raises
        ------
        CompileError
            ``dim`` is not one computed symbol of the graph's table.
        """
        sym = dim.symbols()[0] if isinstance(dim, Dim) and len(dim.symbols()) == 1 else dim
        if not is_computed(dim) or self.plan_symbols.get(getattr(sym, "name", "")) is None:
            raise CompileError(f"set_symbol: {dim!r} is not a computed symbol of this graph")
        k = self.plan_symbols.index(sym.name)
        return f"((int64_t*)(arena + {self.plan.sym_offset}))[{k}] = (int64_t)({c_value});"

    def scratch(self, nbytes: int) -> str:
        """A 64-aligned temporary of ``nbytes`` in the arena, valid during this op."""
        off = self.scratch_base + self.scratch_used
        # a run-time size gets its upper bound: the plan is static
        n = nbytes.hi if isinstance(nbytes, Dim) else int(nbytes)
        self.scratch_used = align(self.scratch_used + max(n, 1))
        return f"((uint8_t*)(arena + {off}))"

    def once_buffer(self, value: Value, nbytes: int) -> tuple[str, str] | None:
        """(pointer to a 64-aligned region of ``nbytes`` kept across runs, C expression
        that is nonzero once the run-once ops have run) when ``value`` is made by
        run-once ops (``plan.init_made``) and this op is not one: data derived from it
        there while the flag is 0 (the first whole run of an arena, or after new params)
        stays valid for every later run. None otherwise (derive it on every run)."""
        if (self.is_init or self.plan.init_offset is None
                or self.plan.root(value).uid not in self.plan.init_made
                and value.uid not in self.plan.init_made
                or not isinstance(nbytes, int)):
            return None
        base = self.plan.arena_bytes if self.keep_base is None else self.keep_base
        off = base + self.keep_used
        self.keep_used = align(self.keep_used + max(int(nbytes), 1))
        return (f"((uint8_t*)(arena + {off}))",
                f"(*(const int32_t*)(arena + {self.plan.init_offset}))")

    # -- top-level code ------------------------------------------------------------
    def helper(self, code: str) -> None:
        """Add a top-level C definition once."""
        self.source.once(self.source.helpers, code.strip("\n"))

    def include(self, header: str) -> None:
        """Paste kernel header ``header`` (``backends/c/headers.py`` finds it) once."""
        self.source.once(
            self.source.headers, f"/* ---- {header} ---- */\n" + kernel_header(header).strip("\n")
        )

    def unique(self, prefix: str) -> str:
        """A fresh C identifier starting with ``prefix``."""
        return self.source.unique(prefix)

    # -- epilogues -----------------------------------------------------------------
    def _const_pointer(self, v: Value) -> str:
        """A baked static array for a constant side input of an epilogue."""
        name = self.source.baked.get(v.uid)
        if name is None:
            name = self.source.baked[v.uid] = self.unique("k")
            flat = v.const.reshape(-1)
            body = ", ".join(c_literal(x, v.dtype) for x in flat.tolist())
            self.source.once(
                self.source.helpers,
                f"static const {ctype(v.dtype)} {name}[{max(flat.size, 1)}] __attribute__((aligned(64))) = {{{body}}};",
            )
        return name

    def _epilogue_pointer(self, v: Value) -> str:
        root = self.plan.root(v)
        if v.is_symbolic_const or root.is_symbolic_const:
            raise UndecidableDimError(
                f"value {v.name!r} is computed from run-time dims and read by a fused "
                "epilogue, which cannot take it"
            )
        if v.is_const or root.is_const:
            return self._const_pointer(v if v.is_const else root)
        return f"(({HOST_C.pointer(ctype(v.dtype), True)})(arena + {self.plan.offset(v)}))"

    def tile_epilogue(self, groups: Sequence[Sequence[int]], part: FusedOp | None = None,
                      band_ld: int | None = None) -> str:
        """Name of the in-place tile epilogue function for ``groups``; ``"0"`` if none.

        The kernel must pass ``ctx.ptr(node.outputs[0])`` itself (the output's base, not
        a tile pointer) as the function's ``out``: the function finds the arena, and so
        the side inputs, at a fixed offset from it. ``part``: the epilogue of that part of
        a ``band`` op instead of this op's; with ``band_ld`` it runs on a band of rows in
        scratch (``epilogue.tile_epilogue_function``).
        """
        f = part or self.fused
        if f.kind != "op" or not f.steps:
            return "0"
        self.epilogue_used = True
        key = repr([id(f), band_ld, [list(g) for g in groups]])
        if key not in self._tile:
            name = self.unique("epi_")
            code = epilogue.tile_epilogue_function(
                name, f.steps, f.out, groups,
                0 if band_ld is not None else self.plan.offset(f.out),
                self._epilogue_pointer, sym_prologue(self.plan), band_ld,
            )
            self.source.functions.append(code)
            self._tile[key] = name
        return self._tile[key]

    def parallel_for(self, var: str, extent: Any, body: str, work: Any) -> str:
        """C statements running ``body`` for ``var`` = 0 .. ``extent``-1, split into
        blocks of ``var`` over the thread pool when ``work`` (threadpool.h's unit:
        multiply-adds, a float moved counts 4) reaches :data:`PARALLEL_MIN_WORK`; the
        pool then decides on the run's state (``ml_par_tasks_mem``).

        ``body`` must write disjoint data for distinct ``var`` and use no scratch (the
        blocks run at once) and may use ``params``, ``arena`` and ``S``: a split body
        goes into a task function of its own, given the op's base pointers.
        ``extent`` and ``work`` are ints or Dims (run-time dims: C over ``S``).
        """
        loop = f"  for (int64_t {var} = 0; {var} < {extent}; ++{var}) {{\n{body}\n  }}"
        local = any(name in body for name in self._materialised.values())
        if size_hint(extent) < 2 or size_hint(work) < PARALLEL_MIN_WORK or local:
            return loop
        name = self.unique("par_task_")
        self.source.functions.append(
            f"static void {name}(void* ctx_, int64_t t, void* scratch_) {{\n"
            "  const ml_ew_ctx* c_ = (const ml_ew_ctx*)ctx_;\n"
            "  const uint8_t* restrict params = c_->params;\n"
            "  uint8_t* restrict arena = c_->arena;\n"
            f"{sym_prologue(self.plan)}\n"
            f"  const int64_t lo_ = t * c_->chunk, n_ = {extent};\n"
            "  const int64_t hi_ = lo_ + c_->chunk < n_ ? lo_ + c_->chunk : n_;\n"
            "  (void)params; (void)arena; (void)scratch_;\n"
            f"  for (int64_t {var} = lo_; {var} < hi_; ++{var}) {{\n{body}\n  }}\n}}"
        )
        return (
            f"  {{ ml_ew_ctx c_ = {{params, arena, 0}};\n"
            f"    const int64_t n_ = {extent}, t_ = ml_par_tasks_mem((double)({work}), n_);\n"
            "    c_.chunk = (n_ + t_ - 1) / t_;\n"
            f"    if (t_ > 1) ml_parallel_for((n_ + c_.chunk - 1) / c_.chunk, {name}, &c_, 0, 0);\n"
            f"    else {name}(&c_, 0, 0); }}"
        )

    def output_expr(self, acc: str, index: Sequence[str]) -> str:
        """C expression of the epilogue applied to ``acc`` at output index ``index``."""
        f = self.fused
        if f.kind != "op" or not f.steps:
            return acc
        self.epilogue_used = True
        if len(index) != len(f.out.shape):
            raise CompileError(
                f"{f.name}: output_expr got {len(index)} indices for a rank-{len(f.out.shape)} output"
            )
        if self._value_fn is None:
            self._value_fn = self.unique("epv_")
            code = epilogue.value_function(
                self._value_fn, f.steps, f.out, self._epilogue_pointer, sym_prologue(self.plan)
            )
            self.source.functions.append(code)
        args = ", ".join([f"({acc})", "params", "arena", *(f"(int64_t)({i})" for i in index)])
        return f"{self._value_fn}({args})"


def _emit_body(fused: FusedOp, ctx: CEmitContext) -> str:
    """The statements of one fused op."""
    if fused.kind == "copy":
        return f"  memcpy({ctx.ptr(fused.out)}, {ctx.ptr(fused.src)}, {fused.out.nbytes});"
    if fused.kind == "band":
        from ...ops.nn.conv_band import emit_band

        return emit_band(fused, ctx)
    if fused.kind == "elementwise":
        out_off = ctx.plan.offset(fused.out)
        in_place = frozenset(
            v.uid
            for v in epilogue.leaves_of(fused.steps)
            if not ctx.plan.root(v).is_const and ctx.plan.offset(v) == out_off
        )
        return _elementwise(fused, ctx, in_place)
    node = fused.anchor
    code = op_of(node).emit(node, ctx)
    if fused.steps and not ctx.epilogue_used:
        # The emitter ignored the epilogue: apply it once on the whole output.
        code += "\n" + _whole_output_epilogue(fused, ctx)
    return code


# Work (threadpool.h's unit) from which an op's memory-bound loop is written as a task
# function the pool may split: threadpool.h's ML_PAR_MIN_MEM (its comment has the
# measurements); at run time ml_par_tasks_mem decides on the pool's state.
PARALLEL_MIN_WORK = 1 << 17
# Elementwise chains of at least this many element-steps are split over the thread pool
# (memory-bound: an element-step counts as 4 multiply-adds).
PARALLEL_ELEMENTWISE = PARALLEL_MIN_WORK // 4


def _elementwise(fused: FusedOp, ctx: CEmitContext, in_place: frozenset[int]) -> str:
    """An elementwise chain: one loop nest, or, when large, a task function over blocks of
    its outermost loop run by ``ml_parallel_for`` (blocks are disjoint: safe in place)."""
    out = fused.out
    n, depth = epilogue.outer_extent(fused.steps, out)
    size = shape_size(out.shape)
    work = size_hint(size) * max(1, len(fused.steps))  # at the bounds for run-time dims
    # a materialised symbolic constant lives in the op function: no task function
    local = any(ctx.plan.root(v).is_symbolic_const or v.is_symbolic_const
                for v in epilogue.leaves_of(fused.steps))
    if size_hint(n) < 2 or work < PARALLEL_ELEMENTWISE or local:
        return epilogue.elementwise_loop(fused.steps, out, ctx.ptr, ctx.ptr(out), in_place)
    if isinstance(size, Dim):  # the pool decides on this run's work
        work_c = f"4.0 * (double){size} * {max(1, len(fused.steps))}"
    else:
        work_c = f"{float(4 * work)}"
    name = ctx.unique("ew_task_")
    loop = epilogue.elementwise_loop(
        fused.steps, out, ctx.ptr, ctx.ptr(out), in_place, ("lo_", "lo_ + c_->chunk")
    )
    ctx.source.functions.append(
        f"static void {name}(void* ctx_, int64_t t, void* scratch_) {{\n"
        "  const ml_ew_ctx* c_ = (const ml_ew_ctx*)ctx_;\n"
        "  const uint8_t* restrict params = c_->params;\n"
        "  uint8_t* restrict arena = c_->arena;\n"
        f"{sym_prologue(ctx.plan)}\n"
        "  int64_t lo_ = t * c_->chunk;\n"
        f"  (void)params; (void)arena; (void)scratch_;\n{loop}\n}}"
    )
    # a flat loop is split at multiples of 64 elements (whole vectors, whole lines)
    align = "\n    c_.chunk = (c_.chunk + 63) & ~(int64_t)63;" if depth == 1 else ""
    return (
        f"  {{ ml_ew_ctx c_ = {{params, arena, 0}};\n"
        f"    int64_t t_ = ml_par_tasks_mem({work_c}, {n});\n"
        f"    c_.chunk = ({n} + t_ - 1) / t_;{align}\n"
        f"    ml_parallel_for(({n} + c_.chunk - 1) / c_.chunk, {name}, &c_, 0, 0); }}"
    )


def _whole_output_epilogue(fused: FusedOp, ctx: CEmitContext) -> str:
    """A loop over output 0 applying the chain element by element, in place."""
    shape = fused.out.shape
    T = ctype(fused.out.dtype)
    idx = [f"i{d}" for d in range(len(shape))]
    lines = [f"  {{ {T}* restrict y = {ctx.ptr(fused.out)};"]
    for i, n in zip(idx, shape):
        lines.append(f"  for (int64_t {i} = 0; {i} < {n}; ++{i})")
    flat = " + ".join(f"{i} * {shape_size(shape[d + 1 :])}" for d, i in enumerate(idx)) or "0"
    lines.append(f"    y[{flat}] = {ctx.output_expr(f'y[{flat}]', idx)};")
    lines.append("  }")
    return "\n".join(lines)


def _assemble(
    source: _Source, op_functions: list[str], n: int, shapes: str = "", run_first: str = "",
    init: tuple[Sequence[int], int | None] = ((), None),
) -> str:
    """The C file: prelude, headers, helpers, op functions and the exported entry
    points; ``shapes`` (C statements, run-time dims only) writes the output shapes at
    the end of ``monolib_run`` and after the last op of ``monolib_run_op``;
    ``run_first`` starts ``monolib_run`` (the dispatch to specialized paths);
    ``init`` (op indices, flag offset): the run-once ops ``monolib_run`` skips once
    the int32 flag at that arena offset is set (it sets it after a whole run)."""
    # marks (C comments) say which op function each function goes with, and where the
    # glue starts, for export to split the file into translation units (csource.py)
    ops = [UNIT_MARK.format(source.owner.get(k, "")) + "\n" + f
           for k, f in enumerate(source.functions)]
    for f in op_functions:  # an op function goes alone; a specialization's runner is glue
        name = f.partition(HOST_C.function + " void ")[2].partition("(")[0]
        ops.append(UNIT_MARK.format(name if name.isidentifier() else "") + "\n" + f)
    parts = [host_prelude(), *source.headers, HELPERS_MARK, *source.helpers, *ops, GLUE_MARK]
    if shapes:
        parts.append(
            "static void ml_output_shapes(uint8_t* restrict arena) {\n" + shapes + "\n}"
        )
    last = "\n  if (i == %d) ml_output_shapes(arena);" % (n - 1) if shapes and n else ""
    write = "\n  ml_output_shapes(arena);" if shapes else ""
    if n:
        table = ", ".join(f"op_{i}" for i in range(n))
        parts.append(
            f"static void (*const monolib_ops[{n}])(const uint8_t* restrict, uint8_t* restrict) = {{{table}}};"
        )
        # a control-flow op that failed at run time (ops/control/status.py) set
        # ml_status: stop there and return STATUS_BASE + the op's index
        status = any("ML_STATUS" in h for h in source.helpers)
        check = (" if (ml_status) { ml_status = 0; return 1000 + (int32_t)i; }"
                 if status else "")
        run_op = (
            f"  if (i < 0 || i >= {n}) return -1;\n  monolib_ops[i](params, arena);{check}"
            f"{last}\n  return 0;"
        )
        once, flag = init
        skip = done = ""
        if once:
            marks = ", ".join("1" if i in set(once) else "0" for i in range(n))
            parts.append(f"static const uint8_t ml_init_op[{n}] = {{{marks}}};")
            skip = f" if (ml_init_op[i] && *(const int32_t*)(arena + {flag})) continue;"
            done = f"\n  *(int32_t*)(arena + {flag}) = 1;"
        run = ("  ml_status = 0;\n" if status else "") + (
            f"{run_first}\n" if run_first else ""
        ) + (
            f"  for (int32_t i = 0; i < {n}; ++i) {{{skip} monolib_ops[i](params, arena);{check} }}"
            f"{write}{done}\n  return 0;"
        )
        clock, run_timed = timed_run(n, check, skip, write, done, bool(run_first))
        if clock:
            parts.append(clock)
    else:
        _, run_timed = timed_run(0, "", "", write, "", False)
    if not n:
        run_op = "  (void)i; (void)params; (void)arena;\n  return -1;"
        run = f"  (void)params; (void)arena;{write}\n  return 0;"
    parts += [
        f"MONOLIB_EXPORT int32_t monolib_num_ops(void) {{ return {n}; }}",
        "MONOLIB_EXPORT int32_t monolib_set_num_threads(int32_t n) { return ml_set_num_threads(n); }",
        "MONOLIB_EXPORT int32_t monolib_set_spin(int32_t us) { return ml_set_spin(us); }",
        "MONOLIB_EXPORT int32_t monolib_stop_threads(void) { ml_pool_stop(); return 0; }",
        "MONOLIB_EXPORT int32_t monolib_sleep_threads(void) { ml_pool_nap(); return 0; }",
        f"MONOLIB_EXPORT int32_t monolib_run_op(int32_t i, const uint8_t* params, uint8_t* arena) {{\n{run_op}\n}}",
        f"MONOLIB_EXPORT int32_t monolib_run(const uint8_t* params, uint8_t* arena) {{\n{run}\n}}",
    ]
    parts.append(run_timed)
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def _output_shapes(fusion: Fusion, plan: MemoryPlan) -> str:
    """C statements writing each output's shape (int64, outputs in order) at
    ``plan.shape_offset``; ``""`` without run-time dims."""
    if plan.shape_offset is None:
        return ""
    lines = [sym_prologue(plan),
             f"  int64_t* restrict shp = (int64_t*)(arena + {plan.shape_offset}); (void)shp;"]
    k = 0
    with c_rendering(fusion.symbols):
        for v in fusion.outputs:
            for d in v.shape:
                lines.append(f"  shp[{k}] = {d};")
                k += 1
    return "\n".join(lines)


def _emit_checked(fused: FusedOp, ctx: CEmitContext) -> str:
    """``_emit_body`` with every error naming the node."""
    try:
        with rendering(HOST_C), c_rendering(ctx.plan_symbols):
            return _emit_body(fused, ctx)
    except UndecidableDimError as e:
        raise UndecidableDimError(
            f"node {fused.name!r} ({fused.op_type}) cannot take a run-time dim: {e}"
        ) from e
    except MonolibError as e:
        if fused.name and repr(fused.name) in str(e):
            raise
        raise type(e)(f"node {fused.name!r} ({fused.op_type}): {e}") from e
    except Exception as e:  # an emitter bug must name the node
        raise CompileError(f"emitting node {fused.name!r} ({fused.op_type}) failed: {e}") from e


def scratch_sizes(fusion: Fusion, plan: MemoryPlan) -> dict[int, int]:
    """Bytes of scratch each fused op asks for (index in ``fusion.ops`` -> bytes),
    measured by emitting every op once into throwaway buffers.

    Raises
    ------
    CompileError
        When an emitter fails (the message names the node).
    """
    params, source, sizes = ParamsBuilder(), _Source(), {}
    for t, fused in enumerate(fusion.ops):
        if not fused.has_code or fused.kind == "copy":
            continue
        ctx = CEmitContext(fused, plan, params, source, plan.arena_bytes)
        ctx.plan_symbols, ctx.blocked_uids = fusion.symbols, fusion.blocked
        ctx.is_init = t in plan.init_ops
        _emit_checked(fused, ctx)
        fused.keep_bytes = ctx.keep_used  # plan_memory gives it a kept region
        if ctx.scratch_used or ctx.keep_used:  # 0: no scratch, but re-plan for keep
            sizes[t] = ctx.scratch_used
    return sizes


def emit_ops(
    fusion: Fusion, plan: MemoryPlan, params: ParamsBuilder, source: _Source, prefix: str = "op_"
) -> tuple[list[str], list[dict[str, Any]], int]:
    """The C function of each fused op that has code, named ``<prefix><i>``.

    Returns
    -------
    (functions, nodes, tail)
        The functions, their graph JSON ``nodes`` entries, and the bytes of scratch of
        ops the plan did not place (they go after ``plan.arena_bytes``).

    Raises
    ------
    CompileError
        When an op's emitter fails (the message names the node).
    """
    functions, nodes = [], []
    prologue = sym_prologue(plan) + "\n" if plan.sym_offset is not None else ""
    tail = 0
    # the functions an op adds (tile epilogues, tasks, a subgraph's ops) go with its own
    # function when export splits the file; a subgraph's emit_ops leaves that to its op
    top, source.emitting = not source.emitting, True
    try:
        for t, fused in enumerate(fusion.ops):
            if not fused.has_code:
                continue
            first = len(source.functions)
            base = plan.scratch.get(t, plan.arena_bytes)
            ctx = CEmitContext(fused, plan, params, source, base)
            ctx.plan_symbols, ctx.blocked_uids = fusion.symbols, fusion.blocked
            ctx.keep_base, ctx.is_init = plan.keep.get(t), t in plan.init_ops
            body = _emit_checked(fused, ctx)
            if ctx.keep_used and t not in plan.keep:
                raise CompileError(f"node {fused.name!r} ({fused.op_type}) asked for a kept "
                                   "region the plan has not placed")
            if t in plan.scratch and ctx.scratch_used > align(plan.scratch_sizes[t]):
                raise CompileError(
                    f"node {fused.name!r} ({fused.op_type}) asked for {ctx.scratch_used} bytes "
                    f"of scratch, {plan.scratch_sizes[t]} were planned (its emitter is not "
                    "deterministic)"
                )
            if t not in plan.scratch:
                tail = max(tail, ctx.scratch_used)
            i = len(nodes)
            decls = "".join(line + "\n" for line in ctx.preamble)
            chain = " -> ".join([fused.op_type, *fused.fused_types])
            functions.append(
                f"/* {chain}: {fused.name} */\n{HOST_C.signature(f'{prefix}{i}')} {{\n"
                f"  (void)params; (void)arena;\n{prologue}{decls}{body}\n}}"
            )
            nodes.append(node_json(fused, plan))
            if fused.out is not None and fused.out.uid in fusion.blocked:
                nodes[-1]["layout"] = BLOCKED  # debug_get_output reads it back to NCHW
            if t in plan.init_ops:  # run once per arena (plan_memory.init_ops)
                nodes[-1]["init"] = True
            if ctx.keep_used:  # data it derives once per arena (plan.keep): [offset, bytes]
                nodes[-1]["keep"] = [plan.keep[t], ctx.keep_used]
            for k in range(first, len(source.functions)) if top else ():
                source.owner.setdefault(k, f"{prefix}{i}")
    finally:
        source.emitting = not top
    return functions, nodes, tail


def generate(
    graph: Graph,
    fusion: Fusion,
    plan: MemoryPlan,
    *,
    constants: dict[str, Any] | None = None,
    variants: Sequence[tuple[dict[str, int], Fusion, MemoryPlan]] = (),
) -> tuple[str, dict[str, Any], np.ndarray]:
    """Generate the C library source, the graph JSON and the params blob.

    Parameters
    ----------
    graph : Graph
        The graph (name and ``metadata`` go into the JSON).
    fusion : Fusion
        Fused ops in run order (:func:`~..passes.fuse_elementwise.fuse_elementwise`).
    plan : MemoryPlan
        Arena offsets (:func:`~..passes.plan_memory.plan_memory`).
    constants : dict, optional
        User constants recorded under ``"constants"`` in the JSON.
    variants : list of (values, Fusion, MemoryPlan), optional
        Static specializations of a graph with run-time dims (:mod:`.specialize`): the
        symbol values each stands for, its fused ops and its own plan.

    Returns
    -------
    source : str
        Self-contained C (ABI: docs/ARCHITECTURE.md, "The generated C library").
    graph_json : dict
        ARCHITECTURE.md, "The graph JSON".
    params : numpy.ndarray
        ``uint8`` params blob.

    Raises
    ------
    CompileError
        When an op's emitter fails (the message names the node).
    """
    params = ParamsBuilder(dedupe=bool(variants))
    source = _Source()
    op_functions, nodes, tail = emit_ops(fusion, plan, params, source)
    # string tensors' element types, before every header and helper that names them
    source.headers[:0] = string_typedefs(
        v.dtype for n in graph.nodes for v in (*n.inputs, *n.outputs) if v is not None)
    arena = align(plan.arena_bytes + tail)
    for k, (values, vfusion, vplan) in enumerate(variants):
        moved = specialize.shifted(vplan, arena)
        functions, vnodes, vtail = emit_ops(vfusion, moved, params, source, f"spec{k}_op_")
        op_functions += functions
        op_functions.append(specialize.runner(k, len(vnodes), fusion, plan, vfusion, moved))
        arena = align(moved.arena_bytes + vtail)
    run_first = ""
    if variants:
        run_first = specialize.dispatch(fusion.symbols, plan.sym_offset, [v for v, _, _ in variants])
    once = [i for i, n in enumerate(nodes) if n.get("init")]
    src = _assemble(source, op_functions, len(nodes), _output_shapes(fusion, plan), run_first,
                    (once, plan.init_offset))
    blob = params.blob()
    graph_json = graph_json_of(graph, fusion, plan, nodes, params, blob, constants,
                               arena_bytes=arena,
                               specializations=[v for v, _, _ in variants])
    if once:  # the flag the executor clears when the params change
        graph_json["init_offset"] = plan.init_offset
    logger.info(
        "generated %d ops (%d specializations), %d bytes of C, arena %d bytes",
        len(nodes),
        len(variants),
        len(src),
        graph_json["arena_bytes"],
    )
    return src, graph_json, blob
