"""A stand-alone test harness for the nn ops: one node -> C -> gcc -> ctypes.

It implements the ``EmitContext`` protocol of ``monolib.compiler.ops.base`` just enough
to compile ONE node's ``emit`` output with the kernel headers, so the nn kernels are
tested independently of the code generator. Results are checked three ways: the op's
NumPy ``reference`` against ONNX Runtime, and the compiled C against the reference, with
and without a test epilogue (``v * 0.5 + 1``: not idempotent, so an element the kernel
forgets or finishes twice shows up).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from monolib.compiler.ir import Node, Value
from monolib.compiler.ops import ctype, op_of

__all__ = ["EPI", "HarnessContext", "check_node", "make_node", "ort_node", "run_c"]

from monolib.compiler.backends.c.headers import kernel_header
EPI = (0.5, 1.0)  # test epilogue: v * 0.5 + 1


def _align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


class HarnessContext:
    """Minimal EmitContext: params blob, arena, headers, helpers, a test epilogue."""

    def __init__(self, node: Node, epilogue: bool = False):
        self.node = node
        self.epilogue = epilogue
        self.params = bytearray()
        self.arena_size = 0
        self.offsets: dict[int, tuple[str, int]] = {}
        self.headers: list[str] = []
        self.helpers: list[str] = []
        self._ids = itertools.count()

    def _add_param(self, array: np.ndarray) -> int:
        off = _align(len(self.params))
        self.params.extend(b"\0" * (off - len(self.params)))
        self.params.extend(np.ascontiguousarray(array).tobytes())
        return off

    def _alloc(self, nbytes: int) -> int:
        off = _align(self.arena_size)
        self.arena_size = off + max(nbytes, 1)
        return off

    def ptr(self, value: Value) -> str:
        ct = ctype(value.dtype)
        if value.uid not in self.offsets:
            if value.const is not None:
                self.offsets[value.uid] = ("params", self._add_param(value.const))
            else:
                self.offsets[value.uid] = ("arena", self._alloc(value.nbytes))
        where, off = self.offsets[value.uid]
        const = "const " if where == "params" else ""
        return f"(({const}{ct}*)({where} + {off}))"

    def param(self, array: np.ndarray, hint: str) -> str:
        return f"((const {ctype(array.dtype)}*)(params + {self._add_param(array)}))"

    def scratch(self, nbytes: int) -> str:
        return f"((uint8_t*)(arena + {self._alloc(nbytes)}))"

    def helper(self, code: str) -> None:
        if code not in self.helpers:
            self.helpers.append(code)

    def include(self, header: str) -> None:
        if header not in self.headers:
            self.headers.append(header)

    def unique(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def tile_epilogue(self, groups: Sequence[Sequence[int]]) -> str:
        if not self.epilogue:
            return "0"
        shape = self.node.outputs[0].shape
        dims = [d for g in groups for d in g]
        assert dims == list(range(len(shape))), groups
        m = int(np.prod([shape[d] for d in groups[1]], dtype=np.int64))
        n = int(np.prod([shape[d] for d in groups[2]], dtype=np.int64))
        name = self.unique("epi")
        s, t = (f"{v!r}f" for v in EPI)
        self.helper(
            f"static void {name}(void* out, int64_t b, int64_t m0, int64_t m1, int64_t n0, "
            f"int64_t n1) {{\n  float* y = (float*)out;\n"
            f"  for (int64_t m = m0; m < m1; ++m) for (int64_t n = n0; n < n1; ++n) {{\n"
            f"    float* p = y + (b * {m} + m) * {n} + n; *p = *p * {s} + {t}; }}\n}}"
        )
        return name

    def output_expr(self, acc: str, index: Sequence[str]) -> str:
        if not self.epilogue:
            return acc
        s, t = (f"{v!r}f" for v in EPI)
        return f"(({acc}) * {s} + {t})"


def make_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    const: Sequence[int] = (),
    opset: int = 17,
    n_outputs: int = 1,
) -> Node:
    """A typed Node with schema defaults filled in (as the frontend does); inputs whose
    index is in ``const`` are constants. Output types come from the op's ``infer``."""
    schema = onnx.defs.get_schema(op_type, opset)
    full: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        if attr.default_value.type != onnx.AttributeProto.UNDEFINED:
            full[name] = helper.get_attribute_value(attr.default_value)
            if isinstance(full[name], bytes):
                full[name] = full[name].decode()
    full.update(attrs)
    vals: list[Value | None] = []
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif i in const:
            vals.append(Value.constant(f"in{i}", a))
        else:
            vals.append(Value(f"in{i}", a.shape, a.dtype))
    node = Node(op_type, f"{op_type}_0", vals, [], full, opset=opset)
    node.outputs = [Value("out_tmp", (), np.float32)] * n_outputs
    types = op_of(node).infer(node)
    node.outputs = [Value(f"out{i}", s, d) for i, (s, d) in enumerate(types)]
    return node


def run_c(
    node: Node,
    inputs: Sequence[np.ndarray | None],
    epilogue: bool = False,
    cflags: Sequence[str] = ("-O2", "-march=native"),
) -> list[np.ndarray]:
    """Emit, compile and run ``node``; returns its outputs."""
    ctx = HarnessContext(node, epilogue)
    body = op_of(node).emit(node, ctx)
    for v in node.outputs:
        ctx.ptr(v)
    for v in node.inputs:
        if v is not None:
            ctx.ptr(v)
    head = _prelude()
    head += "".join(kernel_header(h) + "\n" for h in ctx.headers)
    src = (
        head
        + "\n".join(ctx.helpers)
        + (
            "\nvoid run(const uint8_t* restrict params, uint8_t* restrict arena) {\n"
            + body
            + "\n}\n"
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        c, so = Path(tmp) / "k.c", Path(tmp) / "k.so"
        c.write_text(src)
        cc = os.environ.get("CC", "gcc")
        res = subprocess.run(
            [
                cc,
                *cflags,
                "-fPIC",
                "-shared",
                "-Wall",
                "-Wno-unused-function",
                str(c),
                "-o",
                str(so),
                "-lm",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            raise AssertionError(f"gcc failed:\n{res.stderr}\n--- source ---\n{src[-4000:]}")
        lib = ctypes.CDLL(str(so))
        params = _aligned(max(len(ctx.params), 1))
        params[: len(ctx.params)] = np.frombuffer(bytes(ctx.params), np.uint8)
        arena = _aligned(ctx.arena_size + 64)
        arena[:] = 0xFF  # garbage: kernels must not read what they did not write
        for v, a in zip(node.inputs, inputs):
            if v is not None and v.const is None:
                _, off = ctx.offsets[v.uid]
                arena[off : off + v.nbytes] = np.frombuffer(
                    np.ascontiguousarray(a, v.dtype).tobytes(), np.uint8
                )
        lib.run(ctypes.c_void_p(params.ctypes.data), ctypes.c_void_p(arena.ctypes.data))
        outs = []
        for v in node.outputs:
            _, off = ctx.offsets[v.uid]
            outs.append(arena[off : off + v.nbytes].view(v.dtype).reshape(v.shape).copy())
    return outs


def _prelude() -> str:
    """The code generator's prelude (math declarations, pragmas) when it is importable, so
    kernels are tested as they are built in a real library."""
    try:
        from monolib.compiler.backends.c.generate import PRELUDE
    except ImportError:
        return "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
    return PRELUDE


def _aligned(n: int) -> np.ndarray:
    buf = np.zeros(n + 64, np.uint8)
    off = (-buf.ctypes.data) % 64
    return buf[off : off + n]


def ort_node(node: Node, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Run the same node in ONNX Runtime (constants as initializers)."""
    import onnxruntime as ort

    names, feeds, inits, graph_inputs = [], {}, [], []
    for i, (v, a) in enumerate(zip(node.inputs, inputs)):
        if v is None:
            names.append("")
            continue
        names.append(v.name)
        if v.const is not None:
            inits.append(numpy_helper.from_array(v.const, v.name))
        else:
            feeds[v.name] = a
            graph_inputs.append(
                helper.make_tensor_value_info(
                    v.name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)
                )
            )
    outs = [
        helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(v.dtype), None)
        for v in node.outputs
    ]
    onode = helper.make_node(
        node.op_type, names, [v.name for v in node.outputs], **{k: v for k, v in node.attrs.items()}
    )
    graph = helper.make_graph([onode], "t", graph_inputs, outs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", node.opset)], ir_version=10
    )
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    const: Sequence[int] = (),
    opset: int = 17,
    n_outputs: int = 1,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    epilogue: bool = True,
    ort: bool = True,
    cflags: Sequence[str] = ("-O2", "-march=native"),
) -> Node:
    """Check reference vs ORT, and C (plain and with the test epilogue) vs reference.
    ``cflags`` are the C compiler's flags (e.g. ``-DML_VW=8 -DML_NP=2`` for the AVX-512
    tiling of gemm.h on an AVX2 machine)."""
    node = make_node(op_type, inputs, attrs, const, opset, n_outputs)
    ref = op_of(node).reference(node, list(inputs))
    for v, r in zip(node.outputs, ref):
        assert r.shape == v.shape and r.dtype == v.dtype, (v, r.shape, r.dtype)
    if ort:
        got = ort_node(node, inputs)
        for r, o in zip(ref, got):
            np.testing.assert_allclose(r, o, rtol=rtol, atol=atol, err_msg="reference vs ORT")
    outs = run_c(node, inputs, cflags=cflags)
    for r, o in zip(ref, outs):
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, err_msg="C vs reference")
    if epilogue and op_of(node).epilogue_groups(node) is not None:
        outs = run_c(node, inputs, epilogue=True, cflags=cflags)
        np.testing.assert_allclose(
            outs[0],
            ref[0] * EPI[0] + EPI[1],
            rtol=rtol,
            atol=atol,
            err_msg="C with epilogue vs reference",
        )
    return node
