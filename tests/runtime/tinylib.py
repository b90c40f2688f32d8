"""Shared helpers of the runtime and CLI tests: a tiny hand-written C library implementing the
ABI of docs/ARCHITECTURE.md ("The generated C library"), and its graph JSON.

The model: ``y = x * w + b`` with ``x, y, w: float32[2, 3]``, ``b: float32[1]``.
Arena: x at 0, y at 64 (128 bytes). Params: w at 0, b at 64, and optionally a
large unused ``big`` tensor (to exercise sections above the 1 MiB check limit).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from monolib.export.csource import CSourceModule
from monolib.runtime import GraphExecutorFactoryModule

HERE = os.path.dirname(os.path.abspath(__file__))

TINY_C = r"""
#include <stdint.h>
static void op_0(const uint8_t* restrict params, uint8_t* restrict arena) {
  const float* x = (const float*)(arena + 0);
  float* y = (float*)(arena + 64);
  const float* w = (const float*)(params + 0);
  const float* b = (const float*)(params + 64);
  for (int i = 0; i < 6; ++i) y[i] = x[i] * w[i] + b[0];
}
int32_t monolib_run(const uint8_t* params, uint8_t* arena) {
  op_0(params, arena);
  return RUN_STATUS;
}
int32_t monolib_run_op(int32_t i, const uint8_t* params, uint8_t* arena) {
  if (i != 0) return -1;
  op_0(params, arena);
  return 0;
}
int32_t monolib_num_ops(void) { return 1; }
"""

W = np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 2
B = np.float32(0.25)


def tiny_source(status: int = 0) -> str:
    """The C source; ``monolib_run`` returns ``status`` (nonzero = failure)."""
    return TINY_C.replace("RUN_STATUS", str(int(status)))


def tiny_graph(big_bytes: int = 0) -> tuple[dict, np.ndarray]:
    """(graph JSON, params blob) of the tiny model, with an optional big param."""
    params_bytes = 128 + big_bytes
    params = np.zeros(params_bytes, dtype=np.uint8)
    params[0:24] = np.frombuffer(W.tobytes(), np.uint8)
    params[64:68] = np.frombuffer(np.array([B], np.float32).tobytes(), np.uint8)
    if big_bytes:
        params[128:] = np.arange(big_bytes, dtype=np.uint64).astype(np.uint8)
    table = [
        {"name": "w", "shape": [2, 3], "dtype": "float32", "offset": 0, "nbytes": 24},
        {"name": "b", "shape": [1], "dtype": "float32", "offset": 64, "nbytes": 4},
    ]
    if big_bytes:
        table.append(
            {
                "name": "big",
                "shape": [big_bytes],
                "dtype": "uint8",
                "offset": 128,
                "nbytes": big_bytes,
            }
        )
    graph = {
        "format": "monolib.graph",
        "version": 1,
        "name": "tiny",
        "arena_bytes": 128,
        "params_bytes": params_bytes,
        "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32", "offset": 0}],
        "outputs": [{"name": "y", "shape": [2, 3], "dtype": "float32", "offset": 64}],
        "nodes": [
            {
                "name": "Mul_0",
                "op": "Mul",
                "fused": ["Add"],
                "inputs": ["x", "w"],
                "outputs": ["y"],
                "shape": [2, 3],
                "dtype": "float32",
                "offset": 64,
            }
        ],
        "params": table,
        "constants": {},
        "metadata": {"note": "hand-written test model"},
    }
    return graph, params


def tiny_factory(big_bytes: int = 0, status: int = 0) -> GraphExecutorFactoryModule:
    """A factory module importing a CSourceModule of the tiny model."""
    graph, params = tiny_graph(big_bytes)
    return GraphExecutorFactoryModule(graph, params, CSourceModule(tiny_source(status), "c"))


def reference(x: np.ndarray) -> np.ndarray:
    """NumPy reference of the tiny model."""
    return x * W + B


PYTHON = sys.executable
