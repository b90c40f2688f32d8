"""The op tests' harness: one ONNX node -> its op's ``emit`` -> C -> shared library -> ctypes.

:class:`NodeContext` is the tests' one implementation of the ``EmitContext`` protocol
(``monolib.compiler.ops.base``): every activation in one arena, constants in a params
blob, kernel headers pasted in. It compiles ONE node's ``emit`` output, so the kernels are
tested apart from the code generator, with the export's compiler and flags
(:func:`monolib.compiler.testing.build_shared`). Two test epilogues check that a kernel
applies the fused epilogue to every element exactly once:

* ``"affine"``: ``v * 0.5 + 1`` through ``tile_epilogue`` and ``output_expr`` (not
  idempotent, so an element the kernel forgets or finishes twice shows up);
* ``"index"``: ``acc * 2 + index[0]`` through ``output_expr`` on float32 outputs (checks
  the index a kernel passes).

:func:`run_threads` runs a compiled model on 1 and 2 threads of the pool. Two checks
build on the context: :func:`check_node` (the nn ops: reference vs ONNX Runtime, C vs
reference, plain and with the affine epilogue) and :func:`check_op` (the math and tensor
ops: ``infer``, reference and C vs ONNX Runtime, plain and with the index epilogue).
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from monolib.compiler.backends.c.generate import host_prelude
import monolib
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.backends.cstyle import HOST_C, ctype
from monolib.compiler.ir import Node, Value
from monolib.compiler.ops import op_of
from monolib.compiler.testing import aligned_empty, build_shared, ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads

__all__ = [
    "EPI",
    "TILINGS",
    "VECTOR_WIDTHS",
    "NodeContext",
    "add_inputs",
    "apply_test_epilogue",
    "check_forced",
    "check_threads_match_ort",
    "kernel_formula",
    "assert_close",
    "attr_value",
    "check_node",
    "check_op",
    "make_node",
    "ort_node",
    "run_c",
    "run_threads",
    "run_variants",
]

logger = logging.getLogger(__name__)

EPI = (0.5, 1.0)  # the affine test epilogue: v * 0.5 + 1
#: gemm.h's tilings forced by macro, whatever this machine's ISA (the deployment CPU has
#: AVX-512, CI may not): the AVX-512 two-panel tile at 8 floats, and 4-float vectors.
TILINGS = {
    "avx512_tiling": ("-DML_VW=8", "-DML_NP=2"),
    "sse_width": ("-DML_VW=4", "-DML_NP=1"),
    # the WebAssembly micro-kernel: 2 rows a pass over the B panel (gemm.h, ML_UK_ROWS)
    "wasm_rows": ("-DML_VW=4", "-DML_NP=1", "-DML_UK_ROWS=2"),
}
#: The vector widths the conv kernels do not get on an AVX2 machine: AVX-512's and SSE's.
VECTOR_WIDTHS = {
    "vw16": ("-DML_VW=16", "-DML_NP=2"),
    "vw4": ("-DML_VW=4", "-DML_NP=1"),
}


def _align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


class NodeContext:
    """The ``EmitContext`` of one node: a params blob, one arena, headers, helpers.

    Parameters
    ----------
    node : Node
        The node being emitted; output 0 gets the epilogue.
    epilogue : {None, "affine", "index"}
        The test epilogue fused into output 0 (see the module's docstring).

    Attributes
    ----------
    offsets : dict of int -> (str, int)
        Value uid -> (``"params"`` or ``"arena"``, byte offset), 64-byte aligned.
    """

    def __init__(self, node: Node, epilogue: str | None = None):
        if epilogue not in (None, "affine", "index"):
            raise ValueError(f"unknown test epilogue {epilogue!r}")
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

    def share(self, value: Value, owner: Value) -> None:
        """Place ``value`` in ``owner``'s storage (an alias op's output 0)."""
        self.offsets[value.uid] = self.offsets[owner.uid]

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

    def blocked(self, value) -> bool:  # one node alone: NCHW on both sides
        return False

    def side_inputs(self) -> bool:  # the harness's epilogue is an affine of the value
        return False

    def tile_epilogue(self, groups: Sequence[Sequence[int]]) -> str:
        if self.epilogue != "affine":
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

    def parallel_for(self, var: str, extent: Any, body: str, work: Any) -> str:
        # one node's C: the plain loop (the split is the code generator's, tested there)
        return f"  for (int64_t {var} = 0; {var} < {extent}; ++{var}) {{\n{body}\n  }}"

    def output_expr(self, acc: str, index: Sequence[str]) -> str:
        if self.epilogue == "affine":
            s, t = (f"{v!r}f" for v in EPI)
            return f"(({acc}) * {s} + {t})"
        if self.epilogue == "index" and self.node.outputs[0].dtype == np.float32:
            i0 = index[0] if index else "0"
            return f"(({acc}) * 2.0f + (float)({i0}))"
        return acc


def apply_test_epilogue(y: np.ndarray) -> np.ndarray:
    """What the ``"index"`` epilogue of :class:`NodeContext` does to output 0."""
    if y.dtype != np.float32:
        return y
    idx = np.indices(y.shape)[0] if y.ndim else np.zeros(())
    return (y * np.float32(2) + idx.astype(np.float32)).astype(np.float32)


def attr_value(proto: onnx.AttributeProto) -> Any:
    """An attribute's Python value as the frontend keeps it: strings decoded, tensors as
    NumPy arrays."""
    v = helper.get_attribute_value(proto)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode() for x in v]
    return v


def make_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    opset: int = 17,
    const: Sequence[int] = (),
    n_outputs: int = 1,
) -> Node:
    """A typed IR node as the frontend builds it: schema defaults filled in, attributes
    as ONNX stores them (floats as float32, tensors as arrays); input ``i`` is ``in{i}``
    (a constant when ``i`` is in ``const``, omitted when ``None``); output types come
    from the op's ``infer``."""
    schema = onnx.defs.get_schema(op_type, opset)
    full = {
        name: attr_value(a.default_value)
        for name, a in schema.attributes.items()
        if a.default_value is not None and a.default_value.type
    }
    full.update({k: attr_value(helper.make_attribute(k, v)) for k, v in attrs.items()})
    vals: list[Value | None] = []
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif i in const:
            vals.append(Value.constant(f"in{i}", a))
        else:
            vals.append(Value(f"in{i}", a.shape, a.dtype))
    placeholders = [Value(f"out{i}", (), np.float32) for i in range(n_outputs)]
    node = Node(op_type, f"{op_type}_0", vals, placeholders, full, opset=opset)
    types = op_of(node).infer(node)
    node.outputs = [Value(f"out{i}", s, d) for i, (s, d) in enumerate(types[:n_outputs])]
    return node


def add_inputs(
    named: dict[str, np.ndarray | None],
    consts: set[str],
    graph_inputs: list,
    inits: list,
    feeds: dict[str, np.ndarray],
) -> list[str]:
    """A test node's inputs made into graph inputs or initializers.

    Parameters
    ----------
    named : dict of str to ndarray or None
        The node's inputs in order, by name; None is an omitted optional input.
    consts : set of str
        The names that become initializers; the others become graph inputs (typed by
        the array's dtype and shape) fed with the array.
    graph_inputs, inits, feeds : list, list, dict
        Appended to: value infos, ``TensorProto`` initializers, the feeds.

    Returns
    -------
    list of str
        The node's input names, ``""`` for an omitted input.
    """
    names = []
    for name, x in named.items():
        if x is None:
            names.append("")
            continue
        names.append(name)
        if name in consts:
            inits.append(numpy_helper.from_array(np.asarray(x), name))
        else:
            dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, dtype, x.shape))
            feeds[name] = x
    return names


def ort_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    opset: int = 17,
    const: Sequence[int] = (),
    n_outputs: int = 1,
    optimize: bool = True,
) -> list[np.ndarray]:
    """The node of :func:`make_node` run by ONNX Runtime (one thread; constants as
    initializers; ``optimize=False``: without its graph optimizations)."""
    graph_inputs, inits, feeds = [], [], {}
    names = add_inputs({f"in{i}": x for i, x in enumerate(inputs)}, {f"in{i}" for i in const},
                       graph_inputs, inits, feeds)
    node = helper.make_node(op_type, names, [f"out{i}" for i in range(n_outputs)], **attrs)
    outs = [helper.make_empty_tensor_value_info(f"out{i}") for i in range(n_outputs)]
    graph = helper.make_graph([node], "g", graph_inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return ort_run(model, feeds, optimize=optimize)


def _emit(node: Node, epilogue: str | None) -> tuple[NodeContext, str]:
    """Lay out the node's inputs and outputs, then emit its C body."""
    ctx = NodeContext(node, epilogue)
    for v in node.inputs:
        if v is not None:
            ctx.ptr(v)
    if op_of(node).alias:  # output 0 shares input 0's storage
        ctx.share(node.outputs[0], node.inputs[0])
    for v in node.outputs:
        ctx.ptr(v)
    return ctx, op_of(node).emit(node, ctx)


def _execute(fn, node: Node, ctx: NodeContext, inputs) -> list[np.ndarray]:
    params = aligned_empty(len(ctx.params) + 64)
    params[: len(ctx.params)] = np.frombuffer(bytes(ctx.params), np.uint8)
    arena = aligned_empty(ctx.arena_size + 64)
    arena[:] = 0xFF  # garbage: kernels must not read what they did not write
    for v, x in zip(node.inputs, inputs):
        if v is not None and v.const is None:
            _, off = ctx.offsets[v.uid]
            arena[off : off + v.nbytes] = np.ascontiguousarray(x, v.dtype).view(np.uint8).ravel()
    fn(ctypes.c_void_p(params.ctypes.data), ctypes.c_void_p(arena.ctypes.data))
    outs = []
    for v in node.outputs:
        _, off = ctx.offsets[v.uid]
        outs.append(arena[off : off + v.nbytes].view(v.dtype).reshape(v.shape).copy())
    return outs


def run_variants(
    node: Node,
    inputs: Sequence[np.ndarray | None],
    epilogues: Sequence[str | None] = (None,),
    options: Sequence[str] = (),
) -> list[list[np.ndarray]]:
    """Emit ``node`` once per test epilogue, build all of them as ONE library (the host
    C prelude and headers of a generated library, the op's kernel headers, ``run0``,
    ``run1``...), run each on
    ``inputs``; returns the outputs per epilogue. ``options`` are extra compiler flags
    (e.g. a tiling of :data:`TILINGS`)."""
    if op_of(node).alias and node.inputs[0].const is not None:
        return [[node.inputs[0].const.reshape(node.outputs[0].shape).copy()] for _ in epilogues]
    emitted = [_emit(node, e) for e in epilogues]
    headers: list[str] = list(HOST_C.headers)  # a library's source always has them
    helpers: list[str] = []
    for ctx, _ in emitted:
        headers += [h for h in ctx.headers if h not in headers]
        helpers += [h for h in ctx.helpers if h not in helpers]
    parts = [host_prelude(), *(kernel_header(h) for h in headers), *helpers]
    for k, (_, body) in enumerate(emitted):
        parts.append(
            f"void run{k}(const uint8_t* restrict params, uint8_t* restrict arena) {{\n{body}\n}}"
        )
    lib = build_shared("\n".join(parts), ("-Werror=implicit-function-declaration", *options))
    return [
        _execute(getattr(lib, f"run{k}"), node, ctx, inputs) for k, (ctx, _) in enumerate(emitted)
    ]


def run_c(
    node: Node,
    inputs: Sequence[np.ndarray | None],
    epilogue: str | None = None,
    options: Sequence[str] = (),
) -> list[np.ndarray]:
    """Emit, build and run ``node`` with one test epilogue; returns its outputs."""
    return run_variants(node, inputs, (epilogue,), options)[0]


def assert_close(got, want, rtol: float, atol: float, what: str) -> None:
    """Same shape and dtype; floats within ``rtol``/``atol`` (NaNs equal), others equal."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: dict[str, Any],
    opset: int = 17,
    const: Sequence[int] = (),
    n_outputs: int = 1,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    epilogue: bool = True,
    ort: bool = True,
    options: Sequence[str] = (),
) -> Node:
    """The nn ops' check: reference vs ONNX Runtime, and the C (plain and with the
    affine epilogue) vs the reference. ``options`` are extra compiler flags (e.g. a
    tiling of :data:`TILINGS`). Returns the node."""
    node = make_node(op_type, inputs, attrs, opset, const, n_outputs)
    ref = op_of(node).reference(node, list(inputs))
    for v, r in zip(node.outputs, ref):
        assert r.shape == v.shape and r.dtype == v.dtype, (v, r.shape, r.dtype)
    if ort:
        got = ort_node(op_type, inputs, attrs, opset, const, n_outputs)
        for r, o in zip(ref, got):
            np.testing.assert_allclose(r, o, rtol=rtol, atol=atol, err_msg="reference vs ORT")
    with_epilogue = epilogue and op_of(node).epilogue_groups(node) is not None
    runs = run_variants(node, inputs, (None, "affine") if with_epilogue else (None,), options)
    for r, o in zip(ref, runs[0]):
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, err_msg="C vs reference")
    if with_epilogue:
        np.testing.assert_allclose(
            runs[1][0],
            ref[0] * EPI[0] + EPI[1],
            rtol=rtol,
            atol=atol,
            err_msg="C with epilogue vs reference",
        )
    return node


def check_op(
    op_type,
    inputs,
    attrs=None,
    opset=17,
    const=(),
    n_outputs=1,
    rtol=1e-5,
    atol=1e-6,
    emit=True,
    epilogue=True,
):
    """The math and tensor ops' check: ``infer``, the reference and the C (plain and
    with the index epilogue) vs ONNX Runtime without its graph optimizations. Returns
    ONNX Runtime's outputs."""
    attrs = attrs or {}
    want = ort_node(op_type, inputs, attrs, opset, const, n_outputs, optimize=False)
    node = make_node(op_type, inputs, attrs, opset, const, n_outputs)
    for v, w in zip(node.outputs, want):
        assert v.shape == w.shape, f"infer shape {v.shape} != ORT {w.shape}"
        assert v.dtype == w.dtype, f"infer dtype {v.dtype} != ORT {w.dtype}"
    ref = op_of(node).reference(node, list(inputs))
    for i, (r, w) in enumerate(zip(ref, want)):
        assert_close(r, w, rtol, atol, f"reference output {i}")
    if emit:
        op = op_of(node)
        with_epilogue = epilogue and (op.elementwise or op.epilogue_groups(node) is not None)
        runs = run_variants(node, inputs, (None, "index") if with_epilogue else (None,))
        for i, (g, w) in enumerate(zip(runs[0], want)):
            assert_close(g, w, rtol, atol, f"emitted C output {i}")
        if with_epilogue:
            want0 = apply_test_epilogue(want[0])
            assert_close(runs[1][0], want0, rtol, atol * 4 + 1e-6, "emitted C with epilogue")
    return want


def run_threads(model, feeds: dict[str, np.ndarray], threads: Sequence[int] = (1, 2)):
    """Compile ``model`` for the host (``monolib.compile``) and run it on ``feeds`` once
    per thread count of the pool; the pool is back at its default (the CPUs this process
    may use) afterwards.

    Returns
    -------
    list of list of numpy.ndarray
        The outputs (copies) per thread count, in the order of ``threads``.
    """
    gm = GraphModule(monolib.compile(model, target="c")["default"](cpu()))
    runs = []
    try:
        for n in threads:
            set_num_threads(n)
            gm.run(**feeds)
            runs.append([gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())])
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    return runs


def check_threads_match_ort(model, feeds: dict[str, np.ndarray], rel: float = 3e-5) -> list:
    """``model`` compiled for the host: output 0 at 1 thread within ``rel`` (relative to
    its largest magnitude) of ONNX Runtime's, and the same bits at 2 threads. Returns
    the 1-thread outputs."""
    from monolib.compiler.testing import ort_run

    want = ort_run(model, feeds)[0]
    one, two = run_threads(model, feeds)
    assert np.abs(one[0] - want).max() <= rel * np.abs(want).max()
    np.testing.assert_array_equal(one[0], two[0])
    return one


def check_forced(node: Node, ins: Sequence[np.ndarray], label: str, c_call: str,
                 options: Sequence[str] = (), epilogue: bool = True) -> None:
    """Emit ``node`` with the tuning candidate ``label`` forced: its C calls ``c_call``, and
    the built library's output matches the op's reference (through the test affine
    epilogue when ``epilogue``) within 1e-5 relative."""
    from monolib.compiler.tuning.select import Selection, selecting

    with selecting(Selection(forced={node.name: label})):
        src = op_of(node).emit(node, NodeContext(node, "affine"))
        assert c_call in src, src
        got = run_c(node, ins, "affine" if epilogue else None, options)[0]
    ref = op_of(node).reference(node, list(ins))[0]
    want = ref * EPI[0] + EPI[1] if epilogue else ref
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def kernel_formula(headers: Sequence[str], rows: Sequence[Sequence[int]], call: str) -> list[int]:
    """The C expression ``call`` evaluated for each row of ``rows`` in a library built from
    the kernel ``headers`` (in order, at 16 floats a vector): ``t`` is the row as
    ``const int64_t t[]``. For tests that a Python mirror of a kernel's size formula (its
    scratch, its bands) gives what the kernel computes."""
    width = len(rows[0])
    table = ", ".join(str(int(v)) for row in rows for v in row)
    src = (
        "#include <stdint.h>\n#include <string.h>\n"
        + "".join(kernel_header(h) for h in headers)
        + f"static const int64_t T[] = {{{table}}};\n"
        "void eval(int64_t* out, int n) { for (int i = 0; i < n; ++i) { "
        f"const int64_t* t = T + {width} * i; out[i] = {call}; }} }}\n"
    )
    lib = build_shared(src, ["-DML_VW=16", "-DML_NP=2"])
    out = (ctypes.c_int64 * len(rows))()
    lib.eval(out, len(rows))
    return list(out)
