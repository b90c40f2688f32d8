"""The host C backend (target kind ``c``): one self-contained C library per model.

``generate`` measures each op's scratch with a first emission, re-plans the arena when
some op asks for scratch, then writes the C (:mod:`.generate`), with the static paths
of a graph's ``opt_shapes`` specializations beside its generic one; ``package`` wraps it as
``GraphExecutorFactoryModule(graph_json, params, CSourceModule(source, target))``,
compiled by ``export_library`` (or on first call).
"""

from __future__ import annotations

import logging

from ....export.targets import Target
from ...ir import Graph
from ...passes.conv_bands import fuse_conv_bands
from ...passes.fuse_elementwise import Fusion, fuse_elementwise
from ...passes.plan_memory import MemoryPlan, plan_memory
from ...passes.tconv_subpixel import ConvTransposeToSubpixel
from ..base import Backend, Generated
from . import generate as c_source
from .layout import blocked_values

__all__ = ["CBackend", "host_passes"]

logger = logging.getLogger(__name__)


def host_passes(graph: Graph, fusion: Fusion, plan: MemoryPlan) -> tuple[Fusion, MemoryPlan]:
    """The host-only rewrites: overlapping ConvTransposes as sub-pixel Convs
    (``passes/tconv_subpixel``, which rewrites ``graph`` and fuses it again), then the
    depthwise chains run by bands (``passes/conv_bands``); the arena planned again when
    either changed anything. Last, the values kept channel-blocked between convs
    (``layout.blocked_values``). ``bench/flops.py`` calls it too, to count the ops a
    library runs."""
    changed = ConvTransposeToSubpixel()(graph).modified
    if changed:
        fusion = fuse_elementwise(graph)
    banded = fuse_conv_bands(fusion)
    banded.blocked = blocked_values(banded)  # the layout between convs (layout.py)
    if banded is fusion and not changed:
        return fusion, plan
    return banded, plan_memory(banded)


def _with_scratch(fusion: Fusion, plan: MemoryPlan) -> MemoryPlan:
    """``plan``, re-planned with the scratch each op asks for when some op does (a
    first emission measures it)."""
    scratch = c_source.scratch_sizes(fusion, plan)
    return plan_memory(fusion, scratch) if scratch else plan


class CBackend(Backend):
    """Target kind ``c`` (``-mcpu``, ``-mtriple``, ``-mattr``: flags of the export's C
    compiler, see :meth:`~monolib.export.targets.Target.cflags`)."""

    kind = "c"
    step = "generate C"

    def generate(
        self, graph: Graph, fusion: Fusion, plan: MemoryPlan, target: Target, *, constants=None
    ) -> Generated:
        # looked up at call time: a test's stand-in for the generator is the one run
        fusion, plan = host_passes(graph, fusion, plan)
        plan = _with_scratch(fusion, plan)
        if graph.specialized:  # opt_shapes: static paths in the same library
            variants = []
            for sp in graph.specialized:
                f, p = host_passes(sp.graph, sp.fusion, sp.plan)
                variants.append((sp.values, f, _with_scratch(f, p)))
            source, graph_json, params = c_source.generate(
                graph, fusion, plan, constants=constants, variants=variants
            )
        else:
            source, graph_json, params = c_source.generate(graph, fusion, plan,
                                                           constants=constants)
        return Generated(source, graph_json, params)

    def package(self, generated: Generated, target: Target):
        from ....export.csource import CSourceModule
        from ....runtime.factory import GraphExecutorFactoryModule

        lib = CSourceModule(generated.source, str(target))
        return GraphExecutorFactoryModule(generated.graph_json, generated.params, lib)
