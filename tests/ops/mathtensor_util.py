"""Test helpers for the math and tensor ops: run one ONNX node through ONNX Runtime,
through the op's ``infer``/``reference``, and through its ``emit`` compiled with a
minimal :class:`EmitContext` (gcc + ctypes), and compare.

The minimal context lets the op emitters be tested on their own, independent of the
full code generator: every activation lives in one arena, constants in a params blob.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import onnxruntime as ort

from monolib.compiler.ir import Node, Value
from monolib.compiler.ops import op_of
from monolib.compiler.ops.base import ctype

from monolib.compiler.backends.c.headers import kernel_header
_CACHE = Path(tempfile.gettempdir()) / f"monolib_mt_{os.getuid()}"


def _attr_value(proto: onnx.AttributeProto) -> Any:
    v = oh.get_attribute_value(proto)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, onnx.TensorProto):
        return onh.to_array(v)
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode() for x in v]
    return v


def ir_node(op_type, inputs, attrs, opset, constant_inputs=(), n_outputs=1):
    """An IR node with schema defaults filled, as the frontend would build it."""
    schema = onnx.defs.get_schema(op_type, opset)
    full = {}
    for name, a in schema.attributes.items():
        if a.default_value is not None and a.default_value.type:
            full[name] = _attr_value(a.default_value)
    for k, v in attrs.items():
        full[k] = _attr_value(oh.make_attribute(k, v))
    ins = []
    for i, x in enumerate(inputs):
        if x is None:
            ins.append(None)
        elif i in constant_inputs:
            ins.append(Value(f"in{i}", x.shape, x.dtype, np.asarray(x, order="C")))
        else:
            ins.append(Value(f"in{i}", x.shape, x.dtype))
    placeholders = [Value(f"out{i}", (), np.float32) for i in range(n_outputs)]
    node = Node(op_type, "n0", ins, placeholders, full, opset=opset)
    types = op_of(node).infer(node)
    node.outputs = [Value(f"out{i}", s, d) for i, (s, d) in enumerate(types[:n_outputs])]
    return node


def ort_run(op_type, inputs, attrs, opset, n_outputs=1, constant_inputs=()):
    """Run one node with ONNX Runtime; returns the list of outputs."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = oh.make_node(op_type, names, [f"out{i}" for i in range(n_outputs)], **attrs)
    graph_inputs, inits, feeds = [], [], {}
    for i, x in enumerate(inputs):
        if x is None:
            continue
        if i in constant_inputs:
            inits.append(onh.from_array(x, f"in{i}"))
        else:
            graph_inputs.append(
                oh.make_tensor_value_info(f"in{i}", oh.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            )
            feeds[f"in{i}"] = x
    outs = [oh.make_empty_tensor_value_info(f"out{i}") for i in range(n_outputs)]
    graph = oh.make_graph([node], "g", graph_inputs, outs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


class MiniContext:
    """A minimal EmitContext: one arena, one params blob, optional test epilogue
    ``acc * 2 + index0`` on float outputs (checks index passing)."""

    def __init__(self, node: Node, epilogue: bool = False):
        self.node = node
        self.epilogue = epilogue
        self.arena: dict[int, int] = {}
        self.arena_bytes = 0
        self.params = bytearray()
        self.param_offs: dict[int, int] = {}
        self.helpers: list[str] = []
        self.headers: list[str] = []
        self.n = 0

    def _alloc(self, nbytes: int) -> int:
        off = self.arena_bytes
        self.arena_bytes += (max(nbytes, 1) + 63) // 64 * 64
        return off

    def ptr(self, value: Value) -> str:
        ct = ctype(value.dtype)
        if value.const is not None:
            off = self.param_offs.get(value.uid)
            if off is None:
                off = self.param_offs[value.uid] = self._add_param(value.const)
            return f"((const {ct}*)(params + {off}))"
        if value.uid not in self.arena:
            self.arena[value.uid] = self._alloc(value.nbytes)
        return f"(({ct}*)(arena + {self.arena[value.uid]}))"

    def _add_param(self, array: np.ndarray) -> int:
        off = len(self.params)
        self.params += np.ascontiguousarray(array).tobytes()
        self.params += b"\0" * ((-len(self.params)) % 64)
        return off

    def param(self, array: np.ndarray, hint: str) -> str:
        off = self._add_param(array)
        return f"((const {ctype(array.dtype)}*)(params + {off}))"

    def scratch(self, nbytes: int) -> str:
        return f"((uint8_t*)(arena + {self._alloc(nbytes)}))"

    def helper(self, code: str) -> None:
        if code not in self.helpers:
            self.helpers.append(code)

    def include(self, header: str) -> None:
        if header not in self.headers:
            self.headers.append(header)

    def unique(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def tile_epilogue(self, groups: Sequence[Sequence[int]]) -> str:
        return "0"

    def output_expr(self, acc: str, index: Sequence[str]) -> str:
        out = self.node.outputs[0]
        if not self.epilogue or out.dtype != np.float32:
            return acc
        i0 = index[0] if index else "0"
        return f"(({acc}) * 2.0f + (float)({i0}))"


def apply_test_epilogue(y: np.ndarray) -> np.ndarray:
    """What :class:`MiniContext`'s epilogue does to output 0."""
    if y.dtype != np.float32:
        return y
    idx = np.indices(y.shape)[0] if y.ndim else np.zeros(())
    return (y * np.float32(2) + idx.astype(np.float32)).astype(np.float32)


def _prepare(node: Node, epilogue: bool) -> tuple[MiniContext, str]:
    """Lay out the arena and emit the node's C body."""
    ctx = MiniContext(node, epilogue)
    for v in node.inputs:
        if v is not None and v.const is None:
            ctx.ptr(v)
    if op_of(node).alias:  # output 0 shares input 0's storage
        ctx.arena[node.outputs[0].uid] = ctx.arena[node.inputs[0].uid]
    for v in node.outputs:
        ctx.ptr(v)
    return ctx, op_of(node).emit(node, ctx)


def _build(src: str) -> ctypes.CDLL:
    """Compile ``src`` to a shared library (cached by content) and load it."""
    _CACHE.mkdir(exist_ok=True)
    key = hashlib.sha256(src.encode()).hexdigest()[:20]
    so = _CACHE / f"k_{key}.so"
    if not so.exists():
        c = _CACHE / f"k_{key}.c"
        c.write_text(src)
        tmp = _CACHE / f"k_{key}.{os.getpid()}.so"
        cmd = ["gcc", "-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-Wall",
               "-Werror=implicit-function-declaration", "-o", str(tmp), str(c), "-lm"]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, check=False, text=True, timeout=120)
        if r.returncode:
            raise AssertionError(f"gcc failed:\n{r.stderr}\n--- source ---\n{src}")
        os.replace(tmp, so)
    return ctypes.CDLL(str(so))


def _execute(fn, node: Node, ctx: MiniContext, inputs) -> list[np.ndarray]:
    arena = np.zeros(ctx.arena_bytes + 64, np.uint8)
    params = np.frombuffer(bytes(ctx.params) + b"\0" * 64, np.uint8).copy()
    for v, x in zip(node.inputs, inputs):
        if v is not None and v.const is None:
            off = ctx.arena[v.uid]
            data = np.ascontiguousarray(x, v.dtype).view(np.uint8).reshape(-1)
            arena[off : off + v.nbytes] = data
    fn(params.ctypes.data_as(ctypes.c_void_p), arena.ctypes.data_as(ctypes.c_void_p))
    outs = []
    for v in node.outputs:
        off = ctx.arena[v.uid]
        outs.append(arena[off : off + v.nbytes].view(v.dtype).reshape(v.shape).copy())
    return outs


def compile_variants(node: Node, inputs, variants=(False,)) -> list[list[np.ndarray]]:
    """Emit ``node`` once per epilogue variant, compile all of them in ONE gcc call,
    run each on ``inputs``; returns the outputs per variant."""
    if op_of(node).alias and node.inputs[0].const is not None:
        return [[node.inputs[0].const.reshape(node.outputs[0].shape).copy()] for _ in variants]
    prepared = [_prepare(node, e) for e in variants]
    headers: list[str] = []
    helpers: list[str] = []
    for ctx, _ in prepared:
        headers += [h for h in ctx.headers if h not in headers]
        helpers += [h for h in ctx.helpers if h not in helpers]
    parts = ["#include <stdint.h>", "#include <math.h>", "#include <string.h>"]
    parts += [kernel_header(h) for h in headers] + helpers
    for k, (_, body) in enumerate(prepared):
        parts.append(
            f"void run{k}(const uint8_t* restrict params, uint8_t* restrict arena) {{\n{body}\n}}"
        )
    lib = _build("\n".join(parts))
    return [
        _execute(getattr(lib, f"run{k}"), node, ctx, inputs) for k, (ctx, _) in enumerate(prepared)
    ]


def compile_and_run(node: Node, inputs, epilogue=False):
    """Emit ``node``, compile it with gcc, run it on ``inputs``; returns the outputs."""
    return compile_variants(node, inputs, (epilogue,))[0]


def assert_close(got, want, rtol, atol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_op(
    op_type,
    inputs,
    attrs=None,
    opset=17,
    constant_inputs=(),
    n_outputs=1,
    rtol=1e-5,
    atol=1e-6,
    emit=True,
    epilogue=True,
):
    """Compare infer, reference and emitted C of one node against ONNX Runtime."""
    attrs = attrs or {}
    want = ort_run(op_type, inputs, attrs, opset, n_outputs, constant_inputs)
    node = ir_node(op_type, inputs, attrs, opset, constant_inputs, n_outputs)
    for v, w in zip(node.outputs, want):
        assert v.shape == w.shape, f"infer shape {v.shape} != ORT {w.shape}"
        assert v.dtype == w.dtype, f"infer dtype {v.dtype} != ORT {w.dtype}"
    ref = op_of(node).reference(node, [None if x is None else x for x in inputs])
    for i, (r, w) in enumerate(zip(ref, want)):
        assert_close(r, w, rtol, atol, f"reference output {i}")
    if emit:
        op = op_of(node)
        with_epilogue = epilogue and (op.elementwise or op.epilogue_groups(node) is not None)
        runs = compile_variants(node, inputs, (False, True) if with_epilogue else (False,))
        for i, (g, w) in enumerate(zip(runs[0], want)):
            assert_close(g, w, rtol, atol, f"emitted C output {i}")
        if with_epilogue:
            want0 = apply_test_epilogue(want[0])
            assert_close(runs[1][0], want0, rtol, atol * 4 + 1e-6, "emitted C with epilogue")
    return want
