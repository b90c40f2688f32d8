"""The names both sides of an exported library agree on: module type keys, section
names, and the symbols the generated code and the C API export.

The exporter writes them, the runtime and the tools look them up; a name changed
here changes the format (docs/ARCHITECTURE.md, "The container" and "The generated C
library"), so libraries written before would no longer load.
"""

from __future__ import annotations

import logging

__all__ = [
    "ABI_SYMBOLS",
    "CAPI_SYMBOLS",
    "CONTAINER_END",
    "CONTAINER_START",
    "CONTAINER_SYMBOLS",
    "C_SOURCE",
    "CUDA",
    "DATA_SECTION",
    "DEVICE",
    "DEVICE_TYPE_KEYS",
    "FACTORY",
    "GRAPH_SECTION",
    "HEAD_SECTION",
    "ISA_LEVEL",
    "LIBRARY",
    "LOADER_HINT_SECTION",
    "LOW_LEVEL_SYMBOLS",
    "NUM_OPS",
    "OPENCL",
    "PARAMS_SECTION",
    "RUN",
    "RUN_OP",
    "SECTION_NAME",
    "SECTION_NAMES",
    "SET_NUM_THREADS",
    "SET_SPIN",
    "SLEEP_THREADS",
    "STOP_THREADS",
]

logger = logging.getLogger(__name__)

# ---- module type keys (``Module.type_key``, ``register_loader``, the manifest)
#: The graph executor factory: graph JSON, head and params sections.
FACTORY = "graph_executor_factory"
#: The DSO module: the dlopen'd library itself (no loader, no sections).
LIBRARY = "library"
#: The C source module before export (``monolib.export.csource``).
C_SOURCE = "c"
#: The base device module and the device kinds monolib runs (docs/devices.md).
DEVICE = "device"
OPENCL = "opencl"
CUDA = "cuda"
#: Type keys of device modules: a graph importing one runs partly off the host
#: (TVM's device kinds included, so a foreign tree is refused by the C API too).
DEVICE_TYPE_KEYS = frozenset({DEVICE, OPENCL, CUDA, "vulkan", "metal", "rocm"})

# ---- sections
#: The section that holds the container, per binary format (Mach-O: section
#: ``__monolib`` of segment ``__DATA_CONST``).
SECTION_NAMES = {"ELF": ".monolib", "PE": ".monolib", "Mach-O": "__monolib"}
SECTION_NAME = SECTION_NAMES["ELF"]
#: Sections of a module inside the container.
GRAPH_SECTION = "graph"
HEAD_SECTION = "head"
PARAMS_SECTION = "params"
#: The one section of a module saved with ``save_to_bytes``.
DATA_SECTION = "data"
#: Beside a user module's sections: where its loader lives (``module:function``).
LOADER_HINT_SECTION = "loader_hint"

# ---- exported symbols
#: First and one-past-last byte of the embedded container.
CONTAINER_START = "__monolib_container_start"
CONTAINER_END = "__monolib_container_end"
CONTAINER_SYMBOLS = (CONTAINER_START, CONTAINER_END)
#: The generated code's functions (docs/ARCHITECTURE.md, "The generated C library").
RUN = "monolib_run"
RUN_OP = "monolib_run_op"
#: monolib_run that also writes each op's time in ns (``int64_t ns[num_ops]``), for a
#: profile of ops inside whole runs; libraries built before it lack it.
RUN_TIMED = "monolib_run_timed"
#: What monolib_run_timed returns where the library cannot time its ops (its run
#: dispatches to specialized variants; WebAssembly, which has no clock).
RUN_TIMED_NONE = -2
NUM_OPS = "monolib_num_ops"
SET_NUM_THREADS = "monolib_set_num_threads"
#: The pool's spin after a job (us >= 0 sets, < 0 queries) and the join of its workers
#: (``Module.close`` before dlclose); libraries built before them lack both.
SET_SPIN = "monolib_set_spin"
STOP_THREADS = "monolib_stop_threads"
#: Send the pool's spinning workers to sleep now (the runtime, when the process goes on
#: to run another library); libraries built before it lack it.
SLEEP_THREADS = "monolib_sleep_threads"
#: The instruction-set level whose op code runs (a portable library's pick at load;
#: ``const char*``); libraries built before it lack it.
ISA_LEVEL = "monolib_isa_level"
#: What every model library exports (``monolib inspect`` reports a missing one).
ABI_SYMBOLS = (RUN, RUN_OP, NUM_OPS)
#: Every low-level function the runtime may look up.
LOW_LEVEL_SYMBOLS = (RUN, RUN_OP, RUN_TIMED, NUM_OPS, SET_NUM_THREADS, SET_SPIN, STOP_THREADS,
                     SLEEP_THREADS, ISA_LEVEL)
#: The C API of ``monolib.h`` (docs/c_api.md).
CAPI_SYMBOLS = (
    "monolib_capi_version",
    "monolib_open",
    "monolib_close",
    "monolib_num_inputs",
    "monolib_num_outputs",
    "monolib_input_info",
    "monolib_output_info",
    "monolib_input_index",
    "monolib_output_index",
    "monolib_set_input",
    "monolib_set_input_shaped",
    "monolib_run_model",
    "monolib_get_output",
    "monolib_output_shape",
    "monolib_output_data",
    "monolib_last_error",
)
