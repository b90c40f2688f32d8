"""``ai.onnx.ml`` LabelEncoder (versions 2 and 4): map each element of X through a
key -> value table (string, int64, float keys and values; version 4's tensor forms).

The table is sorted at compile time and stored in the params blob; the C kernel finds
each element by binary search (byte-wise order for strings: ``memcmp`` then length,
which is Python's order of ``bytes``). A key not in the table maps to the default.
Duplicate keys: the first one wins (ONNX Runtime's map insert). A NaN float key never
matches (NaN compares unequal), so a NaN element maps to the default.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ....errors import ShapeError
from ...backends.cstyle import c_literal, ctype
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ._common import byte_param, bytes_ptr, string_dtype, width
from ....runtime.strings import to_utf8

__all__ = ["LabelEncoder"]

logger = logging.getLogger(__name__)

ML = "ai.onnx.ml"
_KINDS = (("strings", None), ("int64s", np.int64), ("floats", np.float32))


def _table(op: OpDef, node: Node, side: str) -> np.ndarray:
    """The ``keys``/``values`` array: ``<side>_tensor`` or one ``<side>_<kind>`` list."""
    where = f"LabelEncoder (node {node.name!r})"
    found = []
    tensor = node.attrs.get(f"{side}_tensor")
    if tensor is not None:
        found.append(np.asarray(tensor).reshape(-1))
    for kind, dt in _KINDS:
        vals = node.attrs.get(f"{side}_{kind}")
        if vals is not None:
            found.append(to_utf8(list(vals)) if dt is None else np.asarray(vals, dtype=dt))
    if len(found) != 1:
        raise ShapeError(f"{where}: exactly one of {side}_tensor, {side}_strings, "
                         f"{side}_int64s, {side}_floats must be given ({len(found)} are)")
    arr = found[0]
    if arr.dtype.kind == "S":
        arr = to_utf8(arr)  # as wide as the longest
    return arr


def _default(node: Node, values: np.ndarray) -> np.ndarray:
    """The one-element default of the value type (``default_tensor`` or the typed
    ``default_*`` attribute)."""
    t = node.attrs.get("default_tensor")
    if t is not None:
        t = np.asarray(t).reshape(-1)
        if t.size != 1:
            raise ShapeError(f"LabelEncoder (node {node.name!r}): default_tensor has "
                             f"{t.size} elements, not 1")
        return to_utf8(t) if values.dtype.kind == "S" else t.astype(values.dtype)
    if values.dtype.kind == "S":
        return to_utf8([node.attrs.get("default_string", "_Unused")])
    if values.dtype.kind == "f":
        return np.array([node.attrs.get("default_float", -0.0)], dtype=values.dtype)
    return np.array([node.attrs.get("default_int64", -1)], dtype=values.dtype)


@register
class LabelEncoder(OpDef):
    """``ai.onnx.ml`` ``LabelEncoder`` (2, 4): Y[i] = values[keys.index(X[i])], or the
    default.

    X: strings, int64, int32, int16, float or double, of the keys' type; Y: X's shape,
    the values' type (strings as wide as the longest value or default).

    Raises
    ------
    ShapeError
        Not exactly one keys and one values attribute, tables of different lengths, a
        default_tensor that is not one element, or X's type not the keys'.
    """

    op_type, domain, since_version = "LabelEncoder", ML, 2
    also_versions = (4,)

    def _tables(self, node: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys, values = _table(self, node, "keys"), _table(self, node, "values")
        where = f"LabelEncoder (node {node.name!r})"
        if keys.size != values.size:
            raise ShapeError(f"{where}: {keys.size} keys but {values.size} values")
        x = node.inputs[0]
        if (x.dtype.kind == "S") != (keys.dtype.kind == "S") or (
                x.dtype.kind != "S" and x.dtype != keys.dtype and keys.dtype.kind != x.dtype.kind):
            raise ShapeError(f"{where}: X is {x.dtype}, the keys are {keys.dtype}")
        default = _default(node, values)
        if values.dtype.kind == "S":
            wide = string_dtype(max(values.dtype.itemsize, default.dtype.itemsize))
            values, default = values.astype(wide), default.astype(wide)
        if keys.dtype.kind != "S":
            keys = keys.astype(x.dtype)
        return keys, values, default

    def infer(self, node: Node) -> list[OutType]:
        _, values, _ = self._tables(node)
        return [(tuple(node.inputs[0].shape), values.dtype)]

    def reference(self, node: Node, inputs):
        keys, values, default = self._tables(node)
        table: dict[Any, Any] = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            table.setdefault(k, v)
        x = inputs[0]
        flat = [table.get(k, default[0]) for k in x.reshape(-1).tolist()]
        return [np.array(flat, dtype=values.dtype).reshape(x.shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ctx.include("text.h")
        keys, values, default = self._tables(node)
        # sorted, first of equal keys kept (stable sort, then drop repeats)
        order = np.argsort(keys, kind="stable")
        keep = [i for j, i in enumerate(order) if j == 0 or keys[i] != keys[order[j - 1]]]
        if keys.dtype.kind == "f":
            keep = [i for i in keep if not np.isnan(keys[i])]
        keys, values = keys[keep], values[keep]
        x, y = node.inputs[0], node.outputs[0]
        n, m = x.size, len(keys)
        text = keys.dtype.kind == "S"
        kp = byte_param(ctx, keys, "keys") if text else ctx.param(keys if m else np.zeros(1, keys.dtype), "keys")
        vp = (byte_param(ctx, values, "values") if values.dtype.kind == "S"
              else ctx.param(values if m else default, "values"))
        if keys.dtype.kind == "S":
            kw, wx = keys.dtype.itemsize, width(x)
            find = (f"const uint8_t* s = {bytes_ptr(ctx, x)} + i * {wx};\n"
                    f"int64_t ls = ml_str_len(s, {wx});\n"
                    "while (lo < hi) {\n"
                    "  int64_t mid = lo + (hi - lo) / 2;\n"
                    f"  const uint8_t* k = (const uint8_t*){kp} + mid * {kw};\n"
                    f"  int c = ml_str_cmp(s, ls, k, ml_str_len(k, {kw}));\n"
                    "  if (c == 0) { at = mid; break; }\n"
                    "  if (c < 0) hi = mid; else lo = mid + 1;\n"
                    "}")
        else:
            find = (f"{ctype(x.dtype)} s = {ctx.ptr(x)}[i];\n"
                    "while (lo < hi) {\n"
                    "  int64_t mid = lo + (hi - lo) / 2;\n"
                    f"  if ({kp}[mid] == s) {{ at = mid; break; }}\n"
                    f"  if (s < {kp}[mid]) hi = mid; else lo = mid + 1;\n"
                    "}")
        if values.dtype.kind == "S":
            wy = width(y)
            dp = byte_param(ctx, default, "default")
            store = (f"const uint8_t* v = at >= 0 ? (const uint8_t*){vp} + at * {wy} "
                     f": (const uint8_t*){dp};\n"
                     f"memcpy({bytes_ptr(ctx, y, const=False)} + i * {wy}, v, {wy});")
        else:
            d = c_literal(default[0], values.dtype)
            store = f"{ctx.ptr(y)}[i] = at >= 0 ? {vp}[at] : ({ctype(values.dtype)}){d};"
        return (f"for (int64_t i = 0; i < {n}; ++i) {{\n"
                f"int64_t lo = 0, hi = {m}, at = -1;\n{find}\n{store}\n}}")
