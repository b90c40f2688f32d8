"""Targets: TVM-style target strings, their compiler flags and their OS's file suffix.

The one parser of target strings: ``"<kind> [-key=value ...]"``, the kind naming the
backend (``compiler/backends``) and each kind taking its own options (:data:`KINDS`).

``Target("c")`` is the host (compiled with ``-O3 -march=native``);
``Target("c -mcpu=native")``, ``Target("c -mcpu=skylake")`` pick a CPU, and
``Target("c -mcpu=x86-64-v2")`` (``-v3``, ``-v4``: :data:`X86_LEVELS`) an x86-64
micro-architecture level, for a library that must run on every CPU of that level
(the features a build needs are recorded in the library and checked at load,
:mod:`monolib.runtime.isa`); ``Target("c -mcpu=portable")`` compiles the op code once
per level of :data:`PORTABLE_LEVELS` into the one library, which picks the best level
for the running CPU once at load (``export/csource.py``, :func:`Target.cflags`);
``Target("c -mtriple=aarch64-linux-gnu")`` cross-compiles (the OS of the triple picks
the library suffix: ``.so``, ``.dylib``, ``.dll``);
``Target("c -mtriple=wasm32-wasi")`` (also ``wasm32-unknown-wasi``, ``wasm32-wasip1``)
builds ONE WebAssembly module, ``.wasm`` (OS ``"wasi"``: zig's wasi-libc, SIMD128,
single-threaded; docs/wasm.md); ``Target("opencl")`` and
``Target("cuda -arch=sm_90")`` run every op as a device kernel (docs/devices.md). The
string form follows TVM's target strings (``tvm.target.Target("c -mtriple=...")``).
"""

from __future__ import annotations

import logging
import platform
import shlex
import sys
from typing import Any

from ..errors import TargetError

__all__ = ["GLUE_LEVEL", "KINDS", "LEVEL_MARK", "OS_SUFFIX", "PORTABLE", "PORTABLE_LEVELS",
           "WASI", "X86_LEVELS", "Target", "host_os"]

logger = logging.getLogger(__name__)

#: target kind -> the options it takes (each ``-key=value``)
KINDS: dict[str, tuple[str, ...]] = {
    "c": ("mcpu", "mtriple", "mattr"),
    "opencl": (),
    "cuda": ("arch",),
}
#: The x86-64 psABI levels ``-mcpu`` takes besides CPU names: v2 (SSE4.2, POPCNT:
#: Nehalem, 2008), v3 (AVX2, FMA, BMI2: Haswell, Zen 1), v4 (AVX-512 F/BW/CD/DQ/VL).
X86_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
#: ``-mcpu`` of a library carrying its op code at several levels, the best picked at load.
PORTABLE = "portable"
#: arch -> the levels a portable library carries, baseline first (what its load check
#: asks of the CPU). aarch64 and others: one level, the architecture's baseline (NEON is
#: part of armv8-a; SVE and dot-product paths are not among the kernels' code paths).
PORTABLE_LEVELS: dict[str, tuple[str, ...]] = {
    "x86_64": ("x86-64-v2", "x86-64-v3", "x86-64-v4"),
}
#: ``cflags(level)`` key of the glue unit (entry points, thread pool, the ISA check):
#: compiled at the architecture's baseline (x86-64: ``-march=x86-64``) for every target,
#: so that the CPU check in it can run on any CPU of the architecture.
GLUE_LEVEL = "glue"
#: First line of a translation unit compiled at a level of its own (``cflags(level)``):
#: the toolchain reads it, so the unit's text and its flags travel together.
LEVEL_MARK = "/* @ml-level {} */"
#: The OS of a WebAssembly target (WASI preview 1: what zig's wasi-libc implements).
WASI = "wasi"
# target OS -> shared library suffix (a wasm module for WASI)
OS_SUFFIX = {"linux": ".so", "macos": ".dylib", "windows": ".dll", WASI: ".wasm"}
# words of a triple -> OS (first match wins)
_TRIPLE_OS = (
    (("wasi",), WASI),
    (("windows", "mingw", "w64", "msvc", "cygwin"), "windows"),
    (("darwin", "macos", "apple", "ios"), "macos"),
    (("linux", "android", "gnu", "musl"), "linux"),
)
_X86 = ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86")


def host_os() -> str:
    """The host OS name as a key of :data:`OS_SUFFIX`."""
    if sys.platform.startswith("win"):
        return "windows"
    if sys.platform == "darwin":
        return "macos"
    return "linux"


class Target:
    """A compilation target parsed from a TVM-style string.

    Parameters
    ----------
    spec : str or Target
        ``"<kind> [-key=value ...]"``: kind ``c`` with keys ``-mcpu`` (a CPU name,
        ``native`` (the host default), an x86-64 level ``x86-64-v2``/``-v3``/``-v4``, or
        ``portable``: every level of :data:`PORTABLE_LEVELS`, picked at load),
        ``-mtriple``, ``-mattr`` (comma-separated features, e.g. ``+avx2``); ``opencl`` with none;
        ``cuda`` with ``-arch`` (the backend checks its value).

    Attributes
    ----------
    kind : str
        The backend key (a key of :data:`KINDS`).
    options : dict of str to str
        The ``-key=value`` options, in the order given.

    Raises
    ------
    TargetError
        Empty string, unknown kind, unknown or malformed option.
    """

    def __init__(self, spec: Any = "c") -> None:
        if isinstance(spec, Target):
            spec = str(spec)
        if not isinstance(spec, str) or not spec.strip():
            raise TargetError(f"target must be a non-empty string like 'c', got {spec!r}")
        try:
            words = shlex.split(spec)
        except ValueError as exc:
            raise TargetError(f"target {spec!r}: {exc}") from None
        self.kind = words[0]
        if self.kind not in KINDS:
            raise TargetError(
                f"target {spec!r}: unknown kind {self.kind!r} (supported: {', '.join(KINDS)})"
            )
        self.options: dict[str, str] = {}
        known = KINDS[self.kind]
        for word in words[1:]:
            key, eq, value = word.lstrip("-").partition("=")
            if not word.startswith("-") or not eq or key not in known or not value:
                takes = ", ".join("-" + o + "=..." for o in known)
                raise TargetError(
                    f"target {spec!r}: bad option {word!r} "
                    + (f"(known: {takes})" if known else f"({self.kind} takes none)")
                )
            self.options[key] = value

    @property
    def mcpu(self) -> str | None:
        return self.options.get("mcpu")

    @property
    def portable(self) -> bool:
        """True for ``-mcpu=portable`` (op code at several levels, picked at load)."""
        return self.mcpu == PORTABLE

    @property
    def levels(self) -> tuple[str, ...]:
        """The levels the op code is compiled at, baseline first: those of
        :data:`PORTABLE_LEVELS` for a portable target (one, ``""``: the architecture's
        baseline, where it has none), else ``("",)`` (the target's own flags)."""
        if not self.portable:
            return ("",)
        return PORTABLE_LEVELS.get(self.arch, ("",))

    @property
    def mtriple(self) -> str | None:
        return self.options.get("mtriple")

    @property
    def is_host(self) -> bool:
        """True when no ``-mtriple`` is given (or it names the host OS and arch)."""
        if self.mtriple is None:
            return True
        return self.arch == _normal_arch(platform.machine()) and self.os == host_os()

    @property
    def arch(self) -> str:
        """CPU architecture (first word of the triple, or the host's)."""
        if self.mtriple is None:
            return _normal_arch(platform.machine())
        return _normal_arch(self.mtriple.split("-")[0])

    @property
    def os(self) -> str:
        """``"linux"``, ``"macos"``, ``"windows"`` or ``"wasi"`` (from the triple, else
        the host)."""
        if self.mtriple is None:
            return host_os()
        words = self.mtriple.lower().split("-")[1:]
        for keys, name in _TRIPLE_OS:
            if any(k in w for w in words for k in keys):
                return name
        raise TargetError(f"target {self}: cannot tell the OS of triple {self.mtriple!r}")

    @property
    def lib_suffix(self) -> str:
        """The shared library suffix of the target OS (``.so``, ``.dylib``, ``.dll``,
        ``.wasm``)."""
        return OS_SUFFIX[self.os]

    @property
    def is_wasm(self) -> bool:
        """True for a WebAssembly target (``-mtriple=wasm32-wasi``...): one ``.wasm``."""
        return self.mtriple is not None and self.os == WASI

    def cflags(self, level: str | None = None) -> list[str]:
        """Optimization and CPU flags for the C compiler (``-O3 -march=native`` on host;
        ``-mcpu=x86-64-v3`` gives ``-march=x86-64-v3``, on ARM ``-mcpu`` stays ``-mcpu``).

        Parameters
        ----------
        level : str, optional
            One of :attr:`levels` (a portable target's op code at that level; None or
            ``""``: its baseline), or :data:`GLUE_LEVEL`: the glue unit, at the
            architecture's baseline on x86 (``-O3 -march=x86-64``, no ``-mattr``) and
            with the target's own flags elsewhere.
        """
        flags = ["-O3"]
        x86 = self.arch in ("x86_64", "x86")
        if level == GLUE_LEVEL:
            return flags + (["-march=x86-64" if self.arch == "x86_64" else "-march=i686"]
                            if x86 else self.cflags()[1:])
        if self.portable:
            level = level or self.levels[0]
            if level not in self.levels:
                raise TargetError(f"target {self}: no level {level!r} (it has {self.levels})")
            cpu = level or None
        else:
            cpu = self.mcpu or ("native" if self.is_host else None)
        if cpu:
            # GCC/Clang spell "which CPU" -march on x86 and -mcpu on ARM/others.
            flags.append(f"-march={cpu}" if x86 else f"-mcpu={cpu}")
        mattr = self.options.get("mattr", "")
        if self.arch.startswith("wasm") and "simd128" not in mattr:
            flags.append("-msimd128")  # the kernels' 128-bit vector paths (ML_VW 4)
        for feat in filter(None, mattr.split(",")):
            flags.append(("-m" if feat[0] == "+" else "-mno-") + feat.lstrip("+-"))
        return flags

    def __str__(self) -> str:
        opts = " ".join(f"-{k}={v}" for k, v in self.options.items())
        return f"{self.kind} {opts}".strip()

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def _normal_arch(name: str) -> str:
    name = name.lower()
    if name in _X86:
        return "x86_64" if name in ("x86_64", "amd64") else "x86"
    if name in ("arm64", "aarch64"):
        return "aarch64"
    return name
