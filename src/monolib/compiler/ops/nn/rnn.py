"""The recurrent family's shared parts, and RNN (ONNX 7, 14, 22) and GRU (7, 14, 22).

Follows the ONNX specs: ``W [D, G*H, I]``, ``R [D, G*H, H]``, ``B [D, 2*G*H]`` (Wb then
Rb), optional ``sequence_lens [B]`` and ``initial_h [D, B, H]``; outputs ``Y [T, D, B,
H]`` and ``Y_h [D, B, H]`` (``layout=1``: X ``[B, T, I]``, Y ``[B, T, D, H]``, states
``[B, D, H]``). RNN (G=1): ``h = f(X W^T + h R^T + Wb + Rb)``. GRU (G=3, gates z, r,
h): ``z = f(..)``, ``r = f(..)``, ``h~ = g(X Wh^T + (r * h) Rh^T + Rbh + Wbh)`` or, with
``linear_before_reset``, ``g(X Wh^T + r * (h Rh^T + Rbh) + Wbh)``; ``h = (1 - z) h~ +
z h``. LSTM (G=4, ``lstm.py``) uses the generic recurrence here for what its fast
kernel does not do. ``clip`` bounds every activation's input but LSTM's last (of the cell state, as ONNX
Runtime does); ``activations`` with
``activation_alpha``/``activation_beta`` take the ONNX list (Relu, Tanh, Sigmoid,
Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus).

``sequence_lens`` is read at run time (ONNX Runtime's semantics, which the ONNX spec
implies: batch entry b runs ``len_b`` steps, a reverse direction starts at step
``len_b - 1``, Y is 0 past ``len_b`` and Y_h is the state after the last step).

Lowering per direction: one GEMM ``gx = X @ W^T + bias`` for all steps, then the steps.
LSTM and GRU with default activations and ``layout=0`` (:func:`fast_kernel`; ragged
``sequence_lens`` run row by row; a GRU without ``linear_before_reset`` in two passes a
step) run
``kernels/lstm.h`` on R packed in blocks of 16 hidden units (:func:`pack_recurrent`), over
the thread pool (two directions side by side, or a large step split by unit blocks).
The rest runs a generic C loop over batch entries and steps with the recurrent mat-vec
``h @ R^T`` (R transposed at compile time when constant, so the inner loop is
contiguous). Measured on a 2-core Zen 4, 1 thread, vs ONNX Runtime in the same run: GRU
T 24, H 256: generic loop 0.95x, packed kernel 0.85x; B 4, H 96: 1.21x and 0.71x; without
linear_before_reset (T 24, H 256) 0.99x and 0.91x (1.10x before its passes of 1 and 2
gates summed k in 2-4 interleaved partial sums: 1 or 2 FMA chains left its latency bare).
"""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, op_of, register
from ...symbolic import is_dim
from ...backends.cstyle import c_literal
from ._common import f32, require_float32
from ._gemm import bbuf_floats, gemm_call, include_gemm
from .gemm import a_operand, b_operand

__all__ = ["GRU", "RNN", "emit_recurrence", "fast_kernel", "input_projection",
           "pack_recurrent", "packed_recurrent", "recurrence_reference", "recurrent_weights",
           "rnn_dims", "seq_lens"]

logger = logging.getLogger(__name__)

#: op -> (gates, default activations per direction)
_KINDS = {"RNN": (1, ["tanh"]), "GRU": (3, ["sigmoid", "tanh"]),
          "LSTM": (4, ["sigmoid", "tanh", "tanh"])}
#: activation -> (C expression of x, default alpha, default beta); a/b: alpha/beta
_ACTS = {
    "relu": ("x > 0 ? x : 0", None, None),
    "tanh": ("ml_tanhf(x)", None, None),  # vmath.h's: vectorises, unlike libm's
    "sigmoid": ("1 / (1 + ml_expf(-x))", None, None),
    "affine": ("a * x + b", 1.0, 0.0),
    "leakyrelu": ("x >= 0 ? x : a * x", 0.01, None),
    "thresholdedrelu": ("x > a ? x : 0", 1.0, None),
    "scaledtanh": ("a * ml_tanhf(b * x)", 1.0, 1.0),
    "hardsigmoid": ("fmaxf(0.0f, fminf(1.0f, a * x + b))", 0.2, 0.5),
    "elu": ("x >= 0 ? x : a * (ml_expf(x) - 1)", 1.0, None),
    "softsign": ("x / (1 + fabsf(x))", None, None),
    "softplus": ("logf(1 + ml_expf(x))", None, None),
}


def _np_act(name: str, x: np.ndarray, a, b) -> np.ndarray:
    return {
        "relu": lambda: np.maximum(x, 0), "tanh": lambda: np.tanh(x),
        "sigmoid": lambda: 1 / (1 + np.exp(-x)), "affine": lambda: a * x + b,
        "leakyrelu": lambda: np.where(x >= 0, x, a * x),
        "thresholdedrelu": lambda: np.where(x > a, x, 0),
        "scaledtanh": lambda: a * np.tanh(b * x),
        "hardsigmoid": lambda: np.clip(a * x + b, 0, 1),
        "elu": lambda: np.where(x >= 0, x, a * (np.exp(x) - 1)),
        "softsign": lambda: x / (1 + np.abs(x)), "softplus": lambda: np.log1p(np.exp(x)),
    }[name]()


def _activations(node: Node, ndir: int) -> list[list[tuple[str, float, float]]]:
    """Per direction, the (name, alpha, beta) of each activation slot."""
    where = f"{node.op_type} node {node.name!r}"
    n = len(_KINDS[node.op_type][1])
    names = [a.lower() for a in node.attrs.get("activations") or []]
    if not names:
        names = _KINDS[node.op_type][1] * ndir
    elif len(names) == n and ndir == 2:
        names = names * 2
    elif len(names) == 2 * n and ndir == 1:  # RNN's schema default lists two Tanh
        names = names[:n]
    if len(names) != n * ndir:
        raise ShapeError(f"{where}: {len(names)} activations, expected {n * ndir}")
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    out = []
    for name in names:
        if name not in _ACTS:
            raise UnsupportedOpError(f"{where}: activation {name!r} is not supported")
        _, da, db = _ACTS[name]
        a = alphas.pop(0) if da is not None and alphas else da
        b = betas.pop(0) if db is not None and betas else db
        out.append((name, a, b))
    return [out[d * n:(d + 1) * n] for d in range(ndir)]


def rnn_dims(node: Node) -> tuple[int, int, int, int, int]:
    """(T, B, I, H, num_directions) of an RNN/GRU/LSTM node, checking every shape.

    Raises
    ------
    ShapeError
        Inconsistent shapes, direction or hidden_size.
    UnsupportedOpError
        LSTM's ``input_forget=1``, an unknown activation.
    """
    g = _KINDS[node.op_type][0]
    x, w, r = node.inputs[0], node.input(1), node.input(2)
    where = f"{node.op_type} node {node.name!r}"
    if node.op_type == "LSTM" and node.attrs["input_forget"]:
        raise UnsupportedOpError(f"{where}: input_forget=1 is not supported")
    if any(v is None or len(v.shape) != 3 for v in (x, w, r)):
        raise ShapeError(f"{where}: needs X, W, R of rank 3")
    layout = int(op_of(node).attr(node, "layout"))
    t, b, i = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    ndir, h = r.shape[0], r.shape[2]
    direction = node.attrs["direction"]
    want = 2 if direction == "bidirectional" else 1
    hs = node.attrs.get("hidden_size") or h
    if ndir != want or hs != h or w.shape != (ndir, g * h, i) or r.shape != (ndir, g * h, h):
        raise ShapeError(f"{where}: W {w.shape}, R {r.shape}, hidden_size {hs}, direction "
                         f"{direction!r} disagree with X {x.shape} (layout {layout})")
    state = (b, ndir, h) if layout else (ndir, b, h)
    expect = {3: (ndir, 2 * g * h), 4: (b,), 5: state}
    if node.op_type == "LSTM":
        expect.update({6: state, 7: (ndir, 3 * h)})
    for idx, shape in expect.items():
        v = node.input(idx)
        if v is not None and tuple(v.shape) != shape:
            raise ShapeError(f"{where}: input {idx} is {v.shape}, expected {shape}")
    _activations(node, ndir)
    return t, b, i, h, ndir


def recurrence_reference(node: Node, inputs: list) -> list[np.ndarray]:
    """NumPy (float64) RNN/GRU/LSTM with ``sequence_lens``, layouts, activations, clip."""
    t, nb, _, h, ndir = rnn_dims(node)
    kind = node.op_type
    g = _KINDS[kind][0]
    get = lambda i: inputs[i] if len(inputs) > i and inputs[i] is not None else None
    layout = int(op_of(node).attr(node, "layout"))
    sw = (lambda a: None if a is None else np.swapaxes(a, 0, 1)) if layout else (lambda a: a)
    x = sw(np.asarray(inputs[0], np.float64))
    w, r = (np.asarray(a, np.float64) for a in inputs[1:3])
    bias, seq, h0 = get(3), get(4), sw(get(5))
    c0, p = (sw(get(6)), get(7)) if kind == "LSTM" else (None, None)
    clip = float(node.attrs.get("clip") or 0.0)
    cl = (lambda v: np.clip(v, -clip, clip)) if clip > 0 else (lambda v: v)
    lbr = kind == "GRU" and bool(node.attrs["linear_before_reset"])
    acts = _activations(node, ndir)
    y = np.zeros((t, ndir, nb, h))
    hs, cs = np.zeros((ndir, nb, h)), np.zeros((ndir, nb, h))
    for d in range(ndir):
        f = [lambda v, a=a: _np_act(a[0], cl(v), a[1], a[2]) for a in acts[d]]
        if kind == "LSTM":  # the cell's output activation is not clipped (ONNX Runtime)
            f[2] = lambda v, a=acts[d][2]: _np_act(a[0], v, a[1], a[2])
        bb = np.zeros(2 * g * h) if bias is None else bias[d].astype(np.float64)
        wb, rb = bb[: g * h], bb[g * h:]
        pp = np.zeros(3 * h) if p is None else p[d].astype(np.float64)
        reverse = node.attrs["direction"] == "reverse" or d == 1
        for b in range(nb):
            n = t if seq is None else int(np.clip(seq[b], 0, t))
            hd = np.zeros(h) if h0 is None else h0[d, b].astype(np.float64)
            cd = np.zeros(h) if c0 is None else c0[d, b].astype(np.float64)
            for s in range(n):
                step = n - 1 - s if reverse else s
                gx = x[step, b] @ w[d].T + wb
                gh = hd @ r[d].T + rb
                if kind == "RNN":
                    hd = f[0](gx + gh)
                elif kind == "GRU":
                    z = f[0](gx[:h] + gh[:h])
                    rr = f[0](gx[h:2 * h] + gh[h:2 * h])
                    if lbr:
                        hh = f[1](gx[2 * h:] + rr * gh[2 * h:])
                    else:
                        hh = f[1](gx[2 * h:] + (rr * hd) @ r[d, 2 * h:].T + rb[2 * h:])
                    hd = (1 - z) * hh + z * hd
                else:
                    gi, go, gf, gc = np.split(gx + gh, 4)
                    i_ = f[0](gi + pp[:h] * cd)
                    f_ = f[0](gf + pp[2 * h:] * cd)
                    cd = f_ * cd + i_ * f[1](gc)
                    o_ = f[0](go + pp[h:2 * h] * cd)
                    hd = o_ * f[2](cd)
                y[step, d, b] = hd
            hs[d, b], cs[d, b] = hd, cd
    if layout:
        y, hs, cs = y.transpose(2, 0, 1, 3), hs.transpose(1, 0, 2), cs.transpose(1, 0, 2)
    dt = inputs[0].dtype
    return [a.astype(dt) for a in (y, hs, cs)][: len(node.outputs)]


def input_projection(node: Node, ctx: EmitContext, d: int, ap: str, gx: str, m: int, i: int,
                     gn: int, bias_const: np.ndarray | None, bias_expr: str | None) -> str:
    """C of the input GEMM of direction ``d`` of an LSTM/GRU/RNN node: ``gx[m, gn] = X @
    W[d]^T + bias`` with X packed at ``ap`` (``[m, i]``). The bias is a constant
    ``[gn]`` array (``bias_const``), else a C expression of element ``j`` computed at run
    time (``bias_expr``), or none."""
    w = node.inputs[1]
    code = ""
    bsrc = b_operand(ctx, w, i, gn, 1, i, offset=str(d * gn * i), const_offset=d * gn * i,
                     name=f"{node.name}.W{d}")
    fields = {"M": str(m), "N": str(gn), "K": str(i), "a": ap, "c": gx}
    if bsrc["kind"] != "ML_B_PACKED":
        fields["bbuf"] = f"(float*){ctx.scratch(4 * bbuf_floats(i, gn))}"
    if bias_const is not None:
        fields["bias_n"] = ctx.param(np.asarray(bias_const, np.float32), f"{node.name}.bias{d}")
    elif bias_expr is not None:
        buf = ctx.scratch(4 * gn)
        code += f"for (int64_t j = 0; j < {gn}; ++j) ((float*){buf})[j] = {bias_expr};\n"
        fields["bias_n"] = f"(const float*){buf}"
    return code + gemm_call(fields, bsrc) + "\n"


def recurrent_weights(node: Node, ctx: EmitContext, d: int, h: int, gn: int) -> tuple[str, str]:
    """(pointer to R[d]^T ``[h, gn]``, C that transposes it at run time or ""): R is
    transposed at compile time when constant."""
    r = node.inputs[2]
    if r.const is not None:
        return ctx.param(np.ascontiguousarray(r.const[d].T, np.float32), f"{node.name}.RT{d}"), ""
    buf = ctx.scratch(4 * h * gn)
    code = (
        f"for (int64_t k = 0; k < {h}; ++k) for (int64_t j = 0; j < {gn}; ++j)\n"
        f"  ((float*){buf})[k * {gn} + j] = {ctx.ptr(r)}[{d * gn * h} + j * {h} + k];\n"
    )
    return f"(const float*){buf}", code




#: hidden units per packed block of R: ``kernels/lstm.h``'s ML_LSTM_U
UNITS = 16


def fast_kernel(node: Node) -> bool:
    """True when ``kernels/lstm.h`` computes the LSTM or GRU ``node``: layout 0, default
    activations, ``sequence_lens`` absent or int32."""
    _, _, _, _, ndir = rnn_dims(node)
    acts = [a.lower() for a in node.attrs.get("activations") or []]
    seq = node.input(4)
    return (
        node.op_type in ("LSTM", "GRU")
        and not op_of(node).attr(node, "layout")
        and (not acts or acts == _KINDS[node.op_type][1] * ndir)
        and (seq is None or seq.dtype == np.int32)
    )


def seq_lens(node: Node, ctx: EmitContext) -> str:
    """C pointer to ``sequence_lens`` for ``kernels/lstm.h``, ``"0"`` when every row runs
    all T steps (absent, or constant and all T with a compile-time T)."""
    t = rnn_dims(node)[0]
    seq = node.input(4)
    if seq is None or (seq.const is not None and not is_dim(t) and bool(np.all(seq.const == t))):
        return "0"
    return f"(const int32_t*){ctx.ptr(seq)}"


def pack_recurrent(r: np.ndarray) -> np.ndarray:
    """R of one direction (``[G*H, H]``, ONNX layout, G gates) packed as
    ``kernels/lstm.h`` reads it: per block of :data:`UNITS` hidden units ``u0..u0+w``,
    ``[H][G][w]`` (the block's gate columns, row k after row k-1), the blocks one after
    another.

    Parameters
    ----------
    r : numpy.ndarray
        ``[G*H, H]`` float32.

    Returns
    -------
    numpy.ndarray
        ``[G*H*H]`` float32.
    """
    h = r.shape[1]
    rg = np.asarray(r, np.float32).reshape(-1, h, h)  # [gate][unit][k]
    return np.concatenate([rg[:, u0:u0 + UNITS, :].transpose(2, 0, 1).ravel()
                           for u0 in range(0, h, UNITS)])


def packed_recurrent(node: Node, ctx: EmitContext, h: int, ndir: int) -> tuple[str, str]:
    """(pointer to every direction's packed R, C that packs it at run time or ""): packed
    at compile time when R is constant; a GRU without ``linear_before_reset`` packs z, r
    and h apart (``kernels/lstm.h``'s two passes)."""
    r = node.inputs[2]
    gn = _KINDS[node.op_type][0] * h
    # gate groups packed apart: a GRU without linear_before_reset reads z, r then h
    split = node.op_type == "GRU" and not node.attrs["linear_before_reset"]
    parts = [(0, 2), (2, 1)] if split else [(0, gn // h)]
    if r.const is not None:
        packed = np.concatenate([pack_recurrent(r.const[d][q * h:(q + n) * h])
                                 for d in range(ndir) for q, n in parts])
        return ctx.param(packed, f"{node.name}.RP"), ""
    buf = ctx.scratch(4 * ndir * gn * h)
    code = "".join(f"ml_rnn_pack_r({h}, {n}, {ctx.ptr(r)} + {d * gn * h + q * h * h}, "
                   f"(float*){buf} + {d * gn * h + q * h * h});\n"
                   for d in range(ndir) for q, n in parts)
    return f"(const float*){buf}", code


def _gru_bias(ctx: EmitContext, bias, d: int, gn: int, folded: int):
    """The input projection's bias of direction ``d`` of a GRU: ``Wb`` plus the first
    ``folded`` columns of ``Rb`` (all of them unless ``linear_before_reset``, where
    ``Rbh`` stays inside the reset product). Returns ``(constant, None)`` as float64
    ``[3H]`` for a constant B, ``(None, C expression in j)`` for a run-time one, or
    ``(None, None)`` without B."""
    if bias is None:
        return None, None
    if bias.const is not None:
        bc = bias.const[d].astype(np.float64)
        rb = bc[gn:].copy()
        rb[folded:] = 0
        return bc[:gn] + rb, None
    bp = ctx.ptr(bias)
    return None, (f"{bp}[{d * 2 * gn} + j] + (j < {folded} ? {bp}[{d * 2 * gn + gn} + j] "
                  ": 0.0f)")


def _emit_gru(node: Node, ctx: EmitContext) -> str:
    """C of a GRU node that :func:`fast_kernel` accepts: the input GEMMs, then ``ml_gru``
    (``linear_before_reset=1``) or ``ml_gru0``."""
    require_float32(node, 0, 1, 2, 3, 5)
    t, b, i, h, ndir = rnn_dims(node)
    include_gemm(ctx)
    ctx.include("lstm.h")
    gn = 3 * h
    lbr = bool(node.attrs["linear_before_reset"])
    folded = 2 * h if lbr else gn  # Rb columns in the GEMM's bias (not Rbh with lbr)
    ap, code = a_operand(ctx, node.inputs[0], t * b, i, i, 1, name=node.name + ".X")
    gx = ctx.scratch(4 * ndir * t * b * gn)
    bias = node.input(3)
    for d in range(ndir):
        bias_c, bias_e = _gru_bias(ctx, bias, d, gn, folded)
        gxd = f"((float*){gx} + (int64_t){d} * ({t}) * ({b}) * {gn})"
        code += input_projection(node, ctx, d, ap, gxd, t * b, i, gn, bias_c, bias_e)
    rp, rcode = packed_recurrent(node, ctx, h, ndir)
    code += rcode
    bn = "0"  # Rbh, added inside the reset product (linear_before_reset only)
    if lbr and bias is not None and bias.const is not None:
        bn = ctx.param(np.ascontiguousarray(bias.const[:, 5 * h:], np.float32), f"{node.name}.rbh")
    elif lbr and bias is not None:
        buf = ctx.scratch(4 * ndir * h)
        code += (f"for (int64_t d = 0; d < {ndir}; ++d) for (int64_t j = 0; j < {h}; ++j)\n"
                 f"  ((float*){buf})[d * {h} + j] = {ctx.ptr(bias)}[d * {2 * gn} + {5 * h} + j];\n")
        bn = f"(const float*){buf}"
    outs = list(node.outputs) + [None] * 2
    y = ctx.ptr(outs[0]) if outs[0] is not None else "0"
    hout = ctx.ptr(outs[1]) if outs[1] is not None else f"(float*){ctx.scratch(4 * ndir * b * h)}"
    h0 = ctx.ptr(node.input(5)) if node.input(5) is not None else "0"
    clip = float(node.attrs.get("clip") or 0.0)
    reverse = int(node.attrs["direction"] == "reverse")
    hbuf = ctx.scratch(4 * ndir * 4 * b * h)
    fn = f"ml_gru({ndir}, {t}, {b}, {h}, {reverse}, (const float*){gx}, {rp}, {bn}, "
    if not lbr:
        fn = f"ml_gru0({ndir}, {t}, {b}, {h}, {reverse}, (const float*){gx}, {rp}, "
    return code + (
        f"{fn}{seq_lens(node, ctx)}, {h0}, "
        f"{f32(clip)}, {y}, {hout}, (float*){hbuf});\n"
    )


def _act_fn(ctx: EmitContext, act: tuple[str, float, float], clip: float) -> str:
    """Name of a C ``float f(float x)`` applying ``clip`` then the activation."""
    name, a, b = act
    fn = ctx.unique(f"ml_rnn_{name}")
    pre = f"x = fminf(fmaxf(x, {c_literal(-clip, np.float32)}), {c_literal(clip, np.float32)}); " if clip > 0 else ""
    consts = "".join(f"const float {k} = {c_literal(float(v), np.float32)}; " for k, v in (("a", a), ("b", b))
                     if v is not None)
    ctx.helper(f"static inline float {fn}(float x) {{ {pre}{consts}return {_ACTS[name][0]}; }}")
    return fn


def _matvec(v: str, rt: str, gn: int, h: int, off: int, n: int, dst: str) -> str:
    """C: ``dst[0:n] = v[0:h] @ RT[:, off:off+n]`` (RT is ``[h, gn]``, rows contiguous)."""
    return (
        f"      for (int64_t j = 0; j < {n}; ++j) {dst}[j] = 0.0f;\n"
        f"      for (int64_t k = 0; k < {h}; ++k) {{ const float vk = {v}[k]; "
        f"const float* rr = {rt} + k * {gn} + {off};\n"
        f"        for (int64_t j = 0; j < {n}; ++j) {dst}[j] += vk * rr[j]; }}\n"
    )


def emit_recurrence(node: Node, ctx: EmitContext) -> str:
    """C of an RNN/GRU/LSTM node with every feature of :func:`recurrence_reference`
    (float32): per direction the input GEMM, then the step loop per batch entry."""
    require_float32(node, 0, 1, 2, 3, 5, 6, 7)
    t, nb, i, h, ndir = rnn_dims(node)
    kind = node.op_type
    g = _KINDS[kind][0]
    gn = g * h
    layout = int(op_of(node).attr(node, "layout"))
    lbr = kind == "GRU" and bool(node.attrs["linear_before_reset"])
    clip = float(node.attrs.get("clip") or 0.0)
    acts = _activations(node, ndir)
    bias, seq, h0 = node.input(3), node.input(4), node.input(5)
    c0, p = (node.input(6), node.input(7)) if kind == "LSTM" else (None, None)
    outs = list(node.outputs) + [None] * 3
    y, yh, yc = outs[0], outs[1], outs[2] if kind == "LSTM" else None
    include_gemm(ctx)
    ctx.include("lstm.h")  # ml_sigmoidf, ml_clipf
    x = node.inputs[0]
    ap, code = a_operand(ctx, x, t * nb, i, i, 1, name=node.name + ".X")
    gx = f"((float*){ctx.scratch(4 * t * nb * gn)})"
    hv, cv = f"((float*){ctx.scratch(4 * h)})", f"((float*){ctx.scratch(4 * h)})"
    gh, tmp = f"((float*){ctx.scratch(4 * gn)})", f"((float*){ctx.scratch(8 * h)})"
    folded = 2 * h if lbr else gn  # Rb columns folded into the GEMM's bias
    yoff = (f"((b * {t} + tt) * {ndir} + d) * {h}" if layout
            else f"((tt * {ndir} + d) * {nb} + b) * {h}")
    soff = f"(b * {ndir} + d) * {h}" if layout else f"(d * {nb} + b) * {h}"
    row = f"(b * {t} + tt)" if layout else f"(tt * {nb} + b)"
    for d in range(ndir):
        bias_c, bias_e = _gru_bias(ctx, bias, d, gn, folded)
        code += input_projection(node, ctx, d, ap, gx, t * nb, i, gn, bias_c, bias_e)
        rt, rcode = recurrent_weights(node, ctx, d, h, gn)
        code += rcode
        f = [_act_fn(ctx, a, 0.0 if kind == "LSTM" and k == 2 else clip)
             for k, a in enumerate(acts[d])]
        reverse = int(node.attrs["direction"] == "reverse" or d == 1)
        if kind == "RNN":
            step = (_matvec(hv, rt, gn, h, 0, h, gh)
                    + f"      for (int64_t j = 0; j < {h}; ++j) {hv}[j] = {f[0]}(xg[j] + {gh}[j]);\n")
        elif kind == "GRU":
            step = _matvec(hv, rt, gn, h, 0, 2 * h, gh) + (
                f"      for (int64_t j = 0; j < {2 * h}; ++j) {tmp}[j] = {f[0]}(xg[j] + {gh}[j]);\n")
            if lbr:
                rbh = "0"
                if bias is not None:
                    rbh = (ctx.param(bias.const[d, gn + 2 * h:].astype(np.float32), "gru_rbh")
                           if bias.const is not None
                           else f"({ctx.ptr(bias)} + {d * 2 * gn + gn + 2 * h})")
                rb_j = f"({rbh} ? {rbh}[j] : 0.0f)" if rbh == "0" else f"{rbh}[j]"
                step += _matvec(hv, rt, gn, h, 2 * h, h, f"({gh} + {2 * h})") + (
                    f"      for (int64_t j = 0; j < {h}; ++j) {{ float hh = {f[1]}(xg[{2 * h} + j] + "
                    f"{tmp}[{h} + j] * ({gh}[{2 * h} + j] + {rb_j}));\n"
                    f"        {hv}[j] = (1 - {tmp}[j]) * hh + {tmp}[j] * {hv}[j]; }}\n")
            else:
                step += (
                    f"      for (int64_t j = 0; j < {h}; ++j) {tmp}[{h} + j] *= {hv}[j];\n"
                    + _matvec(f"({tmp} + {h})", rt, gn, h, 2 * h, h, f"({gh} + {2 * h})")
                    + f"      for (int64_t j = 0; j < {h}; ++j) {{ float hh = {f[1]}(xg[{2 * h} + j] + "
                    f"{gh}[{2 * h} + j]);\n"
                    f"        {hv}[j] = (1 - {tmp}[j]) * hh + {tmp}[j] * {hv}[j]; }}\n")
        else:
            pp = f"({ctx.ptr(p)} + {d * 3 * h})" if p is not None else None
            peep = (lambda k, pp=pp: f" + {pp}[{k * h} + j] * {cv}[j]" if pp else "")
            step = _matvec(hv, rt, gn, h, 0, gn, gh) + (
                f"      for (int64_t j = 0; j < {h}; ++j) {{\n"
                f"        const float* a = xg; const float* q = {gh};\n"
                f"        float ig = {f[0]}(a[j] + q[j]{peep(0)});\n"
                f"        float fg = {f[0]}(a[{2 * h} + j] + q[{2 * h} + j]{peep(2)});\n"
                f"        {cv}[j] = fg * {cv}[j] + ig * {f[1]}(a[{3 * h} + j] + q[{3 * h} + j]);\n"
                f"        float og = {f[0]}(a[{h} + j] + q[{h} + j]{peep(1)});\n"
                f"        {hv}[j] = og * {f[2]}({cv}[j]);\n      }}\n")
        init = lambda v, src: (f"{ctx.ptr(src)}[{soff} + j]" if src is not None else "0.0f")
        seq_len = (f"(int64_t){ctx.ptr(seq)}[b]" if seq is not None else str(t))
        yp = ctx.ptr(y) if y is not None else None
        code += (
            "{\n"
            f"  const int64_t d = {d};\n"
            f"  for (int64_t b = 0; b < {nb}; ++b) {{\n"
            f"    int64_t len = {seq_len}; len = len < 0 ? 0 : (len > {t} ? {t} : len);\n"
            f"    for (int64_t j = 0; j < {h}; ++j) {{ {hv}[j] = {init(hv, h0)}; "
            f"{cv}[j] = {init(cv, c0)}; }}\n"
            "    for (int64_t s = 0; s < len; ++s) {\n"
            f"      const int64_t tt = {'len - 1 - s' if reverse else 's'};\n"
            f"      const float* xg = {gx} + {row} * {gn};\n"
            + step
            + (f"      memcpy({yp} + {yoff}, {hv}, {4 * h});\n" if yp else "")
            + "    }\n"
            + (f"    for (int64_t tt = len; tt < {t}; ++tt) memset({yp} + {yoff}, 0, {4 * h});\n"
               if yp else "")
            + (f"    memcpy({ctx.ptr(yh)} + {soff}, {hv}, {4 * h});\n" if yh is not None else "")
            + (f"    memcpy({ctx.ptr(yc)} + {soff}, {cv}, {4 * h});\n" if yc is not None else "")
            + "  }\n}\n"
        )
    return code


class _Recurrent(OpDef):
    """Shared infer/reference/emit of RNN and GRU."""

    also_versions: ClassVar[tuple[int, ...]] = (14, 22)  # 14: layout; 22: types
    defaults = {"layout": 0}

    def infer(self, node: Node) -> list[OutType]:
        t, b, _, h, ndir = rnn_dims(node)
        dt = node.inputs[0].dtype
        layout = int(self.attr(node, "layout"))
        y = (b, t, ndir, h) if layout else (t, ndir, b, h)
        state = (b, ndir, h) if layout else (ndir, b, h)
        return [(y, dt), (state, dt)][: len(node.outputs)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        return recurrence_reference(node, inputs)

    def emit(self, node: Node, ctx: EmitContext) -> str:
        return emit_recurrence(node, ctx)


@register
class RNN(_Recurrent):
    """ONNX ``RNN``: X ``[T, B, I]`` -> Y ``[T, D, B, H]``, Y_h ``[D, B, H]``; float32."""

    op_type, since_version = "RNN", 7


@register
class GRU(_Recurrent):
    """ONNX ``GRU``: X ``[T, B, I]`` -> Y ``[T, D, B, H]``, Y_h ``[D, B, H]``; float32."""

    op_type, since_version = "GRU", 7

    def emit(self, node: Node, ctx: EmitContext) -> str:
        return _emit_gru(node, ctx) if fast_kernel(node) else emit_recurrence(node, ctx)
