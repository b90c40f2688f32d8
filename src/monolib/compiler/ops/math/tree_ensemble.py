"""``TreeEnsemble`` (ai.onnx.ml 5) as C in the library.

X ``[N, F]`` (float32/float64) -> Y ``[N, n_targets]`` of X's type. Each tree is walked
from its root (``tree_roots``; a root whose true and false edges are the same leaf is
that leaf) by the node's comparison of ``X[feature]`` with its split: BRANCH_LEQ, LT,
GTE, GT, EQ, NEQ, or MEMBER (the value is one of the node's set; the sets are
``membership_values`` split at NaNs, in the order the MEMBER nodes appear in
``nodes_modes``, as the spec says), the true edge also taken on a NaN where
``nodes_missing_value_tracks_true`` says so. Each reached leaf adds its weight to its
target (``aggregate_function`` SUM, AVERAGE: weight / number of trees, MIN, MAX), in
double then rounded to Y's type, tree by tree (ONNX's reference). ``post_transform``
(which ONNX's reference skips) as ONNX Runtime applies it: SOFTMAX, LOGISTIC,
SOFTMAX_ZERO (zeros stay 0), PROBIT (``sqrt(2) * erfinv(2p - 1)`` with Winitzki's
approximation of erfinv, a = 0.147, as ONNX Runtime computes it). The codes are the
spec's: 1 SOFTMAX, 2 LOGISTIC (ONNX Runtime 1.32 reads them the other way round).

The trees are checked at compile time (indices in range, every walk ends at a leaf)
and stored in the params blob as flat per-node arrays.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...backends.cstyle import ctype
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register

__all__ = ["TreeEnsemble", "tree_tables"]

logger = logging.getLogger(__name__)

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MEMBER = 6


def _ints(node: Node, name: str) -> list[int]:
    return [int(v) for v in np.asarray(node.attrs.get(name, [])).reshape(-1)]


def tree_tables(node: Node, features: int) -> dict[str, np.ndarray]:
    """The ensemble as flat arrays (node-indexed: ``feat, mode, split, tnext, fnext,
    tleaf, fleaf, miss, mbeg, mend``; ``members``; leaf-indexed ``lw`` (float64),
    ``lt``; tree-indexed ``roots, rleaf``) and ``n_targets``.

    Raises
    ------
    ShapeError
        Attribute lengths that disagree, an index out of range, a feature id not below
        ``features``, a MEMBER node without a set, or a tree with a cycle; the message
        names the node.
    """
    where = f"TreeEnsemble (node {node.name!r})"
    modes = _ints(node, "nodes_modes")
    n = len(modes)
    t = {k: _ints(node, k) for k in ("nodes_featureids", "nodes_truenodeids",
                                     "nodes_falsenodeids", "nodes_trueleafs",
                                     "nodes_falseleafs")}
    splits = np.asarray(node.attrs["nodes_splits"], np.float64).reshape(-1)
    miss = _ints(node, "nodes_missing_value_tracks_true") or [0] * n
    lw = np.asarray(node.attrs["leaf_weights"], np.float64).reshape(-1)
    lt = _ints(node, "leaf_targetids")
    roots = _ints(node, "tree_roots")
    if any(len(v) != n for v in (*t.values(), splits, miss)) or len(lt) != len(lw):
        raise ShapeError(f"{where}: the per-node (or per-leaf) attributes differ in length")
    n_targets = node.attrs.get("n_targets")
    n_targets = int(n_targets) if n_targets is not None else max(lt, default=-1) + 1
    if any(not 0 <= i < n_targets for i in lt):
        raise ShapeError(f"{where}: a leaf target id is outside [0, {n_targets})")
    if any(not 0 <= f < features for f, m in zip(t["nodes_featureids"], modes)):
        raise ShapeError(f"{where}: a feature id is outside [0, {features})")
    if any(m not in range(7) for m in modes):
        raise ShapeError(f"{where}: nodes_modes must be 0..6, got {sorted(set(modes))}")
    # the MEMBER sets, NaN-separated, in node order
    values = np.asarray(node.attrs.get("membership_values", []), np.float64).reshape(-1)
    sets: list[list[float]] = []
    cur: list[float] = []
    for v in values:
        if math.isnan(v):
            sets.append(cur)
            cur = []
        else:
            cur.append(float(v))
    mbeg, mend, members = [0] * n, [0] * n, []
    it = iter(sets)
    for i, m in enumerate(modes):
        if m == _MEMBER:
            s = next(it, None)
            if s is None:
                raise ShapeError(f"{where}: node {i} is a MEMBER node without a set in "
                                 "membership_values")
            mbeg[i], mend[i] = len(members), len(members) + len(s)
            members.extend(s)
    rleaf = [int(t["nodes_trueleafs"][r] and t["nodes_falseleafs"][r]
                 and t["nodes_truenodeids"][r] == t["nodes_falsenodeids"][r]) for r in roots]

    def check(i: int, leaf: bool, depth: int) -> None:
        if not 0 <= i < (len(lw) if leaf else n):
            raise ShapeError(f"{where}: a {'leaf' if leaf else 'node'} index {i} is out of range")
        if leaf:
            return
        if depth > n:
            raise ShapeError(f"{where}: a tree has a cycle through node {i}")
        check(t["nodes_truenodeids"][i], bool(t["nodes_trueleafs"][i]), depth + 1)
        check(t["nodes_falsenodeids"][i], bool(t["nodes_falseleafs"][i]), depth + 1)

    for r, leaf in zip(roots, rleaf):
        check(r, bool(leaf), 0)
    return {
        "feat": np.array(t["nodes_featureids"] or [0], np.int32),
        "mode": np.array(modes or [0], np.uint8),
        "split": np.array(list(splits) or [0.0], np.float64),
        "tnext": np.array(t["nodes_truenodeids"] or [0], np.int32),
        "fnext": np.array(t["nodes_falsenodeids"] or [0], np.int32),
        "tleaf": np.array(t["nodes_trueleafs"] or [0], np.uint8),
        "fleaf": np.array(t["nodes_falseleafs"] or [0], np.uint8),
        "miss": np.array(miss or [0], np.uint8),
        "mbeg": np.array(mbeg or [0], np.int32),
        "mend": np.array(mend or [0], np.int32),
        "members": np.array(members or [0.0], np.float64),
        "lw": np.array(list(lw) or [0.0], np.float64),
        "lt": np.array(lt or [0], np.int32),
        "roots": np.array(roots or [0], np.int32),
        "rleaf": np.array(rleaf or [0], np.uint8),
        "n_targets": n_targets,
    }


def _compare(mode: int, v: float, split: float, members) -> bool:
    return [v <= split, v < split, v >= split, v > split, v == split, v != split,
            v in members][mode]


def _erfinv(x: np.ndarray) -> np.ndarray:
    """Winitzki's approximation in float32, as ONNX Runtime's ``ErfInv``."""
    f = np.float32
    sgn = np.where(x < 0, f(-1), f(1)).astype(f)
    x = ((f(1) - x) * (f(1) + x)).astype(f)
    lg = np.log(x).astype(f)
    v = (f(2) / (f(3.14159) * f(0.147)) + f(0.5) * lg).astype(f)
    v2 = (f(1) / f(0.147) * lg).astype(f)
    return (sgn * np.sqrt(-v + np.sqrt(v * v - v2))).astype(f)


@register
class TreeEnsemble(OpDef):
    """``ai.onnx.ml`` ``TreeEnsemble`` (5): see the module docstring.

    Raises
    ------
    UnsupportedOpError
        An X type other than float32/float64, an unknown aggregate function or post
        transform.
    ShapeError
        X not 2-D, or inconsistent tree attributes (:func:`tree_tables`).
    """

    op_type, domain, since_version = "TreeEnsemble", "ai.onnx.ml", 5
    defaults = {"n_targets": None, "membership_values": [], "nodes_hitrates": [],
                "nodes_missing_value_tracks_true": []}

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        where = f"TreeEnsemble (node {node.name!r})"
        if x.dtype not in _FLOATS:
            raise UnsupportedOpError(f"{where}: X of type {x.dtype} is not supported")
        if len(x.shape) != 2:
            raise ShapeError(f"{where}: X must be [N, F], got {list(x.shape)}")
        if int(node.attrs["aggregate_function"]) not in range(4):
            raise UnsupportedOpError(f"{where}: aggregate_function "
                                     f"{node.attrs['aggregate_function']} is not 0..3")
        if int(node.attrs["post_transform"]) not in range(5):
            raise UnsupportedOpError(f"{where}: post_transform "
                                     f"{node.attrs['post_transform']} is not 0..4")
        tab = tree_tables(node, int(x.shape[1]))
        return [((x.shape[0], tab["n_targets"]), x.dtype)]

    def reference(self, node: Node, inputs):
        x = np.asarray(inputs[0])
        tab = tree_tables(node, x.shape[1])
        agg, post = int(node.attrs["aggregate_function"]), int(node.attrs["post_transform"])
        fill = {2: np.finfo(x.dtype).max, 3: np.finfo(x.dtype).min}.get(agg, 0)
        y = np.full((x.shape[0], tab["n_targets"]), fill, x.dtype)
        ntrees = len(_ints(node, "tree_roots"))
        for r, row in enumerate(x):
            for root, leaf in zip(tab["roots"][:ntrees], tab["rleaf"]):
                i, leaf = int(root), bool(leaf)
                while not leaf:
                    v = float(row[tab["feat"][i]])
                    members = tab["members"][tab["mbeg"][i]:tab["mend"][i]].tolist()
                    c = _compare(int(tab["mode"][i]), v, x.dtype.type(tab["split"][i]), members)
                    c = c or (bool(tab["miss"][i]) and math.isnan(v))
                    i, leaf = ((int(tab["tnext"][i]), bool(tab["tleaf"][i])) if c else
                               (int(tab["fnext"][i]), bool(tab["fleaf"][i])))
                w, k = float(tab["lw"][i]), int(tab["lt"][i])
                if agg == 1:
                    y[r, k] = float(y[r, k]) + w
                elif agg == 0:
                    y[r, k] = float(y[r, k]) + w / ntrees
                elif agg == 2:
                    y[r, k] = min(float(y[r, k]), w)
                else:
                    y[r, k] = max(float(y[r, k]), w)
        return [self._post(post, y)]

    @staticmethod
    def _post(post: int, y: np.ndarray) -> np.ndarray:
        if post == 1:
            e = np.exp(y - y.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).astype(y.dtype)
        if post == 2:
            return (1 / (1 + np.exp(-y))).astype(y.dtype)
        if post == 3:
            e = np.where(y != 0, np.exp(y - y.max(axis=1, keepdims=True)), 0)
            s = e.sum(axis=1, keepdims=True)
            return np.where(s > 0, e / np.where(s > 0, s, 1), 0).astype(y.dtype)
        if post == 4:
            return (np.float32(1.41421356) * _erfinv(y.astype(np.float32) * 2 - 1)).astype(y.dtype)
        return y

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        rows, feats = x.shape
        tab = tree_tables(node, int(feats))
        nt = tab["n_targets"]
        ntrees = len(_ints(node, "tree_roots"))
        agg, post = int(node.attrs["aggregate_function"]), int(node.attrs["post_transform"])
        T = ctype(x.dtype)
        p = {k: ctx.param(v, f"te_{k}") for k, v in tab.items() if k != "n_targets"}
        p["split"] = ctx.param(tab["split"].astype(x.dtype), "te_split_t")
        p["members"] = ctx.param(tab["members"].astype(x.dtype), "te_members_t")
        fill = {2: "DBL_MAX" if T == "double" else "FLT_MAX",
                3: "-DBL_MAX" if T == "double" else "-FLT_MAX"}.get(agg, "0")
        acc = {1: "o[k] = ({T})((double)o[k] + w);",
               0: f"o[k] = ({{T}})((double)o[k] + w / {ntrees}.0);",
               2: "if (w < (double)o[k]) o[k] = ({T})w;",
               3: "if (w > (double)o[k]) o[k] = ({T})w;"}[agg].replace("{T}", T)
        post_c = {
            0: "",
            1: (f"{{ {T} mx = o[0]; for (int64_t k = 1; k < {nt}; ++k) if (o[k] > mx) mx = o[k];\n"
                f"  {T} s = 0; for (int64_t k = 0; k < {nt}; ++k) {{ o[k] = exp(o[k] - mx); s += o[k]; }}\n"
                f"  for (int64_t k = 0; k < {nt}; ++k) o[k] /= s; }}"),
            2: f"for (int64_t k = 0; k < {nt}; ++k) o[k] = ({T})1 / (({T})1 + exp(-o[k]));",
            3: (f"{{ {T} mx = o[0]; for (int64_t k = 1; k < {nt}; ++k) if (o[k] > mx) mx = o[k];\n"
                f"  {T} s = 0; for (int64_t k = 0; k < {nt}; ++k) if (o[k] != 0) {{ o[k] = exp(o[k] - mx); s += o[k]; }}\n"
                f"  if (s > 0) for (int64_t k = 0; k < {nt}; ++k) o[k] /= s; }}"),
            4: (f"for (int64_t k = 0; k < {nt}; ++k) {{\n"
                f"  float e = (float)o[k] * 2.0f - 1.0f, sg = e < 0 ? -1.0f : 1.0f;\n"
                f"  e = (1.0f - e) * (1.0f + e); float lg = logf(e);\n"
                f"  float v = 2.0f / (3.14159f * 0.147f) + 0.5f * lg, v2 = 1.0f / 0.147f * lg;\n"
                f"  o[k] = ({T})(1.41421356f * (sg * sqrtf(-v + sqrtf(v * v - v2)))); }}"),
        }[post]
        ctx.helper("#include <float.h>")
        fn = ctx.unique("tree_ensemble")
        ctx.helper(f"""
/* TreeEnsemble (ops/math/tree_ensemble.py): rows of X -> rows of Y */
static void {fn}(const {T}* restrict x, {T}* restrict y, const int32_t* feat,
    const uint8_t* mode, const {T}* split, const int32_t* tnext, const int32_t* fnext,
    const uint8_t* tleaf, const uint8_t* fleaf, const uint8_t* miss, const int32_t* mbeg,
    const int32_t* mend, const {T}* members, const double* lw, const int32_t* lt,
    const int32_t* roots, const uint8_t* rleaf) {{
  for (int64_t r = 0; r < {rows}; ++r) {{
    const {T}* xr = x + r * {feats};
    {T}* o = y + r * {nt};
    for (int64_t k = 0; k < {nt}; ++k) o[k] = ({T}){fill};
    for (int64_t t = 0; t < {ntrees}; ++t) {{
      int32_t i = roots[t]; int leaf = rleaf[t];
      while (!leaf) {{
        const {T} v = xr[feat[i]], s = split[i];
        int c = 0;
        switch (mode[i]) {{
          case 0: c = v <= s; break; case 1: c = v < s; break;
          case 2: c = v >= s; break; case 3: c = v > s; break;
          case 4: c = v == s; break; case 5: c = v != s; break;
          default: for (int32_t m = mbeg[i]; m < mend[i]; ++m) if (v == members[m]) {{ c = 1; break; }}
        }}
        if (!c && miss[i] && v != v) c = 1;
        if (c) {{ leaf = tleaf[i]; i = tnext[i]; }} else {{ leaf = fleaf[i]; i = fnext[i]; }}
      }}
      {{ const double w = lw[i]; const int32_t k = lt[i]; {acc} }}
    }}
    {post_c}
  }}
}}""")
        args = ", ".join(p[k] for k in ("feat", "mode", "split", "tnext", "fnext", "tleaf",
                                         "fleaf", "miss", "mbeg", "mend", "members", "lw",
                                         "lt", "roots", "rleaf"))
        return f"{fn}({ctx.ptr(x)}, {ctx.ptr(y)}, {args});"
