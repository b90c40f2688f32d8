"""StringNormalizer (ONNX 10): drop stopwords, change case.

X is ``[C]`` or ``[1, C]`` strings; Y has the same rank and width, ``C'`` the strings
that are not stopwords (ONNX Runtime's kernel: when none is left, Y is one empty
string, ``[1]`` / ``[1, 1]``). With stopwords and a run-time X, ``C'`` is a computed
dim (issue 13) written by the kernel. Case change (``LOWER``/``UPPER``) and the
case-insensitive stopword match (``is_case_sensitive=0``) act on ASCII letters only:
other UTF-8 characters are copied as they are, at any ``locale`` (ONNX Runtime at
``locale="C"``; at a UTF-8 locale it also changes non-ASCII letters, "é" -> "É"), so a
string keeps its byte length and its slot width.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ...symbolic import is_one
from ..base import EmitContext, OpDef, OutType, register
from ..tensor._computed import count_dim, is_runtime, upper
from ._common import byte_param, bytes_ptr, require_strings, width
from ....runtime.strings import to_utf8

__all__ = ["StringNormalizer"]

logger = logging.getLogger(__name__)

_CASE = {"NONE": "", "LOWER": "ml_ascii_lower", "UPPER": "ml_ascii_upper"}


@register
class StringNormalizer(OpDef):
    """ONNX ``StringNormalizer`` (10): X strings ``[C]`` or ``[1, C]`` -> Y, the
    non-stopwords with their case changed (ASCII letters; see the module docstring).

    Raises
    ------
    ShapeError
        X is not a string tensor of shape ``[C]`` or ``[1, C]``.
    CompileError
        ``case_change_action`` is not NONE, LOWER or UPPER.
    """

    op_type, since_version = "StringNormalizer", 10
    defaults = {"stopwords": None, "locale": ""}

    def _check(self, node: Node) -> tuple[str, list[bytes], bool]:
        require_strings(node, (0,))
        x = node.inputs[0]
        if not (len(x.shape) == 1 or (len(x.shape) == 2 and is_one(x.shape[0]))):
            raise ShapeError(f"StringNormalizer (node {node.name!r}): X must be [C] or "
                             f"[1, C], got {list(x.shape)}")
        action = node.attrs.get("case_change_action", "NONE")
        if action not in _CASE:
            from ....errors import CompileError

            raise CompileError(f"StringNormalizer (node {node.name!r}): case_change_action "
                               f"{action!r} is not NONE, LOWER or UPPER")
        stop = [s.encode("utf-8") if isinstance(s, str) else bytes(s)
                for s in (self.attr(node, "stopwords") or [])]
        return action, stop, bool(node.attrs.get("is_case_sensitive", 0))

    def infer(self, node: Node) -> list[OutType]:
        _, stop, _ = self._check(node)
        x = node.inputs[0]
        if not stop:
            return [(tuple(x.shape), x.dtype)]
        if not is_runtime(x):
            return [(self.reference(node, [x.const])[0].shape, x.dtype)]
        # at least 1: with none left, Y is one empty string
        kept = count_dim(node, 0, len(x.shape) - 1, "kept", max(upper(x.shape[-1]), 1))
        return [((*x.shape[:-1], kept), x.dtype)]

    def reference(self, node: Node, inputs):
        action, stop, sensitive = self._check(node)
        x = inputs[0]
        fold = (lambda b: b) if sensitive else bytes.lower
        stops = {fold(s) for s in stop}
        kept = [bytes(s) for s in x.reshape(-1).tolist() if fold(bytes(s)) not in stops]
        if stop and not kept:
            kept = [b""]
        if action == "LOWER":
            kept = [s.lower() for s in kept]  # bytes: ASCII letters only
        elif action == "UPPER":
            kept = [s.upper() for s in kept]
        shape = (len(kept),) if x.ndim == 1 else (1, len(kept))
        return [to_utf8(kept, x.dtype.itemsize).reshape(shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ctx.include("text.h")
        action, stop, sensitive = self._check(node)
        x, y = node.inputs[0], node.outputs[0]
        w, n = width(x), x.size
        px, py = bytes_ptr(ctx, x), bytes_ptr(ctx, y, const=False)
        change = _CASE[action]
        copy = (f"for (int64_t j = 0; j < {w}; ++j) r[j] = {change}(s[j]);" if change
                else f"memcpy(r, s, {w});")
        if not stop:
            return (f"for (int64_t i = 0; i < {n}; ++i) {{\n"
                    f"const uint8_t* s = {px} + i * {w}; uint8_t* r = {py} + i * {w};\n"
                    f"{copy}\n}}")
        words = to_utf8(stop)
        sw = words.dtype.itemsize
        pw = byte_param(ctx, words, "stopwords")
        eq = "ml_str_eq_nocase" if not sensitive else "ml_str_eq"
        kept = y.shape[-1]
        set_count = ctx.set_symbol(kept, "kept") if not isinstance(kept, int) else ""
        return (f"{{\nint64_t kept = 0;\n"
                f"for (int64_t i = 0; i < {n}; ++i) {{\n"
                f"const uint8_t* s = {px} + i * {w}; int64_t ls = ml_str_len(s, {w}); int stop = 0;\n"
                f"for (int64_t k = 0; k < {len(stop)} && !stop; ++k) "
                f"stop = {eq}(s, ls, {pw} + k * {sw}, ml_str_len({pw} + k * {sw}, {sw}));\n"
                f"if (stop) continue;\n"
                f"uint8_t* r = {py} + kept * {w};\n{copy}\n++kept;\n}}\n"
                f"if (kept == 0) {{ memset({py}, 0, {w}); kept = 1; }}\n"
                f"{set_count}\n}}")
