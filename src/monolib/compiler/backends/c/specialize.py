"""The static paths of ``opt_shapes`` (issue 12, "Specialization") in the one C library.

Each specialization is the model compiled statically at that exact shape
(:class:`~...pipeline.Specialized`): its ops are emitted as ``spec<k>_op_<i>`` into the
same C file and params blob (identical weights stored once, see
:class:`~.generate.ParamsBuilder`), its memory plan shifted past the generic arena
(:func:`shifted`). ``monolib_run`` compares the symbol values ``S`` with each
specialization's (:func:`dispatch`) and, on an exact match, runs ``ml_spec<k>``
(:func:`runner`): copy the inputs from the generic slots the executor wrote into its own,
run its ops, copy the outputs back to the generic slots, where the executor reads them.
Any other shape takes the generic path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ....errors import CompileError
from ...computed_bounds import origin
from ...ir import Value, nbytes_at_bounds
from ...passes.fuse_elementwise import Fusion
from ...passes.plan_memory import MemoryPlan
from ...symbolic import SymbolTable

__all__ = ["computed_copies", "dispatch", "runner", "shifted"]

logger = logging.getLogger(__name__)


def shifted(plan: MemoryPlan, base: int) -> MemoryPlan:
    """``plan`` with every arena offset (values, scratch, the arena end) moved up by
    ``base`` bytes (a multiple of 64), so it shares no byte with what lies below."""
    return MemoryPlan(
        offsets={u: o + base for u, o in plan.offsets.items()},
        roots=plan.roots,
        arena_bytes=plan.arena_bytes + base,
        buffers=plan.buffers,
        scratch={t: o + base for t, o in plan.scratch.items()},
        scratch_sizes=dict(plan.scratch_sizes),
        state={k: o + base for k, o in plan.state.items()},
        # a specialization's own computed dims (issue 13) live in its own slots
        sym_offset=None if plan.sym_offset is None else plan.sym_offset + base,
        shape_offset=None if plan.shape_offset is None else plan.shape_offset + base,
    )


def _by_name(values: Sequence[Value], what: str, k: int) -> dict[str, Value]:
    out = {v.name: v for v in values}
    if len(out) != len(values):
        raise CompileError(f"specialization {k}: two {what} share a name")
    return out


def runner(
    k: int,
    n_ops: int,
    generic: Fusion,
    generic_plan: MemoryPlan,
    fusion: Fusion,
    plan: MemoryPlan,
) -> str:
    """``static void ml_spec<k>(params, arena)``: inputs copied in, ``spec<k>_op_0..``,
    outputs copied back (each a static size: this specialization's shape).

    Raises
    ------
    CompileError
        When the specialized graph's inputs or outputs are not the generic graph's.
    """
    g_in, v_in = _by_name(generic.inputs, "inputs", k), _by_name(fusion.inputs, "inputs", k)
    g_out, v_out = _by_name(generic.outputs, "outputs", k), _by_name(fusion.outputs, "outputs", k)
    if set(g_in) != set(v_in) or set(g_out) != set(v_out):
        raise CompileError(
            f"specialization {k}: inputs/outputs {sorted(v_in)}/{sorted(v_out)} differ from "
            f"the generic graph's {sorted(g_in)}/{sorted(g_out)}"
        )
    lines = [f"static void ml_spec{k}(const uint8_t* restrict params, uint8_t* restrict arena) {{"]
    for name, v in v_in.items():
        lines.append(
            f"  memcpy(arena + {plan.offset(v)}, arena + {generic_plan.offset(g_in[name])}, "
            f"{nbytes_at_bounds(v)});"
        )
    lines += [f"  spec{k}_op_{i}(params, arena);" for i in range(n_ops)]
    lines += computed_copies(generic, generic_plan, fusion, plan)
    for name, v in v_out.items():
        lines.append(
            f"  memcpy(arena + {generic_plan.offset(g_out[name])}, arena + {plan.offset(v)}, "
            f"{nbytes_at_bounds(v)});"
        )
    lines += ["  (void)params;", "}"]
    return "\n".join(lines)


def computed_copies(generic: Fusion, generic_plan: MemoryPlan, fusion: Fusion,
                    plan: MemoryPlan) -> list[str]:
    """C statements copying each computed dim (issue 13) the specialization wrote into
    the generic graph's slot of the same size (same node, output, axis:
    ``computed_bounds.origin``), where ``ml_output_shapes`` reads it.

    Raises
    ------
    CompileError
        A computed dim of the specialization without a generic counterpart.
    """
    by_origin = {origin(s.name): i for i, s in enumerate(generic.symbols) if s.computed}
    lines = []
    for i, s in enumerate(fusion.symbols):
        if not s.computed:
            continue
        j = by_origin.get(origin(s.name))
        if j is None:
            raise CompileError(f"specialization: computed dim {s.name} has no counterpart in "
                               "the generic graph")
        lines.append(f"  ((int64_t*)(arena + {generic_plan.sym_offset}))[{j}] = "
                     f"((const int64_t*)(arena + {plan.sym_offset}))[{i}];")
    return lines


def dispatch(
    symbols: SymbolTable, sym_offset: int, specs: Sequence[Mapping[str, int]]
) -> str:
    """C statements at the top of ``monolib_run``: the first specialization whose symbol
    values all equal this run's runs instead of the generic path (then the output
    shapes are written and ``monolib_run`` returns)."""
    if not specs:
        return ""
    lines = [f"  {{ const int64_t* restrict S = (const int64_t*)(arena + {sym_offset});"]
    for k, values in enumerate(specs):
        cond = " && ".join(f"S[{symbols.index(n)}] == {int(v)}" for n, v in values.items())
        lines.append(
            f"    if ({cond or '1'}) {{ ml_spec{k}(params, arena); "
            "ml_output_shapes(arena); return 0; }"
        )
    lines.append("  }")
    return "\n".join(lines)
