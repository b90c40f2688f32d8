"""DFT (ONNX 17, 20) and STFT (17).

DFT: X ``[..., L, ..., 1 or 2]`` (the last dim: real, or real and imaginary parts)
transformed along ``axis`` (an attribute in 17, default 1; a constant input in 20,
default -2) with ``n = dft_length`` points (default L; ``2 (L - 1)`` for an inverse
one-sided transform): the input is cut or zero-padded to n. Forward: ``y_k = sum_j
x_j e^{-2 pi i jk/n}``, ``n // 2 + 1`` bins with ``onesided``; inverse: the ``1/n``
scaled transform with ``e^{+...}``; inverse with ``onesided`` takes the first
``n // 2 + 1`` bins of a Hermitian spectrum and returns the real signal ``[..., n, 1]``
(NumPy's irfft, as the ONNX reference does). STFT: frames of ``frame_length`` samples
every ``frame_step`` of signal ``[B, L, 1 or 2]``, times the window, each
transformed: ``[B, frames, bins, 2]``; a signal ``[B, L]`` is a real one (what
``torch.stft`` exports and ONNX Runtime accepts).

A real float32 STFT with a constant window (or none) is one GEMM per signal: the frames
are the rows of an A read in place (row ``f`` starts at sample ``f * frame_step``, so
rows overlap), B the ``[frame_length, 2 * bins]`` basis ``w_j cos(2 pi jk/n)``,
``-w_j sin(2 pi jk/n)`` (interleaved: C is the output as it is laid out), packed at
compile time: a log-mel front end's 400-point frames every 160 samples of a second of
16 kHz audio took 8.8 ms as direct sums, 0.3 ms so (ONNX Runtime 4.1). Everything else
is emitted as direct sums over a twiddle table (cos/sin of ``2 pi m / n`` computed in
float64 at compile time), accumulated in double: O(n^2) per transform, with one C
helper shared by both ops.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype
from ..nn._gemm import gemm_call, include_gemm, pack_b
from ..tensor.loops import const_ints, normalize_axis

__all__ = ["DFT17", "DFT20", "STFT", "dft_reference"]

logger = logging.getLogger(__name__)


def dft_reference(x: np.ndarray, n: int, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The DFT of ``x`` (``[..., 1 or 2]``) along ``axis`` in ONNX's layout (NumPy FFT)."""
    sig = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    sig = sig.astype(np.complex128)
    if inverse and onesided:
        return np.fft.irfft(sig, n=n, axis=axis)[..., None].astype(x.dtype)
    y = np.fft.ifft(sig, n=n, axis=axis) if inverse else np.fft.fft(sig, n=n, axis=axis)
    if onesided and not inverse:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], axis=-1).astype(x.dtype)


def _helper(ty: str) -> str:
    """``ml_dft_<ty>``: one transform of ``J`` complex samples at stride ``xs`` (``cin``
    parts each, weighted by ``win`` when not null) into ``K`` bins at stride ``ys``.
    mode 0: forward, 1: inverse, 2: inverse of a one-sided spectrum (real output)."""
    return (
        f"static void ml_dft_{ty}(const {ty}* x, int64_t xs, int cin, int64_t J, const {ty}* win,\n"
        f"                        {ty}* y, int64_t ys, int64_t K, int64_t n,\n"
        f"                        const {ty}* cs, const {ty}* sn, int mode) {{\n"
        "  for (int64_t k = 0; k < K; ++k) {\n"
        "    double re = 0.0, im = 0.0;\n"
        "    for (int64_t j = 0; j < J; ++j) {\n"
        "      double xr = x[j * xs], xi = cin == 2 ? x[j * xs + 1] : 0.0;\n"
        "      if (win) { xr *= win[j]; xi *= win[j]; }\n"
        "      int64_t m = (j * k) % n;\n"
        "      double c = cs[m], s = sn[m];\n"
        "      if (mode == 0) { re += xr * c + xi * s; im += xi * c - xr * s; }\n"
        "      else if (mode == 1) { re += xr * c - xi * s; im += xi * c + xr * s; }\n"
        "      else { double w = (j == 0 || 2 * j == n) ? 1.0 : 2.0; re += w * (xr * c - xi * s); }\n"
        "    }\n"
        "    if (mode != 0) { re /= (double)n; im /= (double)n; }\n"
        f"    y[k * ys] = ({ty})re;\n"
        f"    if (mode != 2) y[k * ys + 1] = ({ty})im;\n"
        "  }\n"
        "}\n"
    )


def _tables(ctx: EmitContext, n: int, dtype) -> tuple[str, str]:
    ph = 2 * np.pi * np.arange(n, dtype=np.float64) / n
    return (ctx.param(np.cos(ph).astype(dtype), "dft_cos"),
            ctx.param(np.sin(ph).astype(dtype), "dft_sin"))


def _check_complex(node: Node, x, real_2d: bool = False) -> None:
    """``x`` is float32/64 and ends in a dim of 1 (real) or 2 (complex); ``real_2d``: a
    ``[B, L]`` signal (STFT) passes too."""
    if x.dtype not in (np.float32, np.float64):
        raise UnsupportedOpError(f"{node.op_type} (node {node.name!r}): input is {x.dtype}; "
                                 "float32 and float64 are supported")
    if real_2d and len(x.shape) == 2:
        return
    if len(x.shape) < 2 or x.shape[-1] not in (1, 2):
        raise ShapeError(f"{node.op_type} (node {node.name!r}): input {list(x.shape)} must end "
                         "in a dim of 1 (real) or 2 (complex)")


class _DFT(OpDef):
    """Shared parts of the DFT versions; ``_axis`` differs."""

    def _axis(self, node: Node) -> int:
        raise NotImplementedError

    def _plan(self, node: Node):
        """(axis, n, output shape, mode)."""
        x = node.inputs[0]
        _check_complex(node, x)
        rank = len(x.shape)
        axis = normalize_axis(self._axis(node), rank, f"DFT (node {node.name!r})")
        if axis == rank - 1:
            raise ShapeError(f"DFT (node {node.name!r}): axis {axis} is the real/imaginary dim")
        inverse, onesided = bool(node.attrs["inverse"]), bool(node.attrs["onesided"])
        length = const_ints(node, 1, "dft_length") if node.input(1) is not None else None
        if length is not None:
            n = length[0]
        else:
            n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
        if n < 1:
            raise ShapeError(f"DFT (node {node.name!r}): dft_length {n} < 1")
        out = list(x.shape)
        if inverse and onesided:
            out[axis], out[-1], mode = n, 1, 2
        else:
            out[axis], out[-1], mode = (n // 2 + 1 if onesided else n), 2, int(inverse)
        return axis, n, tuple(out), mode

    def infer(self, node: Node) -> list[OutType]:
        return [(self._plan(node)[2], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        axis, n, _, mode = self._plan(node)
        return [dft_reference(inputs[0], n, axis, mode > 0,
                              bool(node.attrs["onesided"]))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        axis, n, out, mode = self._plan(node)
        if y.size == 0:
            return ""
        ty = ctype(x.dtype)
        ctx.helper(_helper(ty))
        cs, sn = _tables(ctx, n, x.dtype)
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis + 1:-1], dtype=np.int64))
        cin, cout, length, k = x.shape[-1], out[-1], x.shape[axis], out[axis]
        used = min(length, n // 2 + 1 if mode == 2 else n)
        if y.size and used < 1:
            return f"memset({ctx.ptr(y)}, 0, {y.size * y.dtype.itemsize});"
        return (
            f"for (int64_t o = 0; o < {outer}; ++o)\n"
            f"for (int64_t i = 0; i < {inner}; ++i)\n"
            f"  ml_dft_{ty}({ctx.ptr(x)} + (o * {length * inner} + i) * {cin}, {inner * cin}, {cin}, "
            f"{used}, 0, {ctx.ptr(y)} + (o * {k * inner} + i) * {cout}, {inner * cout}, {k}, {n}, "
            f"{cs}, {sn}, {mode});"
        )


@register
class DFT17(_DFT):
    """ONNX ``DFT`` version 17 (``axis`` attribute, default 1)."""

    op_type, since_version = "DFT", 17
    defaults = {"axis": 1}

    def _axis(self, node: Node) -> int:
        return int(self.attr(node, "axis"))


@register
class DFT20(_DFT):
    """ONNX ``DFT`` version 20 (``axis`` a constant input, default -2).

    Raises
    ------
    ShapeError
        When ``axis`` or ``dft_length`` is not a compile-time constant.
    """

    op_type, since_version = "DFT", 20

    def _axis(self, node: Node) -> int:
        a = const_ints(node, 2, "axis")
        return -2 if a is None else a[0]


@register
class STFT(OpDef):
    """ONNX ``STFT``: signal ``[B, L, 1 or 2]`` (or ``[B, L]``, real), constant
    frame_step, optional window ``[W]``, optional constant frame_length -> ``[B, frames,
    bins, 2]`` with
    ``frames = 1 + (L - frame_length) // frame_step``, ``bins = frame_length // 2 + 1``
    (``onesided``, default) or ``frame_length``.

    Raises
    ------
    ShapeError
        Non-constant frame_step/frame_length, a window longer than the frame, a frame
        longer than the signal.
    """

    op_type, since_version = "STFT", 17

    def _plan(self, node: Node):
        x, win = node.inputs[0], node.input(2)
        _check_complex(node, x, real_2d=True)
        if len(x.shape) not in (2, 3):
            raise ShapeError(f"STFT (node {node.name!r}): signal {list(x.shape)} must be "
                             "[B, L, 1|2] or [B, L]")
        step = const_ints(node, 1, "frame_step")[0]
        fl = const_ints(node, 3, "frame_length") if node.input(3) is not None else None
        fl = fl[0] if fl else (win.shape[0] if win is not None else x.shape[1])
        wlen = win.shape[0] if win is not None else fl
        if step < 1 or fl < 1 or fl > x.shape[1] or wlen > fl:
            raise ShapeError(f"STFT (node {node.name!r}): frame_step {step}, frame_length {fl}, "
                             f"window {wlen} do not fit signal length {x.shape[1]}")
        frames = 1 + (x.shape[1] - fl) // step
        bins = fl // 2 + 1 if node.attrs["onesided"] else fl
        return step, fl, wlen, (x.shape[0], frames, bins, 2)

    def infer(self, node: Node) -> list[OutType]:
        return [(self._plan(node)[3], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        x, win = inputs[0], inputs[2] if len(inputs) > 2 else None
        step, fl, wlen, (_b, frames, bins, _) = self._plan(node)
        if x.ndim == 2:
            x = x[..., None]
        w = np.ones(fl) if win is None else np.concatenate([win, np.zeros(fl - wlen)])
        idx = np.arange(frames)[:, None] * step + np.arange(fl)[None, :]
        fr = (x[:, idx, :] * w[None, None, :, None]).astype(x.dtype)  # [B, frames, fl, c]
        return [dft_reference(fr, fl, 2, False, bins != fl)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, win, y = node.inputs[0], node.input(2), node.outputs[0]
        step, fl, wlen, (b, frames, bins, _) = self._plan(node)
        if y.size == 0:
            return ""
        cin, length = (x.shape[2] if len(x.shape) == 3 else 1), x.shape[1]
        if x.dtype == np.float32 and cin == 1 and (win is None or win.const is not None):
            return self._emit_gemm(node, ctx, step, fl, wlen, b, frames, bins)
        ty = ctype(x.dtype)
        ctx.helper(_helper(ty))
        cs, sn = _tables(ctx, fl, x.dtype)
        wp = ctx.ptr(win) if win is not None else "0"
        used = wlen  # samples past the window are its zero padding
        return (
            f"for (int64_t b = 0; b < {b}; ++b)\n"
            f"for (int64_t f = 0; f < {frames}; ++f)\n"
            f"  ml_dft_{ty}({ctx.ptr(x)} + (b * {length} + f * {step}) * {cin}, {cin}, {cin}, "
            f"{used}, {wp}, {ctx.ptr(y)} + (b * {frames} + f) * {bins * 2}, 2, {bins}, {fl}, "
            f"{cs}, {sn}, 0);"
        )

    def _emit_gemm(self, node: Node, ctx: EmitContext, step: int, fl: int, wlen: int,
                   b: int, frames: int, bins: int) -> str:
        """The real float32 STFT as one GEMM per signal (see the module doc)."""
        x, win, y = node.inputs[0], node.input(2), node.outputs[0]
        w = np.ones(fl) if win is None else np.concatenate(
            [win.const.astype(np.float64).ravel(), np.zeros(fl - wlen)])
        jk = (np.arange(fl)[:, None] * np.arange(bins)[None, :]) % fl  # exact phases
        ph = 2 * np.pi * jk / fl
        basis = np.empty((fl, 2 * bins), np.float64)
        basis[:, 0::2] = w[:, None] * np.cos(ph)
        basis[:, 1::2] = -w[:, None] * np.sin(ph)
        include_gemm(ctx)
        bp = ctx.param(pack_b(basis.astype(np.float32)), f"{node.name}.basis")
        length = x.shape[1]
        call = gemm_call(
            {"M": str(frames), "N": str(2 * bins), "K": str(fl), "a": "0",
             "a_raw": f"{ctx.ptr(x)} + s * {length}", "lda": str(step),
             "c": f"{ctx.ptr(y)} + s * {frames * bins * 2}"},
            {"kind": "ML_B_PACKED", "k_total": str(fl), "p": bp})
        return f"for (int64_t s = 0; s < {b}; ++s) {call}"
