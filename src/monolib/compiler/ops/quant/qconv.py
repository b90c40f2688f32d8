"""QLinearConv (10) and ConvInteger (10): 8-bit convolutions with int32 accumulation.

ONNX specs: ``ConvInteger``: ``Y = conv(X - x_zero_point, W - w_zero_point)`` in int32;
``QLinearConv``: the same sum plus the int32 bias ``B``, requantized to ``y_zero_point``'s
type with ``x_scale * w_scale / y_scale`` (see ``_qcommon``). ``x_zero_point`` is per
tensor; ``w_zero_point`` and ``w_scale`` per tensor or per output channel.

Lowering, like the float ``Conv`` (``nn/conv.py``): depthwise (``group == C_in ==
C_out``) is ``ml_qdwconv`` of ``kernels/qgemm.h``, a direct kernel over float planes
(exact: the sums stay below 2^24);
everything else is per image and group ``Y[Cout_g, OH*OW] = W[Cout_g, K] @ cols`` with
the weights packed at compile time (int16, zero points subtracted) and the columns
packed per block by ``ml_qgemm``: straight from X for a 1x1 stride-1 convolution, else
an implicit im2col of the image converted once to int16 minus its zero point and
zero-padded (so the padding is the zero point, as the spec's integer convolution has it).
Each finished tile is stored as int32 or requantized.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OutType, register
from ..nn._common import Geometry
from ..nn.conv import as_2d, conv_geometry, grouped_conv
from ._q8 import include_q8, pack_a8, q8_conv_bbuf_bytes, q8_kq, use_q8conv
from ._qcommon import (
    QMR,
    check_vector,
    include_qgemm,
    mult_ref,
    pack_a16,
    qgemm_bbuf_bytes,
    qgemm_call,
    requantize,
    require_q8,
    zp_c,
    zp_ref,
)
from ._qop import QuantOp, check_float_scales, requantized_out

__all__ = ["ConvInteger", "QLinearConv", "int_conv"]

logger = logging.getLogger(__name__)


def int_conv(x: np.ndarray, w: np.ndarray, geo: Geometry, group: int) -> np.ndarray:
    """N-D grouped convolution of integer arrays (zero points already subtracted), exact
    in int64, returned as int32 (wrapping like the int32 sums of the spec)."""
    return grouped_conv(x.astype(np.int64), w.astype(np.int64), geo, group, np.int64).astype(np.int32)


class _QConv(QuantOp):
    """Shared logic; subclasses name the input positions."""

    X, W, XZP, WZP, BIAS = 0, 1, 2, 3, -1

    def _view(self, node: Node) -> SimpleNamespace:
        """The node seen as a Conv with inputs (X, W), for the shared geometry."""
        return SimpleNamespace(
            inputs=[node.inputs[self.X], node.input(self.W)],
            attrs=node.attrs,
            name=node.name,
            op_type=node.op_type,
        )

    def _check(self, node: Node) -> Geometry:
        require_q8(node, self.X, self.W)
        geo = conv_geometry(self._view(node))
        m = node.inputs[self.W].shape[0]
        check_vector(node, self.XZP, 1, "tensor")
        check_vector(node, self.WZP, m, "output channel")
        return geo

    def infer(self, node: Node) -> list[OutType]:
        geo = self._check(node)
        x, w = node.inputs[self.X], node.inputs[self.W]
        return [((x.shape[0], w.shape[0], *geo.out), self._out_dtype(node))]

    def _acc(self, node: Node, inputs: list) -> np.ndarray:
        x, w = inputs[self.X], inputs[self.W]
        m = w.shape[0]
        xz = zp_ref(inputs[self.XZP] if len(inputs) > self.XZP else None, 1)[0]
        wz = zp_ref(inputs[self.WZP] if len(inputs) > self.WZP else None, m)
        wz = wz.reshape((m,) + (1,) * (w.ndim - 1))
        geo = conv_geometry(self._view(node))
        acc = int_conv(x.astype(np.int32) - xz, w.astype(np.int32) - wz, geo, int(node.attrs["group"]))
        if self.BIAS >= 0 and len(inputs) > self.BIAS and inputs[self.BIAS] is not None:
            bias = inputs[self.BIAS].astype(np.int32).reshape((1, m) + (1,) * (x.ndim - 2))
            acc = (acc.astype(np.int64) + bias).astype(np.int32)
        return acc

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, w = node.inputs[self.X], node.inputs[self.W]
        if len(x.shape) not in (3, 4):
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: only 1-D and 2-D convolutions are "
                f"emitted, X is {list(x.shape)}"
            )
        if x.size == 0 or node.outputs[0].size == 0:
            return ""
        include_qgemm(ctx)
        d = as_2d(list(x.shape[2:]), conv_geometry(self._view(node)))
        out, code, per_channel = self._out(node, ctx)
        group = int(node.attrs["group"])
        if group == x.shape[1] == w.shape[0]:
            return code + self._emit_depthwise(node, ctx, d, out)
        return code + self._emit_gemm(node, ctx, d, out, group, per_channel)

    def _bias(self, node: Node, ctx: EmitContext) -> str:
        b = node.input(self.BIAS) if self.BIAS >= 0 else None
        return f"(const int32_t*){ctx.ptr(b)}" if b is not None else "0"

    def _sizes(self, node: Node, d, group: int) -> tuple[int, ...]:
        """(batch, C_in, C_out, C_in and C_out per group, K per group, input and output
        pixels per image) of the GEMM paths."""
        n, c = node.inputs[self.X].shape[:2]
        m = node.inputs[self.W].shape[0]
        cg, mg = c // group, m // group
        return (n, c, m, cg, mg, cg * d["KH"] * d["KW"], d["H"] * d["W"], d["OH"] * d["OW"])

    def _group_out(self, node: Node, ctx: EmitContext, out, fields: dict, m: int, mg: int,
                   ohw: int, per_channel: bool) -> dict:
        """Group ``g``'s bias (into ``fields``) and output store of image ``n``: ``out``
        with its destination, row stride and per-channel multipliers moved to the group."""
        bias = self._bias(node, ctx)
        if bias != "0":
            fields["bias_m"] = f"{bias} + g * {mg}"
        out = dict(out)
        out["y"] = f"(void*)({ctx.ptr(node.outputs[0])} + (n * {m} + g * {mg}) * {ohw})"
        out["ld"] = str(ohw)
        if per_channel:
            out["mult"] = f"{out['mult']} + g * {mg}"
        return out

    def _emit_depthwise(self, node: Node, ctx: EmitContext, d: dict[str, int], out) -> str:
        x, w, y = node.inputs[self.X], node.inputs[self.W], node.outputs[0]
        n, c = x.shape[:2]
        kk = d["KH"] * d["KW"]
        xzp, _, _ = zp_c(ctx, node, self.XZP, 1)
        wz = node.input(self.WZP)
        code = ""
        if w.const is not None and (wz is None or wz.const is not None):
            w16 = w.const.astype(np.int32).reshape(c, kk) - zp_ref(None if wz is None else wz.const, c)[:, None]
            wp = ctx.param(w16.astype(np.int16).ravel(), f"{node.name}.w16")
        else:
            wzp0, wzp_arr, code = zp_c(ctx, node, self.WZP, c)
            buf, i = ctx.scratch(2 * c * kk), ctx.unique("i")
            zexpr = f"{wzp_arr}[{i} / {kk}]" if wzp_arr != "0" else wzp0
            code += (
                f"for (int64_t {i} = 0; {i} < {c * kk}; ++{i}) "
                f"((int16_t*){buf})[{i}] = (int16_t)({ctx.ptr(w)}[{i}] - {zexpr});\n"
            )
            wp = f"((const int16_t*){buf})"
        hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
        wpad = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
        # ml_qdw_scratch_bytes: the float plane, the sums (and the int32 form's smaller needs)
        wrow = wpad + d["SW"] - 1  # rows hold SW column phases: up to SW - 1 floats more
        scratch = ctx.scratch(-(-4 * hp * wrow // 64) * 64 + 4 * (hp * wrow + d["OW"]) + 64)
        hw, ohw = d["H"] * d["W"], d["OH"] * d["OW"]
        dims = {k: d[k] for k in ("H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW")}
        dims.update({"C": c, "Hp": hp, "Wp": wpad})
        lines = ["{", "  ml_qdw_args qd_;", "  memset(&qd_, 0, sizeof qd_);"]
        lines += [f"  qd_.{k} = {v};" for k, v in dims.items()]
        lines += [
            f"  qd_.is_signed = {int(x.dtype == np.int8)};",
            f"  qd_.xzp = {xzp};",
            f"  qd_.w = {wp};",
            f"  qd_.bias = {self._bias(node, ctx)};",
        ]
        lines += [f"  qd_.out.{k} = {v};" for k, v in out.items() if k not in ("y", "ld")]
        lines += [
            f"  for (int64_t n = 0; n < {n}; ++n) {{",
            f"    qd_.x = {ctx.ptr(x)} + n * {c * hw};",
            f"    qd_.out.y = (void*)({ctx.ptr(y)} + n * {c * ohw});",
            f"    ml_qdwconv(&qd_, {scratch});",
            "  }",
            "}",
        ]
        return code + "\n".join(lines)

    def _weights(self, node: Node, ctx: EmitContext, group: int, mg: int, k: int) -> tuple[str, int, str]:
        """(packed A pointer, int16 per group, C that packs it at run time or "")."""
        w, wz = node.inputs[self.W], node.input(self.WZP)
        m = w.shape[0]
        per_group = -(-mg // QMR) * QMR * (k + (k & 1))
        if w.const is not None and (wz is None or wz.const is not None):
            wi = w.const.astype(np.int32).reshape(m, k) - zp_ref(None if wz is None else wz.const, m)[:, None]
            wg = wi.reshape(group, mg, k)
            packed = np.concatenate([pack_a16(wg[g]) for g in range(group)])
            return ctx.param(packed, f"{node.name}.packed_w16"), per_group, ""
        wzp0, wzp_arr, code = zp_c(ctx, node, self.WZP, m)
        buf = ctx.scratch(2 * per_group * group)
        zarr = f"{wzp_arr} + g * {mg}" if wzp_arr != "0" else "0"
        code += (
            f"for (int64_t g = 0; g < {group}; ++g)\n"
            f"  ml_qpack_a({mg}, {k}, {ctx.ptr(w)} + g * {mg * k}, {int(w.dtype == np.int8)}, {k}, 1, "
            f"{zarr}, {wzp0}, (int16_t*){buf} + g * {per_group});\n"
        )
        return f"((const int16_t*){buf})", per_group, code

    def _emit_gemm(self, node: Node, ctx: EmitContext, d, out, group: int, per_channel: bool) -> str:
        x, w = node.inputs[self.X], node.inputs[self.W]
        n, c, m, cg, mg, k, hw, ohw = self._sizes(node, d, group)
        wz = node.input(self.WZP)
        if (x.dtype == np.uint8 and w.const is not None and (wz is None or wz.const is not None)
                and use_q8conv(mg)):
            return self._emit_q8(node, ctx, d, out, group, per_channel)
        ap, per_group, code = self._weights(node, ctx, group, mg, k)
        xzp, _, _ = zp_c(ctx, node, self.XZP, 1)
        signed = int(x.dtype == np.int8)
        pointwise = (
            d["KH"] == d["KW"] == d["SH"] == d["SW"] == 1
            and d["PT"] == d["PL"] == 0
            and (d["OH"], d["OW"]) == (d["H"], d["W"])
        )
        pad = ""
        if pointwise:
            bsrc = {
                "kind": "ML_QB_STRIDED",
                "is_signed": str(signed),
                "p8": f"{ctx.ptr(x)} + (n * {c} + g * {cg}) * {hw}",
                "ldk": str(hw),
                "ldn": "1",
                "zp0": xzp,
            }
        else:
            hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
            wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
            img = ctx.scratch(2 * c * hp * wp)
            pad = (
                f"  ml_qpad_image({c}, {d['H']}, {d['W']}, {hp}, {wp}, {d['PT']}, {d['PL']}, "
                f"{ctx.ptr(x)} + n * {c * hw}, {signed}, {xzp}, (int16_t*){img});\n"
            )
            bsrc = {
                "kind": "ML_QB_IM2COL",
                "p16": f"(const int16_t*){img} + g * {cg * hp * wp}",
                "H": str(hp),
                "W": str(wp),
            }
            bsrc.update({key: str(d[key]) for key in ("KH", "KW", "SH", "SW", "DH", "DW", "OH", "OW")})
        bbuf = ctx.scratch(qgemm_bbuf_bytes(k, ohw))
        fields = {
            "M": str(mg),
            "N": str(ohw),
            "K": str(k),
            "a": f"{ap} + g * {per_group}",
            "bbuf": f"(int16_t*){bbuf}",
        }
        out = self._group_out(node, ctx, out, fields, m, mg, ohw, per_channel)
        return (
            code + f"for (int64_t n = 0; n < {n}; ++n) {{\n{pad}"
            f"for (int64_t g = 0; g < {group}; ++g)\n{qgemm_call(fields, bsrc, out)}\n}}"
        )


    def _emit_q8(self, node: Node, ctx: EmitContext, d, out, group: int, per_channel: bool) -> str:
        """The groups' products through ``ml_q8conv`` (``q8gemv.h``): constant weights
        as int8 bytes against the uint8 image's bytes, zero points through row and
        column sums (where ``_q8.use_q8conv``: AVX-512 VNNI's vpdpbusd)."""
        x, w = node.inputs[self.X], node.inputs[self.W]
        n, c, m, cg, mg, k, hw, ohw = self._sizes(node, d, group)
        include_q8(ctx)
        wz = node.input(self.WZP)
        zw = zp_ref(None if wz is None else wz.const, m)
        wg = w.const.reshape(group, mg, k)
        parts = [pack_a8(wg[g], zw[g * mg : (g + 1) * mg]) for g in range(group)]
        ap = ctx.param(np.concatenate([p[0] for p in parts]), f"{node.name}.packed_w8")
        alpha = ctx.param(np.concatenate([p[1] for p in parts]), f"{node.name}.alpha8")
        rowsum = ctx.param(np.concatenate([p[2] for p in parts]), f"{node.name}.rowsum8")
        per_group = parts[0][0].size
        xzp, _, _ = zp_c(ctx, node, self.XZP, 1)
        fields = {"M": str(mg), "N": str(ohw), "K": str(k), "Kq": str(q8_kq(k)), "zb": xzp,
                  "a": f"{ap} + g * {per_group}", "alpha": f"{alpha} + g * {mg}",
                  "rowsum": f"{rowsum} + g * {mg}",
                  "bbuf": f"(uint8_t*){ctx.scratch(q8_conv_bbuf_bytes(k))}"}
        pad = ""
        if (d["KH"] == d["KW"] == d["SH"] == d["SW"] == 1 and d["PT"] == d["PL"] == 0
                and (d["OH"], d["OW"]) == (d["H"], d["W"])):
            fields.update({"p8": f"(const uint8_t*){ctx.ptr(x)} + (n * {c} + g * {cg}) * {hw}", "ldk": str(hw)})
        else:
            hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
            wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
            img = ctx.scratch(c * hp * wp)
            pad = (
                f"  ml_q8pad_image({c}, {d['H']}, {d['W']}, {hp}, {wp}, {d['PT']}, {d['PL']}, "
                f"(const uint8_t*){ctx.ptr(x)} + n * {c * hw}, {xzp}, (uint8_t*){img});\n"
            )
            fields.update({"im2col": "1", "p8": f"(const uint8_t*){img} + g * {cg * hp * wp}",
                           "H": str(hp), "W": str(wp)})
            fields.update({key: str(d[key]) for key in ("KH", "KW", "SH", "SW", "DH", "DW", "OH", "OW")})
        out = self._group_out(node, ctx, out, fields, m, mg, ohw, per_channel)
        lines = ["{", "  ml_q8c_args qc_;", "  memset(&qc_, 0, sizeof qc_);"]
        lines += [f"  qc_.{key} = {val};" for key, val in fields.items()]
        lines += [f"  qc_.n_end = {ohw};"] + [f"  qc_.out.{key} = {val};" for key, val in out.items()]
        lines += ["  ml_q8conv_par(&qc_);", "}"]
        body = "\n".join(lines)
        return f"for (int64_t n = 0; n < {n}; ++n) {{\n{pad}for (int64_t g = 0; g < {group}; ++g)\n{body}\n}}"


@register
class ConvInteger(_QConv):
    """ONNX ``ConvInteger``: X ``[N, C_in, *S]`` and W ``[C_out, C_in/group, *K]`` (uint8
    or int8, each), zero points x (per tensor) and w (per tensor or per output channel);
    Y int32 ``[N, C_out, *O]``. 1-D and 2-D convolutions are emitted."""

    op_type, since_version = "ConvInteger", 10
    X, W, XZP, WZP, BIAS = 0, 1, 2, 3, -1


@register
class QLinearConv(_QConv):
    """ONNX ``QLinearConv``: inputs ``x, x_scale, x_zero_point, w, w_scale,
    w_zero_point, y_scale, y_zero_point[, B]``; x and w uint8 or int8, scales float32
    (``w_scale`` per tensor or per output channel), B int32 ``[C_out]``; y in
    ``y_zero_point``'s type. Requantization as ``_qcommon.requantize``."""

    op_type, since_version = "QLinearConv", 10
    X, W, XZP, WZP, BIAS = 0, 3, 2, 5, 8

    def _check(self, node: Node) -> Geometry:
        geo = super()._check(node)
        m = node.inputs[3].shape[0]
        check_float_scales(node)
        check_vector(node, 1, 1, "tensor")
        check_vector(node, 6, 1, "tensor")
        check_vector(node, 4, m, "output channel")
        check_vector(node, 7, 1, "tensor")
        require_q8(node, 7)
        b = node.input(8)
        if b is not None and (b.dtype != np.int32 or b.size != m):
            raise ShapeError(f"QLinearConv node {node.name!r}: B must be int32 [{m}], got {b.dtype} {list(b.shape)}")
        return geo

    def _out_dtype(self, node: Node) -> np.dtype:
        yz = node.input(7)
        return yz.dtype if yz is not None else node.inputs[0].dtype

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        acc = self._acc(node, inputs)
        m = inputs[3].shape[0]
        mult = np.broadcast_to(mult_ref(inputs[1], inputs[4], inputs[6]), (m,))
        mult = mult.reshape((1, m) + (1,) * (acc.ndim - 2))
        yz = inputs[7] if len(inputs) > 7 else None
        return [requantize(acc, mult, None if yz is None else zp_ref(yz, 1)[0], self._out_dtype(node))]

    def _out(self, node: Node, ctx: EmitContext):
        return requantized_out(ctx, node, self._out_dtype(node), "ML_QMULT_ROW")
