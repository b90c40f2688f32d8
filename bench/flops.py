"""FLOP counts of a model's Conv / ConvTranspose / Gemm / MatMul ops, from their shapes,
and their achieved GFLOP/s against the machine's peak (issue 14's tables).

:func:`model_work` imports the model through monolib's own pipeline (``prepare`` and the
C backend's ``host_passes``: the fused ops a compile generates, named as the library's
profile names them) and
returns one :class:`OpWork` per fused op whose anchor is one of :data:`COUNTED`:
its signature text, its class (``conv3x3``, ``conv1x1``, ``dw3x3``, ``gemm``...) and its
flops (:func:`node_flops`: a multiply and an add per term, the direct algorithm's count:
Winograd's saved multiplies are credited, as is usual). :func:`by_signature` joins them
with per-op times (``gm.executor.profile``) and the algorithm chosen per node
(``monolib.compiler.tuning.report``) into one row per distinct signature.

    python bench/flops.py MODEL.onnx        # per-signature FLOP counts of one model
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COUNTED", "OpWork", "SignatureRow", "by_class", "by_signature", "main", "model_work",
    "node_flops", "op_class", "signature_text",
]

logger = logging.getLogger(__name__)

#: Anchor op types whose work is counted (float multiply-adds that dominate a CNN).
COUNTED = ("Conv", "ConvTranspose", "Gemm", "MatMul", "FusedMatMul")


def _prod(xs: Sequence[int]) -> int:
    return math.prod(int(x) for x in xs)


def node_flops(op: str, in_shapes: Sequence[Sequence[int] | None], out_shape: Sequence[int],
               attrs: Mapping[str, Any] | None = None) -> int:
    """Flops of one node (2 per multiply-add; bias and epilogue not counted).

    Parameters
    ----------
    op : str
        One of :data:`COUNTED`.
    in_shapes : sequence of shapes
        The node's input shapes (X, W[, B] / A, B[, C]).
    out_shape : sequence of int
        Output 0's shape.
    attrs : mapping, optional
        ``transA`` of Gemm / FusedMatMul (the reduced axis of A).

    Returns
    -------
    int
        Conv: ``2 * prod(Y) * prod(W[1:])`` (each output sums ``C_in/group * prod(K)``
        terms); ConvTranspose: ``2 * prod(X) * prod(W[1:])`` (each input pixel scatters
        into ``C_out/group * prod(K)`` outputs); Gemm / MatMul: ``2 * prod(Y) * K``.
    """
    attrs = attrs or {}
    if op == "Conv":
        return 2 * _prod(out_shape) * _prod(in_shapes[1][1:])
    if op == "ConvTranspose":
        return 2 * _prod(in_shapes[0]) * _prod(in_shapes[1][1:])
    if op in ("Gemm", "MatMul", "FusedMatMul"):
        a = in_shapes[0]
        if op == "Gemm":
            k = a[0] if attrs.get("transA") else a[1]
        else:  # MatMul's 1-D A is a row; FusedMatMul's transA swaps A's last two axes
            k = a[-2] if (attrs.get("transA") and len(a) >= 2) else a[-1]
        return 2 * _prod(out_shape) * int(k)
    raise ValueError(f"no FLOP count for op {op!r}")


def op_class(op: str, x: Sequence[int], w: Sequence[int], group: int) -> str:
    """The class a target is stated for: ``conv3x3`` / ``conv1x1`` (ungrouped 2-D),
    ``dw3x3`` (depthwise), ``gconv3x3`` (grouped), ``conv1d k5``, ``convT4x4``, ``gemm``,
    ``matmul``."""
    if op in ("Gemm", "MatMul", "FusedMatMul"):
        return "gemm" if op == "Gemm" else "matmul"
    k = "x".join(str(int(d)) for d in w[2:])
    if op == "ConvTranspose":
        return f"convT{k}"
    if len(w) == 3:
        return f"conv1d k{k}"
    if group == 1:
        return f"conv{k}"
    return f"dw{k}" if group == x[1] == w[0] else f"gconv{k}"


def signature_text(op: str, in_shapes: Sequence[Sequence[int] | None], out_shape: Sequence[int],
                   attrs: Mapping[str, Any], fused: Sequence[str] = (),
                   const_b: bool = False) -> str:
    """A short, distinct text of a node's signature, e.g.
    ``"conv3x3/1 64->64 56x56 +Relu"`` or ``"gemm 1x2048 * 2048x1000 const B"``."""
    tail = "".join(f" +{t}" for t in fused)
    if op in ("Conv", "ConvTranspose"):
        x, w = in_shapes[0], in_shapes[1]
        group = int(attrs.get("group", 1))
        strides = attrs.get("strides") or [1] * (len(x) - 2)
        s = str(strides[0]) if len(set(strides)) == 1 else "x".join(map(str, strides))
        cout = w[0] if op == "Conv" else w[1] * group
        batch = f"N{x[0]} " if x[0] != 1 else ""
        dil = attrs.get("dilations") or []
        d = f" dil{dil[0]}" if any(v != 1 for v in dil) else ""
        g = f" g{group}" if group > 1 and not (op == "Conv" and group == x[1] == w[0]) else ""
        return (f"{op_class(op, x, w, group)}/{s}{d} {batch}{x[1]}->{cout} "
                f"{'x'.join(map(str, x[2:]))}{g}{tail}")
    a, b = in_shapes[0], in_shapes[1]
    ta = "^T" if attrs.get("transA") else ""
    tb = "^T" if attrs.get("transB") else ""
    return (f"{op_class(op, a, b, 1)} {'x'.join(map(str, a))}{ta} * {'x'.join(map(str, b))}{tb}"
            f"{' const B' if const_b else ''}{tail}")


@dataclass(frozen=True)
class OpWork:
    """One counted fused op: its name (the profile's), anchor op type, signature text,
    class (:func:`op_class`) and flops."""

    name: str
    op: str
    signature: str
    cls: str
    flops: int


def model_work(model: Any, shapes: Mapping | None = None,
               constants: Mapping | None = None) -> list[OpWork]:
    """The counted ops of ``model`` in run order (see the module docstring).

    Parameters
    ----------
    model : str, path, bytes or onnx.ModelProto
    shapes, constants : mapping, optional
        As for ``monolib.compile``; the shapes must be static (an op with a run-time
        dim is left out: its work is not known).
    """
    from monolib.compiler.backends.c.backend import host_passes
    from monolib.compiler.pipeline import prepare

    graph, fusion, plan = prepare(model, dict(shapes) if shapes else None,
                                  dict(constants) if constants else None)
    fusion, _ = host_passes(graph, fusion, plan)  # the fused ops the C backend runs
    out = []
    for fop in fusion.ops:
        if fop.kind == "band":  # a 1x1 + depthwise pair: one op in the profile
            parts = [w for p in fop.parts if (w := _work(p)) is not None]
            if len(parts) == len(fop.parts):
                out.append(OpWork(fop.name, "Conv", " then ".join(w.signature for w in parts),
                                  "+".join(w.cls for w in parts), sum(w.flops for w in parts)))
            continue
        work = _work(fop)
        if work is not None:
            out.append(work)
    return out


def _work(fop: Any) -> OpWork | None:
    """The OpWork of one fused op of kind ``op`` with a counted anchor, else None."""
    from monolib.compiler.symbolic import is_dim

    node = fop.anchor
    if fop.kind != "op" or node is None or node.op_type not in COUNTED:
        return None
    ins = [None if v is None else tuple(v.shape) for v in node.inputs]
    y = tuple(node.outputs[0].shape)
    if any(is_dim(d) for s in [*ins[:2], y] if s is not None for d in s):
        logger.info("%s: run-time dims, not counted", fop.name)
        return None
    attrs = dict(node.attrs)
    const_b = len(node.inputs) > 1 and node.inputs[1].const is not None
    sig = signature_text(node.op_type, ins, y, attrs, fop.fused_types,
                         const_b and node.op_type not in ("Conv", "ConvTranspose"))
    cls = (op_class(node.op_type, ins[0], ins[1], int(attrs.get("group", 1)))
           if node.op_type in ("Conv", "ConvTranspose") else op_class(node.op_type, (), (), 1))
    return OpWork(fop.name, node.op_type, sig, cls, node_flops(node.op_type, ins, y, attrs))


@dataclass
class SignatureRow:
    """One distinct signature of a model: how many ops have it, their total flops,
    total time per thread count (seconds; absent when not profiled), the algorithms
    chosen and why (from ``monolib.compiler.tuning.report``)."""

    signature: str
    cls: str
    count: int = 0
    flops: int = 0
    seconds: dict[int, float] = field(default_factory=dict)
    algos: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)

    def gflops(self, threads: int) -> float | None:
        """Achieved GFLOP/s at ``threads`` (None when not timed)."""
        s = self.seconds.get(threads)
        return self.flops / s / 1e9 if s else None


def by_signature(works: Sequence[OpWork], profiles: Mapping[int, Sequence[Mapping]],
                 choices: Sequence[Any] = ()) -> list[SignatureRow]:
    """Rows per distinct signature, largest total 1-thread time first.

    Parameters
    ----------
    works : sequence of OpWork
    profiles : mapping
        Thread count -> ``gm.executor.profile()`` rows (``name``, ``time_ms``).
    choices : sequence
        ``NodeChoice`` s (``node``, ``choice``, ``why``); ops without one show
        ``"fixed"`` (a single way: MatMul, a Gemm with a constant A), a band op
        (a 1x1 + depthwise pair, class ``conv1x1+dw3x3``...) ``"band"``.
    """
    by_node = {c.node: c for c in choices}
    times = {t: {r["name"]: r["time_ms"] * 1e-3 for r in rows} for t, rows in profiles.items()}
    rows: dict[str, SignatureRow] = {}
    untimed: set[tuple[str, int]] = set()  # (signature, threads) with an op not profiled
    for w in works:
        row = rows.setdefault(w.signature, SignatureRow(w.signature, w.cls))
        row.count += 1
        row.flops += w.flops
        for t, named in times.items():
            if w.name in named:
                row.seconds[t] = row.seconds.get(t, 0.0) + named[w.name]
            else:
                untimed.add((w.signature, t))
        c = by_node.get(w.name)
        algo, why = (c.choice, c.why) if c is not None else ("fixed", "single way")
        if "+" in w.cls:  # a band op (model_work): no per-node choice
            algo, why = "band", "1x1 + depthwise by bands of rows (intermediate >= 4x L2)"
        if algo not in row.algos:
            row.algos.append(algo)
            row.why.append(why)
    for sig, t in untimed:  # a partial sum would overstate the GFLOP/s
        rows[sig].seconds.pop(t, None)
    return sorted(rows.values(), key=lambda r: -r.seconds.get(1, 0.0))


def by_class(rows: Sequence[SignatureRow]) -> dict[str, SignatureRow]:
    """The rows summed per class (``conv3x3``...), for the targets stated per class."""
    out: dict[str, SignatureRow] = {}
    for r in rows:
        c = out.setdefault(r.cls, SignatureRow(r.cls, r.cls))
        c.count += r.count
        c.flops += r.flops
        for t, s in r.seconds.items():
            c.seconds[t] = c.seconds.get(t, 0.0) + s
    for c in out.values():  # a thread count is summed only where every row was timed
        c.seconds = {t: s for t, s in c.seconds.items()
                     if all(t in r.seconds for r in rows if r.cls == c.cls)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print each distinct signature's count and GFLOP of one ONNX file."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    works = model_work(args[0])
    for r in by_signature(works, {}):
        print(f"{r.count:3d} x {r.signature:60s} {r.flops / 1e9:8.3f} GFLOP")
    print(f"total {sum(w.flops for w in works) / 1e9:.3f} GFLOP in {len(works)} ops")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
