"""The backend interface: what ``compile`` asks of a target kind.

A backend accepts a parsed :class:`~monolib.export.targets.Target` of its kind (checking
the option values), generates code from the prepared graph
(:func:`~monolib.compiler.pipeline.prepare`), and packages the result into the module
tree ``export_library`` writes (``graph_executor_factory`` -> ``c`` [-> device module]).
The table of backends is :data:`monolib.compiler.backends.registry.BACKENDS`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...export.targets import Target
from ..ir import Graph
from ..passes.fuse_elementwise import Fusion
from ..passes.plan_memory import MemoryPlan

__all__ = ["Backend", "Generated"]

logger = logging.getLogger(__name__)


@dataclass
class Generated:
    """What a backend's :meth:`Backend.generate` returns.

    Attributes
    ----------
    source : str
        The generated source (host C, or the device kernels).
    graph_json : dict
        The graph JSON (``monolib.abi.graph_spec``).
    params : numpy.ndarray
        The ``uint8`` params blob.
    functions : list of dict
        Device kernels in run order (``{"name", "node", "items"}``); empty for host C.
    """

    source: str
    graph_json: dict[str, Any]
    params: np.ndarray
    functions: list[dict[str, Any]] = field(default_factory=list)


class Backend(ABC):
    """One target kind: ``accept`` -> ``generate`` -> ``package``.

    Attributes
    ----------
    kind : str
        The target kind served (``Target.kind``).
    step : str
        The progress step announced before :meth:`generate` (``"generate C"``).
    """

    kind: str = ""
    step: str = ""

    def accept(self, target: Target) -> None:
        """Check the option values of ``target`` (its kind is this backend's).

        Raises
        ------
        TargetError
            An option value this backend cannot use.
        """

    @abstractmethod
    def generate(
        self, graph: Graph, fusion: Fusion, plan: MemoryPlan, target: Target, *, constants=None
    ) -> Generated:
        """Source, graph JSON and params blob of the prepared graph.

        Raises
        ------
        CompileError
            An op the backend cannot lower (``UnsupportedOpError``), or an emitter
            failure; the message names the node.
        """

    @abstractmethod
    def package(self, generated: Generated, target: Target) -> Any:
        """The ``GraphExecutorFactoryModule`` holding ``generated``."""
