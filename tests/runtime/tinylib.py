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


# ------------------------------------------------------------------ run-time shapes
# "dyn": a hand-written library with run-time dims (graph JSON version 2), the way the
# compiler lays one out: symbols n in [1, 64] and k in [4, 32] step 4.
#   inputs  x: float32[n], v: float32[n] (n shared), u: float32[2, k]
#   outputs y = x * w[:n] + b + v: [n];  z = concat(x, y): [2*n];  t = 2 * u: [2, k];
#           q: float32[1], 1 where (n, k) is the specialization (8, 16), else 0
# Arena: sym@0 (2 x int64), out shapes@64 (5 x int64), x@128, v@384, u@640, y@896,
# z@1152, t@1664, q@1920 (1984 bytes); params: w float32[64]@0, b float32[1]@256.
DYN_C = r"""
#include <stdint.h>
#define SYM(i) (((const int64_t*)arena)[i])
static void op_0(const uint8_t* restrict params, uint8_t* restrict arena) {
  int64_t n = SYM(0);
  const float* x = (const float*)(arena + 128);
  const float* v = (const float*)(arena + 384);
  float* y = (float*)(arena + 896);
  float* z = (float*)(arena + 1152);
  const float* w = (const float*)params;
  const float* b = (const float*)(params + 256);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * w[i] + b[0] + v[i];
  for (int64_t i = 0; i < n; ++i) { z[i] = x[i]; z[n + i] = y[i]; }
}
static void op_1(const uint8_t* restrict params, uint8_t* restrict arena) {
  int64_t k = SYM(1);
  const float* u = (const float*)(arena + 640);
  float* t = (float*)(arena + 1664);
  (void)params;
  for (int64_t i = 0; i < 2 * k; ++i) t[i] = 2.0f * u[i];
  ((float*)(arena + 1920))[0] = (SYM(0) == 8 && k == 16) ? 1.0f : 0.0f;
}
static void out_shapes(uint8_t* arena) {
  int64_t* s = (int64_t*)(arena + 64);
  s[0] = SYM(0); s[1] = 2 * SYM(0); s[2] = 2; s[3] = SYM(1); s[4] = 1;
}
int32_t monolib_run(const uint8_t* params, uint8_t* arena) {
  op_0(params, arena);
  op_1(params, arena);
  out_shapes(arena);
  return 0;
}
int32_t monolib_run_op(int32_t i, const uint8_t* params, uint8_t* arena) {
  if (i == 0) op_0(params, arena);
  else if (i == 1) op_1(params, arena);
  else return -1;
  out_shapes(arena);
  return 0;
}
int32_t monolib_num_ops(void) { return 2; }
"""

DYN_W = (np.arange(64, dtype=np.float32) - 20) / 8
DYN_B = np.float32(0.5)


def dyn_graph() -> tuple[dict, np.ndarray]:
    """(graph JSON version 2, params blob) of the "dyn" model, written with the
    graph_spec writer the compiler uses."""
    from monolib.abi.graph_spec import graph_document, node_entry, tensor_entry
    from monolib.abi.symbols import symbol_entry

    params = np.zeros(320, dtype=np.uint8)
    params[:256] = np.frombuffer(DYN_W.tobytes(), np.uint8)
    params[256:260] = np.frombuffer(np.array([DYN_B]).tobytes(), np.uint8)
    f32 = "float32"
    graph = graph_document(
        "dyn",
        arena_bytes=1984,
        params_bytes=320,
        symbols=[symbol_entry("n", 1, 64), symbol_entry("k", 4, 32, 4)],
        sym_offset=0,
        shape_offset=64,
        inputs=[
            tensor_entry("x", ["n"], f32, 128, max_nbytes=256),
            tensor_entry("v", ["n"], f32, 384, max_nbytes=256),
            tensor_entry("u", [2, "k"], f32, 640, max_nbytes=256),
        ],
        outputs=[
            tensor_entry("y", ["n"], f32, 896, max_nbytes=256),
            tensor_entry("z", ["2*n"], f32, 1152, max_nbytes=512),
            tensor_entry("t", [2, "k"], f32, 1664, max_nbytes=256),
            tensor_entry("q", [1], f32, 1920, max_nbytes=4),
        ],
        nodes=[
            node_entry("Mul_0", "Mul", ["Add", "Concat"], ["x", "w", "b", "v"], ["y", "z"],
                       ["n"], f32, 896),
            node_entry("Mul_1", "Mul", [], ["u"], ["t", "q"], [2, "k"], f32, 1664),
        ],
        params=[
            {"name": "w", "shape": [64], "dtype": f32, "offset": 0, "nbytes": 256},
            {"name": "b", "shape": [1], "dtype": f32, "offset": 256, "nbytes": 4},
        ],
        aliases={},
        metadata={"note": "hand-written model with run-time dims"},
        specializations=[{"n": 8, "k": 16}],
    )
    return graph, params


def dyn_factory() -> GraphExecutorFactoryModule:
    """A factory module importing a CSourceModule of the "dyn" model."""
    graph, params = dyn_graph()
    return GraphExecutorFactoryModule(graph, params, CSourceModule(DYN_C, "c"))


def dyn_reference(x: np.ndarray, v: np.ndarray, u: np.ndarray) -> list[np.ndarray]:
    """NumPy reference of the "dyn" model: [y, z, t, q]."""
    y = x * DYN_W[: len(x)] + DYN_B + v
    special = len(x) == 8 and u.shape[1] == 16
    return [y, np.concatenate([x, y]), 2 * u, np.array([special], np.float32)]
