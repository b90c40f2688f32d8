"""``Einsum`` (ONNX 12, 28): Einstein summation over one or more operands.

The equation (``"bij,bjk->bik"``, implicit output when ``->`` is absent, ``...`` for
broadcast leading dims, a repeated letter in one term for a diagonal) is parsed into
integer labels. The emitter writes one loop nest: the output labels outside, the
summed labels inside, each operand read at the offset ``sum(label index * stride)``
(a label repeated in a term adds its strides: the diagonal; a broadcast size-1 dim
has stride 0). Products accumulate in double (int64 for integer types). The ONNX spec
follows ``numpy.einsum``, which ``reference`` calls.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...symbolic import is_dim, is_one, same
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype
from ..tensor.loops import contiguous_strides, emit_loops

__all__ = ["Einsum", "parse_einsum"]

logger = logging.getLogger(__name__)


def parse_einsum(equation: str, shapes: list[tuple[int, ...]], where: str = "Einsum"):
    """Labels of each operand and of the output, and each label's size.

    Returns ``(in_labels, out_labels, sizes)``: lists of label ids per operand dim and
    per output dim, and ``{label: size}``. Ellipsis dims get labels ``-1, -2, ...``
    (right-aligned, broadcast across operands).

    Raises
    ------
    ShapeError
        A malformed equation, a term whose letters do not match its operand's rank, or
        label sizes that disagree.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"{where}: equation {equation!r} has {len(terms)} terms for {len(shapes)} inputs")
    n_ell = 0
    in_labels: list[list[int]] = []
    for term, shape in zip(terms, shapes):
        head, ell, tail = term.partition("...")
        letters = head + tail
        if not all(ch.isalpha() for ch in letters) or "." in tail:
            raise ShapeError(f"{where}: bad term {term!r} in {equation!r}")
        k = len(shape) - len(letters) if ell else 0
        if k < 0 or (not ell and len(letters) != len(shape)):
            raise ShapeError(f"{where}: term {term!r} does not fit an operand of rank {len(shape)}")
        n_ell = max(n_ell, k)
        in_labels.append([ord(c) for c in head] + [-(k - i) for i in range(k)] + [ord(c) for c in tail])
    sizes: dict[int, int] = {}
    for labels, shape in zip(in_labels, shapes):
        for lab, d in zip(labels, shape):
            old = sizes.get(lab, 1)
            if not is_one(d) and not (is_one(old) or same(old, d)):  # a run-time dim is never 1
                raise ShapeError(f"{where}: label {chr(lab) if lab > 0 else '...'} has sizes {old} and {d}")
            sizes[lab] = d if not is_one(d) else old
    ell_labels = [-(n_ell - i) for i in range(n_ell)]
    if arrow:
        if "..." not in rhs and n_ell and any(not is_one(sizes[e]) for e in ell_labels):
            raise ShapeError(f"{where}: the output of {equation!r} drops broadcast dims")
        head, ell, tail = rhs.partition("...")
        if not all(ch.isalpha() for ch in head + tail):
            raise ShapeError(f"{where}: bad output {rhs!r}")
        out = [ord(c) for c in head] + (ell_labels if ell else []) + [ord(c) for c in tail]
        if any(lab not in sizes for lab in out) or len(set(out)) != len(out):
            raise ShapeError(f"{where}: output {rhs!r} names labels absent from the inputs")
    else:
        counts: dict[int, int] = {}
        for labels in in_labels:
            for lab in labels:
                if lab > 0:
                    counts[lab] = counts.get(lab, 0) + 1
        out = ell_labels + sorted(lab for lab, n in counts.items() if n == 1)
    return in_labels, out, sizes


@register
class Einsum(OpDef):
    """ONNX ``Einsum`` (12; 28 adds bfloat16 and integer types, which the C types
    cover or refuse).

    Raises
    ------
    ShapeError
        See :func:`parse_einsum`; operands of different dtypes.
    """

    op_type, since_version = "Einsum", 12
    also_versions = (28,)

    def _parse(self, node: Node):
        return parse_einsum(
            node.attrs["equation"], [tuple(v.shape) for v in node.inputs], f"Einsum (node {node.name!r})"
        )

    def infer(self, node: Node) -> list[OutType]:
        dts = {v.dtype for v in node.inputs}
        if len(dts) != 1:
            raise ShapeError(f"Einsum (node {node.name!r}): operands of dtypes {sorted(map(str, dts))}")
        dt = dts.pop()
        if dt == np.bool_:
            raise UnsupportedOpError(f"Einsum (node {node.name!r}): bool operands")
        _, out, sizes = self._parse(node)
        return [(tuple(sizes[lab] for lab in out), dt)]

    def reference(self, node: Node, inputs):
        out = np.einsum(node.attrs["equation"].replace(" ", ""), *inputs)
        return [np.asarray(out, dtype=inputs[0].dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        in_labels, out, sizes = self._parse(node)
        y = node.outputs[0]
        dt = y.dtype
        summed = [lab for lab in dict.fromkeys(x for ls in in_labels for x in ls) if lab not in out]
        order = out + summed
        acc_t = "double" if dt.kind == "f" else "int64_t"
        ptrs = [ctx.ptr(v) for v in node.inputs]
        yst = contiguous_strides([sizes[lab] for lab in out])
        acc = ctx.unique("acc")

        def offsets(idx: list[str]) -> list[str]:
            var = dict(zip(order, idx))
            outs = []
            for labels, v in zip(in_labels, node.inputs):
                st = contiguous_strides(v.shape)
                terms = [f"{var[lab]}*{s}" for lab, s, d in zip(labels, st, v.shape)
                         if not is_one(d)]
                outs.append(" + ".join(terms) or "0")
            return outs

        def body(idx: list[str]) -> str:
            prod = " * ".join(f"({acc_t}){p}[{o}]" for p, o in zip(ptrs, offsets(idx)))
            return f"{acc} += {prod};"

        out_vars = [ctx.unique("o") for _ in out]
        inner = emit_loops(ctx, [sizes[lab] for lab in summed], lambda sv: body(out_vars + sv), "s")
        yoff = " + ".join(f"{v}*{s}" for v, s in zip(out_vars, yst)) or "0"
        code = f"{acc_t} {acc} = 0;\n{inner}\n{ctx.ptr(y)}[{yoff}] = ({ctype(dt)}){acc};"
        for v, lab in zip(reversed(out_vars), reversed(out)):
            code = f"for (int64_t {v} = 0; {v} < {sizes[lab]}; ++{v}) {{\n{code}\n}}"
        if any(not is_dim(d) and d == 0 for d in y.shape):
            return ""
        return "{\n" + code + "\n}"
