"""A pattern of RE2's syntax compiled at compile time to a Thompson NFA program that
``text.h``'s ``ml_re_fullmatch`` runs (linear in the text; no backtracking).

The pattern is parsed with Python's ``re`` parser, whose syntax agrees with RE2's on
literals, ``.``, classes, ``\\d \\w \\s`` (and negations), alternation, groups,
``* + ? {m,n}`` (lazy or greedy: the same for a yes/no answer), ``^ $ \\A \\Z \\b \\B``.
The classes take RE2's ASCII meaning (``\\w`` = ``[0-9A-Za-z_]``, ``\\d`` = ``[0-9]``,
``\\s`` = ``[\\t\\n\\f\\r ]``); ``.`` is any code point but ``\\n``; ``^``/``$`` are the
text's ends. Refused, naming the feature: backreferences, lookaround, conditionals,
atomic groups and possessive repeats (RE2 has none), and flags (``(?i)``...).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import numpy as np

from ....errors import CompileError

try:  # Python 3.11+
    from re import _constants as C
    from re import _parser as P
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

__all__ = ["Program", "compile_regex"]

logger = logging.getLogger(__name__)

# instruction codes: text.h's ML_RE_* enum, in its order
CHAR, ANY, CLASS, NCLASS, SPLIT, JMP, ASSERT, MATCH = range(8)
AT_BEGIN, AT_END, AT_WORD, AT_NOT_WORD = range(4)
MAX_CP = 0x10FFFF
#: the largest program compiled (counted repeats expand their body)
MAX_INSTRUCTIONS = 100_000

_DIGIT = [(48, 57)]
_WORD = [(48, 57), (65, 90), (95, 95), (97, 122)]
_SPACE = [(9, 10), (12, 13), (32, 32)]
_CATEGORIES = {
    C.CATEGORY_DIGIT: (_DIGIT, False), C.CATEGORY_NOT_DIGIT: (_DIGIT, True),
    C.CATEGORY_WORD: (_WORD, False), C.CATEGORY_NOT_WORD: (_WORD, True),
    C.CATEGORY_SPACE: (_SPACE, False), C.CATEGORY_NOT_SPACE: (_SPACE, True),
}
_AT = {C.AT_BEGINNING: AT_BEGIN, C.AT_BEGINNING_STRING: AT_BEGIN, C.AT_END: AT_END,
       C.AT_END_STRING: AT_END, C.AT_BOUNDARY: AT_WORD, C.AT_NON_BOUNDARY: AT_NOT_WORD}
_REFUSED = {"GROUPREF": "backreferences", "GROUPREF_EXISTS": "conditional groups",
            "ASSERT": "lookahead/lookbehind", "ASSERT_NOT": "lookahead/lookbehind",
            "ATOMIC_GROUP": "atomic groups", "POSSESSIVE_REPEAT": "possessive repeats"}


def _complement(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for lo, hi in sorted(ranges):
        if lo > at:
            out.append((at, lo - 1))
        at = max(at, hi + 1)
    if at <= MAX_CP:
        out.append((at, MAX_CP))
    return out


class Program:
    """The NFA: ``code`` (int32 ``[n, 3]``: op, a, b) and ``ranges`` (int32 ``[m, 2]``:
    inclusive code point ranges the CLASS instructions index)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.code: list[list[int]] = []
        self.ranges: list[tuple[int, int]] = []

    def emit(self, op: int, a: int = 0, b: int = 0) -> int:
        """Append instruction ``(op, a, b)``; its index.

        Raises
        ------
        CompileError
            The program would exceed :data:`MAX_INSTRUCTIONS`.
        """
        if len(self.code) >= MAX_INSTRUCTIONS:
            raise CompileError(f"{self.where}: the pattern compiles to more than "
                               f"{MAX_INSTRUCTIONS} NFA instructions (counted repeats)")
        self.code.append([op, a, b])
        return len(self.code) - 1

    def cls(self, ranges: Sequence[tuple[int, int]], negate: bool) -> None:
        """Append a class instruction over code point ``ranges`` (inclusive)."""
        start = len(self.ranges)
        self.ranges.extend(ranges)
        self.emit(NCLASS if negate else CLASS, start, len(self.ranges))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(code int32 [n, 3], ranges int32 [m, 2])`` for the params blob."""
        ranges = self.ranges or [(1, 0)]  # never empty (a params array of 0 bytes)
        return (np.asarray(self.code, np.int32).reshape(-1, 3),
                np.asarray(ranges, np.int32).reshape(-1, 2))

    # -- the parse tree -> code ------------------------------------------------------
    def seq(self, items) -> None:
        """Compile a sequence of parse-tree items (``re._parser`` ``(op, arg)``)."""
        for op, av in items:
            self.item(op, av)

    def item(self, op, av) -> None:
        """Compile one parse-tree item.

        Raises
        ------
        CompileError
            A feature RE2 lacks or this compiler does not take, named.
        """
        name = str(op)
        if op is C.LITERAL:
            self.emit(CHAR, av)
        elif op is C.NOT_LITERAL:
            self.cls([(av, av)], True)
        elif op is C.ANY:
            self.emit(ANY)
        elif op is C.IN:
            self.in_(av)
        elif op is C.AT:
            if av not in _AT:
                raise CompileError(f"{self.where}: anchor {av} is not supported")
            self.emit(ASSERT, _AT[av])
        elif op is C.SUBPATTERN:
            _group, add, remove, body = av
            if add or remove:
                raise CompileError(f"{self.where}: group flags are not supported")
            self.seq(body)
        elif op is C.BRANCH:
            self.branch(av[1])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            self.repeat(*av)
        else:
            what = _REFUSED.get(name, name.lower())
            raise CompileError(f"{self.where}: {what} are not supported (RE2 syntax, "
                               "compiled to C at compile time)")

    def in_(self, items) -> None:
        """Compile a class ``[...]`` (literals, ranges, ``\\d \\w \\s`` and negations)."""
        ranges: list[tuple[int, int]] = []
        negate = False
        for op, av in items:
            if op is C.NEGATE:
                negate = True
            elif op is C.LITERAL:
                ranges.append((av, av))
            elif op is C.RANGE:
                ranges.append(tuple(av))
            elif op is C.CATEGORY and av in _CATEGORIES:
                rs, neg = _CATEGORIES[av]
                ranges.extend(_complement(rs) if neg else rs)
            else:
                raise CompileError(f"{self.where}: class item {op} {av} is not supported")
        self.cls(ranges, negate)

    def branch(self, alternatives) -> None:
        """Compile ``a|b|...``: a chain of SPLITs, each alternative jumping to the end."""
        jumps = []
        for k, alt in enumerate(alternatives):
            if k < len(alternatives) - 1:
                split = self.emit(SPLIT, len(self.code) + 1, 0)
                self.seq(alt)
                jumps.append(self.emit(JMP))
                self.code[split][2] = len(self.code)
            else:
                self.seq(alt)
        for j in jumps:
            self.code[j][1] = len(self.code)

    def repeat(self, lo: int, hi: int, body) -> None:
        """Compile ``body{lo,hi}``: ``lo`` copies, then a loop (unbounded) or
        ``hi - lo`` optional copies."""
        for _ in range(lo):
            self.seq(body)
        if hi == C.MAXREPEAT:
            loop = self.emit(SPLIT, len(self.code) + 1, 0)
            self.seq(body)
            self.emit(JMP, loop)
            self.code[loop][2] = len(self.code)
            return
        splits = []
        for _ in range(hi - lo):
            splits.append(self.emit(SPLIT, len(self.code) + 1, 0))
            self.seq(body)
        for s in splits:
            self.code[s][2] = len(self.code)


def compile_regex(pattern: str, where: str) -> Program:
    """The NFA program of ``pattern`` (matched against a whole string).

    Raises
    ------
    CompileError
        The pattern does not parse, uses a refused feature or flag (named), or
        compiles to more than :data:`MAX_INSTRUCTIONS` instructions.
    """
    try:
        tree = P.parse(pattern)
    except re.error as exc:
        raise CompileError(f"{where}: pattern {pattern!r} does not parse: {exc}") from None
    if tree.state.flags & ~int(re.UNICODE):
        raise CompileError(f"{where}: pattern {pattern!r}: flags ((?i), (?s)...) are not "
                           "supported")
    prog = Program(where)
    prog.seq(tree)
    prog.emit(MATCH)
    return prog
