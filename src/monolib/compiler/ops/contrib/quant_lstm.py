"""``com.microsoft`` DynamicQuantizeLSTM: an LSTM whose weights are 8-bit and whose
activations are quantized to uint8 at run time, as ONNX Runtime's quantizer emits for a
float LSTM (``quantize_dynamic``).

Inputs (ORT ``ContribOperators.md``): ``X [T, B, I]``, ``W [D, I, 4H]``, ``R [D, H, 4H]``
(uint8 or int8, gates i, o, f, c; note: transposed against ONNX LSTM), ``B [D, 8H]?``,
``sequence_lens?``, ``initial_h?``, ``initial_c? [D, B, H]``, ``P?``, ``W_scale``,
``W_zero_point``, ``R_scale``, ``R_zero_point`` (each ``[D]`` per tensor or ``[D, 4H]``
per output column). Outputs ``Y [T, D, B, H]``, ``Y_h``, ``Y_c [D, B, H]`` (optional).

ONNX Runtime's kernel (``deep_cpu_lstm`` with quantized ``GemmWeights``) and this one:
per direction, X of all T*B rows is quantized once to uint8 the way DynamicQuantizeLinear
does (min/max over the whole operand including 0), multiplied exactly in int32 with W
(``ops/quant/qgemm.h``) and scaled ``acc * (x_scale * w_scale[n])``; at each step the
previous hidden state ``[B, H]`` is quantized the same way and multiplied with R (kept
as bytes, ``ops/quant/q8gemv.h``, where ``_q8.use_q8``: a step reads all of R for a few
rows, and int16 packing doubled what it read). The
gates add both projections and ``Wb + Rb``, then ``i, o, f = sigmoid``, ``c~ = tanh``,
``c = f * c + i * c~``, ``h = o * tanh(c)`` (``clip`` bounds the pre-activations).
Float sums are taken in another order than ORT's and ORT's sigmoid/tanh are MLAS
polynomials: values agree to float32 rounding until a state value sits at a rounding tie
of the next step's quantization, which moves it one step (tests: within 2e-3).

Refused (UnsupportedOpError naming the node): other activations, ``input_forget=1``,
peepholes ``P``, a ``sequence_lens`` input, weights or their quantization parameters
that are not constants.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ..quant._q8 import include_q8, pack_b8, q8_call, use_q8
from ..quant._qcommon import QMR, include_qgemm, out_fields, pack_b16, qgemm_call
from ..quant.dynamic_quantize import DynamicQuantizeLinear

__all__ = ["DynamicQuantizeLSTM"]

logger = logging.getLogger(__name__)

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))
_ACTS = ["sigmoid", "tanh", "tanh"]


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


@register
class DynamicQuantizeLSTM(OpDef):
    """``com.microsoft.DynamicQuantizeLSTM`` (1): see the module docstring for inputs,
    outputs, the arithmetic and what is refused."""

    domain, op_type, since_version = "com.microsoft", "DynamicQuantizeLSTM", 1
    defaults = {
        "direction": "forward",
        "clip": None,
        "activations": None,
        "input_forget": 0,
        "hidden_size": None,
        "activation_alpha": None,
        "activation_beta": None,
    }

    def _dims(self, node: Node) -> tuple[int, int, int, int, int]:
        """(T, B, I, H, D), checking shapes, types and what is supported."""
        where = f"DynamicQuantizeLSTM node {node.name!r}"
        x, w, r = node.inputs[0], node.inputs[1], node.inputs[2]
        if x.dtype != np.float32 or w.dtype not in _Q8 or r.dtype not in _Q8:
            raise UnsupportedOpError(
                f"{where}: X must be float32, W and R uint8 or int8 (got {x.dtype}, {w.dtype}, {r.dtype})"
            )
        if len(x.shape) != 3 or len(w.shape) != 3 or len(r.shape) != 3:
            raise ShapeError(f"{where}: X, W, R must be rank 3")
        t, b, i = x.shape
        d, h = r.shape[0], r.shape[1]
        ndir = 2 if self.attr(node, "direction") == "bidirectional" else 1
        hs = self.attr(node, "hidden_size") or h
        if (
            d != ndir
            or hs != h
            or tuple(w.shape) != (d, i, 4 * h)
            or tuple(r.shape) != (d, h, 4 * h)
        ):
            raise ShapeError(
                f"{where}: W {list(w.shape)}, R {list(r.shape)}, direction and hidden_size disagree with X {list(x.shape)}"
            )
        acts = [a.lower() for a in self.attr(node, "activations") or []]
        if acts and acts != _ACTS * ndir:
            raise UnsupportedOpError(
                f"{where}: activations {acts} are not supported (only the defaults)"
            )
        if self.attr(node, "input_forget"):
            raise UnsupportedOpError(f"{where}: input_forget=1 is not supported")
        if node.input(4) is not None or node.input(7) is not None:
            raise UnsupportedOpError(f"{where}: sequence_lens and peepholes (P) are not supported")
        for idx in (1, 2, 8, 9, 10, 11):
            v = node.input(idx)
            if v is None or v.const is None:
                raise UnsupportedOpError(
                    f"{where}: input {idx} (weights and their scales/zero points) must be a constant"
                )
            if idx in (8, 9, 10, 11) and v.size not in (d, d * 4 * h):
                raise ShapeError(
                    f"{where}: input {idx} has shape {list(v.shape)}; expected [{d}] or [{d}, {4 * h}]"
                )
        for idx, shape in ((3, (d, 8 * h)), (5, (d, b, h)), (6, (d, b, h))):
            v = node.input(idx)
            if v is not None and tuple(v.shape) != shape:
                raise ShapeError(f"{where}: input {idx} is {list(v.shape)}, expected {list(shape)}")
        return t, b, i, h, d

    def infer(self, node: Node) -> list[OutType]:
        t, b, _, h, d = self._dims(node)
        f = np.dtype(np.float32)
        return [((t, d, b, h), f), ((d, b, h), f), ((d, b, h), f)][: len(node.outputs)]

    @staticmethod
    def _per_col(v: np.ndarray, d: int, n: int) -> np.ndarray:
        """A ``[D]`` or ``[D, N]`` parameter as ``[D, N]``."""
        return np.broadcast_to(np.asarray(v).reshape(d, -1), (d, n))

    def _qmm(self, a: np.ndarray, w: np.ndarray, wz: np.ndarray, ws: np.ndarray) -> np.ndarray:
        """``a`` quantized as DynamicQuantizeLinear, times ``w - wz`` exactly, scaled."""
        aq, s, z = DynamicQuantizeLinear().reference(None, [a])
        acc = (aq.astype(np.int64) - int(z)) @ (w.astype(np.int64) - wz.astype(np.int64))
        return acc.astype(np.int32).astype(np.float32) * (np.float32(s) * ws.astype(np.float32))

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        t, b, i, h, d = self._dims(node)
        x, w, r = inputs[0], inputs[1], inputs[2]
        g4 = 4 * h
        ws, wz, rs, rz = (self._per_col(inputs[k], d, g4) for k in (8, 9, 10, 11))
        bias = inputs[3] if inputs[3] is not None else np.zeros((d, 8 * h), np.float32)
        clip = self.attr(node, "clip")
        y = np.zeros((t, d, b, h), np.float32)
        hs, cs = np.zeros((d, b, h), np.float32), np.zeros((d, b, h), np.float32)
        for k in range(d):
            gx = self._qmm(x.reshape(t * b, i), w[k], wz[k], ws[k]).reshape(t, b, g4)
            hk = (
                inputs[5][k].copy()
                if len(inputs) > 5 and inputs[5] is not None
                else np.zeros((b, h), np.float32)
            )
            ck = (
                inputs[6][k].copy()
                if len(inputs) > 6 and inputs[6] is not None
                else np.zeros((b, h), np.float32)
            )
            bsum = (bias[k, :g4] + bias[k, g4:]).astype(np.float32)
            reverse = self.attr(node, "direction") == "reverse" or k == 1
            for s in range(t):
                tt = t - 1 - s if reverse else s
                g = gx[tt] + self._qmm(hk, r[k], rz[k], rs[k]) + bsum
                if clip is not None:
                    g = np.clip(g, -np.float32(clip), np.float32(clip))
                gi, go, gf = (
                    _sigmoid(g[:, :h]),
                    _sigmoid(g[:, h : 2 * h]),
                    _sigmoid(g[:, 2 * h : 3 * h]),
                )
                gc = np.tanh(g[:, 3 * h :]).astype(np.float32)
                ck = (gf * ck + gi * gc).astype(np.float32)
                hk = (go * np.tanh(ck)).astype(np.float32)
                y[tt, k] = hk
            hs[k], cs[k] = hk, ck
        return [y, hs, cs][: len(node.outputs)]

    def _gemm(
        self,
        ctx: EmitContext,
        m,
        k: int,
        n: int,
        a16: str,
        packed: str,
        mult: str,
        per_col: bool,
        y: str,
    ) -> str:
        out = out_fields(
            np.float32, y, str(n), mult, "ML_QMULT_COL" if per_col else "ML_QMULT_TENSOR"
        )
        return qgemm_call(
            {"M": str(m), "N": str(n), "K": str(k), "a": a16, "bbuf": "0"},
            {"kind": "ML_QB_PACKED", "p16": packed},
            out,
        )

    def emit(self, node: Node, ctx: EmitContext) -> str:
        t, b, i, h, d = self._dims(node)
        g4 = 4 * h
        include_qgemm(ctx)
        ctx.include("dql.h")  # ml_dynamic_quantize: DynamicQuantizeLinear's arithmetic
        x = node.inputs[0]
        w, r = node.inputs[1].const, node.inputs[2].const
        ws, wz, rs, rz = (self._per_col(node.inputs[k].const, d, g4) for k in (8, 9, 10, 11))
        per_w, per_r = node.inputs[8].size > 1, node.inputs[10].size > 1
        padm = lambda m: -(-m // QMR) * QMR
        bias = node.input(3)
        clip = self.attr(node, "clip")
        outs = list(node.outputs)
        dirs = []
        for k in range(d):
            # each direction its own scratch: a bidirectional op runs them side by side
            xq, xa = ctx.scratch(t * b * i), ctx.scratch(2 * padm(t * b) * (i + i % 2))
            hq, ha = ctx.scratch(b * h), ctx.scratch(2 * padm(b) * (h + h % 2))
            gx, gh = ctx.scratch(4 * t * b * g4), ctx.scratch(4 * b * g4)
            mult = ctx.scratch(4 * g4)
            hst, cst = ctx.scratch(4 * b * h), ctx.scratch(4 * b * h)
            lines = ["  int32_t zp_; float sc_; uint8_t zq_;"]
            if not use_q8(t * b):
                wp = ctx.param(
                    pack_b16(w[k].astype(np.int32) - wz[k].astype(np.int32)), f"{node.name}.w{k}"
                )
            if use_q8(b):  # a step's product is bound by reading R: keep it as bytes
                include_q8(ctx)
                r8 = pack_b8(r[k], rz[k])
            else:
                rp = ctx.param(
                    pack_b16(r[k].astype(np.int32) - rz[k].astype(np.int32)), f"{node.name}.r{k}"
                )
            wsp = ctx.param(np.ascontiguousarray(ws[k], np.float32), f"{node.name}.ws{k}")
            rsp = ctx.param(np.ascontiguousarray(rs[k], np.float32), f"{node.name}.rs{k}")
            bsum = "0.0f"
            if bias is not None:
                bsum = f"({ctx.ptr(bias)}[{k * 2 * g4} + j_] + {ctx.ptr(bias)}[{k * 2 * g4 + g4} + j_])"
            reverse = self.attr(node, "direction") == "reverse" or k == 1
            init_h, init_c = node.input(5), node.input(6)
            lines += [
                "  {",
                # X of all steps: quantized once, one integer GEMM with W
                f"  ml_dynamic_quantize({ctx.ptr(x)}, {t * b * i}, (uint8_t*){xq}, &sc_, &zq_); zp_ = zq_;",
                f"  for (int64_t j_ = 0; j_ < {g4}; ++j_) ((float*){mult})[j_] = sc_ * {wsp}[j_];",
                (
                    q8_call(
                        ctx,
                        f"{node.name}.w{k}",
                        t * b,
                        i,
                        g4,
                        f"(const uint8_t*){xq}",
                        str(i),
                        "zp_",
                        pack_b8(w[k], wz[k]),
                        out_fields(
                            np.float32,
                            f"(float*){gx}",
                            str(g4),
                            f"(const float*){mult}",
                            "ML_QMULT_COL" if per_w else "ML_QMULT_TENSOR",
                        ),
                    )
                    if use_q8(t * b)
                    else f"  ml_qpack_a({t * b}, {i}, (const uint8_t*){xq}, 0, {i}, 1, 0, zp_, (int16_t*){xa});\n"
                    + self._gemm(
                        ctx,
                        t * b,
                        i,
                        g4,
                        f"(const int16_t*){xa}",
                        wp,
                        f"(const float*){mult}",
                        per_w,
                        f"(float*){gx}",
                    )
                ),
                f"  for (int64_t j_ = 0; j_ < {b * h}; ++j_) {{",
                f"    ((float*){hst})[j_] = {f'{ctx.ptr(init_h)}[{k * b * h} + j_]' if init_h is not None else '0.0f'};",
                f"    ((float*){cst})[j_] = {f'{ctx.ptr(init_c)}[{k * b * h} + j_]' if init_c is not None else '0.0f'};",
                "  }",
                f"  for (int64_t s_ = 0; s_ < {t}; ++s_) {{",
                f"    const int64_t t_ = {f'{t - 1} - s_' if reverse else 's_'};",
                f"    ml_dynamic_quantize((const float*){hst}, {b * h}, (uint8_t*){hq}, &sc_, &zq_); zp_ = zq_;",
                f"    for (int64_t j_ = 0; j_ < {g4}; ++j_) ((float*){mult})[j_] = sc_ * {rsp}[j_];",
                (
                    q8_call(
                        ctx,
                        f"{node.name}.r{k}",
                        b,
                        h,
                        g4,
                        f"(const uint8_t*){hq}",
                        str(h),
                        "zp_",
                        r8,
                        out_fields(
                            np.float32,
                            f"(float*){gh}",
                            str(g4),
                            f"(const float*){mult}",
                            "ML_QMULT_COL" if per_r else "ML_QMULT_TENSOR",
                        ),
                    )
                    if use_q8(b)
                    else f"    ml_qpack_a({b}, {h}, (const uint8_t*){hq}, 0, {h}, 1, 0, zp_, (int16_t*){ha});\n  "
                    + self._gemm(
                        ctx,
                        b,
                        h,
                        g4,
                        f"(const int16_t*){ha}",
                        rp,
                        f"(const float*){mult}",
                        per_r,
                        f"(float*){gh}",
                    )
                ),
                f"    for (int64_t b_ = 0; b_ < {b}; ++b_) {{",
                f"      float* g_ = (float*){gh} + b_ * {g4};",
                f"      const float* x_ = (const float*){gx} + (t_ * {b} + b_) * {g4};",
                f"      for (int64_t j_ = 0; j_ < {g4}; ++j_) {{",
                f"        float v_ = x_[j_] + g_[j_] + {bsum};",
                (
                    f"        v_ = v_ < -{float(clip)!r}f ? -{float(clip)!r}f : (v_ > {float(clip)!r}f ? {float(clip)!r}f : v_);"
                    if clip is not None
                    else ""
                ),
                "        g_[j_] = v_;",
                "      }",
                f"      for (int64_t j_ = 0; j_ < {h}; ++j_) {{",
                "        float gi_ = ml_logisticf(g_[j_]);",  # vmath.h: vectorizes
                f"        float go_ = ml_logisticf(g_[{h} + j_]);",
                f"        float gf_ = ml_logisticf(g_[{2 * h} + j_]);",
                f"        float gc_ = ml_tanhf(g_[{3 * h} + j_]);",
                f"        float* c_ = (float*){cst} + b_ * {h} + j_;",
                "        *c_ = gf_ * *c_ + gi_ * gc_;",
                "        float hv_ = go_ * ml_tanhf(*c_);",
                f"        ((float*){hst})[b_ * {h} + j_] = hv_;",
                (
                    f"        {ctx.ptr(outs[0])}[((t_ * {d} + {k}) * {b} + b_) * {h} + j_] = hv_;"
                    if outs and outs[0] is not None
                    else ""
                ),
                "      }",
                "    }",
                "  }",
            ]
            for idx, src in ((1, hst), (2, cst)):
                if len(outs) > idx and outs[idx] is not None:
                    lines.append(
                        f"  memcpy({ctx.ptr(outs[idx])} + {k * b * h}, (const float*){src}, {4 * b * h});"
                    )
            lines.append("  }")
            dirs.append("\n".join(x for x in lines if x))
        if d == 1:
            return "{\n" + dirs[0] + "\n}"
        # the two directions on two threads where the pool has them: each step's
        # products are too small to split (ddddocr_old's H 512: 4.8 ms at 1 thread,
        # 4.3 at 2 split per step), the directions share nothing
        body = "\n".join(f"  if (dir_ == {k}) {{\n{text}\n  }}" for k, text in enumerate(dirs))
        return ctx.parallel_for("dir_", d, body, d * t * b * (i + h) * g4)
