"""Test-only ops (domain ``monolib.test``) and graph-building helpers for codegen tests.

The real ops are written in parallel; these small OpDefs exercise every path of the
generator (elementwise chains, tile epilogues, output expressions, aliases, scratch,
params) independently of them.
"""

from __future__ import annotations

import numpy as np

from monolib.compiler.ir import Graph, Node, Value
from monolib.compiler.ops.base import OpDef, register
from monolib.compiler.backends.cstyle import c_literal, ctype

D = "monolib.test"


class _Binary(OpDef):
    domain = D
    elementwise = True
    fn = staticmethod(np.add)
    sym = "+"

    def infer(self, node):
        a, b = node.inputs
        return [(np.broadcast_shapes(a.shape, b.shape), a.dtype)]

    def reference(self, node, inputs):
        return [self.fn(*inputs).astype(inputs[0].dtype)]

    def c_expr(self, node, args):
        return f"({args[0]} {self.sym} {args[1]})"


@register
class TAdd(_Binary):
    op_type = "TAdd"


@register
class TMul(_Binary):
    op_type = "TMul"
    fn = staticmethod(np.multiply)
    sym = "*"


@register
class TSub(_Binary):
    op_type = "TSub"
    fn = staticmethod(np.subtract)
    sym = "-"


@register
class TRelu(OpDef):
    op_type = "TRelu"
    domain = D
    elementwise = True

    def infer(self, node):
        return [(node.inputs[0].shape, node.inputs[0].dtype)]

    def reference(self, node, inputs):
        return [np.maximum(inputs[0], 0)]

    def c_expr(self, node, args):
        zero = c_literal(0, node.inputs[0].dtype)
        return f"({args[0]} > {zero} ? {args[0]} : {zero})"


@register
class TGreater(OpDef):
    """Output dtype differs from the input (bool)."""

    op_type = "TGreater"
    domain = D
    elementwise = True

    def infer(self, node):
        a, b = node.inputs
        return [(np.broadcast_shapes(a.shape, b.shape), np.dtype(bool))]

    def reference(self, node, inputs):
        return [np.greater(*inputs)]

    def c_expr(self, node, args):
        return f"({args[0]} > {args[1]})"


@register
class TReshape(OpDef):
    op_type = "TReshape"
    domain = D
    alias = True

    def infer(self, node):
        return [(tuple(node.attrs["shape"]), node.inputs[0].dtype)]

    def reference(self, node, inputs):
        return [inputs[0].reshape(node.attrs["shape"])]

    def emit(self, node, ctx):
        return ""


@register
class TMatMul(OpDef):
    """[B, M, K] x [K, N] (B weights constant, packed via ``ctx.param``), tile epilogue
    per row block, scratch used for a row of accumulators."""

    op_type = "TMatMul"
    domain = D

    def infer(self, node):
        a, w = node.inputs
        return [((*a.shape[:-1], w.shape[-1]), a.dtype)]

    def reference(self, node, inputs):
        return [inputs[0] @ inputs[1]]

    def epilogue_groups(self, node):
        r = len(node.outputs[0].shape)
        return [list(range(r - 2)), [r - 2], [r - 1]]

    def emit(self, node, ctx):
        a, w = node.inputs
        y = node.outputs[0]
        *bs, M, K = a.shape
        N = w.shape[1]
        B = int(np.prod(bs, dtype=np.int64))
        T = ctype(y.dtype)
        wt = ctx.param(np.ascontiguousarray(w.const.T), "wt")  # [N, K] packed
        acc = ctx.scratch(N * 4)
        epi = ctx.tile_epilogue(self.epilogue_groups(node))
        return f"""
  const {T}* restrict A = {ctx.ptr(a)};
  const {T}* restrict W = {wt};
  {T}* restrict Y = {ctx.ptr(y)};
  float* restrict acc = (float*){acc};
  for (int64_t b = 0; b < {B}; ++b) {{
    for (int64_t m = 0; m < {M}; ++m) {{
      for (int64_t n = 0; n < {N}; ++n) {{
        float s = 0.0f;
        for (int64_t k = 0; k < {K}; ++k) s += A[(b * {M} + m) * {K} + k] * W[n * {K} + k];
        acc[n] = s;
      }}
      for (int64_t n = 0; n < {N}; ++n) Y[(b * {M} + m) * {N} + n] = acc[n];
    }}
    if ({epi}) {{
      void (*f)(void*, int64_t, int64_t, int64_t, int64_t, int64_t) = {epi};
      f(Y, b, 0, {M}, 0, {N // 2});
      f(Y, b, 0, {M}, {N // 2}, {N});
    }}
  }}"""


@register
class TScale(OpDef):
    """y = x * alpha, written with ``ctx.output_expr`` (element epilogue)."""

    op_type = "TScale"
    domain = D

    def infer(self, node):
        return [(node.inputs[0].shape, node.inputs[0].dtype)]

    def reference(self, node, inputs):
        return [(inputs[0] * node.attrs["alpha"]).astype(inputs[0].dtype)]

    def epilogue_groups(self, node):
        r = len(node.outputs[0].shape)
        return [[], list(range(r - 1)), [r - 1]]

    def emit(self, node, ctx):
        x, y = node.inputs[0], node.outputs[0]
        shape = y.shape
        idx = [f"i{d}" for d in range(len(shape))]
        loops = "".join(f"  for (int64_t {i} = 0; {i} < {n}; ++{i})\n" for i, n in zip(idx, shape))
        flat = (
            " + ".join(
                f"{i} * {int(np.prod(shape[d + 1 :], dtype=np.int64))}" for d, i in enumerate(idx)
            )
            or "0"
        )
        alpha = c_literal(node.attrs["alpha"], y.dtype)
        val = ctx.output_expr(f"{ctx.ptr(x)}[{flat}] * {alpha}", idx)
        return f"{loops}    {ctx.ptr(y)}[{flat}] = {val};"


@register
class TNegNoEpi(OpDef):
    """Accepts an epilogue but its emitter ignores it (the generator applies it)."""

    op_type = "TNegNoEpi"
    domain = D

    def infer(self, node):
        return [(node.inputs[0].shape, node.inputs[0].dtype)]

    def reference(self, node, inputs):
        return [-inputs[0]]

    def epilogue_groups(self, node):
        return [[], [], list(range(len(node.outputs[0].shape)))]

    def emit(self, node, ctx):
        x, y = node.inputs[0], node.outputs[0]
        return f"  for (int64_t i = 0; i < {y.size}; ++i) {ctx.ptr(y)}[i] = -{ctx.ptr(x)}[i];"


@register
class TOpaque(OpDef):
    """y = x, written by a plain loop; accepts no epilogue (a fusion barrier)."""

    op_type = "TOpaque"
    domain = D

    def infer(self, node):
        return [(node.inputs[0].shape, node.inputs[0].dtype)]

    def reference(self, node, inputs):
        return [inputs[0].copy()]

    def emit(self, node, ctx):
        x, y = node.inputs[0], node.outputs[0]
        return f"  for (int64_t i = 0; i < {y.size}; ++i) {ctx.ptr(y)}[i] = {ctx.ptr(x)}[i];"


@register
class TBroken(OpDef):
    """An emitter that fails: with a MonolibError, or with a plain bug."""

    op_type = "TBroken"
    domain = D

    def infer(self, node):
        return [(node.inputs[0].shape, node.inputs[0].dtype)]

    def emit(self, node, ctx):
        from monolib.errors import UnsupportedOpError

        if node.attrs.get("kind") == "unsupported":
            raise UnsupportedOpError("dtype float16 is not supported")
        raise KeyError("oops")


class GraphBuilder:
    """Build a typed :class:`Graph` of test ops and evaluate it with the references."""

    def __init__(self, name: str = "g"):
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.k = 0

    def input(self, name, shape, dtype=np.float32) -> Value:
        v = Value(name, shape, dtype)
        self.inputs.append(v)
        return v

    def const(self, name, array) -> Value:
        return Value.constant(name, np.asarray(array))

    def op(self, op_type, *inputs, **attrs) -> Value:
        """A test op; ``onnx=True`` takes the real ONNX op (opset 17) instead."""
        import monolib.compiler.ops  # noqa: F401  (registers the real ops)
        from monolib.compiler.ops.base import lookup

        self.k += 1
        domain, opset = ("", 17) if attrs.pop("onnx", False) else (D, 1)
        node = Node(
            op_type, f"{op_type}_{self.k}", list(inputs), [], attrs, domain=domain, opset=opset
        )
        ((shape, dtype),) = lookup(op_type, opset, domain).infer(node)
        out = Value(f"v{self.k}", shape, dtype)
        node.outputs = [out]
        self.nodes.append(node)
        return out

    def graph(self, *outputs) -> Graph:
        return Graph(self.name, list(self.inputs), list(outputs), list(self.nodes))


def evaluate(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """NumPy evaluation of a graph with the ops' references."""
    from monolib.compiler.ops.base import op_of

    env = {v.uid: feeds[v.name] for v in graph.inputs}

    def get(v):
        return v.const if v.is_const else env[v.uid]

    for n in graph.nodes:
        outs = op_of(n).reference(n, [get(v) if v is not None else None for v in n.inputs])
        for v, a in zip(n.outputs, outs):
            env[v.uid] = np.asarray(a)
    return [get(v) for v in graph.outputs]
