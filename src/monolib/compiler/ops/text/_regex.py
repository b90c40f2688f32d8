"""A pattern of RE2's syntax compiled at compile time to a Thompson NFA program that
``text.h``'s ``ml_re_fullmatch`` runs (linear in the text; no backtracking).

The pattern is parsed with Python's ``re`` parser, whose syntax agrees with RE2's on
literals, ``.``, classes, ``\\d \\w \\s`` (and negations), alternation, groups,
``* + ? {m,n}`` (lazy or greedy: the same for a yes/no answer), ``^ $ \\A \\b \\B``;
RE2's ``\\z`` and POSIX classes (``[[:alpha:]]``, ``[[:^digit:]]``) are translated
first. The classes take RE2's ASCII meaning (``\\w`` = ``[0-9A-Za-z_]``, ``\\d`` =
``[0-9]``, ``\\s`` = ``[\\t\\n\\f\\r ]``); ``.`` is any code point but ``\\n``;
``^``/``$`` are the text's ends. Flags ``i`` (Unicode simple case folding, as RE2:
``k`` matches ``K`` and the Kelvin sign) and ``s`` (``.`` matches ``\\n``), global or
scoped (``(?i:...)``). Refused, naming the feature: backreferences, lookaround,
conditionals, atomic groups and possessive repeats (RE2 has none), flags ``m`` and
``x``, RE2's ``\\pN``/``\\C``/``\\Q..\\E`` (Python's parser has no such syntax).
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
import warnings
from collections.abc import Sequence

import numpy as np

from ....errors import CompileError

try:  # Python 3.11+
    from re import _constants as C
    from re import _parser as P
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as C  # type: ignore[no-redef]
    import sre_parse as P  # type: ignore[no-redef]

__all__ = ["Program", "compile_regex", "fullmatch", "translate"]

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

    def __init__(self, where: str, flags: int = 0) -> None:
        self.where = where
        self.code: list[list[int]] = []
        self.ranges: list[tuple[int, int]] = []
        self.flags = _check_flags(flags, where)

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
        icase = bool(self.flags & re.IGNORECASE)
        if op is C.LITERAL:
            if icase and av in _orbits():
                self.cls([(c, c) for c in _orbits()[av]], False)
            else:
                self.emit(CHAR, av)
        elif op is C.NOT_LITERAL:
            self.cls([(c, c) for c in (_orbits().get(av, (av,)) if icase else (av,))], True)
        elif op is C.ANY:
            if self.flags & re.DOTALL:
                self.cls([(0, MAX_CP)], False)
            else:
                self.emit(ANY)
        elif op is C.IN:
            self.in_(av)
        elif op is C.AT:
            if av not in _AT:
                raise CompileError(f"{self.where}: anchor {av} is not supported")
            self.emit(ASSERT, _AT[av])
        elif op is C.SUBPATTERN:
            _group, add, remove, body = av
            saved = self.flags
            self.flags = _check_flags((self.flags | add) & ~remove, self.where)
            self.seq(body)
            self.flags = saved
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
        if self.flags & re.IGNORECASE:
            ranges = ranges + _fold_ranges(ranges)
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


def _check_flags(flags: int, where: str) -> int:
    """``flags`` less UNICODE (Python's default for str patterns).

    Raises
    ------
    CompileError
        A flag other than ``i`` and ``s``.
    """
    flags &= ~int(re.UNICODE)
    extra = flags & ~int(re.IGNORECASE | re.DOTALL)
    if extra:
        names = [f.name for f in re.RegexFlag if f & extra] or [str(extra)]
        raise CompileError(f"{where}: flag(s) {', '.join(names)} are not supported "
                           "(only (?i) and (?s))")
    return flags


@functools.cache
def _orbits() -> dict[int, tuple[int, ...]]:
    """Code point -> the code points equal to it under simple case folding (each
    cased code point of planes 0 and 1; its single-code-point lower and upper case,
    closed transitively: s, S and U+017F long s are one orbit)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for c in range(0x20000):
        ch = chr(c)
        for other in (ch.lower(), ch.upper()):
            if len(other) == 1 and ord(other) != c:
                a, b = find(c), find(ord(other))
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for c in list(parent):
        groups.setdefault(find(c), []).append(c)
    out = {}
    for root, members in groups.items():
        orbit = tuple(sorted({root, *members}))
        for c in orbit:
            out[c] = orbit
    return out


@functools.cache
def _cased() -> list[int]:
    return sorted(_orbits())


def _fold_ranges(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The case variants of the cased code points in ``ranges``."""
    cased, orbits, out = _cased(), _orbits(), set()
    for lo, hi in ranges:
        for c in cased[bisect.bisect_left(cased, lo):bisect.bisect_right(cased, hi)]:
            out.update(orbits[c])
    return [(c, c) for c in sorted(out)]


_POSIX = {
    "alnum": [(48, 57), (65, 90), (97, 122)], "alpha": [(65, 90), (97, 122)],
    "ascii": [(0, 127)], "blank": [(9, 9), (32, 32)], "cntrl": [(0, 31), (127, 127)],
    "digit": [(48, 57)], "graph": [(33, 126)], "lower": [(97, 122)], "print": [(32, 126)],
    "punct": [(33, 47), (58, 64), (91, 96), (123, 126)], "space": [(9, 13), (32, 32)],
    "upper": [(65, 90)], "word": [(48, 57), (65, 90), (95, 95), (97, 122)],
    "xdigit": [(48, 57), (65, 70), (97, 102)],
}


def translate(pattern: str, where: str) -> str:
    """RE2 syntax Python's parser lacks, rewritten: ``\\z`` (end of text) as
    ``\\Z``, POSIX classes ``[:name:]``/``[:^name:]`` inside brackets as ranges.

    Raises
    ------
    CompileError
        An unknown or unterminated POSIX class.
    """
    out, i, n, in_class = [], 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            esc = pattern[i:i + 2]
            out.append("\\Z" if esc == "\\z" and not in_class else esc)
            i += 2
        elif in_class and pattern.startswith("[:", i):
            j = pattern.find(":]", i + 2)
            name = pattern[i + 2:j] if j > 0 else ""
            rs = _POSIX.get(name.lstrip("^"))
            if rs is None:
                raise CompileError(f"{where}: POSIX class {pattern[i:j + 2]!r} is not one of "
                                   f"{sorted(_POSIX)}")
            rs = _complement(rs) if name.startswith("^") else rs
            out.append("".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in rs))
            i = j + 2
        elif in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
        elif c == "[":
            in_class = True
            k = i + 1 + (pattern[i + 1:i + 2] == "^")
            k += pattern[k:k + 1] == "]"  # a "]" first in the class is a literal
            out.append(pattern[i:k])
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _code_points(text: bytes) -> list[int]:
    """``text``'s code points as ``ml_utf8_next`` reads them (an invalid byte is
    U+FFFD, one byte long)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        size = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else \
            4 if c >> 3 == 30 else 0
        tail = text[i + 1:i + size]
        if size == 0 or i + size > n or any(b & 0xC0 != 0x80 for b in tail):
            out.append(0xFFFD)
            i += 1
            continue
        cp = c if size == 1 else c & (0x7F >> size)
        for b in tail:
            cp = cp << 6 | (b & 0x3F)
        out.append(cp)
        i += size
    return out


def fullmatch(prog: "Program", text: bytes) -> bool:
    """``ml_re_fullmatch`` in Python (the op's NumPy reference): whether the whole
    of ``text`` matches ``prog``."""
    code, ranges = prog.code, prog.ranges
    cps = _code_points(text)
    n = len(cps)

    def word(c: int | None) -> bool:
        return c is not None and (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95)

    def closure(pcs: list[int], k: int) -> set[int]:
        prev, nxt = (cps[k - 1] if k else None), (cps[k] if k < n else None)
        seen, stack, out = set(), list(pcs), set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            op, a, b = code[p]
            if op == JMP:
                stack.append(a)
            elif op == SPLIT:
                stack += [b, a]
            elif op == ASSERT:
                ok = (k == 0 if a == AT_BEGIN else k == n if a == AT_END
                      else (word(prev) != word(nxt)) == (a == AT_WORD))
                if ok:
                    stack.append(p + 1)
            else:
                out.add(p)
        return out

    cur = closure([0], 0)
    for k, c in enumerate(cps):
        hits = []
        for p in cur:
            op, a, b = code[p]
            if op == CHAR:
                hit = c == a
            elif op == ANY:
                hit = c != 10
            elif op in (CLASS, NCLASS):
                hit = any(lo <= c <= hi for lo, hi in ranges[a:b]) == (op == CLASS)
            else:
                hit = False
            if hit:
                hits.append(p + 1)
        cur = closure(hits, k + 1)
        if not cur:
            return False
    return any(code[p][0] == MATCH for p in cur)


def compile_regex(pattern: str, where: str) -> Program:
    """The NFA program of ``pattern`` (matched against a whole string).

    Raises
    ------
    CompileError
        The pattern does not parse, uses a refused feature or flag (named), or
        compiles to more than :data:`MAX_INSTRUCTIONS` instructions.
    """
    try:
        with warnings.catch_warnings():  # "[" in a class: a literal, as in RE2
            warnings.simplefilter("ignore", FutureWarning)
            tree = P.parse(translate(pattern, where))
    except re.error as exc:
        raise CompileError(f"{where}: pattern {pattern!r} does not parse: {exc}") from None
    prog = Program(where, tree.state.flags)
    prog.seq(tree)
    prog.emit(MATCH)
    return prog
