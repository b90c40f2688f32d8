"""The C API (``monolib.h``) compiled into every exported library.

At export, :func:`tree_capi_source` gives the C text appended to ``lib.c``: the
public header (``monolib/include/monolib.h``), a table generated from the model (its
inputs and outputs: names, shapes, dtypes, arena offsets; the arena size; where the
params section lies in the embedded container) and the fixed implementation
(``monolib/include/monolib_capi_impl.h``, pasted, never included by users). It is compiled with the generated code and reaches the
params through the container symbols ``__monolib_container_start/_end``, so a C
program needs nothing but the library. Dtypes carry DLPack's type codes (dlpack.h
``DLDataTypeCode``).

A graph with run-time dims (graph JSON version 2) also gets its symbols' table and
the arena offsets of the symbol values and the output shapes; each tensor's table row
gives per axis the size (-1 for a run-time dim), the bounds and step, and (inputs)
the symbol's index, so ``monolib_set_input_shaped`` checks a shape as the Python
executor does.

A library whose graph cannot run from C alone (a device module in the tree, params
removed or compressed, no graph executor factory at the root) still exports the API:
``monolib_open`` then fails with the reason, and nothing references ``monolib_run``.
"""

from __future__ import annotations

import logging
import math
import mmap
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from ..abi.names import (
    CONTAINER_SYMBOLS,
    DEVICE_TYPE_KEYS,
    FACTORY,
    LOW_LEVEL_SYMBOLS,
    PARAMS_SECTION,
    RUN,
)
from ..abi.container import Container
from ..abi.graph_spec import graph_layout
from ..abi.symbols import Symbol
from ..runtime.module import Module

__all__ = ["capi_source", "dlpack_dtype", "header_text", "tree_capi_source"]

logger = logging.getLogger(__name__)

# DLPack DLDataTypeCode values (dlpack.h, v1.1)
_KIND_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_NAMED_CODES = {"bfloat16": 4, "float8_e4m3fn": 10, "float8_e5m2": 12}
OPAQUE_CODE = 3


def header_text() -> str:
    """The text of ``monolib.h`` shipped in the package (what ``monolib header`` prints)."""
    return resources.files("monolib").joinpath("include/monolib.h").read_text(encoding="utf-8")


def _template_text() -> str:
    # beside monolib.h, so the package data that ships the header ships it too
    path = "include/monolib_capi_impl.h"
    return resources.files("monolib").joinpath(path).read_text(encoding="utf-8")


def dlpack_dtype(name: str) -> tuple[int, int]:
    """``(DLPack type code, bits)`` of the dtype spelled ``name`` (NumPy spelling).

    ``"float32"`` -> ``(2, 32)``, ``"bool"`` -> ``(6, 8)``, ``"bfloat16"`` -> ``(4, 16)``;
    a dtype DLPack has no code for -> ``(3, bits)`` (opaque; the name tells).
    """
    if name in _NAMED_CODES:
        code = _NAMED_CODES[name]
        return code, 8 * _itemsize(name)
    try:
        dt = np.dtype(name)
    except TypeError:
        return OPAQUE_CODE, 8 * _itemsize(name)
    return _KIND_CODES.get(dt.kind, OPAQUE_CODE), 8 * dt.itemsize


def _itemsize(name: str) -> int:
    try:
        import ml_dtypes  # bfloat16 / float8 names, only when such a graph is met

        return np.dtype(getattr(ml_dtypes, name)).itemsize
    except (ImportError, AttributeError, TypeError):
        return 1 if "float8" in name else 2


def _c_string(text: str) -> str:
    """A C string literal of ``text`` (UTF-8 bytes, octal escapes: no trigraphs, no
    hex digits swallowed by a following character)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        out.append(ch if 32 <= byte < 127 and ch not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _c_array(ctype: str, name: str, values: Sequence[int]) -> str:
    # a zero-length C array is not C99: a scalar gets one unused element
    return f"static const {ctype} {name}[] = {{{', '.join(map(str, values)) or '0'}}};"


def _tensor_table(kind: str, entries: Sequence[dict], symbols: Sequence[Symbol] = ()) -> list[str]:
    """The C table of the inputs or outputs: per tensor its name, dtype, per-axis
    size (-1: run-time), bounds and step, per-axis symbol index (-1: static), bytes
    (at the upper bounds) and arena offset, and where its dims start in the handle's
    input shapes (inputs) or the arena's output shapes (outputs)."""
    index = {s.name: k for k, s in enumerate(symbols)}
    lines, rows, at = [], [], 0
    for i, raw in enumerate(entries):
        dims = list(raw["shape"])
        code, bits = dlpack_dtype(str(raw["dtype"]))
        lanes = 1
        if str(raw["dtype"]).startswith("S"):  # a string, S<n>: opaque, n lanes of 8 bits
            bits, lanes = 8, int(str(raw["dtype"])[1:])
        dynamic = any(isinstance(d, str) for d in dims)
        if dynamic:
            nbytes = int(raw["max_nbytes"])
            most = nbytes * 8 // (bits * lanes) if bits else 0  # any output axis: a bound
        else:
            nbytes = math.prod(int(d) for d in dims) * bits * lanes // 8
        axes = []  # per axis: (size, lo, hi, step, symbol index)
        for d in dims:
            if not isinstance(d, str):
                axes.append((int(d), int(d), int(d), 1, -1))
            elif d in index:
                sym = symbols[index[d]]
                axes.append((-1, sym.lo, sym.hi, sym.step, index[d]))
            else:  # an output's dim expression: sized by the run, bounded by its slot
                axes.append((-1, 0, most, 1, -1))
        base = f"ml_capi_{kind}_{i}"
        columns = list(zip(*axes)) or [()] * 5
        for field, ctype, values in zip(("shape", "lo", "hi", "step", "sym"),
                                        ("int64_t",) * 4 + ("int32_t",), columns):  # fmt: skip
            lines.append(_c_array(ctype, f"{base}_{field}", values))
        rows.append(
            f"  {{{_c_string(str(raw['name']))}, {_c_string(str(raw['dtype']))}, {code}, {bits}, "
            f"{lanes}, "
            f"{len(dims)}, {base}_shape, {base}_lo, {base}_hi, {base}_step, {base}_sym, "
            f"{nbytes}u, {int(raw['offset'])}u, {int(dynamic)}, {at}}}"
        )
        at += len(dims)
    if not rows:
        rows.append('  {"", "", 0, 0, 1, 0, NULL, NULL, NULL, NULL, NULL, 0u, 0u, 0, 0}')
    lines.append(
        f"static const ml_capi_tensor ml_capi_{kind}s[] = {{\n" + ",\n".join(rows) + "\n};"
    )
    lines.append(f"#define ML_CAPI_{kind.upper()}_DIMS {at}")
    return lines


def _symbol_table(graph: dict | None) -> tuple[list[str], tuple[Symbol, ...]]:
    """The C table of the graph's symbols and the arena offsets of their values and
    of the output shapes (``ML_CAPI_NUM_SYMBOLS`` 0 for a static graph)."""
    layout = None if graph is None else graph_layout(graph)
    if layout is None or not layout.symbols:
        return ["#define ML_CAPI_NUM_SYMBOLS 0"], ()
    rows = [f"  {{{_c_string(s.name)}, {s.lo}, {s.hi}, {s.step}}}" for s in layout.symbols]
    return [
        "static const ml_capi_symbol ml_capi_symbols[] = {\n" + ",\n".join(rows) + "\n};",
        f"#define ML_CAPI_NUM_SYMBOLS {len(layout.symbols)}",
        f"#define ML_CAPI_SYM_OFFSET {layout.sym_offset}u",
        f"#define ML_CAPI_SHAPE_OFFSET {layout.shape_offset}u",
    ], layout.symbols


_TABLE_PRELUDE = """\
/* ---- the model's table, generated by monolib.export.capi ---- */
typedef struct ml_capi_tensor {
  const char* name;
  const char* dtype_name;
  uint8_t code, bits;
  uint16_t lanes;                        /* the bytes of a string (S<n>), else 1 */
  int32_t ndim;
  const int64_t *shape, *lo, *hi, *step; /* shape[d] -1: a run-time dim */
  const int32_t* sym;                    /* per axis: symbol index, -1 static */
  uint64_t nbytes, offset;               /* nbytes at the upper bounds */
  int32_t dynamic;                       /* some dim is a run-time dim */
  int32_t dims_at;                       /* first dim in the input / output shapes */
} ml_capi_tensor;
typedef struct ml_capi_symbol {
  const char* name;
  int64_t lo, hi, step;
} ml_capi_symbol;
"""


# The symbols the runtime looks up besides the C API (LOW_LEVEL_SYMBOLS and
# CONTAINER_SYMBOLS of abi/names.py). On PE, a dllexport (the C API's, the generated
# code's) turns off the linker's export of every global, so these are exported by
# name (a .drectve directive) where the library defines them.


def _pe_exports(names: Sequence[str]) -> str:
    directives = " ".join(
        f"-export:{n},data" if n in CONTAINER_SYMBOLS else f"-export:{n}" for n in names
    )
    return (
        "#if defined(_WIN32) && defined(__GNUC__) && !defined(__i386__)\n"
        f'__asm__(".pushsection .drectve\\n\\t.ascii \\" {directives}\\"\\n\\t.popsection");\n'
        "#endif"
    )


def defined_symbols(source: str) -> list[str]:
    """The low-level ABI functions that the C ``source`` defines (returns int32_t)."""
    return [n for n in LOW_LEVEL_SYMBOLS if re.search(rf"\bint32_t\s+{n}\s*\(", source)]


def capi_source(
    graph: dict | None,
    params: tuple[int, int] | None,
    refusal: str | None,
    exports: Sequence[str] = (),
) -> str:
    """The C source of the API for one model.

    Parameters
    ----------
    graph : dict or None
        The graph JSON (``inputs``, ``outputs``, ``arena_bytes``); None with a refusal.
    params : (offset, nbytes) or None
        Where the params blob lies in the container (bytes from its first byte).
    refusal : str or None
        Why ``monolib_open`` must refuse (then ``graph`` and ``params`` are unused).
    exports : sequence of str
        Low-level functions the library defines, exported by name on PE.
    """
    parts = [
        "/* Generated by monolib: the C API of monolib.h (docs/c_api.md). */",
        "#define MONOLIB_BUILDING_LIBRARY 1",
        header_text(),
        _pe_exports([*CONTAINER_SYMBOLS, *exports]),
        _TABLE_PRELUDE,
    ]
    if refusal is None and graph is not None and params is not None:
        table, symbols = _symbol_table(graph)
        parts += _tensor_table("input", graph["inputs"], symbols)
        parts += _tensor_table("output", graph["outputs"], symbols) + table
        parts += [
            "#define ML_CAPI_HOST 1",
            f"#define ML_CAPI_NUM_INPUTS {len(graph['inputs'])}",
            f"#define ML_CAPI_NUM_OUTPUTS {len(graph['outputs'])}",
            f"#define ML_CAPI_ARENA_BYTES {int(graph['arena_bytes'])}ull",
            f"#define ML_CAPI_PARAMS_OFFSET {params[0]}ull",
            f"#define ML_CAPI_PARAMS_BYTES {params[1]}ull",
        ]
    else:
        parts += _tensor_table("input", []) + _tensor_table("output", [])
        parts += _symbol_table(None)[0]
        parts += [
            "#define ML_CAPI_HOST 0",
            "#define ML_CAPI_NUM_INPUTS 0",
            "#define ML_CAPI_NUM_OUTPUTS 0",
            f"static const char ml_capi_refusal[] = {_c_string(refusal or 'no model')};",
        ]
    parts.append(_template_text())
    return "\n".join(p.rstrip("\n") for p in parts) + "\n"


def _params_section(container_path: str) -> Any:
    """The root module's ``params`` SectionEntry in the written container, or None."""
    with open(container_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        box = Container(mm, container_path)
        try:
            root = box.modules[box.root]
            return next((s for s in root.sections if s.name == PARAMS_SECTION), None)
        finally:
            box.release()


def _refusal(modules: Sequence[Module], lib: Module, params: Any) -> str | None:
    root = modules[0]
    devices = sorted({m.type_key for m in modules if m.type_key in DEVICE_TYPE_KEYS})
    if devices:
        return (
            f"this library's graph runs on a device ({', '.join(devices)} module); the C API "
            'runs host-only graphs (compile with target="c", or run it from Python)'
        )
    if root.type_key != FACTORY:
        return f"the library's root module is {root.type_key!r}, not a graph executor factory"
    if RUN not in getattr(lib, "source", ""):
        return "the library's C code defines no monolib_run"
    if params is None:
        return (
            "the library was exported without its params (remove_params); the C API "
            "needs them inside the library"
        )
    if params.codec != "raw":
        return (
            f"the library's params are compressed ({params.codec}); the C API reads them in "
            "place: export without compress="
        )
    return None


def tree_capi_source(modules: Sequence[Module], lib: Module, container_path: str) -> str:
    """The C API source for the tree ``modules`` (root first), appended to ``lib.c``.

    ``lib`` is the module compiled into the library (a CSourceModule);
    ``container_path`` the container just written for the tree (its params section
    is located there). A tree the C API cannot run gets a source whose
    ``monolib_open`` fails with the reason.

    Raises
    ------
    ContainerError
        The container file does not read back.
    """
    params = _params_section(container_path)
    refusal = _refusal(modules, lib, params)
    exports = defined_symbols(getattr(lib, "source", ""))
    if refusal is not None:
        logger.info("the C API of this library refuses to open: %s", refusal)
        return capi_source(None, None, refusal, exports)
    return capi_source(modules[0].graph_json, (params.offset, params.size), None, exports)
