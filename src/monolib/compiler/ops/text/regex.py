"""RegexFullMatch (ONNX 20): whether each string matches a pattern entirely.

The pattern (an attribute, RE2 syntax) is compiled at compile time to an NFA program
(``_regex.py``) stored in the params blob; ``text.h``'s ``ml_re_fullmatch`` simulates
it over each string's code points (Thompson's construction: time linear in the
string, no backtracking, as RE2).
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ._common import bytes_ptr, require_strings, width
from ._regex import compile_regex, fullmatch

__all__ = ["RegexFullMatch"]

logger = logging.getLogger(__name__)


@register
class RegexFullMatch(OpDef):
    """ONNX ``RegexFullMatch`` (20): X strings -> Y bool, X's shape; Y[i] is true when
    the whole of X[i] matches ``pattern`` (RE2 syntax, see ``_regex.py`` for what is
    supported).

    Raises
    ------
    ShapeError
        X is not a string tensor.
    CompileError
        The pattern is missing, does not parse, or uses an unsupported feature (named).
    """

    op_type, since_version = "RegexFullMatch", 20
    defaults = {"pattern": None}

    def _where(self, node: Node) -> str:
        return f"RegexFullMatch (node {node.name!r})"

    def _pattern(self, node: Node) -> str:
        p = self.attr(node, "pattern")
        if p is None:
            from ....errors import CompileError

            raise CompileError(f"{self._where(node)}: attribute 'pattern' is missing")
        return p

    def infer(self, node: Node) -> list[OutType]:
        require_strings(node, (0,))
        compile_regex(self._pattern(node), self._where(node))  # refuse early
        return [(tuple(node.inputs[0].shape), np.dtype(bool))]

    def reference(self, node: Node, inputs):
        # the compiled program run in Python: the C kernel's semantics exactly
        prog = compile_regex(self._pattern(node), self._where(node))
        x = inputs[0]
        flat = [fullmatch(prog, bytes(s)) for s in x.reshape(-1).tolist()]
        return [np.array(flat, dtype=bool).reshape(x.shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ctx.include("text.h")
        code, ranges = compile_regex(self._pattern(node), self._where(node)).arrays()
        x, y = node.inputs[0], node.outputs[0]
        w, n = width(x), len(code)
        prog = ctx.param(code, "re_prog")
        rng = ctx.param(ranges, "re_ranges")
        work = ctx.scratch(6 * n * 4)
        return (f"for (int64_t i = 0; i < {x.size}; ++i) {{\n"
                f"const uint8_t* s = {bytes_ptr(ctx, x)} + i * {w};\n"
                f"{ctx.ptr(y)}[i] = ml_re_fullmatch({prog}, {n}, {rng}, s, "
                f"ml_str_len(s, {w}), (int32_t*){work});\n}}")
