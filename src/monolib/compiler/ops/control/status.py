"""Run-time failure of a control-flow op (a ``Loop`` past its planned trip-count
bound): the op sets the library's thread-local ``ml_status`` and returns;
``monolib_run`` (``backends/c/generate.py``) stops after that op and returns
``STATUS_BASE + i``, ``i`` the index of the fused op (for an op inside a subgraph, the
top-level op holding it), which the executor reports as an
:class:`~monolib.errors.ExecutionError` naming that node.
"""

from __future__ import annotations

import logging

from ...ir import Node

__all__ = ["STATUS_BASE", "STATUS_HELPER", "fail_statement"]

logger = logging.getLogger(__name__)

#: ``monolib_run`` returns this plus the failing fused op's index (ABI: abi/names.py
#: mirrors it for the executor)
STATUS_BASE = 1000

#: the C definition every library using it holds once (``ml_status`` is per thread:
#: two threads may run the library on their own arenas)
STATUS_HELPER = "static _Thread_local int32_t ml_status; /* ML_STATUS: control-flow failure */"


def fail_statement(ctx, node: Node, what: str) -> str:
    """The C statement recording a run-time failure of ``node`` (``what`` goes in a C
    comment); the caller leaves the op right after it."""
    ctx.helper(STATUS_HELPER)
    return f"ml_status = 1; /* {node.op_type} {what} exceeded */"
