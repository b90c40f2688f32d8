"""The C-style languages monolib writes: host C, OpenCL C and CUDA C.

One emitter writes every op as scalar C; a :class:`Language` holds only the data in
which the three languages differ, in the spirit of tinygrad's ``renderer/cstyle.py``
(``CStyleLanguage``): the function prefix, the kernel prefix, the qualifier of a
pointer to device memory, ``restrict``, the work-item index, the prelude, the kernel
headers always pasted, and how a bound sub-expression is spelled (:func:`bind`).

The element types (:func:`ctype`), literals (:func:`c_literal`) and the storage-type
conversions (:func:`storage_load`, :func:`storage_store`) are those of C99 in all three
languages; the device preludes map the C99 names the ops write (``int64_t``,
``INT64_C``, ``ml_expf``, ``expf``, ``INFINITY``) onto the language's own.

Sources: ISO C99 (``<stdint.h>``, ``<math.h>``), the OpenCL C 1.2 specification
(``__kernel``, ``__global``, ``get_global_id``), the CUDA C++ Programming Guide
(``__global__``, ``blockIdx``/``blockDim``/``threadIdx``, lambdas in device code), GCC's
"Statements and Declarations in Expressions".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import UnsupportedOpError

__all__ = [
    "CUDA",
    "HOST_C",
    "LANGUAGES",
    "OPENCL",
    "STORAGE_TYPES",
    "Language",
    "bound_expression",
    "c_literal",
    "ctype",
    "string_typedefs",
    "current_language",
    "rendering",
    "storage_load",
    "storage_store",
    "tensor_pointer",
]

logger = logging.getLogger(__name__)

_CTYPES = {
    np.dtype("float32"): "float",
    np.dtype("float64"): "double",
    np.dtype("int64"): "int64_t",
    np.dtype("int32"): "int32_t",
    np.dtype("int16"): "int16_t",
    np.dtype("int8"): "int8_t",
    np.dtype("uint64"): "uint64_t",
    np.dtype("uint32"): "uint32_t",
    np.dtype("uint16"): "uint16_t",
    np.dtype("uint8"): "uint8_t",
    np.dtype("bool"): "uint8_t",
}

# Storage types (backends/c/kernels/types.h): kept in their ONNX / ml_dtypes byte layout,
# converted to float32 (floats) or int32 (ints) to compute: dtype -> C storage type.
# ml_dtypes is a dependency of onnx, which the compiler imports anyway.
_STORAGE_NAMES = {
    "float16": "uint16_t", "bfloat16": "uint16_t",
    "float8_e4m3fn": "uint8_t", "float8_e4m3fnuz": "uint8_t", "float8_e5m2": "uint8_t",
    "float8_e5m2fnuz": "uint8_t", "float8_e8m0fnu": "uint8_t", "float4_e2m1fn": "uint8_t",
    "int4": "uint8_t", "uint4": "uint8_t", "int2": "uint8_t", "uint2": "uint8_t",
}


def _storage_table() -> dict[np.dtype, str]:
    import ml_dtypes

    out = {np.dtype("float16"): "uint16_t"}
    for name, c in _STORAGE_NAMES.items():
        if name != "float16":
            out[np.dtype(getattr(ml_dtypes, name))] = c
    return out


#: dtype -> C storage type of every storage type (see ``backends/c/kernels/types.h``).
STORAGE_TYPES: dict[np.dtype, str] = _storage_table()
_CTYPES.update(STORAGE_TYPES)


def ctype(dtype: Any) -> str:
    """The C element type of a NumPy dtype (``float32`` -> ``"float"``).

    Raises
    ------
    UnsupportedOpError
        For a dtype the C backends have no type for.
    """
    dt = np.dtype(dtype)
    if dt.kind == "S":  # a string tensor: one struct per fixed-width UTF-8 slot
        return f"ml_str{dt.itemsize}"
    try:
        return _CTYPES[dt]
    except KeyError:
        raise UnsupportedOpError(f"dtype {np.dtype(dtype)} has no C type in monolib") from None


def string_typedefs(dtypes: Any) -> list[str]:
    """The C typedefs of the string element types among ``dtypes``: ``ml_str<n>``, a
    struct of ``n`` bytes (NUL-padded UTF-8), so ops that only move elements (copies,
    Gather, Transpose...) move whole strings by assignment."""
    widths = sorted({np.dtype(d).itemsize for d in dtypes if np.dtype(d).kind == "S"})
    return [f"typedef struct {{ uint8_t b[{w}]; }} ml_str{w};" for w in widths]


def c_literal(value: Any, dtype: Any) -> str:
    """A C literal of ``value`` as ``dtype`` (exact for float32: printed with 9
    significant digits; ``INFINITY``/``NAN`` for non-finite values; for a storage type
    its bit pattern, e.g. ``15360u`` for float16 1.0; for a string ``S<n>``, a
    compound literal ``((ml_str<n>){{...bytes}})``, an expression, not a static
    initializer)."""
    dt = np.dtype(dtype)
    if dt.kind == "S":  # a string: a compound literal of its slot's bytes
        raw = np.asarray(value, dtype=dt).reshape(1).tobytes()
        return f"((ml_str{dt.itemsize}){{{{{', '.join(map(str, raw))}}}}})"
    if dt in STORAGE_TYPES:  # the bit pattern, as the storage C type holds it
        bits = np.asarray(value).astype(dt).reshape(1).view(np.uint8 if dt.itemsize == 1 else np.uint16)
        return f"{int(bits[0])}u"
    if dt.kind == "f":
        v = float(value)
        if np.isnan(v):
            return "NAN"
        if np.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        text = f"{np.float32(v).item():.9g}" if dt == np.float32 else repr(v)
        if not any(c in text for c in ".en"):
            text += ".0"  # "0f" is not a C literal; "0.0f" is
        return text + "f" if dt == np.float32 else text
    if dt.kind == "b":
        return "1" if value else "0"
    if dt == np.int64:
        if int(value) == np.iinfo(np.int64).min:  # the literal 9223372036854775808 overflows
            return "(-INT64_C(9223372036854775807) - 1)"
        return f"INT64_C({int(value)})"
    return str(int(value))


def storage_load(expr: str, dtype: Any) -> str:
    """C expression of the compute-type value of the storage element ``expr``
    (``ml_from_float16(x)``); ``expr`` itself for other dtypes. ``types.h``, which
    defines the conversions, is in every host C file (:data:`HOST_C` ``.headers``)."""
    dt = np.dtype(dtype)
    return f"ml_from_{dt.name}({expr})" if dt in STORAGE_TYPES else expr


def storage_store(expr: str, dtype: Any, saturate: bool = True) -> str:
    """C expression of the storage bits of ``dtype`` for the value ``expr`` (a float for
    the storage floats, an integer for int4...; RNE; out of range: ONNX Cast's
    ``saturate`` rules for float8, Inf for float16/bfloat16, low bits kept for ints).
    ``expr`` itself for other dtypes."""
    dt = np.dtype(dtype)
    if dt not in STORAGE_TYPES:
        return expr
    arg = f"(int64_t)({expr})" if "int" in dt.name else f"(float)({expr})"
    sat = 1 if saturate and dt.name.startswith("float8") else 0
    return f"ml_to_{dt.name}({arg}, {sat})"


# GNU C statement expression (GCC, Clang, and so PoCL's OpenCL C); NVRTC has no GNU C
# extensions but C++ lambdas, called where they are written
_GNU_BOUND = "({{ {decls} {value}; }})"


@dataclass(frozen=True)
class Language:
    """What one C-style language spells differently (data only).

    The element types and literals are not here: all three languages write C99's
    (:func:`ctype`, :func:`c_literal`), the device preludes define them.

    Attributes
    ----------
    name : str
        The target kind (``"c"``, ``"opencl"``, ``"cuda"``); for a device, also the
        device module's type key.
    function : str
        Written before ``void`` of an op function (host C: ``ML_OP_FN``) or a kernel.
    prelude : str
        Definitions pasted at the top of the source.
    buffer : str
        Qualifier of a pointer to the params blob or the arena (``"__global "``, ``""``).
    restrict : str
        Written after ``*`` of the ``params``/``arena`` parameters (``" restrict"``).
    gid : str or None
        C expression of the flat work-item index, as ``idx_t``; ``None`` on the host.
    headers : tuple of str
        Kernel headers (``backends/c/headers.py`` names) pasted after the prelude.
    bound : str
        Format of a sub-expression with bound temporaries: ``{decls}`` (declarations,
        each ending in ``;``) and ``{value}`` (the expression using them).
    """

    name: str
    function: str
    prelude: str
    buffer: str = ""
    restrict: str = ""
    gid: str | None = None
    headers: tuple[str, ...] = ()
    bound: str = _GNU_BOUND

    def pointer(self, ctype_: str, const: bool = False) -> str:
        """The pointer type to ``ctype_`` elements of the params blob or the arena."""
        return f"{self.buffer}{'const ' if const else ''}{ctype_}*"

    def signature(self, name: str) -> str:
        """The head of op function (or kernel) ``name``: each takes the params blob and
        the arena and finds its tensors at fixed byte offsets in them."""
        return (
            f"{self.function} void {name}({self.pointer('uint8_t', True)}{self.restrict} params, "
            f"{self.pointer('uint8_t')}{self.restrict} arena)"
        )


#: host C prelude: the ABI's export macro, and math declarations that let gcc vectorize
_HOST_PRELUDE = """\
/* Generated by monolib: one self-contained C file (see docs/ARCHITECTURE.md). */
#if !defined(_GNU_SOURCE) && !defined(_WIN32)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT (threadpool.h) */
#endif
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#if defined(_WIN32)
#define MONOLIB_EXPORT __declspec(dllexport)
#else
#define MONOLIB_EXPORT __attribute__((visibility("default")))
#endif
#if defined(__GNUC__) && !defined(__clang__)
/* gcc 12.2's IPA (pure-const + modref) judged a one-op model's op function free of side
   effects and dropped its calls from monolib_run at -O1/-O2 (ONNX cases
   test_argmax_default_axis_random, test_transpose_all_permutations_4): op functions
   are kept out of interprocedural analysis (they are called through a table anyway). */
#define ML_OP_FN __attribute__((noipa)) static
#else
#define ML_OP_FN static
#endif
#if defined(__GNUC__) && !defined(__clang__)
/* Nobody reads the FP exception flags: let gcc if-convert float selects (Relu, Clip,
   HardSigmoid...) into vector blends. */
#pragma GCC optimize("no-trapping-math")
/* errno is never read: math calls are pure, so loops calling them can vectorize; on
   x86-64 glibc the simd attribute lets gcc call libmvec's vector variants. */
#if defined(__x86_64__) && defined(__GLIBC__)
#define ML_VMATH __attribute__((simd("notinbranch"), const, nothrow, leaf))
#else
#define ML_VMATH __attribute__((const, nothrow, leaf))
#endif
ML_VMATH float expf(float);
ML_VMATH float logf(float);
ML_VMATH float sinf(float);
ML_VMATH float cosf(float);
ML_VMATH float powf(float, float);
ML_VMATH double exp(double);
ML_VMATH double log(double);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
ML_VMATH float tanhf(float);
ML_VMATH float erff(float);
ML_VMATH float expm1f(float);
ML_VMATH float log1pf(float);
ML_VMATH float tanf(float);
ML_VMATH float atanf(float);
#endif
__attribute__((const, nothrow, leaf)) float sqrtf(float);
__attribute__((const, nothrow, leaf)) double sqrt(double);
#endif
"""

#: vmath.h's float32 clamps (bit selects on the host) as the plain ternaries they equal,
#: for the device preludes
_DEVICE_CLAMPS = """\
#define ml_atleastf(x, lo) ((x) < (lo) ? (lo) : (x))
#define ml_atmostf(x, hi) ((x) > (hi) ? (hi) : (x))
"""

_OPENCL_PRELUDE = """\
/* Generated by monolib: OpenCL C kernels, one per fused op (see docs/devices.md). */
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
typedef long int64_t;
typedef int int32_t;
typedef short int16_t;
typedef char int8_t;
typedef ulong uint64_t;
typedef uint uint32_t;
typedef ushort uint16_t;
typedef uchar uint8_t;
#define INT64_C(x) ((long)(x))
/* C99 float names -> OpenCL's overloaded built-ins */
#define ml_expf exp
#define ml_erff erf
#define ml_tanhf tanh
#define ml_logisticf(x) (1.0f / (1.0f + exp(-(x))))
""" + _DEVICE_CLAMPS + """\
#define expf exp
#define logf log
#define sqrtf sqrt
#define powf pow
#define fabsf fabs
#define fmaxf fmax
#define fminf fmin
#define floorf floor
#define ceilf ceil
#define roundf round
#define rintf rint
#define truncf trunc
#define tanhf tanh
#define erff erf
#define expm1f expm1
#define log1pf log1p
#define sinf sin
#define cosf cos
#define tanf tan
#define asinf asin
#define acosf acos
#define atanf atan
#define sinhf sinh
#define coshf cosh
#define asinhf asinh
#define acoshf acosh
#define atanhf atanh
#define fmodf fmod
"""

_CUDA_PRELUDE = """\
/* Generated by monolib: CUDA C kernels, one per fused op (see docs/devices.md). */
typedef long long int64_t;
typedef int int32_t;
typedef short int16_t;
typedef signed char int8_t;
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
#define INT64_C(x) ((long long)(x))
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define ml_expf expf
#define ml_erff erff
#define ml_tanhf tanhf
#define ml_logisticf(x) (1.0f / (1.0f + expf(-(x))))
""" + _DEVICE_CLAMPS + """\
"""

HOST_C = Language(
    name="c",
    function="ML_OP_FN",
    prelude=_HOST_PRELUDE,
    restrict=" restrict",
    # float32 exp that vectorizes everywhere, the storage-type conversions, the pool
    # (every library exports monolib_set_num_threads; gemm.h / conv.h use it)
    headers=("vmath.h", "types.h", "threadpool.h"),
)

OPENCL = Language(
    name="opencl",
    function="__kernel",
    prelude=_OPENCL_PRELUDE,
    buffer="__global ",
    gid="(idx_t)get_global_id(0)",
)

CUDA = Language(
    name="cuda",
    function='extern "C" __global__',
    prelude=_CUDA_PRELUDE,
    gid="((idx_t)blockIdx.x * blockDim.x + threadIdx.x)",
    bound="([&]() {{ {decls} return {value}; }}())",
)

#: target kind -> language
LANGUAGES: Mapping[str, Language] = {lang.name: lang for lang in (HOST_C, OPENCL, CUDA)}

_CURRENT: ContextVar[Language] = ContextVar("monolib_cstyle_language", default=HOST_C)


def current_language() -> Language:
    """The language being written (:data:`HOST_C` outside :func:`rendering`)."""
    return _CURRENT.get()


@contextmanager
def rendering(language: Language) -> Iterator[Language]:
    """Within the block, the ops' C expressions are written in ``language`` (what
    :func:`~monolib.compiler.ops.math.elementwise.bind` reads)."""
    token = _CURRENT.set(language)
    try:
        yield language
    finally:
        _CURRENT.reset(token)


def tensor_pointer(language: Language, value: Any, plan: Any, params: Any) -> str:
    """Typed pointer expression of ``value``'s data: in the params blob for a constant
    (or a value aliasing one), else at its planned arena offset.

    Parameters
    ----------
    language : Language
    value : Value
    plan : MemoryPlan
        ``root(value)`` and ``offset(value)``.
    params : ParamsBuilder
        ``value(constant)``: the constant's byte offset in the blob.
    """
    root = plan.root(value)
    T = ctype(value.dtype)
    if value.is_const or root.is_const:
        src = value if value.is_const else root
        return f"(({language.pointer(T, True)})(params + {params.value(src)}))"
    return f"(({language.pointer(T)})(arena + {plan.offset(value)}))"


def bound_expression(decls: Sequence[str], value: str) -> str:
    """``value`` with the declarations ``decls`` in scope, as the current language
    spells a bound sub-expression (``value`` itself when there are none)."""
    if not decls:
        return value
    return current_language().bound.format(decls=" ".join(decls), value=value)
