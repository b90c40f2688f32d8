"""``TfIdfVectorizer`` (ONNX 9) over integer tokens, as C in the library.

The pool of n-grams (``pool_int64s``, grouped by length through ``ngram_counts``) is a
trie built at compile time and stored in the params blob as flat arrays (per trie node:
its key, its children's index range sorted by key, its n-gram id); at run time each
row is scanned as the ONNX spec and its reference (``onnx/reference/ops/
op_tfidf_vectorizer.py``, ONNX Runtime's algorithm) do: for each skip distance ``1 ..
max_skip_count + 1`` and each start, the trie is walked along tokens ``skip`` apart,
each n-gram of a length in ``[min_gram_length, max_gram_length]`` found counts once at
its ``ngram_indexes`` slot; 1-grams are counted at the first skip distance only. The
counts become TF (the count), IDF (``weights[i]`` or 1 where the count is non-zero) or
TFIDF (``weights[i] * count``, or the count), float32.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register

__all__ = ["TfIdfVectorizer", "ngram_trie"]

logger = logging.getLogger(__name__)

_MODES = {"TF": 0, "IDF": 1, "TFIDF": 2}


def ngram_trie(node: Node) -> tuple[list[int], list[list[int]], list[int]]:
    """The pool's trie: ``(keys, children, ids)`` per trie node (node 0 the root, key
    unused); ``children[k]`` lists child nodes sorted by key; ``ids[k]`` is the n-gram
    id (1-based index into ``ngram_indexes``, 0: no n-gram ends here). N-grams of a
    length outside ``[min_gram_length, max_gram_length]`` take ids but are not stored,
    as in the reference."""
    pool = [int(v) for v in node.attrs.get("pool_int64s", [])]
    counts = [int(c) for c in node.attrs["ngram_counts"]]
    lo, hi = int(node.attrs["min_gram_length"]), int(node.attrs["max_gram_length"])
    keys, kids, ids = [0], [{}], [0]
    ngram_id = 1
    for size, start in enumerate(counts, 1):
        end = counts[size] if size < len(counts) else len(pool)
        grams = max(end - start, 0) // size
        for g in range(grams):
            if not lo <= size <= hi:
                ngram_id += 1
                continue
            at = 0
            for key in pool[start + g * size: start + (g + 1) * size]:
                nxt = kids[at].get(key)
                if nxt is None:
                    nxt = kids[at][key] = len(keys)
                    keys.append(key)
                    kids.append({})
                    ids.append(0)
                at = nxt
            ids[at] = ngram_id
            ngram_id += 1
    children = [[c for _, c in sorted(k.items())] for k in kids]
    return keys, children, ids


@register
class TfIdfVectorizer(OpDef):
    """ONNX ``TfIdfVectorizer`` (9): int32/int64 tokens ``[C]`` or ``[B, C]`` -> float32
    ``[max(ngram_indexes) + 1]`` or ``[B, max(ngram_indexes) + 1]``.

    Raises
    ------
    UnsupportedOpError
        String tokens (``pool_strings``) or another input type.
    ShapeError
        An input of rank above 2.
    """

    op_type, since_version = "TfIdfVectorizer", 9
    defaults = {"pool_int64s": [], "pool_strings": [], "weights": []}

    def _out(self, node: Node) -> int:
        return max(int(i) for i in node.attrs["ngram_indexes"]) + 1

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        where = f"TfIdfVectorizer (node {node.name!r})"
        if self.attr(node, "pool_strings") or x.dtype not in (np.int32, np.int64):
            raise UnsupportedOpError(f"{where}: {x.dtype} tokens are not supported (int32 "
                                     "and int64 with pool_int64s are)")
        if len(x.shape) > 2:
            raise ShapeError(f"{where}: input must be [C] or [B, C], got {list(x.shape)}")
        out = self._out(node)
        return [((x.shape[0], out) if len(x.shape) == 2 else (out,), np.dtype(np.float32))]

    def _counts(self, node: Node, x: np.ndarray) -> np.ndarray:
        keys, children, ids = ngram_trie(node)
        index = [dict((keys[c], c) for c in cs) for cs in children]
        lo, hi = int(node.attrs["min_gram_length"]), int(node.attrs["max_gram_length"])
        slots = [int(i) for i in node.attrs["ngram_indexes"]]
        rows = x.reshape(-1 if x.ndim < 2 else x.shape[0], x.shape[-1] if x.ndim else 1)
        freq = np.zeros((rows.shape[0], self._out(node)), np.int64)
        for r, row in enumerate(rows):
            first = lo
            for skip in range(1, int(node.attrs["max_skip_count"]) + 2):
                for start in range(len(row)):
                    if start + skip * (first - 1) >= len(row):
                        break
                    at, size, item = 0, 1, start
                    while index[at] and size <= hi and item < len(row):
                        at = index[at].get(int(row[item]))
                        if at is None:
                            break
                        if size >= first and ids[at]:
                            freq[r, slots[ids[at] - 1]] += 1
                        size, item = size + 1, item + skip
                if first == 1:  # unigrams do not depend on the skip: counted once
                    first = 2
                    if first > hi:
                        break
        return freq

    def reference(self, node: Node, inputs):
        (shape, _), = self.infer(node)
        freq = self._counts(node, np.asarray(inputs[0]))
        w = [float(v) for v in self.attr(node, "weights")]
        mode = node.attrs["mode"]
        if mode == "TF" or (mode == "TFIDF" and not w):
            y = freq.astype(np.float64)
        elif mode == "IDF":
            y = np.where(freq > 0, np.array(w) if w else 1.0, 0.0)
        else:
            y = np.array(w) * freq
        return [y.astype(np.float32).reshape(shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        mode = node.attrs["mode"]
        if mode not in _MODES:
            raise UnsupportedOpError(f"TfIdfVectorizer (node {node.name!r}): mode {mode!r}")
        keys, children, ids = ngram_trie(node)
        flat, begin = [], []
        for cs in children:
            begin.append(len(flat))
            flat.extend(cs)
        begin.append(len(flat))
        slots = [int(i) for i in node.attrs["ngram_indexes"]]
        w = [float(v) for v in self.attr(node, "weights")]
        out = self._out(node)
        rows = x.shape[0] if len(x.shape) == 2 else 1
        cols = x.shape[-1] if len(x.shape) else 1
        lo, hi = int(node.attrs["min_gram_length"]), int(node.attrs["max_gram_length"])
        p_keys = ctx.param(np.array(keys, np.int64), "trie_keys")
        p_kids = ctx.param(np.array(flat or [0], np.int32), "trie_children")
        p_beg = ctx.param(np.array(begin, np.int32), "trie_begin")
        p_ids = ctx.param(np.array(ids, np.int32), "trie_ids")
        p_slot = ctx.param(np.array(slots or [0], np.int32), "slots")
        p_w = ctx.param(np.array(w or [0.0], np.float64), "weights")
        fn = ctx.unique("tfidf_row")
        ctx.helper(f"""
/* one row of TfIdfVectorizer (ops/math/tfidf.py): counts into freq[{out}] */
static void {fn}(const {'int64_t' if x.dtype == np.int64 else 'int32_t'}* row, int64_t* freq,
    const int64_t* keys, const int32_t* kids, const int32_t* beg, const int32_t* ids,
    const int32_t* slot) {{
  int64_t first = {lo};
  for (int64_t skip = 1; skip <= {int(node.attrs["max_skip_count"]) + 1}; ++skip) {{
    for (int64_t start = 0; start < {cols}; ++start) {{
      if (start + skip * (first - 1) >= {cols}) break;
      int32_t at = 0;
      for (int64_t size = 1, item = start;
           beg[at] < beg[at + 1] && size <= {hi} && item < {cols}; ++size, item += skip) {{
        const int64_t key = (int64_t)row[item];
        int32_t a = beg[at], b = beg[at + 1];
        while (a < b) {{ int32_t m = (a + b) / 2; if (keys[kids[m]] < key) a = m + 1; else b = m; }}
        if (a == beg[at + 1] || keys[kids[a]] != key) break;
        at = kids[a];
        if (size >= first && ids[at]) freq[slot[ids[at] - 1]] += 1;
      }}
    }}
    if (first == 1) {{ first = 2; if (first > {hi}) break; }}
  }}
}}""")
        mode_id = _MODES[mode]
        if mode_id == 0 or (mode_id == 2 and not w):
            value = "(float)f"
        elif mode_id == 1:
            value = f"f > 0 ? (float){p_w}[i] : 0.0f" if w else "f > 0 ? 1.0f : 0.0f"
        else:
            value = f"(float)({p_w}[i] * (double)f)"
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        freq = ctx.scratch(8 * out)
        return (
            f"int64_t* freq = (int64_t*){freq};\n"
            f"for (int64_t r = 0; r < {rows}; ++r) {{\n"
            f"  for (int64_t i = 0; i < {out}; ++i) freq[i] = 0;\n"
            f"  {fn}({xp} + r * {cols}, freq, {p_keys}, {p_kids}, {p_beg}, {p_ids}, {p_slot});\n"
            f"  for (int64_t i = 0; i < {out}; ++i) {{ const int64_t f = freq[i];"
            f" {yp}[r * {out} + i] = {value}; }}\n}}"
        )
