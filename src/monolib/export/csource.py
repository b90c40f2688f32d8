"""CSourceModule (type key ``"c"``): generated C that becomes the DSO at export.

TVM's ``CSourceModule``: the code generator's output as text plus the target it is
for. ``export_library`` compiles it into the library together with the embedded
container. To run before export (``monolib.compile(...)`` then ``GraphModule``),
the first function lookup builds a temporary ``.so`` in a temporary directory,
dlopens it, deletes the directory, and caches the loaded module.

Heavy imports (subprocess, tempfile) are deferred to the first build so that
importing ``monolib`` stays fast.

Split builds: the code generator marks each top-level function with the op function it
goes with (:data:`UNIT_MARK`, a C comment) and where the glue starts
(:data:`GLUE_MARK`). :func:`split_source` cuts such a file into op units (the common
top: prelude, kernel headers, helpers; then a share of the ops) and one glue unit (the
exported entry points, prototypes of the op functions), which the toolchain compiles in
parallel and caches one by one (:mod:`.objcache`). Op functions become hidden globals
(still ``noipa``: their code is what one file gives), the thread pool lives in the glue
unit (``threadpool.h``: ``ML_SPLIT_UNIT`` / ``ML_SPLIT_GLUE``), a top-level
``static _Thread_local`` variable is defined in the glue unit and declared elsewhere.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

from ..abi.names import C_SOURCE
from ..runtime.module import Module

__all__ = ["GLUE_MARK", "HELPERS_MARK", "SPLIT_MIN_CHARS", "UNIT_MARK", "CSourceModule",
           "split_source"]

logger = logging.getLogger(__name__)


#: Marks the function after it as going with op function ``{}`` ("": the glue).
UNIT_MARK = "/* @ml-unit {} */"
#: Marks the start of the glue (the op table and the exported entry points).
GLUE_MARK = "/* @ml-glue */"
#: Marks the end of the kernel headers (the model's own helpers follow).
HELPERS_MARK = "/* @ml-helpers */"
#: Below this many characters of op code a file is not split: the units' common top
#: (kernel headers) would be parsed once more for little to share out.
SPLIT_MIN_CHARS = 40_000
#: Kernel entry points compiled in units of their own (:func:`_entry_signature`),
#: shared by every model with the same headers through the object cache.
KERNEL_UNITS = True
#: Entry points with scalar parameters too (else only pointers).
KERNEL_SCALARS = True
_SCALAR_RE = re.compile(
    r"^(?:const\s+)?(?:u?int(?:8|16|32|64)_t|int|float|double|size_t|ml_\w+_fn)\s+\w+$")
#: Compile time of a character of kernel code against one of op code (a guess)
KERNEL_WEIGHT = 3

_UNIT_RE = re.compile(r"^/\* @ml-unit (\w*) \*/$", re.MULTILINE)
_TLS_RE = re.compile(r"^static (_Thread_local [^;=(]*;)", re.MULTILINE)
# Before the prelude of every unit: which side of a split build it is, and how a symbol
# shared between units but not exported is declared.
_UNIT_HEAD = """/* monolib: {what} of a build split into translation units (export/csource.py) */
#define {macro} 1
#if defined(_WIN32)
#define ML_UNIT_HIDDEN
#else
#define ML_UNIT_HIDDEN __attribute__((visibility("hidden")))
#endif
"""
# After the common top: op functions are reached from the glue unit's op table.
_OP_LINKAGE = """#undef ML_OP_FN
#if defined(__GNUC__) && !defined(__clang__)
#define ML_OP_FN __attribute__((noipa)) ML_UNIT_HIDDEN
#else
#define ML_OP_FN ML_UNIT_HIDDEN
#endif
"""
_OP_PROTO = "ML_OP_FN void {}(const uint8_t* restrict params, uint8_t* restrict arena);\n"
# A kernel function defined at the top level of a header: its name and where its body
# starts (the headers' style: the head from column 0, the closing brace at column 0).
_DEF_RE = re.compile(
    r"^(?:ML_\w+ +)*(?:static|__attribute__)[^;{}]*?\b(ml_\w+)\s*\([^;{}]*\{", re.MULTILINE)
_NAME_RE = re.compile(r"\b(ml_\w+)\b")
_SECTION_RE = re.compile(r"^/\* ---- ([\w.]+) ---- \*/$", re.MULTILINE)
_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_ID_RE = re.compile(r"\b[A-Za-z_]\w*\b")
_PP_RE = re.compile(r"^[ \t]*#[ \t]*(ifdef|ifndef|if|elif|else|endif)\b(?:[^\n]*\\\n)*[^\n]*",
                    re.MULTILINE)
# what a header defines besides functions: a macro, a typedef (``} name;`` or ``typedef
# ... name;``), a struct or enum tag, an array
_DEFINED_RE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+(\w+)|^[ \t]*\}[ \t]*(\w+)[ \t]*;"
    r"|^typedef\b[^;{]*?\b(\w+)\s*(?:\[[^\]]*\])?\s*;|\b(?:struct|enum)\s+(\w+)\s*\{"
    r"|^(?:static\s+)?(?:const\s+)?[\w ]+?\b(ml_\w+)\s*\[", re.MULTILINE)


def _params(text: str) -> list[str]:
    """The parameters of a C parameter list, split at its top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()] if cur.strip() else out


def _entry_signature(head: str, name: str) -> tuple[str, str, str] | None:
    """``(return type, parameters, arguments)`` of a kernel entry point whose head (up to
    its ``{``) is ``head``: a ``static``, not ``inline`` (those are meant to be inlined
    into the op), function taking pointers and, with :data:`KERNEL_SCALARS`, plain
    scalars and ``ml_*_fn`` function pointers; None for any other. Compiled in a unit of
    its own it cannot be cloned for one op's constants: measured no slower (bench/BUILD.md)
    and the outputs stay bit-identical."""
    before, _, rest = head.partition(name + "(")
    words = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)|\bML_\w+", " ", before).split()
    if "static" not in words or "inline" in words or not rest.rstrip().endswith("{"):
        return None
    if any(not re.fullmatch(r"[\w*]+", w) for w in words):  # a directive, a stray token
        return None
    ret = " ".join(w for w in words if w != "static")
    params = rest.rstrip()[:-1].rstrip()
    if not params.endswith(")") or not ret:
        return None
    params = params[:-1]
    names = []
    for p in _params(params):
        fn = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)
        m = fn or re.search(r"(\w+)\s*$", p)
        if m is None or ("*" not in p and not (KERNEL_SCALARS and _SCALAR_RE.match(p))):
            return None
        names.append(m.group(1))
    return (ret, params, ", ".join(names)) if names else None


def _kernel_units(common: str, texts: dict[str, str]) -> tuple[list[str], str, frozenset[str]]:
    """Units of the kernel entry points the ops call (:func:`_entry_signature`): one per
    header holding some, and the text that makes an op unit call them (its own copy of
    the kernel, unused, is never compiled); and the entry points' names.

    A unit is the same text for every model that calls into its header, so the object
    cache compiles it once for all of them: the host prelude, the headers it needs
    (:func:`_header_needs`) in one order, the header, and a hidden wrapper ``<name>_k``
    for each of the header's entry points, called or not. (Cutting the file at the
    header's end instead gave one text per set of headers before it: a CI run compiled
    ``gemm.h``, about 10 s, once per model.)"""
    helpers = common.find("\n" + HELPERS_MARK + "\n")
    start = _kernels_start(common)
    if helpers < 0 or not start:
        return [], "", frozenset()
    marks = list(_SECTION_RE.finditer(common, start, helpers + 1))
    ends = [m.start() for m in marks[1:]] + [helpers]
    sections = {m.group(1): common[m.start():end].strip("\n") + "\n"
                for m, end in zip(marks, ends)}
    needs = _header_needs(common[:start], sections)
    used = set().union(*(_NAME_RE.findall(t) for t in texts.values()))
    units, remap, names = [], [], []
    for header, text in sections.items():
        conds = _conditions(text)
        entries = [(m.group(1), *sig, conds(m.start())) for m in _DEF_RE.finditer(text)
                   if (sig := _entry_signature(m.group(0), m.group(1))) is not None]
        if not any(n in used for n, *_ in entries):
            continue
        wrap = "".join(
            f"{pre}ML_UNIT_HIDDEN {r} {n}_k({p}) {{ {'' if r == 'void' else 'return '}{n}({a}); }}"
            f"\n{post}" for n, r, p, a, (pre, post) in entries)
        body = "".join(sections[h] for h in _in_order(header, needs))
        units.append(_UNIT_HEAD.format(what="kernel unit", macro="ML_SPLIT_UNIT")
                     + common[:start] + body + text + "\n" + wrap)
        remap += [f"ML_UNIT_HIDDEN {r} {n}_k({p});\n#define {n} {n}_k\n"
                  for n, r, p, *_ in entries]
        names += [n for n, *_ in entries]
    return units, "".join(remap), frozenset(names)


def _conditions(text: str) -> Callable[[int], tuple[str, str]]:
    """For a header's text, a function of an offset in it giving the preprocessor lines
    that open, and those that close, the conditional branches the offset is in (an
    include guard aside): a wrapper placed after the header under them exists exactly
    when the function it calls does."""
    events = []  # (end of a directive, the open levels' lines after it)
    stack: list[list[str]] = []
    for m in _PP_RE.finditer(text):
        kind, line = m.group(1), m.group(0).strip()
        if kind in ("if", "ifdef", "ifndef"):
            name = line.split()[-1] if kind == "ifndef" else ""
            nxt = text[m.end():].lstrip("\n").split("\n", 1)[0].split()
            guard = nxt[:2] == ["#define", name] and len(nxt) == 2
            stack.append([] if guard else [line])
        elif kind in ("elif", "else") and stack and stack[-1]:
            stack[-1].append(line)
        elif kind == "endif" and stack:
            stack.pop()
        events.append((m.end(), [list(level) for level in stack]))

    def at(offset: int) -> tuple[str, str]:
        levels = next((lv for end, lv in reversed(events) if end <= offset), [])
        levels = [lv for lv in levels if lv]
        return ("".join("\n".join(lv) + "\n" for lv in levels),
                "#endif\n" * len(levels))

    return at


def _defined(text: str) -> set[str]:
    """Names a kernel header defines: functions, macros, types, struct and enum tags,
    arrays."""
    found = {n for m in _DEFINED_RE.finditer(text) for n in m.groups() if n}
    return found | {m.group(1) for m in _DEF_RE.finditer(text)}


def _header_needs(prelude: str, sections: dict[str, str]) -> dict[str, set[str]]:
    """For each pasted header (name -> its text, in the file's order), the earlier
    headers defining a name its code (comments aside) uses; the prelude's names are
    there for all."""
    base = _defined(prelude)
    defs = {h: _defined(t) - base for h, t in sections.items()}
    needs, before = {}, []
    for h, text in sections.items():
        used = set(_ID_RE.findall(_COMMENT_RE.sub(" ", text)))
        needs[h] = {d for d in before if defs[d] & used}
        before.append(h)
    return needs


def _in_order(header: str, needs: dict[str, set[str]]) -> list[str]:
    """The headers ``header`` needs, directly or not, each after those it needs, ties
    by name: one order whatever order a model pasted them in."""
    todo, seen = list(needs[header]), set()
    while todo:
        h = todo.pop()
        if h not in seen:
            seen.add(h)
            todo.extend(needs[h])
    order: list[str] = []
    while seen:
        h = min(d for d in seen if needs[d] <= set(order))
        order.append(h)
        seen.remove(h)
    return order


def _kernels_start(common: str) -> int:
    """Where the op kernels' headers start in the common top: after the host prelude
    (vmath, types, threadpool; all the glue unit needs), 0 when not found."""
    start = common.find("/* ---- threadpool.h ---- */")
    start = common.find("\n/* ---- ", start + 1) if start >= 0 else -1
    return max(start, 0)


def _kernel_graph(common: str) -> dict[str, tuple[int, set[str]]]:
    """Kernel functions of the headers after the thread pool (which a split build keeps
    in the glue unit): name -> (characters of its definition, the names it refers to)."""
    defs = {}
    for m in _DEF_RE.finditer(common, _kernels_start(common)):
        end = common.find("\n}", m.end())
        end = len(common) if end < 0 else end + 2
        defs[m.group(1)] = (end - m.start(), set(_NAME_RE.findall(common, m.end(), end)))
    return {k: (n, refs & defs.keys()) for k, (n, refs) in defs.items()}


def _share_out(common: str, texts: dict[str, str], parts: int,
               elsewhere: frozenset[str] = frozenset()) -> dict[str, int]:
    """Unit of each op (op function name -> its functions' text): ops that reach the
    same kernel function (gcc compiles it once per unit that calls it) go to the same
    unit; these groups are then placed largest first on the least loaded unit, a
    group's load its ops' text plus the kernels it reaches (not those compiled
    ``elsewhere``: the kernel units' entry points)."""
    # a kernel that calls an entry point compiled elsewhere reaches it through the kernel
    # unit's symbol: not a dependency that pins it to this op's unit
    graph = {k: (n, refs - elsewhere) for k, (n, refs) in _kernel_graph(common).items()
             if k not in elsewhere}
    group: dict[str, str] = {}  # union-find over op and kernel names

    def find(x: str) -> str:
        while group.setdefault(x, x) != x:
            group[x] = group[group[x]]
            x = group[x]
        return x

    reach: dict[str, set[str]] = {}
    for op, text in texts.items():
        seen, todo = set(), [n for n in _NAME_RE.findall(text) if n in graph]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(graph[n][1])
        reach[op] = seen
        for n in seen:
            group[find(n)] = find(op)
    members: dict[str, list[str]] = {}
    for op in texts:
        members.setdefault(find(op), []).append(op)
    loads = []
    for ops in members.values():
        kernels = set().union(*(reach[o] for o in ops))
        loads.append((sum(len(texts[o]) for o in ops)
                      + KERNEL_WEIGHT * sum(graph[k][0] for k in kernels), ops))
    bins, unit_of = [0] * parts, {}
    for load, ops in sorted(loads, key=lambda x: -x[0]):
        k = bins.index(min(bins))
        bins[k] += load
        unit_of.update((o, k) for o in ops)
    return unit_of


def split_source(source: str, parts: int, target: Any = None) -> list[str]:
    """Cut a marked generated C file into at most ``parts`` op units (one below
    :data:`SPLIT_MIN_CHARS` of op code), the kernel units (:func:`_kernel_units`) and
    one glue unit (last); ``[source]`` when it has no marks, ``parts`` < 2, or it would
    be one op unit and no kernel unit.

    Ops that reach the same kernel function go to the same unit (:func:`_share_out`); a
    unit holds its ops' functions in their order in the file. Compiled and linked
    together, the units give the code of the single file (op functions are ``noipa``
    in both; a kernel unit's entry points take only pointers).

    With a ``target``, the glue (or the one file) also gets the CPU check and level
    pick of :func:`monolib.runtime.isa.glue_source`, and the glue unit is compiled at
    the architecture's baseline (:data:`~.targets.GLUE_LEVEL`). A portable target
    (``-mcpu=portable``) is always split: every op and kernel unit comes once per level
    (:func:`_level_units`) and the glue calls the picked level's op functions.

    Parameters
    ----------
    source : str
        The generated C (:data:`UNIT_MARK` and :data:`GLUE_MARK` in it).
    parts : int
        Most op units (e.g. the build's parallel jobs).
    target : Target or str, optional
        The target the units are compiled for.

    Returns
    -------
    list of str
        The translation units, the glue unit last.
    """
    from .targets import GLUE_LEVEL, LEVEL_MARK, Target

    target = None if target is None else Target(target)
    levels = target.levels if target is not None else ("",)
    isa_c = ""
    if target is not None:
        from ..runtime import isa
        from .toolchain import isa_record

        record = isa_record(target)
        isa_c = isa.glue_source(record)
    cut = _cut(source, parts, force=len(levels) > 1)
    if cut is None:  # (a portable one without marks, hand-written: its baseline only)
        if len(levels) > 1:
            isa_c = isa.glue_source({**record, "levels": list(levels[:1])})
        return [source + ("\n" + isa_c if isa_c else "")]
    ops, kernels, remap, names, glue_top, glue_rest = cut
    if len(levels) > 1:
        units = _level_units(ops, kernels, remap, names, levels)
        protos = isa_c + "".join(_pick_op(n, len(levels)) for n in names[0])
        head = LEVEL_MARK.format(GLUE_LEVEL) + "\n"
    else:
        units = [u + remap + t for u, t in ops] + kernels
        protos = isa_c + "".join(_OP_PROTO.format(n) for n in names[0])
        head = LEVEL_MARK.format(GLUE_LEVEL) + "\n" if target is not None else ""
    return [*units, head + glue_top + protos + glue_rest]


def _pick_op(name: str, levels: int) -> str:
    """The glue's op function ``name`` of a portable build: a call of the picked level's
    (``ml_isa_level``, set once at load by :func:`monolib.runtime.isa.glue_source`)."""
    sig = "(const uint8_t* restrict params, uint8_t* restrict arena)"
    protos = "".join(f"ML_OP_FN void {name}_L{k}{sig};\n" for k in range(levels))
    calls = "".join(f"  {'else ' if k < levels - 1 else ''}"
                    f"{f'if (ml_isa_level == {k}) ' if k else ''}{name}_L{k}(params, arena);\n"
                    for k in reversed(range(levels)))
    return f"{protos}static void {name}{sig} {{\n{calls}}}\n"


def _level_units(ops: list[tuple[str, str]], kernels: list[str], remap: str,
                 names: tuple[list[str], list[str]], levels: tuple[str, ...]) -> list[str]:
    """Every op and kernel unit once per level, first line its level
    (:data:`~.targets.LEVEL_MARK`: the toolchain compiles it with that level's flags), its
    shared hidden symbols (op functions, kernel wrappers ``<name>_k``) renamed
    ``<name>_L<k>`` by macros before any code, so that the levels link side by side."""
    from .targets import LEVEL_MARK

    if len(levels) > 3:
        raise ValueError(f"at most 3 levels are picked from, got {levels}")
    op_names, wrappers = names
    out = []
    for k, level in enumerate(levels):
        mark = LEVEL_MARK.format(level) + "\n"
        rename = "".join(f"#define {n} {n}_L{k}\n" for n in [*op_names, *wrappers])
        out += [mark + rename + u + remap + t for u, t in ops]
        for unit in kernels:  # only its own wrappers: the same text for every model
            own = [w for w in wrappers if f" {w}(" in unit]
            out.append(mark + "".join(f"#define {n} {n}_L{k}\n" for n in own) + unit)
    return out


def _cut(source: str, parts: int, force: bool = False):
    """The pieces of :func:`split_source`: ``(op units as (head, ops text), kernel units,
    remap text, (op function names, kernel wrapper names), glue top, glue rest)``, or
    None for no split (``force``: split even a small file, as one op unit)."""
    glue_at = source.find("\n" + GLUE_MARK + "\n")
    marks = list(_UNIT_RE.finditer(source, 0, max(glue_at, 0)))
    if (parts < 2 and not force) or glue_at < 0 or not marks:
        return None
    ends = [m.start() for m in marks[1:]] + [glue_at]
    pieces = [(m.group(1), m.start(), end) for m, end in zip(marks, ends)]
    texts: dict[str, str] = {}
    for owner, a, b in pieces:
        if owner:
            texts[owner] = texts.get(owner, "") + source[a:b]
    common = source[: marks[0].start()]
    kernels, remap, entries = _kernel_units(common, texts) if KERNEL_UNITS else ([], "", ())
    parts = max(parts, 1)
    if sum(map(len, texts.values())) < SPLIT_MIN_CHARS or len(texts) < 2 or parts < 2:
        unit_of = dict.fromkeys(texts, 0)  # small: one op unit
    else:
        unit_of = _share_out(common, texts, parts, frozenset(entries))
    if len(set(unit_of.values())) < 2 and not kernels and not force:
        return None  # one op unit and no kernel unit: the file as it is
    units = [[] for _ in range(parts)]
    glue = []
    for owner, a, b in pieces:
        (units[unit_of[owner]] if owner else glue).append(source[a:b])
    op_common = _TLS_RE.sub(r"extern ML_UNIT_HIDDEN \1", common)
    ops = [(_UNIT_HEAD.format(what=f"op unit {k + 1}", macro="ML_SPLIT_UNIT") + op_common
            + _OP_LINKAGE, "".join(u)) for k, u in enumerate(units) if u]
    # the glue: the host prelude (no op kernels) and the thread-local variables
    cut = _kernels_start(common) or len(common)
    shared = "".join(m.group(0) + "\n" for m in _TLS_RE.finditer(common, cut))
    top = (_UNIT_HEAD.format(what="glue unit", macro="ML_SPLIT_GLUE")
           + _TLS_RE.sub(r"ML_UNIT_HIDDEN \1", common[:cut] + "\n" + shared) + _OP_LINKAGE)
    names = (list(texts), sorted(f"{n}_k" for n in entries))
    return ops, kernels, remap, names, top, "".join(glue) + source[glue_at + 1:]


class CSourceModule(Module):
    """Generated C source plus its target; compiled into the library at export.

    Parameters
    ----------
    source : str
        One self-contained C file implementing the ABI of ``docs/ARCHITECTURE.md``
        (``monolib_run``, ``monolib_run_op``, ``monolib_num_ops``).
    target : str or Target
        Target string (``"c"``, ``"c -mtriple=aarch64-linux-gnu"``...).

    Raises
    ------
    TargetError
        The target string is invalid.
    """

    type_key = C_SOURCE
    exports_to_library = True

    def __init__(self, source: str, target: Any = "c") -> None:
        from .targets import Target

        super().__init__()
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        self.source = source
        self.target = Target(target)
        self._dso = None
        self._lock = threading.Lock()

    def get_source(self, fmt: str = "c") -> str:
        """The C source text."""
        return self.source

    def build(self) -> Module:
        """The temporary DSO module built from the source (built once, then cached).

        Raises
        ------
        ToolchainError
            No C compiler, or it failed.
        ExportError
            The target is not the host (the library could not run here).
        """
        with self._lock:
            if self._dso is None:
                self._dso = _build_temporary(self)
            return self._dso

    def _get_own_function(self, name: str) -> Callable | None:
        return self.build()._get_own_function(name)

    def save_to_bytes(self) -> bytes:
        """The source as UTF-8 (used only if a tree is packed without compiling)."""
        return self.source.encode("utf-8")

    def __repr__(self) -> str:
        return f"CSourceModule(target={str(self.target)!r}, {len(self.source)} chars)"


def _build_temporary(mod: CSourceModule) -> Module:
    import os
    import tempfile

    from ..errors import ExportError
    from ..runtime.dso import DSOModule, open_library
    from .objcache import default_cache
    from .toolchain import build_jobs, compile_objects, link_shared

    if not mod.target.is_host:
        raise ExportError(
            f"cannot run code for target {mod.target} on this host; "
            "export_library it and run it on the target"
        )
    with tempfile.TemporaryDirectory(prefix="monolib-build-") as tmp:
        units = split_source(mod.source, build_jobs(), mod.target)
        srcs = [os.path.join(tmp, f"lib_{k}.c") for k in range(len(units))]
        for src, text in zip(srcs, units):
            with open(src, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "lib.so")
        objects = compile_objects(srcs, mod.target, cwd=tmp, jobs=build_jobs(),
                                  cache=default_cache())
        link_shared(objects, out, mod.target, cwd=tmp)
        cdll = open_library(out)  # the mapping outlives the deleted file
    logger.debug("built temporary library for %r", mod)
    return DSOModule(cdll, f"<temporary build of {mod!r}>")
