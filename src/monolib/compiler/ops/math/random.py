"""The random generators: ``RandomUniform``, ``RandomNormal`` (ONNX 1, 22), their
``Like`` forms (1, 22), ``Bernoulli`` (15, 22) and ``Multinomial`` (7, 22), as C in the
library (``mt19937.h``).

Generator: MT19937 with NumPy's legacy ``RandomState`` draws (``random_sample``,
``standard_normal``, ``binomial(1, p)``), the generator of ONNX's reference
implementation (``onnx/reference/ops/_op_common_random.py``) and of the test data of
its Dropout cases, so an op with a ``seed`` attribute gives exactly what
``np.random.RandomState(int(seed))`` gives, and :meth:`reference` is that NumPy code.
Seed semantics (ONNX leaves them to the implementation):

* with ``seed``: the generator is re-seeded on every run, so every run and every
  process gives the same values;
* without: one generator per op and executor (its state in the arena, never reused:
  ``OpDef.state_bytes``), seeded once on the first run from the clock and its address,
  then drawing on, so successive runs give new values.

The arithmetic after the draw follows the reference in the output type: uniform
``u * float(high - low) + low``, normal ``g * scale + mean``, each product and sum
rounded separately (no fused multiply-add); float16/bfloat16 outputs are computed in
float, each step rounded to the type (the draw from double directly, by round-to-odd).
"""

from __future__ import annotations

import logging
import math

import ml_dtypes
import numpy as np

from ....errors import CompileError, ShapeError, UnsupportedOpError
from ...backends.cstyle import c_literal, ctype, storage_load, storage_store
from ...ir import Node, shape_size
from ..base import EmitContext, OpDef, OutType, register
from .cast import onnx_dtype

__all__ = [
    "STATE_BYTES",
    "Bernoulli",
    "Multinomial",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "begin_rng",
    "rng_seed",
]

logger = logging.getLogger(__name__)

#: Arena bytes of one generator state (``ml_rng_state``: 624 words, position, the kept
#: normal value, the seeded flag; checked by the C compiler), 64-aligned.
STATE_BYTES = 2560

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: the generators' output types: float16/bfloat16 computed in float, each step rounded
#: to the type as NumPy's arithmetic in it rounds
_GEN_TYPES = (*_FLOATS, np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def rng_seed(op: OpDef, node: Node) -> int | None:
    """The node's ``seed`` attribute as NumPy's ``RandomState`` takes it (``int(seed)``),
    or None when absent.

    Raises
    ------
    CompileError
        A seed outside ``[0, 2**32)`` (NumPy's range for one integer seed).
    """
    seed = op.attr(node, "seed")
    if seed is None:
        return None
    s = int(seed)
    if not 0 <= s < 2**32:
        raise CompileError(f"{node.op_type} (node {node.name!r}): seed {seed} is outside "
                           "[0, 2**32), the range of MT19937's integer seed")
    return s


def begin_rng(op: OpDef, node: Node, ctx: EmitContext) -> tuple[str, str]:
    """C that declares the node's generator state (``ml_rng_state* <name>``) and seeds it
    for this run; returns ``(code, name)``.

    Raises
    ------
    CompileError
        The plan gave the node no state region, or a bad seed.
    """
    ctx.include("mt19937.h")
    ctx.helper(f'_Static_assert(sizeof(ml_rng_state) <= {STATE_BYTES}, '
               '"ml_rng_state outgrew ops/math/random.py STATE_BYTES");')
    off = getattr(ctx, "plan", None) and ctx.plan.state.get(node.name)
    if off is None:
        raise CompileError(f"{node.op_type} (node {node.name!r}): no generator state was "
                           "planned in the arena")
    seed = rng_seed(op, node)
    st = ctx.unique("rng")
    code = (f"ml_rng_state* {st} = (ml_rng_state*)(arena + {off});\n"
            f"ml_rng_begin({st}, {int(seed is not None)}, {seed or 0}u);\n")
    return code, st


def _state(seed: int | None) -> np.random.RandomState:
    return np.random.RandomState(seed)


class _Random(OpDef):
    """Shared parts: never folded (each run draws), one generator state per node."""

    foldable = False
    defaults = {"seed": None}

    def state_bytes(self, node: Node) -> int:
        return STATE_BYTES

    def _out_dtype(self, node: Node, default: np.dtype) -> np.dtype:
        dt = self.attr(node, "dtype")
        where = f"{node.op_type} (node {node.name!r})"
        dtype = onnx_dtype(dt, where) if dt else np.dtype(default)
        if dtype not in _GEN_TYPES:
            raise UnsupportedOpError(f"{where}: output type {dtype} is not supported "
                                     "(float32, float64, float16, bfloat16 are)")
        return dtype


class _Generator(_Random):
    """RandomUniform/RandomNormal and the Like forms (1; 22 adds types only): draws in
    the output's shape."""

    since_version = 1
    also_versions = (22,)
    normal = False
    like = False

    def _shape(self, node: Node):
        if self.like:
            return tuple(node.inputs[0].shape)
        shape = tuple(int(d) for d in node.attrs["shape"])
        if any(d < 0 for d in shape):
            raise ShapeError(f"{node.op_type} (node {node.name!r}): negative dim in shape "
                             f"{list(shape)}")
        return shape

    def infer(self, node: Node) -> list[OutType]:
        default = node.inputs[0].dtype if self.like else np.float32
        if self.like and node.inputs[0].dtype not in _GEN_TYPES and not self.attr(node, "dtype"):
            default = np.float32  # ONNX: dtype defaults to the input's; ints get float
        return [(self._shape(node), self._out_dtype(node, default))]

    def _affine(self, node: Node) -> tuple[float, float]:
        if self.normal:
            return float(node.attrs["scale"]), float(node.attrs["mean"])
        high, low = float(node.attrs["high"]), float(node.attrs["low"])
        return high - low, low

    def reference(self, node: Node, inputs):
        (shape, dtype), = self.infer(node)
        state = _state(rng_seed(self, node))
        draw = state.standard_normal(shape) if self.normal else state.random_sample(shape)
        mul, add = self._affine(node)
        res = np.asarray(draw).astype(dtype)
        res *= dtype.type(mul)
        res += dtype.type(add)
        return [res]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        y = node.outputs[0]
        code, st = begin_rng(self, node, ctx)
        mul, add = self._affine(node)
        dt = y.dtype if y.dtype in _FLOATS else np.dtype(np.float32)  # the compute type
        ct = ctype(dt)
        mul, add = float(y.dtype.type(mul)), float(y.dtype.type(add))

        def rnd(e: str) -> str:  # one rounding to the output type (float16, bfloat16)
            return storage_load(storage_store(e, y.dtype), y.dtype)

        draw = "ml_rng_gauss(st)" if self.normal else "ml_rng_double(st)"
        first = f"({ct}){draw}" if dt == y.dtype else rnd(f"ml_rng_float_odd({draw})")
        fn = ctx.unique("rng_fill")
        # a function of its own so the no-contraction attribute applies to it
        ctx.helper(
            f"#if defined(__GNUC__) && !defined(__clang__)\n"
            f"__attribute__((optimize(\"fp-contract=off\")))\n#endif\n"
            f"static void {fn}(ml_rng_state* st, {ctype(y.dtype)}* y, int64_t n) {{\n"
            f"#if defined(__clang__)\n#pragma clang fp contract(off)\n#endif\n"
            f"  for (int64_t i = 0; i < n; ++i) {{\n"
            f"    {ct} v = {first};\n"
            f"    v = {rnd(f'v * {c_literal(mul, dt)}')};\n"
            f"    y[i] = {storage_store(f'v + {c_literal(add, dt)}', y.dtype)};\n  }}\n}}"
        )
        return code + f"{fn}({st}, {ctx.ptr(y)}, {shape_size(y.shape)});"


@register
class RandomUniform(_Generator):
    """ONNX ``RandomUniform`` (1; 22 adds types only): ``shape`` drawn uniformly in
    ``[low, high)``, ``dtype`` float32 (default), float64, float16 or bfloat16.

    Raises
    ------
    UnsupportedOpError
        Another ``dtype``.
    CompileError
        A seed outside ``[0, 2**32)``.
    """

    op_type = "RandomUniform"


@register
class RandomNormal(_Generator):
    """ONNX ``RandomNormal`` (1; 22 adds types only): ``shape`` drawn from
    N(``mean``, ``scale``^2), ``dtype`` float32 (default), float64, float16 or bfloat16.

    Raises
    ------
    UnsupportedOpError
        Another ``dtype``.
    CompileError
        A seed outside ``[0, 2**32)``.
    """

    op_type = "RandomNormal"
    normal = True


class _LikeGenerator(_Generator):
    """The ``Like`` forms: the generator in the input's shape (run-time dims too);
    ``dtype`` defaults to the input's type (float32 for an integer input).

    Raises
    ------
    UnsupportedOpError
        An output type other than float32, float64, float16, bfloat16.
    """

    defaults = {"seed": None, "dtype": None}
    like = True


@register
class RandomUniformLike(_LikeGenerator):
    """ONNX ``RandomUniformLike`` (1; 22 adds types only): ``RandomUniform`` in the
    input's shape; UnsupportedOpError for an output type other than float32, float64,
    float16, bfloat16 (:class:`_LikeGenerator`)."""

    op_type = "RandomUniformLike"


@register
class RandomNormalLike(_LikeGenerator):
    """ONNX ``RandomNormalLike`` (1; 22 adds types only): ``RandomNormal`` in the
    input's shape; UnsupportedOpError for an output type other than float32, float64,
    float16, bfloat16 (:class:`_LikeGenerator`)."""

    op_type = "RandomNormalLike"
    normal = True


_BERNOULLI_OUT = {np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32,
                                        np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                                        np.bool_)}


@register
class Bernoulli(_Random):
    """ONNX ``Bernoulli`` (15; 22 adds types only): each output element is 1 with the
    probability given by the input element (float32/float64), as NumPy's
    ``binomial(1, p)`` draws it (one double per element); output type ``dtype`` (default:
    the input's), any numeric type or bool.

    Raises
    ------
    UnsupportedOpError
        An input or output type outside those.
    """

    op_type, since_version = "Bernoulli", 15
    also_versions = (22,)
    defaults = {"seed": None, "dtype": None}

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        where = f"Bernoulli (node {node.name!r})"
        if x.dtype not in _FLOATS:
            raise UnsupportedOpError(f"{where}: input type {x.dtype} is not supported")
        dt = self.attr(node, "dtype")
        out = onnx_dtype(dt, where) if dt else x.dtype
        if out not in _BERNOULLI_OUT:
            raise UnsupportedOpError(f"{where}: output type {out} is not supported")
        return [(tuple(x.shape), out)]

    def reference(self, node: Node, inputs):
        (_, dtype), = self.infer(node)
        state = _state(rng_seed(self, node))
        return [state.binomial(1, np.asarray(inputs[0], np.float64)).astype(dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        code, st = begin_rng(self, node, ctx)
        i = ctx.unique("i")
        return code + (
            f"for (int64_t {i} = 0; {i} < {shape_size(y.shape)}; ++{i})"
            f" {ctx.ptr(y)}[{i}] = ({ctype(y.dtype)})ml_rng_bernoulli({st}, "
            f"(double){ctx.ptr(x)}[{i}]);"
        )


@register
class Multinomial(_Random):
    """ONNX ``Multinomial`` (7; 22 adds types only): ``sample_size`` class indices per
    row of the ``[batch, classes]`` unnormalized log-probabilities (float32/float64),
    output ``[batch, sample_size]`` int32 (default) or int64.

    Each row's cumulative sums of ``exp(x - max)`` are taken in double; a draw
    ``u * total`` (``u`` NumPy's ``random_sample``) picks the first class whose
    cumulative sum exceeds it (a class of probability 0 is never drawn).

    Raises
    ------
    ShapeError
        An input that is not 2-D.
    UnsupportedOpError
        Another input or output type.
    """

    op_type, since_version = "Multinomial", 7
    also_versions = (22,)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        where = f"Multinomial (node {node.name!r})"
        if len(x.shape) != 2:
            raise ShapeError(f"{where}: input must be [batch, classes], got {list(x.shape)}")
        if x.dtype not in _FLOATS:
            raise UnsupportedOpError(f"{where}: input type {x.dtype} is not supported")
        out = onnx_dtype(node.attrs["dtype"], where)
        if out not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise UnsupportedOpError(f"{where}: output type {out} is not supported "
                                     "(int32 and int64 are)")
        return [((x.shape[0], int(node.attrs["sample_size"])), out)]

    def reference(self, node: Node, inputs):
        (shape, dtype), = self.infer(node)
        state = _state(rng_seed(self, node))
        x = np.asarray(inputs[0], np.float64)
        out = np.empty(shape, dtype)
        for b in range(x.shape[0]):
            top = x[b].max()
            cdf = np.cumsum([math.exp(v - top) for v in x[b]])  # libm's exp, as the C
            for s in range(shape[1]):
                u = state.random_sample() * cdf[-1]
                out[b, s] = min(int(np.searchsorted(cdf, u, side="right")), x.shape[1] - 1)
        return [out]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        batch, classes = x.shape
        samples = y.shape[1]
        code, st = begin_rng(self, node, ctx)
        cdf = ctx.unique("cdf")
        xp, yp, yt = ctx.ptr(x), ctx.ptr(y), ctype(y.dtype)
        return code + (
            f"double* {cdf} = (double*){ctx.scratch(8 * max(classes, 1))};\n"
            f"for (int64_t b = 0; b < {batch}; ++b) {{\n"
            f"  double top = -INFINITY, total = 0.0;\n"
            f"  for (int64_t j = 0; j < {classes}; ++j)"
            f" if ((double){xp}[b * {classes} + j] > top) top = (double){xp}[b * {classes} + j];\n"
            f"  for (int64_t j = 0; j < {classes}; ++j) {{"
            f" total += exp((double){xp}[b * {classes} + j] - top); {cdf}[j] = total; }}\n"
            f"  for (int64_t s = 0; s < {samples}; ++s) {{\n"
            f"    double u = ml_rng_double({st}) * total;\n"
            f"    int64_t lo = 0, hi = {classes} - 1;\n"
            f"    while (lo < hi) {{ int64_t mid = (lo + hi) / 2;"
            f" if ({cdf}[mid] > u) hi = mid; else lo = mid + 1; }}\n"
            f"    {yp}[b * {samples} + s] = ({yt})lo;\n"
            f"  }}\n}}"
        )
