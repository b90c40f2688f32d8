"""The instruction set a library needs, recorded at export and checked before ``dlopen``.

A library built with ``-march=native`` (the host default) may use every extension of
the build machine (AVX2, FMA, AVX-512...); moved to an older CPU its first run would
die with SIGILL. So export records the features the compiler was given (from the
compiler's own predefined macros, :func:`features_from_macros`) in a small ``isa``
section of the container's ``library`` entry, e.g.::

    {"arch": "x86_64", "level": "x86-64-v3", "features": ["avx", "avx2", "bmi", ...],
     "flags": ["-march=x86-64-v3"]}

and :func:`check_library` compares it with the running CPU's features (Linux
``/proc/cpuinfo`` flags or Features, macOS ``sysctl``) before any of the library's
code runs, raising :class:`~monolib.errors.CPUFeatureError` naming what is missing.
Where the CPU's features cannot be read (another OS) the check is skipped with a log
line. Feature names are GCC's ``-m<name>`` spellings (``sse4.1``, ``avx512f``) on x86
and the ``+<name>`` ones on aarch64 (``neon``, ``dotprod``, ``sve``).

A portable library (``-mcpu=portable``) records its baseline (what the load check asks
of the CPU) and ``"levels"``, the levels its op code is compiled at; its glue picks one
of them at load (:func:`glue_source`: CPUID in a constructor, ``$MONOLIB_ISA_LEVEL``
lowers the pick). Every library's C API refuses in ``monolib_open`` on a CPU that lacks
a recorded feature (the same check in C, compiled at the architecture's baseline).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import sys
from collections.abc import Iterable
from typing import Any

from ..abi.names import LIBRARY
from ..errors import CPUFeatureError

__all__ = [
    "FEATURES",
    "ISA_SECTION",
    "X86_LEVELS",
    "check",
    "check_library",
    "features_from_macros",
    "glue_source",
    "host_features",
    "level_of",
    "make_record",
    "missing_features",
    "normal_arch",
    "parse_record",
    "record_of",
]

logger = logging.getLogger(__name__)

#: Section of the container's ``library`` entry holding the record (UTF-8 JSON).
ISA_SECTION = "isa"

# name -> (predefined macro, Linux /proc/cpuinfo flag, macOS sysctl name). The
# extensions a compiler may use on its own from -march (plus the crypto ones it is
# told about): what a SIGILL can come from.
_X86 = {
    "sse3": ("__SSE3__", "pni", "SSE3"),
    "ssse3": ("__SSSE3__", "ssse3", "SSSE3"),
    "sse4.1": ("__SSE4_1__", "sse4_1", "SSE4.1"),
    "sse4.2": ("__SSE4_2__", "sse4_2", "SSE4.2"),
    "sse4a": ("__SSE4A__", "sse4a", "SSE4A"),
    "popcnt": ("__POPCNT__", "popcnt", "POPCNT"),
    "cx16": ("__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16", "cx16", "CX16"),
    "sahf": ("__LAHF_SAHF__", "lahf_lm", "LAHF"),
    "avx": ("__AVX__", "avx", "AVX1.0"),
    "avx2": ("__AVX2__", "avx2", "AVX2"),
    "fma": ("__FMA__", "fma", "FMA"),
    "f16c": ("__F16C__", "f16c", "F16C"),
    "bmi": ("__BMI__", "bmi1", "BMI1"),
    "bmi2": ("__BMI2__", "bmi2", "BMI2"),
    "lzcnt": ("__LZCNT__", "abm", "LZCNT"),
    "movbe": ("__MOVBE__", "movbe", "MOVBE"),
    "xsave": ("__XSAVE__", "xsave", "XSAVE"),
    "pclmul": ("__PCLMUL__", "pclmulqdq", "PCLMULQDQ"),
    "aes": ("__AES__", "aes", "AES"),
    "sha": ("__SHA__", "sha_ni", "SHA"),
    "adx": ("__ADX__", "adx", "ADX"),
    "gfni": ("__GFNI__", "gfni", "GFNI"),
    "vaes": ("__VAES__", "vaes", "VAES"),
    "vpclmulqdq": ("__VPCLMULQDQ__", "vpclmulqdq", "VPCLMULQDQ"),
    "avxvnni": ("__AVXVNNI__", "avx_vnni", "AVXVNNI"),
    "avx512f": ("__AVX512F__", "avx512f", "AVX512F"),
    "avx512cd": ("__AVX512CD__", "avx512cd", "AVX512CD"),
    "avx512bw": ("__AVX512BW__", "avx512bw", "AVX512BW"),
    "avx512dq": ("__AVX512DQ__", "avx512dq", "AVX512DQ"),
    "avx512vl": ("__AVX512VL__", "avx512vl", "AVX512VL"),
    "avx512ifma": ("__AVX512IFMA__", "avx512ifma", "AVX512IFMA"),
    "avx512vbmi": ("__AVX512VBMI__", "avx512vbmi", "AVX512VBMI"),
    "avx512vbmi2": ("__AVX512VBMI2__", "avx512_vbmi2", "AVX512VBMI2"),
    "avx512vnni": ("__AVX512VNNI__", "avx512_vnni", "AVX512VNNI"),
    "avx512bitalg": ("__AVX512BITALG__", "avx512_bitalg", "AVX512BITALG"),
    "avx512vpopcntdq": ("__AVX512VPOPCNTDQ__", "avx512_vpopcntdq", "AVX512VPOPCNTDQ"),
    "avx512bf16": ("__AVX512BF16__", "avx512_bf16", "AVX512BF16"),
    "avx512fp16": ("__AVX512FP16__", "avx512_fp16", "AVX512FP16"),
}
_AARCH64 = {
    "neon": ("__ARM_NEON", "asimd", "hw.optional.neon"),
    "crc": ("__ARM_FEATURE_CRC32", "crc32", "hw.optional.armv8_crc32"),
    "lse": ("__ARM_FEATURE_ATOMICS", "atomics", "hw.optional.arm.FEAT_LSE"),
    "fp16": ("__ARM_FEATURE_FP16_VECTOR_ARITHMETIC", "asimdhp", "hw.optional.arm.FEAT_FP16"),
    "dotprod": ("__ARM_FEATURE_DOTPROD", "asimddp", "hw.optional.arm.FEAT_DotProd"),
    "i8mm": ("__ARM_FEATURE_MATMUL_INT8", "i8mm", "hw.optional.arm.FEAT_I8MM"),
    "bf16": ("__ARM_FEATURE_BF16_VECTOR_ARITHMETIC", "bf16", "hw.optional.arm.FEAT_BF16"),
    "sve": ("__ARM_FEATURE_SVE", "sve", None),
    "sve2": ("__ARM_FEATURE_SVE2", "sve2", None),
}
#: arch -> {feature: (compiler macro, Linux cpuinfo name, macOS sysctl name or None)}
FEATURES: dict[str, dict[str, tuple[str, str, str | None]]] = {
    "x86_64": _X86, "x86": _X86, "aarch64": _AARCH64,
}
# x86 feature -> where CPUID reports it: (leaf, subleaf, register 0-3 = eax..edx, bit)
_CPUID = {
    "sse3": (1, 0, 2, 0), "pclmul": (1, 0, 2, 1), "ssse3": (1, 0, 2, 9), "fma": (1, 0, 2, 12),
    "cx16": (1, 0, 2, 13), "sse4.1": (1, 0, 2, 19), "sse4.2": (1, 0, 2, 20),
    "movbe": (1, 0, 2, 22), "popcnt": (1, 0, 2, 23), "aes": (1, 0, 2, 25),
    "xsave": (1, 0, 2, 26), "avx": (1, 0, 2, 28), "f16c": (1, 0, 2, 29),
    "bmi": (7, 0, 1, 3), "avx2": (7, 0, 1, 5), "bmi2": (7, 0, 1, 8), "avx512f": (7, 0, 1, 16),
    "avx512dq": (7, 0, 1, 17), "adx": (7, 0, 1, 19), "avx512ifma": (7, 0, 1, 21),
    "avx512cd": (7, 0, 1, 28), "sha": (7, 0, 1, 29), "avx512bw": (7, 0, 1, 30),
    "avx512vl": (7, 0, 1, 31), "avx512vbmi": (7, 0, 2, 1), "avx512vbmi2": (7, 0, 2, 6),
    "gfni": (7, 0, 2, 8), "vaes": (7, 0, 2, 9), "vpclmulqdq": (7, 0, 2, 10),
    "avx512vnni": (7, 0, 2, 11), "avx512bitalg": (7, 0, 2, 12),
    "avx512vpopcntdq": (7, 0, 2, 14), "avx512fp16": (7, 0, 3, 23),
    "avxvnni": (7, 1, 0, 4), "avx512bf16": (7, 1, 0, 5),
    "sahf": (0x80000001, 0, 2, 0), "lzcnt": (0x80000001, 0, 2, 5), "sse4a": (0x80000001, 0, 2, 6),
}
# void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t out[4]), x86-64 System V:
# push rbx; mov eax,edi; mov ecx,esi; mov r8,rdx; cpuid; mov [r8],eax;
# mov [r8+4],ebx; mov [r8+8],ecx; mov [r8+12],edx; pop rbx; ret
_CPUID_CODE = bytes.fromhex("5389f889f14989d00fa241890041895804418948084189500c5bc3")
#: The x86-64 micro-architecture levels (psABI), each with the features it adds.
X86_LEVELS = (
    ("x86-64-v2", frozenset({"cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"})),
    ("x86-64-v3", frozenset({"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe",
                             "xsave"})),
    ("x86-64-v4", frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})),
)


def normal_arch(name: str) -> str:
    """``x86_64``, ``x86``, ``aarch64`` or the lower-cased name."""
    name = name.lower()
    if name in ("x86_64", "amd64"):
        return "x86_64"
    if name in ("i386", "i486", "i586", "i686", "x86"):
        return "x86"
    return "aarch64" if name in ("arm64", "aarch64") else name


def features_from_macros(arch: str, macros: Iterable[str]) -> list[str]:
    """The features (sorted) whose predefined macro is among ``macros`` (the names a
    compiler defines for its flags, from ``cc <flags> -dM -E``)."""
    have = set(macros)
    return sorted(f for f, (macro, _, _) in FEATURES.get(normal_arch(arch), {}).items()
                  if macro in have)


def level_of(arch: str, features: Iterable[str]) -> str | None:
    """The highest x86-64 level ``features`` cover (``"x86-64"`` for the baseline);
    None off x86-64."""
    if normal_arch(arch) != "x86_64":
        return None
    have, level = set(features), "x86-64"
    for name, adds in X86_LEVELS:
        if not adds <= have:
            break
        level = name
    return level


def make_record(arch: str, features: Iterable[str] | None, flags: Iterable[str] = (),
                levels: Iterable[str] | None = None) -> dict:
    """The ``isa`` record: ``{"arch", "level", "features", "flags"}``; ``features``
    None means they could not be learned (the load check is then skipped). A portable
    library adds ``"levels"``: those its op code is compiled at (``features`` and
    ``level`` are then its baseline's)."""
    arch = normal_arch(arch)
    feats = None if features is None else sorted(set(features))
    rec = {"arch": arch, "level": None if feats is None else level_of(arch, feats),
           "features": feats, "flags": list(flags)}
    if levels is not None:
        rec["levels"] = list(levels)
    return rec


def parse_record(raw: Any, shown: str = "<library>") -> dict:
    """The record from its section bytes; a malformed one is a CPUFeatureError."""
    try:
        rec = json.loads(bytes(raw).decode("utf-8"))
        feats = rec["features"]
        ok = isinstance(rec.get("arch"), str) and (
            feats is None or (isinstance(feats, list) and all(isinstance(f, str) for f in feats)))
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise CPUFeatureError(f"{shown}: its {ISA_SECTION!r} record is malformed")
    return rec


def _read_text(path: str, limit: int = 1 << 16) -> str:
    """The head of ``path`` up to the first blank line (one processor of cpuinfo)."""
    with open(path, "rb") as f:
        head = f.read(limit)
    return head.split(b"\n\n", 1)[0].decode("utf-8", "replace")


def _linux_features(arch: str, text: str) -> set[str]:
    key = "flags" if arch in ("x86_64", "x86") else "features"
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key:
            have = set(value.split())
            return {f for f, (_, linux, _) in FEATURES[arch].items() if linux in have}
    return set()


def _macos_features(arch: str) -> set[str]:
    """Features from ``sysctl`` (aarch64: ``hw.optional.*`` = 1; x86: the CPUID words)."""
    import subprocess  # only here: ``import monolib.runtime`` stays light

    table = FEATURES[arch]
    aarch64 = arch == "aarch64"
    keys = ([mac for _, _, mac in table.values() if mac] if aarch64 else
            ["-n", "machdep.cpu.features", "machdep.cpu.leaf7_features",
             "machdep.cpu.extfeatures"])
    try:
        out = subprocess.run(["sysctl", *keys], capture_output=True, text=True, timeout=10).stdout
    except subprocess.SubprocessError as exc:
        raise OSError(f"sysctl: {exc}") from None
    if aarch64:
        on = {k.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines())
              if v.strip() == "1"}
        return {f for f, (_, _, mac) in table.items() if mac in on}
    have = set(out.upper().split())
    return {f for f, (_, _, mac) in table.items() if mac and mac.upper() in have}


def _cpuid_features() -> set[str] | None:
    """The x86-64 features CPUID reports (None where it cannot be run: no executable
    mapping allowed). What an emulator (``qemu-x86_64 -cpu Nehalem``) presents, where
    ``/proc/cpuinfo`` still shows the host's; the kernel's flags add the OS side
    (AVX state enabled), so the host's features are the two intersected."""
    import ctypes
    import mmap

    try:
        prot = mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=prot)
    except (OSError, AttributeError, ValueError) as exc:
        logger.debug("no executable page for CPUID: %s", exc)
        return None
    try:
        page.write(_CPUID_CODE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
        proto = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32,
                                 ctypes.POINTER(ctypes.c_uint32))
        fn, regs, leaves = proto(addr), (ctypes.c_uint32 * 4)(), {}
        for base in (0, 0x80000000):
            fn(base, 0, regs)
            top = regs[0]
            for leaf, sub in {(lf, sb) for lf, sb, _, _ in _CPUID.values()}:
                if base <= leaf <= top and (leaf < 0x80000000) == (base == 0):
                    fn(leaf, sub, regs)
                    leaves[leaf, sub] = tuple(regs)
        del fn, proto, addr  # nothing may point into the page once it is unmapped
    finally:
        try:
            page.close()
        except BufferError:  # a ctypes view still alive: the GC unmaps it later
            pass
    return {f for f, (leaf, sub, reg, bit) in _CPUID.items()
            if (leaves.get((leaf, sub), (0, 0, 0, 0))[reg] >> bit) & 1}


@functools.lru_cache(maxsize=4)
def host_features(arch: str | None = None, cpuinfo: str = "/proc/cpuinfo") -> frozenset | None:
    """The running CPU's features (names of :data:`FEATURES`), or None where they
    cannot be read (an OS other than Linux and macOS, no ``/proc``): then nothing is
    checked. The CPU does not change under a process, so this is read once."""
    arch = normal_arch(arch or platform.machine())
    if arch not in FEATURES:
        return None
    found: set[str] | None = None
    try:
        if sys.platform.startswith("linux") or os.path.isfile(cpuinfo):
            found = _linux_features(arch, _read_text(cpuinfo))
        elif sys.platform == "darwin":
            found = _macos_features(arch)
    except OSError as exc:
        logger.info("cannot read this CPU's features (%s): ISA check skipped", exc)
        return None
    if found is None:
        logger.info("no way to read CPU features on %s: ISA check skipped", sys.platform)
        return None
    if arch == "x86_64" and normal_arch(platform.machine()) == "x86_64" and os.name == "posix":
        cpu = _cpuid_features()
        if cpu is not None:
            found &= cpu
    return frozenset(found)


def missing_features(record: dict, host: Iterable[str] | None = None) -> list[str] | None:
    """Features of ``record`` the CPU lacks (sorted; ``[]``: runs here), or None when
    either side is unknown. ``host`` defaults to :func:`host_features`."""
    feats = record.get("features")
    if feats is None:
        return None
    have = host_features(record.get("arch")) if host is None else set(host)
    if have is None:
        return None
    return sorted(set(feats) - set(have))


def check(record: dict | None, shown: str, host: Iterable[str] | None = None) -> None:
    """Raise CPUFeatureError when this CPU lacks a feature ``record`` needs.

    Raises
    ------
    CPUFeatureError
        Names the library, the missing features, and the level it was built for.
    """
    if record is None:
        logger.debug("%s records no ISA (an older library): not checked", shown)
        return
    missing = missing_features(record, host)
    if missing is None:
        logger.info("%s: ISA not checked (features unknown here or in the library)", shown)
        return
    if missing:
        level = record.get("level") or record.get("arch")
        flags = " ".join(record.get("flags") or []) or "?"
        raise CPUFeatureError(
            f"{shown}: built for {level} ({flags}), needs CPU feature(s) "
            f"{', '.join(missing)} that this CPU lacks; rebuild it for this machine or "
            f"for an older level (target='c -mcpu=x86-64-v2'), or portable "
            f"(target='c -mcpu=portable': every level, the best picked at load)"
        )


def record_of(container: Any, buf: Any = None) -> dict | None:
    """The ``isa`` record of a container's ``library`` entry (None when absent);
    ``container`` must still hold its buffer, or ``buf`` be given."""
    for i, entry in enumerate(container.modules):
        for sec in entry.sections:
            if entry.type_key == LIBRARY and sec.name == ISA_SECTION:
                return parse_record(container.section_data(i, sec, buf), container.source)
    return None


def check_library(path: str, container: Any, section_offset: int, shown: str) -> None:
    """Check the ISA record of the library file ``path`` (its container parsed, at
    file offset ``section_offset``) against this CPU, BEFORE it is dlopen'd.

    Raises
    ------
    CPUFeatureError
        The CPU lacks a recorded feature, or the record is malformed or damaged.
    """
    from ..abi.container import CODECS, sha256

    for entry in container.modules:
        sec = next((s for s in entry.sections if entry.type_key == LIBRARY
                    and s.name == ISA_SECTION), None)
        if sec is None:
            continue
        try:
            with open(path, "rb") as f:
                f.seek(section_offset + sec.offset)
                raw = f.read(sec.stored_size)
        except OSError as exc:
            raise CPUFeatureError(f"{shown}: cannot read its ISA record: {exc}") from None
        if sha256(raw).hexdigest() != sec.sha256:
            raise CPUFeatureError(f"{shown}: its {ISA_SECTION!r} record fails its SHA-256 check")
        decode = CODECS[sec.codec][1]
        try:
            data = decode(raw, sec.size) if decode else raw
        except Exception as exc:  # noqa: BLE001  (zlib/zstd errors are not one type)
            raise CPUFeatureError(f"{shown}: cannot decode its ISA record: {exc}") from None
        check(parse_record(data, shown), shown)
        return
    check(None, shown)


# C of the glue's CPU check and level pick (x86-64, GCC/Clang): every function at the
# psABI baseline (a native library compiled as one file has its glue at -march=native).
_C_HEAD = r"""/* ---- ISA check and level pick (runtime/isa.py glue_source) ---- */
#include <stdlib.h>
#include <string.h>
#ifndef MONOLIB_EXPORT /* a hand-written library source */
#if defined(_WIN32)
#define MONOLIB_EXPORT __declspec(dllexport)
#else
#define MONOLIB_EXPORT __attribute__((visibility("default")))
#endif
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ML_ISA_X86 1
#define ML_ISA_BASE __attribute__((target("arch=x86-64"), noinline, unused))
typedef struct { const char* name; unsigned leaf, sub; unsigned char reg, bit, os; } ml_isa_feat;
static ML_ISA_BASE void ml_isa_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}
/* os: the register state the OS must save (XCR0): 1 YMM, 2 ZMM and mask registers */
static ML_ISA_BASE int ml_isa_has(const ml_isa_feat* f) {
  unsigned r[4], lo, hi, need;
  ml_isa_cpuid(f->leaf & 0x80000000u, 0, r);
  if (r[0] < f->leaf) return 0;
  ml_isa_cpuid(f->leaf, f->sub, r);
  if (!((r[f->reg] >> f->bit) & 1u)) return 0;
  if (!f->os) return 1;
  ml_isa_cpuid(1, 0, r);
  if (!((r[2] >> 27) & 1u)) return 0; /* no OSXSAVE: no XGETBV */
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  need = f->os == 1 ? 0x6u : 0xe6u;
  return (lo & need) == need;
}
/* 1 when the CPU has all n features; else the missing ones' names into buf */
static ML_ISA_BASE int ml_isa_all(const ml_isa_feat* f, int n, char* buf, size_t size) {
  int ok = 1, i;
  for (i = 0; i < n; ++i) {
    if (ml_isa_has(&f[i])) continue;
    ok = 0;
    if (buf && strlen(buf) + strlen(f[i].name) + 3 < size) {
      if (buf[0]) strcat(buf, ", ");
      strcat(buf, f[i].name);
    }
  }
  return ok;
}
#endif
"""
_YMM = {"avx", "avx2", "fma", "f16c", "vaes", "vpclmulqdq", "avxvnni"}


def _c_table(name: str, feats: Iterable[str]) -> str:
    rows = []
    for f in sorted(feats):
        if f not in _CPUID:
            continue  # nothing CPUID can tell (none of the recorded ones today)
        leaf, sub, reg, bit = _CPUID[f]
        os_state = 2 if f.startswith("avx512") else 1 if f in _YMM else 0
        rows.append(f'  {{"{f}", {leaf:#x}u, {sub}u, {reg}, {bit}, {os_state}}},')
    count = len(rows)
    rows = rows or ['  {"", 0u, 0u, 0, 0, 0},']  # C has no empty arrays
    return (f"static const ml_isa_feat {name}[] = {{\n" + "\n".join(rows) + "\n};\n"
            f"#define {name.upper()}_N {count}\n")


def _c_string(text: str) -> str:
    return json.dumps(text)  # a JSON string of ASCII is a C string literal


def glue_source(record: dict | None) -> str:
    """C for the glue unit: ``ml_isa_refusal()`` (NULL, or why this CPU cannot run the
    library: the recorded features it lacks, by CPUID and XGETBV; used by the C API's
    ``monolib_open``), ``ML_ISA_CHECK``, the exported ``monolib_isa_level()`` (the level
    that runs), and for a record with ``"levels"`` the pick: ``ml_isa_level``, the index
    of the best level this CPU has, set once by a constructor; ``$MONOLIB_ISA_LEVEL``
    (``v2``, ``x86-64-v3``...) lowers it, never above what the CPU has. Off x86-64
    (or without features) nothing is checked and the level is the record's.

    Parameters
    ----------
    record : dict or None
        The library's ISA record (:func:`make_record`).

    Returns
    -------
    str
        The C text.
    """
    record = record or {}
    levels = list(record.get("levels") or [])
    feats = record.get("features")
    shown = record.get("level") or record.get("arch") or "?"
    flags = " ".join(record.get("flags") or []) or "default flags"
    names = ", ".join(_c_string(lv) for lv in levels) or _c_string(shown)
    out = [_C_HEAD, "#ifdef ML_ISA_X86\n"]
    out.append(_c_table("ml_isa_need", feats or ()))
    # the features each level adds over the one before it (the baseline's: ml_isa_need)
    by_name = dict(X86_LEVELS)
    for k, lv in enumerate(levels[1:], 1):
        out.append(_c_table(f"ml_isa_lv{k}", by_name.get(lv, frozenset())))
    out.append("#endif\n")
    check = ("  if (ml_isa_all(ml_isa_need, ML_ISA_NEED_N, missing, sizeof missing)) return NULL;\n"
             if feats else "  return NULL;\n")
    out.append(f"""#define ML_ISA_CHECK 1
static const char* const ml_isa_names[] = {{{names}}};
static int ml_isa_level; /* index into ml_isa_names: the op code that runs */
#ifdef ML_ISA_X86
static char ml_isa_why[384];
static ML_ISA_BASE const char* ml_isa_refusal(void) {{
  char missing[256] = "";
{check}  strcpy(ml_isa_why, "this CPU lacks feature(s) ");
  strncat(ml_isa_why, missing, 200);
  strcat(ml_isa_why, {_c_string(f" that the library needs (built for {shown}: {flags}"[:100])});
  strcat(ml_isa_why, "); rebuild it for an older level or with -mcpu=portable");
  return ml_isa_why;
}}
""")
    if len(levels) > 1:
        tries = "".join(
            f"  if (best == {k - 1} && ml_isa_all(ml_isa_lv{k}, ML_ISA_LV{k}_N, NULL, 0)) "
            f"best = {k};\n" for k in range(1, len(levels)))
        out.append(f"""static ML_ISA_BASE void ml_isa_pick(void) {{
  int best = 0, k;
  const char* want = getenv("MONOLIB_ISA_LEVEL");
{tries}  if (want && *want) /* "v3", "x86-64-v3": never above what the CPU has */
    for (k = 0; k < best; ++k) {{
      const char* n = ml_isa_names[k];
      size_t a = strlen(n), b = strlen(want);
      if (b <= a && strcmp(n + a - b, want) == 0) {{ best = k; break; }}
    }}
  ml_isa_level = best;
}}
__attribute__((constructor)) static void ml_isa_init(void) {{ ml_isa_pick(); }}
""")
    out.append("""#else
static __attribute__((unused)) const char* ml_isa_refusal(void) { return NULL; } /* unchecked */
#endif
MONOLIB_EXPORT const char* monolib_isa_level(void) { return ml_isa_names[ml_isa_level]; }
""")
    return "".join(out)
