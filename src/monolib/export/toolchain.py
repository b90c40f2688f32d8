"""Find the C compiler for a target and run it (compile + link a shared library).

Host: ``$CC`` if set, else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``.
Cross (``-mtriple``): ``$CC``, else ``<triple>-gcc``, else zig's C compiler
(``python -m ziglang cc -target <triple>`` from PyPI ``ziglang``, or ``zig`` on PATH).
WebAssembly (``-mtriple=wasm32-wasi``): zig's C compiler only (``-target wasm32-wasi``:
clang with wasi-libc; ``$CC``, a host compiler, is not used), see docs/wasm.md.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence

from ..errors import ToolchainError
from ..runtime import isa
from .targets import LEVEL_MARK, Target

__all__ = [
    "build_jobs", "compile_objects", "cpu_flags", "find_compiler", "isa_record", "isa_sections",
    "link_shared", "run_tool", "unit_level",
]

logger = logging.getLogger(__name__)

HOST_CANDIDATES = ("cc", "gcc", "clang")
# Target OS -> flags that make a shared library of the generated C. ELF: no executable
# stack. PE: export every global (the C functions and the container symbols).
LINK_FLAGS = {
    "linux": ["-fPIC", "-shared", "-pthread", "-Wl,-z,noexecstack"],  # -pthread: older glibc
    "macos": ["-fPIC", "-shared"],
    "windows": ["-shared", "-Wl,--export-all-symbols"],
    # a WASI reactor (no main; the host calls _initialize, then the exports), a 1 MiB
    # stack (zig places it first: an overflow traps below address 0 instead of
    # overwriting data), no debug sections (wasi-libc's would be most of a small
    # model's file)
    "wasi": ["-mexec-model=reactor", "-Wl,-z,stack-size=1048576", "-Wl,--strip-all"],
}
#: zig's spelling of the WebAssembly triples a target takes (wasm32-unknown-wasi...).
ZIG_WASM_TRIPLE = "wasm32-wasi"
#: Seconds a compiler run may take before it is considered hung.
TIMEOUT_S = 1800


def _from_env() -> list[str] | None:
    cc = os.environ.get("CC", "").strip()
    if not cc:
        return None
    cmd = shlex.split(cc)
    if shutil.which(cmd[0]) is None:
        raise ToolchainError(
            f"CC={cc!r}: {cmd[0]!r} not found on PATH; fix CC or unset it "
            "(then cc/gcc/clang is used; install one: apt-get install gcc)"
        )
    return cmd


def _zig(triple: str) -> list[str] | None:
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc", "-target", triple]
    if shutil.which("zig"):
        return ["zig", "cc", "-target", triple]
    return None


def find_compiler(target: Target | str = "c") -> list[str]:
    """The compiler command (argv prefix) for ``target``.

    Raises
    ------
    ToolchainError
        None found; the message says what to install (``apt-get install gcc``,
        ``pip install ziglang`` for cross targets).
    """
    target = Target(target)
    if target.is_wasm:  # a host $CC cannot build for WASI: zig brings clang and wasi-libc
        cmd = _zig(ZIG_WASM_TRIPLE)
        if cmd:
            return cmd
        raise ToolchainError(
            f"no WebAssembly C compiler for {target.mtriple!r}: monolib builds .wasm with "
            "zig's C toolchain (pip install ziglang, or monolib[wasm])"
        )
    cmd = _from_env()
    if cmd:
        return cmd
    if target.is_host:
        for name in HOST_CANDIDATES:
            if shutil.which(name):
                return [name]
        raise ToolchainError(
            "no C compiler found (tried $CC, " + ", ".join(HOST_CANDIDATES) + "): "
            "monolib compiles the generated C with the system compiler; install one "
            "(Debian/Ubuntu: apt-get install gcc; macOS: xcode-select --install)"
        )
    triple = target.mtriple
    if shutil.which(f"{triple}-gcc"):
        return [f"{triple}-gcc"]
    cmd = _zig(triple)
    if cmd:
        return cmd
    raise ToolchainError(
        f"no C cross compiler for {triple!r} (tried $CC, {triple}-gcc, zig): install "
        f"one (pip install ziglang, or apt-get install gcc-{triple})"
    )


def run_tool(cmd: Sequence[str], cwd: str | None = None) -> None:
    """Run a toolchain command; a failure is a ToolchainError with its stderr.

    Raises
    ------
    ToolchainError
        Non-zero exit, missing executable, or a run longer than ``TIMEOUT_S``.
    """
    logger.debug("run: %s", shlex.join(cmd))
    try:
        res = subprocess.run(
            list(cmd), cwd=cwd, check=False, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except FileNotFoundError:
        raise ToolchainError(f"{cmd[0]!r} not found (install gcc: apt-get install gcc)") from None
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{cmd[0]} ran over {TIMEOUT_S} s: {shlex.join(cmd)}") from None
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip()[-4000:]
        raise ToolchainError(f"{cmd[0]} failed (exit {res.returncode}): {shlex.join(cmd)}\n{tail}")


def link_shared(
    sources: Sequence[str],
    output: str,
    target: Target | str = "c",
    *,
    compiler: Sequence[str] | None = None,
    options: Sequence[str] = (),
    cwd: str | None = None,
) -> None:
    """Compile C / assembler ``sources`` and link them into the shared library ``output``.

    Flags: the target's ``cflags()`` (``-O3 -march=native`` on the host), the OS's
    :data:`LINK_FLAGS` (``-fPIC -shared -Wl,-z,noexecstack`` on Linux), ``-lm``, then
    ``options``.

    Raises
    ------
    ToolchainError
        No compiler, or the compiler failed (its stderr is in the message).
    """
    target = Target(target)
    cmd = list(compiler or find_compiler(target))
    cmd += cpu_flags(cmd, target.cflags()) + LINK_FLAGS[target.os]
    cmd += ["-o", output, *sources, "-lm", *options]
    run_tool(cmd, cwd=cwd)


def build_jobs() -> int:
    """Compiler runs at once for one build: ``$MONOLIB_BUILD_JOBS`` if set, else the CPUs
    this process may use (also the most op units a generated file is split into)."""
    env = os.environ.get("MONOLIB_BUILD_JOBS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            logger.warning("MONOLIB_BUILD_JOBS=%r is not an integer; ignored", env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def compile_objects(
    sources: Sequence[str],
    target: Target | str = "c",
    *,
    compiler: Sequence[str] | None = None,
    cwd: str | None = None,
    jobs: int = 1,
    cache=None,
) -> list[str]:
    """Compile each C / assembler source to an object file beside it (``x.c`` -> ``x.o``).

    Flags: the target's ``cflags(level)`` and ``-fPIC`` (the objects go into a shared
    library or a position-independent executable later); ``level`` is the one named by
    a unit's first line (:data:`~.targets.LEVEL_MARK`, :func:`unit_level`), else None.

    Parameters
    ----------
    sources : sequence of str
        The files (``.c``, ``.s``/``.S``).
    target, compiler, cwd
        As :func:`link_shared`.
    jobs : int
        Compiler runs at once (threads waiting on the processes).
    cache : ObjectCache, optional
        :class:`~.objcache.ObjectCache`: a C source whose key (text, compiler, flags at
        its level, and the macros the compiler predefines for them: the CPU of
        ``-march=native``) is there is not compiled; new objects are stored in it, so
        each level of a portable build is cached apart.

    Returns
    -------
    list of str
        The object files, in the order of ``sources``.

    Raises
    ------
    ToolchainError
        No compiler, or the compiler failed.
    """
    target = Target(target)
    base = list(compiler or find_compiler(target))
    pic = ["-fPIC"] if target.os not in ("windows", "wasi") else []
    commands: dict[str | None, tuple[list[str], list[str]]] = {}

    def command(level: str | None) -> tuple[list[str], list[str]]:
        """The compiler command at ``level`` and its cache-key flags."""
        if level not in commands:
            cmd = base + cpu_flags(base, target.cflags(level)) + pic
            flags = cmd[len(base):]
            if cache is not None:  # -march=native: the CPU it stands for is part of the key
                macros = _predefined_macros(tuple(cmd))
                flags = [*flags, "macros:" + ",".join(sorted(macros or ()))]
            commands[level] = (cmd, flags)
        return commands[level]

    def one(src: str) -> str:
        obj = os.path.splitext(src)[0] + ".o"
        text = None
        if src.endswith(".c"):
            with open(src, "rb") as f:
                text = f.read()
        cmd, flags = command(unit_level(text))
        key = None
        if cache is not None and text is not None:
            key = cache.key(text, base, flags)
            if cache.get(key, obj):
                return obj
        run_tool([*cmd, "-c", "-o", obj, src], cwd=cwd)
        if key is not None:
            cache.put(key, obj)
        return obj

    if jobs <= 1 or len(sources) < 2:
        return [one(src) for src in sources]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(jobs, len(sources))) as pool:
        return list(pool.map(one, sources))


def unit_level(text: bytes | None) -> str | None:
    """The level a C unit's first line names (:data:`~.targets.LEVEL_MARK`), or None."""
    if not text:
        return None
    head = text.split(b"\n", 1)[0].decode("utf-8", "replace")
    before, after = LEVEL_MARK.split("{}")
    if head.startswith(before) and head.endswith(after):
        return head[len(before):len(head) - len(after)] or None
    return None


def _is_zig(cmd: Sequence[str]) -> bool:
    return any(os.path.basename(w) in ("zig", "ziglang") for w in cmd[:3])


def cpu_flags(cmd: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``flags`` as the compiler ``cmd`` spells them: zig's CPU names use underscores
    (``-march=x86_64_v3``, ``-mcpu=cortex_a76+sve``) where GCC and Clang take
    ``x86-64-v3`` and ``cortex-a76``; the features after ``+`` are kept as given."""
    if not _is_zig(cmd):
        return list(flags)
    out = []
    for flag in flags:
        key, eq, value = flag.partition("=")
        if eq and key in ("-march", "-mcpu", "-mtune"):
            name, plus, feats = value.partition("+")
            flag = f"{key}={name.replace('-', '_')}{plus}{feats}"
        out.append(flag)
    return out


@functools.lru_cache(maxsize=16)
def _predefined_macros(cmd: tuple[str, ...]) -> frozenset[str] | None:
    """The macro names the compiler ``cmd`` (flags included) predefines, or None."""
    try:
        res = subprocess.run([*cmd, "-dM", "-E", "-x", "c", "-"], input="", check=False,
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("cannot ask %s for its predefined macros: %s", cmd[0], exc)
        return None
    if res.returncode != 0:
        logger.info("%s -dM -E failed (exit %d): %s", cmd[0], res.returncode, res.stderr[-500:])
        return None
    return frozenset(w[1] for w in (ln.split() for ln in res.stdout.splitlines())
                     if len(w) >= 2 and w[0] == "#define")


def isa_record(target: Target | str = "c", compiler: Sequence[str] | None = None) -> dict:
    """The instruction-set record of code built for ``target`` (:mod:`monolib.runtime.isa`):
    the features the compiler enables for ``target.cflags()`` (``-march=native``: the
    build machine's), learned from its predefined macros (``cc -dM -E``, ~30 ms, once
    per compiler and flags); a portable target's are its baseline level's, and
    ``levels`` lists the levels its op code is compiled at. ``features`` is None
    (nothing checked at load) when the compiler cannot be run or the architecture has
    no feature table."""
    target = Target(target)
    flags = [f for f in target.cflags() if not f.startswith("-O")]
    features = None
    try:
        cmd = list(compiler or find_compiler(target))
    except ToolchainError as exc:
        logger.info("no compiler to learn the ISA of %s: %s", target, exc)
    else:
        macros = _predefined_macros(tuple(cmd + cpu_flags(cmd, flags)))
        if macros is not None and isa.normal_arch(target.arch) in isa.FEATURES:
            features = isa.features_from_macros(target.arch, macros)
    levels = ([lv or "baseline" for lv in target.levels] if target.portable else None)
    record = isa.make_record(target.arch, features, flags, levels)
    logger.debug("ISA of %s: %s", target, record)
    return record


def isa_sections(target: Target | str = "c") -> dict[str, bytes]:
    """``{"isa": JSON}``: the sections of the container's ``library`` entry that record
    the instruction set its code needs (:func:`isa_record`), checked by ``load_module``
    before ``dlopen``."""
    record = isa_record(target)
    return {isa.ISA_SECTION: json.dumps(record, separators=(",", ":")).encode("utf-8")}
