"""A property test of run-time dims (issue 12): each small op model below is compiled
ONCE with run-time dims, then hypothesis draws in-bound shapes (both bounds among the
explicit examples) and the outputs must match ONNX Runtime in values and shapes.

One model per op family, with the attribute variants that change the emitted code path
(strides, pads, groups and depthwise, broadcasting patterns, axes, keepdims, the Conv
paths: direct, im2col GEMM, Winograd, 1x1, batch-folded; fused epilogues; quantized
MatMul/Conv). Bounds are small so the file stays fast (about 40 s on one core: one
library per model, reused by every draw); some symbols have a step > 1. Also:
out-of-bounds, off-step and shared-name inputs are refused with an InputError naming the
input, axis, dim, bounds and value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.build import compile as compile_model
from monolib.errors import InputError

F, I64, U8 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8
RNG = np.random.default_rng(20261125)
MAX_SYMBOLS = 4  # draws per example: one fraction per symbol of the case


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(*((n, None) if isinstance(n, str) else n)[:1], F,
                                       None if isinstance(n, str) else n[1])
         for n in outputs],  # all float; a shape only where ONNX infers none
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)  # the outputs' ranks


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def _i64(name, values):
    return name, np.array(values, dtype=np.int64)


@dataclass
class Case:
    """One op model: ``inputs`` are ``(name, onnx type, dims)``, a dim an int or a symbol
    of ``dims`` (``{name: (lo, hi[, step])}``, every value in bounds valid)."""

    id: str
    nodes: list
    inputs: list
    dims: dict
    inits: tuple = ()
    opset: int = 17
    outputs: tuple = ("y",)
    atol: float = 1e-4

    def model(self):
        return _model(self.nodes, self.inputs, list(self.outputs), self.inits, self.opset)

    def values(self, fractions) -> dict[str, int]:
        """A fraction in [0, 1] per symbol -> its in-bound value (0 the lower bound,
        1 the upper)."""
        out = {}
        for (name, b), u in zip(self.dims.items(), fractions):
            lo, hi, step = (*b, 1) if len(b) == 2 else b
            n = (hi - lo) // step
            out[name] = lo + step * min(n, math.floor(u * n + 0.5))
        return out

    def shapes(self, values):
        return {n: tuple(values[d] if isinstance(d, str) else d for d in s)
                for n, _, s in self.inputs}


def _n(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


B, N = {"b": (1, 3)}, {"n": (1, 9)}
IMG = {"b": (1, 2), "h": (4, 20, 2), "w": (5, 17)}  # h on a step of 2


def _image(c, dims=IMG):
    return [("x", F, ["b", c, "h", "w"])], dims


def _conv(cid, cin, cout, k=3, group=1, dims=IMG, **attrs):
    kernel = k if isinstance(k, tuple) else (k, k)
    return Case(cid, [_n("Conv", ["x", "wt", "bias"], group=group, **attrs)], *_image(cin, dims),
                [("wt", _w(cout, cin // group, *kernel)), ("bias", _w(cout))])


def _pool(cid, op, dims=IMG, **attrs):
    inputs, dims = _image(3, dims)
    return Case(cid, [_n(op, ["x"], **attrs)], inputs, dims)


def _rnn(cid, op, gates, hidden=5, feat=4, **attrs):
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    return Case(cid, [_n(op, ["x", "W", "R", "Bi"], ["y", "yh"], hidden_size=hidden, **attrs)],
                [("x", F, ["t", "b", feat])], {"t": (1, 7), "b": (1, 3)},
                [("W", _w(dirs, gates * hidden, feat)), ("R", _w(dirs, gates * hidden, hidden)),
                 ("Bi", _w(dirs, 2 * gates * hidden))], outputs=("y", "yh"))


CASES = [
    # -- elementwise: shared dims across inputs, broadcasting a run-time dim against 1
    Case("add_relu_mul_shared", [_n("Add", ["x", "z"], ["s"]), _n("Relu", ["s"], ["r"]),
                                 _n("Mul", ["r", "c"])],
         [("x", F, ["b", "n"]), ("z", F, ["b", "n"])], {**B, **N}, [("c", _w(1))]),
    Case("broadcast_b1n_1mn", [_n("Mul", ["x", "z"], ["m"]), _n("Sub", ["m", "c"])],
         [("x", F, ["b", 1, "n"]), ("z", F, [1, "m", "n"])], {**B, "m": (1, 4), **N},
         [("c", _w(1, 1, 1))]),
    Case("unary_chain", [_n("Sigmoid", ["x"], ["s"]), _n("Tanh", ["x"], ["t"]),
                         _n("Abs", ["x"], ["a"]), _n("Sqrt", ["a"], ["q"]),
                         _n("Mul", ["s", "t"], ["p"]), _n("Add", ["p", "q"])],
         [("x", F, ["b", 3, "n"])], {**B, **N}),
    Case("div_pow_three_way", [_n("Abs", ["x"], ["a"]), _n("Add", ["a", "one"], ["p"]),
                               _n("Pow", ["p", "z"], ["q"]), _n("Div", ["q", "col"])],
         [("x", F, ["b", 1, "n"]), ("z", F, [1, "m", 1]), ("col", F, ["b", "m", 1])],
         {**B, "m": (1, 4), **N}, [("one", np.array(1.0, np.float32))]),
    Case("max_sum_min_variadic",
         [_n("Max", ["x", "z", "c"], ["a"]), _n("Sum", ["a", "x", "z"], ["s"]),
          _n("Min", ["s", "z"])],
         [("x", F, ["b", 1, "n"]), ("z", F, ["b", "m", 1])], {**B, "m": (1, 4), **N},
         [("c", _w(1))]),
    Case("where_bias_column", [_n("Greater", ["x", "c"], ["g"]), _n("Where", ["g", "x", "col"])],
         [("x", F, ["b", "n"]), ("col", F, ["b", 1])], {**B, **N}, [("c", _w(1))]),
    # -- MatMul / Gemm
    Case("matmul_const_w", [_n("MatMul", ["x", "wt"])], [("x", F, ["b", "n", 16])],
         {**B, **N}, [("wt", _w(16, 8))]),
    Case("matmul_batched_runtime_mkn", [_n("MatMul", ["x", "z"])],
         [("x", F, ["b", "m", "k"]), ("z", F, ["b", "k", "n"])],
         {**B, "m": (1, 6), "k": (1, 9), **N}),
    Case("matmul_runtime_batch_const_b", [_n("MatMul", ["x", "wt"])],
         [("x", F, ["b", 2, "m", 8])], {**B, "m": (1, 6)}, [("wt", _w(2, 8, 5))]),
    Case("matmul_const_a_runtime_batch", [_n("MatMul", ["wt", "x"])],
         [("x", F, ["b", 2, 8, "n"])], {**B, **N}, [("wt", _w(2, 3, 8))]),
    Case("matmul_broadcast_2d_rhs", [_n("MatMul", ["x", "z"])],
         [("x", F, ["b", 2, "m", 8]), ("z", F, [8, "n"])], {**B, "m": (1, 6), **N}),
    Case("gemm_transb_bias", [_n("Gemm", ["x", "wt", "c"], transB=1)], [("x", F, ["b", 16])],
         {"b": (1, 9)}, [("wt", _w(12, 16)), ("c", _w(12))]),
    Case("gemm_transa_alpha_beta", [_n("Gemm", ["x", "wt", "c"], transA=1, alpha=0.5, beta=2.0)],
         [("x", F, [16, "b"])], {"b": (1, 9)}, [("wt", _w(16, 12)), ("c", _w(1, 12))]),
    Case("matmul_bias_relu_fused", [_n("MatMul", ["x", "wt"], ["m"]), _n("Add", ["m", "c"], ["a"]),
                                    _n("Relu", ["a"])],
         [("x", F, ["b", "n", 16])], {**B, **N}, [("wt", _w(16, 8)), ("c", _w(8))]),
    Case("gemm_c_column_input", [_n("Gemm", ["x", "wt", "c"])],
         [("x", F, ["b", 8]), ("c", F, ["b", 1])],
         {"b": (1, 9)}, [("wt", _w(8, 5))]),
    Case("gemm_one_column_scalar_bias", [_n("Gemm", ["x", "wt", "c"])], [("x", F, ["b", 8])],
         {"b": (1, 9)}, [("wt", _w(8, 1)), ("c", _w(1))]),
    Case("gemm_runtime_n_row_bias", [_n("Gemm", ["x", "z", "c"])],
         [("x", F, [3, 8]), ("z", F, [8, "n"]), ("c", F, [1, "n"])], N),
    Case("matmul_vector_rhs", [_n("MatMul", ["x", "z"])],
         [("x", F, ["b", "m", "n"]), ("z", F, ["n"])],
         {**B, "m": (1, 5), **N}),
    Case("matmul_vector_lhs", [_n("MatMul", ["z", "x"])],
         [("x", F, ["b", "n", "m"]), ("z", F, ["n"])],
         {**B, "m": (1, 5), **N}),
    # -- Softmax
    Case("softmax_axis0_runtime_inner", [_n("Softmax", ["x"], axis=0)], [("x", F, ["b", "n"])],
         {**B, **N}),
    Case("softmax_last_runtime_axis", [_n("Softmax", ["x"], axis=-1)],
         [("x", F, ["b", 3, "n"])], {**B, **N}),
    Case("logsoftmax_opset11_axis1", [_n("LogSoftmax", ["x"], axis=1)], [("x", F, ["b", "n", 2])],
         {**B, **N}, opset=11),
    Case("logsoftmax_middle_axis", [_n("LogSoftmax", ["x"], axis=1)],
         [("x", F, ["b", "n", 3])], {**B, **N}),
    # -- reductions
    Case("reducemean_axis1_keep", [_n("ReduceMean", ["x"], axes=[1], keepdims=1)],
         [("x", F, ["b", "n", 4])], {**B, **N}),
    Case("reducemax_axes02_drop", [_n("ReduceMax", ["x"], axes=[0, 2], keepdims=0)],
         [("x", F, ["b", 3, "n"])], {**B, **N}),
    Case("reducesum_all_drop", [_n("ReduceSum", ["x"], keepdims=0)],
         [("x", F, ["b", "n"])], {**B, **N}),
    Case("reducesum_axes_input_neg", [_n("ReduceSum", ["x", "ax"], keepdims=1)],
         [("x", F, ["b", 2, "n"])], {**B, **N}, [_i64("ax", [-1])]),
    Case("reducel2_last", [_n("ReduceL2", ["x"], axes=[-1], keepdims=0)],
         [("x", F, ["b", "n"])], {**B, **N}),
    # -- shape-changing ops and shape computations
    Case("reshape_zero_minus1", [_n("Reshape", ["x", "s"])], [("x", F, ["b", "n", 4])],
         {**B, **N}, [_i64("s", [0, -1])]),
    Case("shape_gather_concat_reshape",
         [_n("Shape", ["x"], ["s"]), _n("Gather", ["s", "i1"], ["d1"], axis=0),
          _n("Concat", ["d1", "m1"], ["ns"], axis=0), _n("Reshape", ["x", "ns"])],
         [("x", F, ["b", "n", 3])], {**B, **N}, [_i64("i1", [1]), _i64("m1", [-1])]),
    Case("reshape_step3_split_last", [_n("Reshape", ["x", "s"])], [("x", F, ["b", "n"])],
         {"b": (1, 3), "n": (3, 15, 3)}, [_i64("s", [0, -1, 3])]),
    Case("transpose_nchw_nhwc", [_n("Transpose", ["x"], perm=[0, 2, 3, 1])], *_image(5)),
    Case("argmax_runtime_axis", [_n("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
                                 _n("Cast", ["a"], to=F)], [("x", F, ["b", "n", 3])], {**B, **N}),
    Case("argmin_last_keepdims", [_n("ArgMin", ["x"], ["a"], axis=-1, keepdims=1,
                                     select_last_index=1), _n("Cast", ["a"], to=F)],
         [("x", I64, ["b", 2, "n"])], {**B, **N}, opset=13),
    Case("flatten_axis2", [_n("Flatten", ["x"], axis=2)], [("x", F, ["b", 3, "n", 2])],
         {**B, **N}),
    Case("transpose_201", [_n("Transpose", ["x"], perm=[2, 0, 1])],
         [("x", F, ["b", "n", 3])], {**B, **N}),
    Case("concat_runtime_axis", [_n("Concat", ["x", "z"], axis=1)],
         [("x", F, ["b", "n"]), ("z", F, ["b", "m"])], {**B, **N, "m": (1, 5)}),
    Case("slice_neg_end", [_n("Slice", ["x", "st", "en", "ax"])], [("x", F, ["b", "n"])],
         {"b": (1, 3), "n": (3, 11)}, [_i64("st", [1]), _i64("en", [-1]), _i64("ax", [1])]),
    Case("slice_step2_two_axes", [_n("Slice", ["x", "st", "en", "ax", "sp"])],
         [("x", F, ["b", "n", 3])], {**B, **N},
         [_i64("st", [0, 0]), _i64("en", [2**62, 2**62]), _i64("ax", [0, 1]), _i64("sp", [1, 2])]),
    Case("slice_reverse", [_n("Slice", ["x", "st", "en", "ax", "sp"])], [("x", F, ["b", "n"])],
         {**B, **N}, [_i64("st", [-1]), _i64("en", [-(2**62)]), _i64("ax", [1]), _i64("sp", [-1])]),
    Case("gather_neg_index_runtime_axis", [_n("Gather", ["x", "i"], axis=1)],
         [("x", F, ["b", "n", 2])], {**B, **N}, [_i64("i", [[0, -1], [-1, 0]])]),
    Case("gather_runtime_rows", [_n("Gather", ["e", "i"], axis=0)],
         [("i", I64, ["b", "n"])], {**B, **N}, [("e", _w(256, 3))]),
    Case("gathernd_runtime_data", [_n("GatherND", ["x", "i"])], [("x", F, ["b", "n", 3])],
         {**B, **N}, [_i64("i", [[0, 0], [0, -1]])]),
    Case("expand_to_shape", [_n("Shape", ["z"], ["s"]), _n("Expand", ["x", "s"])],
         [("x", F, [1, "n"]), ("z", F, ["b", "n"])], {**B, **N}),
    Case("constant_of_shape", [_n("Shape", ["x"], ["s"]),
                               _n("ConstantOfShape", ["s"], ["c"],
                                  value=helper.make_tensor("v", F, [1], [2.5])),
                               _n("Add", ["c", "x"])],
         [("x", F, ["b", "n"])], {**B, **N}),
    Case("range_position_ids", [_n("Shape", ["x"], ["s"]), _n("Gather", ["s", "i1"], ["k"], axis=0),
                                _n("Range", ["z0", "k", "one"], ["r"]),
                                _n("Cast", ["r"], ["rf"], to=F), _n("Add", ["x", "rf"])],
         [("x", F, ["b", "n"])], {**B, **N}, [_i64("i1", 1), _i64("z0", 0), _i64("one", 1)]),
    # -- Conv: direct (few output channels), im2col GEMM (many), Winograd (3x3, enough
    #    channels), 1x1, strides, pads, dilation, groups, depthwise, 1-D, batch-folded
    _conv("conv3x3_direct", 3, 8, pads=[1, 1, 1, 1]),
    _conv("conv3x3_s2_asym_pads", 3, 8, pads=[0, 1, 2, 1], strides=[2, 2]),
    _conv("conv_gemm_many_cout", 4, 64, pads=[1, 1, 1, 1]),
    _conv("conv_winograd", 16, 16, pads=[1, 1, 1, 1], dims={"b": (1, 2), "h": (4, 32, 4),
                                                            "w": (4, 32)}),
    Case("conv_bn_relu_fused", [_n("Conv", ["x", "wt"], ["c"], pads=[1, 1, 1, 1]),
                                _n("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"]),
                                _n("Relu", ["bn"], ["r"]), _n("Add", ["r", "x2"])],
         [("x", F, ["b", 4, "h", "w"]), ("x2", F, ["b", 8, "h", "w"])], IMG,
         [("wt", _w(8, 4, 3, 3)), ("g", _w(8)), ("be", _w(8)), ("mu", _w(8)),
          ("var", np.abs(_w(8)) + 0.5)]),
    Case("conv_runtime_batch_static_winograd", [_n("Conv", ["x", "wt"], pads=[1, 1, 1, 1])],
         [("x", F, ["b", 16, 32, 32])], {"b": (1, 3)}, [("wt", _w(16, 16, 3, 3))]),
    Case("conv_runtime_batch_static_direct", [_n("Conv", ["x", "wt"], pads=[1, 1, 1, 1])],
         [("x", F, ["b", 3, 12, 10])], {"b": (1, 3)}, [("wt", _w(8, 3, 3, 3))]),
    _conv("conv_2x3_strides_1x3_asym_pads", 3, 6, k=(2, 3), strides=[1, 3], pads=[0, 2, 1, 0]),
    _conv("conv1x1", 8, 12, k=1),
    _conv("conv1x1_stride2", 8, 12, k=1, strides=[2, 2]),
    _conv("conv_dilated_k2x3", 4, 6, k=(2, 3), dilations=[2, 1], pads=[1, 1, 0, 2]),
    _conv("conv_groups2", 4, 6, group=2, pads=[1, 1, 1, 1]),
    _conv("conv_depthwise", 6, 6, group=6, pads=[1, 1, 1, 1]),
    _conv("conv_depthwise_s2", 6, 6, group=6, pads=[1, 1, 1, 1], strides=[2, 2]),
    _conv("conv_depthwise_5x5", 4, 4, k=5, group=4, pads=[2, 2, 2, 2]),
    _conv("conv_auto_same_upper", 3, 5, auto_pad="SAME_UPPER", strides=[2, 2]),
    _conv("conv_folded_batch", 8, 16, pads=[1, 1, 1, 1],
          dims={"b": (1, 5), "h": (1, 6), "w": (1, 6)}),
    Case("conv1d", [_n("Conv", ["x", "wt"], pads=[2, 2])], [("x", F, ["b", 8, "w"])],
         {"b": (1, 2), "w": (1, 40)}, [("wt", _w(8, 8, 5))]),
    Case("conv_transpose_s2", [_n("ConvTranspose", ["x", "wt", "bias"], strides=[2, 2],
                                  pads=[1, 1, 1, 1])],
         *_image(4), [("wt", _w(4, 3, 4, 4)), ("bias", _w(3))]),
    Case("conv_transpose_outpad_groups", [_n("ConvTranspose", ["x", "wt"], strides=[2, 3],
                                             output_padding=[1, 2], group=2)],
         *_image(4), [("wt", _w(4, 2, 3, 3))]),
    Case("conv_transpose_same_upper", [_n("ConvTranspose", ["x", "wt"], strides=[2, 2],
                                          auto_pad="SAME_UPPER")],
         *_image(4), [("wt", _w(4, 3, 3, 3))]),
    # -- pools and Resize
    _pool("maxpool_k3s2p1", "MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    _pool("maxpool_ceil", "MaxPool", kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1),
    _pool("maxpool_ceil_drops_pad_window", "MaxPool", kernel_shape=[2, 2], strides=[2, 2],
          pads=[0, 0, 1, 1], ceil_mode=1),
    _pool("avgpool_ceil_pads", "AveragePool", kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 2, 2], ceil_mode=1),
    _pool("avgpool_exclude_pad", "AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    _pool("avgpool_include_pad_s2", "AveragePool", kernel_shape=[3, 2], strides=[2, 1],
          pads=[1, 0, 1, 1], count_include_pad=1),
    _pool("maxpool_dilated", "MaxPool", kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 0, 1, 0]),
    Case("avgpool_1d", [_n("AveragePool", ["x"], kernel_shape=[3], strides=[2], pads=[1, 1])],
         [("x", F, ["b", 3, "w"])], {"b": (1, 2), "w": (2, 21)}),
    _pool("lppool", "LpPool", kernel_shape=[2, 2], p=2),
    _pool("global_avg", "GlobalAveragePool"),
    _pool("global_max", "GlobalMaxPool"),
    Case("resize_nearest_2x3", [_n("Resize", ["x", "", "sc"], mode="nearest")], *_image(2),
         [("sc", np.array([1, 1, 2, 3], np.float32))], opset=13),
    Case("resize_nearest_1d_last_axis", [_n("Resize", ["x", "", "sc"], mode="nearest")],
         [("x", F, ["b", 3, "n"])], {**B, **N}, [("sc", np.array([1, 1, 3], np.float32))],
         opset=13),
    Case("resize_nearest_asym_floor", [_n("Resize", ["x", "", "sc"], mode="nearest",
                                          coordinate_transformation_mode="asymmetric",
                                          nearest_mode="floor")],
         *_image(2), [("sc", np.array([1, 1, 2, 2], np.float32))], opset=13),
    # -- normalizations
    Case("layernorm_runtime_row", [_n("LayerNormalization", ["x", "g", "be"], axis=-1)],
         [("x", F, ["b", "n", 8])], {**B, **N}, [("g", _w(8)), ("be", _w(8))]),
    Case("layernorm_axis1", [_n("LayerNormalization", ["x", "g", "be"], axis=1)],
         [("x", F, ["b", 4, "n"])], {**B, **N}, [("g", _w(4, 1)), ("be", _w(4, 1))]),
    Case("instancenorm", [_n("InstanceNormalization", ["x", "g", "be"])], *_image(3),
         [("g", _w(3)), ("be", _w(3))]),
    Case("batchnorm", [_n("BatchNormalization", ["x", "g", "be", "mu", "var"])], *_image(3),
         [("g", _w(3)), ("be", _w(3)), ("mu", _w(3)), ("var", np.abs(_w(3)) + 0.5)]),
    Case("groupnorm", [_n("GroupNormalization", ["x", "g", "be"], num_groups=2)], *_image(4),
         [("g", _w(4)), ("be", _w(4))], opset=21, outputs=(("y", ["b", 4, "h", "w"]),)),
    Case("softmax_opset11_flatten_axis1", [_n("Softmax", ["x"], axis=1)],
         [("x", F, ["b", 2, "n"])], {**B, **N}, opset=11),
    Case("mean_variance_norm", [_n("MeanVarianceNormalization", ["x"])], *_image(3),
         outputs=(("y", ["b", 3, "h", "w"]),)),
    # -- recurrences over a run-time sequence length and batch
    _rnn("lstm", "LSTM", 4),
    _rnn("lstm_bidirectional", "LSTM", 4, direction="bidirectional"),
    _rnn("gru_linear_before_reset", "GRU", 3, linear_before_reset=1),
    _rnn("gru_reverse", "GRU", 3, direction="reverse"),
    _rnn("rnn_tanh", "RNN", 1),
    # -- other ops over run-time dims
    Case("attention_sdpa", [_n("MatMul", ["q", "kt"], ["s"]), _n("Softmax", ["s"], ["p"], axis=-1),
                            _n("MatMul", ["p", "v"])],
         [("q", F, ["b", 2, "n", 4]), ("kt", F, ["b", 2, 4, "n"]), ("v", F, ["b", 2, "n", 4])],
         {**B, **N}),
    Case("einsum_bij_bjk", [_n("Einsum", ["x", "z"], equation="bij,bjk->bik")],
         [("x", F, ["b", "m", "n"]), ("z", F, ["b", "n", 4])], {**B, "m": (1, 5), **N}),
    Case("topk_runtime_axis_and_batch", [_n("TopK", ["x", "k"], ["v", "i"], axis=-1),
                                         _n("Cast", ["i"], ["fi"], to=F), _n("Add", ["v", "fi"])],
         [("x", F, ["b", "n"])], {"b": (1, 3), "n": (3, 11)}, [_i64("k", [2])]),
    Case("split_equal_step2", [_n("Split", ["x"], ["y", "y2"], axis=1, num_outputs=2)],
         [("x", F, ["b", "n", 3])], {"b": (1, 3), "n": (2, 10, 2)}, opset=18, outputs=("y", "y2")),
    Case("tile", [_n("Tile", ["x", "r"])], [("x", F, ["b", "n"])], {**B, **N}, [_i64("r", [2, 3])]),
    Case("unsqueeze_squeeze", [_n("Unsqueeze", ["x", "a0"], ["u"]), _n("Squeeze", ["u", "a0"])],
         [("x", F, ["b", 1, "n"])], {**B, **N}, [_i64("a0", [0])]),
    Case("cumsum", [_n("CumSum", ["x", "ax"])], [("x", F, ["b", "n"])], {**B, **N},
         [_i64("ax", 1)]),
    Case("cumsum_reverse_exclusive", [_n("CumSum", ["x", "ax"], reverse=1, exclusive=1)],
         [("x", F, ["b", "n"])], {**B, **N}, [_i64("ax", 1)]),
    Case("scatternd_runtime_data", [_n("ScatterND", ["x", "i", "u"])],
         [("x", F, ["b", "n", 3]), ("u", F, [1, 3])], {**B, **N}, [_i64("i", [[0, 0]])]),
    Case("activations",
         [_n("Clip", ["x", "lo", "hi"], ["c"]), _n("LeakyRelu", ["c"], ["l"], alpha=0.1),
          _n("HardSigmoid", ["l"], ["h"]), _n("Erf", ["h"])],
         [("x", F, ["b", "n"])], {**B, **N},
         [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.7, np.float32))]),
    Case("prelu_channel", [_n("PRelu", ["x", "sl"])], *_image(3), [("sl", _w(3, 1, 1))]),
    Case("depth_to_space", [_n("DepthToSpace", ["x"], blocksize=2)], *_image(8)),
    Case("space_to_depth", [_n("SpaceToDepth", ["x"], blocksize=2)], [("x", F, ["b", 3, "h", "w"])],
         {"b": (1, 2), "h": (2, 12, 2), "w": (2, 8, 2)}),
    Case("reduce_logsumexp", [_n("ReduceLogSumExp", ["x"], axes=[1], keepdims=0)],
         [("x", F, ["b", "n"])], {**B, **N}),
    Case("lrn", [_n("LRN", ["x"], size=3)], *_image(4)),
    Case("trilu", [_n("Trilu", ["x"])], [("x", F, ["b", "n", "m"])], {**B, **N, "m": (1, 5)},
         opset=14),
    Case("lstm_initial_states",
         [_n("LSTM", ["x", "W", "R", "Bi", "", "h0", "c0"], ["y", "yh", "yc"],
             hidden_size=5)],
         [("x", F, ["t", "b", 4]), ("h0", F, [1, "b", 5]), ("c0", F, [1, "b", 5])],
         {"t": (1, 6), "b": (1, 3)}, [("W", _w(1, 20, 4)), ("R", _w(1, 20, 5)), ("Bi", _w(1, 40))],
         outputs=("y", "yh", "yc")),
    Case("batchnorm_2d", [_n("BatchNormalization", ["x", "g", "be", "mu", "var"])],
         [("x", F, ["b", 3])], {"b": (1, 9)},
         [("g", _w(3)), ("be", _w(3)), ("mu", _w(3)), ("var", np.abs(_w(3)) + 0.5)]),
    Case("size_op",
         [_n("Size", ["x"], ["s"]), _n("Cast", ["s"], ["sf"], to=F), _n("Mul", ["x", "sf"])],
         [("x", F, ["b", "n"])], {**B, **N}),
    Case("shape_start_end_reshape", [_n("Shape", ["x"], ["s"], start=1, end=3),
                                     _n("Reshape", ["z", "s"])],
         [("x", F, [2, "b", "n", 2]), ("z", F, ["b", "n"])], {**B, **N}, opset=15),
    Case("reshape_mul_of_shape_dims",
         [_n("Shape", ["x"], ["s"]), _n("Gather", ["s", "i0"], ["d0"]),
          _n("Gather", ["s", "i1"], ["d1"]),
          _n("Mul", ["d0", "d1"], ["p"]), _n("Concat", ["p", "m1"], ["ns"], axis=0),
          _n("Reshape", ["x", "ns"])],
         [("x", F, ["b", "n", 3])], {**B, **N},
         [_i64("i0", [0]), _i64("i1", [1]), _i64("m1", [-1])]),
    Case("slice_end_from_shape", [_n("Shape", ["z"], ["s"]), _n("Gather", ["s", "i1"], ["e"]),
                                  _n("Slice", ["x", "st", "e", "ax"])],
         [("x", F, ["b", 12]), ("z", F, ["b", "n"])], {**B, **N},
         [_i64("i1", [1]), _i64("st", [0]), _i64("ax", [1])]),
    Case("conv_transpose_1d", [_n("ConvTranspose", ["x", "wt"], strides=[3])],
         [("x", F, ["b", 4, "n"])], {**B, **N}, [("wt", _w(4, 2, 5))]),
    Case("hardmax_runtime_axis", [_n("Hardmax", ["x"], axis=-1)], [("x", F, ["b", "n"])],
         {**B, **N}),
    Case("reducemean_image_keepdims", [_n("ReduceMean", ["x"], axes=[2, 3], keepdims=1)],
         *_image(3)),
    Case("gelu", [_n("Gelu", ["x"])], [("x", F, ["b", "n"])], {**B, **N}, opset=20),
    Case("rmsnorm", [_n("RMSNormalization", ["x", "g"], axis=-1)], [("x", F, ["b", "n", 4])],
         {**B, **N}, [("g", _w(4))], opset=23, outputs=(("y", ["b", "n", 4]),)),
    Case("round_floor_sign", [_n("Round", ["x"], ["r"]), _n("Floor", ["x"], ["f"]),
                              _n("Sign", ["x"], ["s"]), _n("Sum", ["r", "f", "s"])],
         [("x", F, ["b", "n"])], {**B, **N}),
    # -- quantized
    Case("quantize_dequantize", [_n("QuantizeLinear", ["x", "s", "zp"], ["q"]),
                                 _n("DequantizeLinear", ["q", "s", "zp"])],
         [("x", F, ["b", "n"])], {**B, **N},
         [("s", np.array(0.01, np.float32)), ("zp", np.array(128, np.uint8))]),
    Case("matmulinteger_runtime_batch", [_n("MatMulInteger", ["x", "wt"], ["q"]),
                                         _n("Cast", ["q"], to=F)],
         [("x", U8, ["b", "n", 8])], {**B, **N},
         [("wt", np.arange(40, dtype=np.uint8).reshape(8, 5))]),
    Case("matmulinteger_runtime_k_zero_points", [_n("MatMulInteger", ["x", "z", "az", "bz"], ["q"]),
                                                 _n("Cast", ["q"], to=F)],
         [("x", U8, ["b", "m", "n"]), ("z", U8, ["n", 4])], {**B, "m": (1, 5), **N},
         [("az", np.array(3, np.uint8)), ("bz", np.array([1, 2, 3, 4], np.uint8))]),
    Case("qlinearmatmul_runtime_batch",
         [_n("QuantizeLinear", ["x", "s", "zp"], ["q"]),
          _n("QLinearMatMul", ["q", "s", "zp", "wq", "ws", "wz", "s", "zp"], ["c"]),
          _n("DequantizeLinear", ["c", "s", "zp"])],
         [("x", F, ["b", "n", 8])], {**B, **N},
         [("s", np.array(0.02, np.float32)), ("zp", np.array(128, np.uint8)),
          ("wq", (np.arange(40, dtype=np.uint8).reshape(8, 5) % 9 + 124)),
          ("ws", np.array(0.01, np.float32)), ("wz", np.array(128, np.uint8))]),
    Case("qlinearconv", [_n("QuantizeLinear", ["x", "s", "zp"], ["q"]),
                         _n("QLinearConv", ["q", "s", "zp", "wq", "ws", "wz", "s", "zp"], ["c"],
                            pads=[1, 1, 1, 1]),
                         _n("DequantizeLinear", ["c", "s", "zp"])], *_image(3),
         [("s", np.array(0.02, np.float32)), ("zp", np.array(128, np.uint8)),
          ("wq", (np.arange(4 * 3 * 9, dtype=np.uint8).reshape(4, 3, 3, 3) % 7 + 125)),
          ("ws", np.array(0.01, np.float32)), ("wz", np.array(128, np.uint8))]),
    # -- Pad and Cast
    Case("pad_constant", [_n("Pad", ["x", "p", "cv"])], [("x", F, ["b", 2, "n"])],
         {**B, **N}, [_i64("p", [0, 0, 1, 1, 2, 0]), ("cv", np.array(1.5, np.float32))]),
    Case("pad_reflect", [_n("Pad", ["x", "p"], mode="reflect")], [("x", F, ["b", "n"])],
         {"b": (1, 3), "n": (3, 11)}, [_i64("p", [0, 2, 0, 1])]),
    Case("pad_reflect_two_axes_crop", [_n("Pad", ["x", "p"], mode="reflect")],
         [("x", F, ["b", "n", 4])], {"b": (1, 3), "n": (3, 11)}, [_i64("p", [0, 1, 0, 0, 2, -1])]),
    Case("pad_edge", [_n("Pad", ["x", "p"], mode="edge")], [("x", F, ["b", "n"])],
         {**B, **N}, [_i64("p", [1, 1, 0, 3])]),
    Case("cast_float_int_float", [_n("Mul", ["x", "c"], ["m"]), _n("Cast", ["m"], ["i"], to=I64),
                                  _n("Cast", ["i"], to=F)],
         [("x", F, ["b", "n"])], {**B, **N}, [("c", np.array(10.0, np.float32))]),
    Case("cast_int_to_float", [_n("Cast", ["x"], to=F)], [("x", I64, ["b", 2, "n"])], {**B, **N}),
]
assert all(len(c.dims) <= MAX_SYMBOLS for c in CASES)
assert len({c.id for c in CASES}) == len(CASES)

_COMPILED: dict[str, tuple] = {}


def _compiled(case: Case):
    """(model, executor, ORT session) of ``case``, compiled once per module."""
    if case.id not in _COMPILED:
        pytest.importorskip("onnxruntime")
        from monolib.compiler.testing import ort_session

        model = case.model()
        gm = monolib.GraphModule(compile_model(model, dims=case.dims)["default"](monolib.cpu()))
        _COMPILED[case.id] = (model, gm, ort_session(model))
    return _COMPILED[case.id]


def _feed(dtype, shape):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(0, 256, shape).astype(dtype)
    return (RNG.standard_normal(shape) * 0.5).astype(dtype)


_FRACTIONS = st.tuples(*[st.floats(0, 1)] * MAX_SYMBOLS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@settings(max_examples=8, deadline=None)
@example(fractions=(0.0,) * MAX_SYMBOLS)
@example(fractions=(1.0,) * MAX_SYMBOLS)
@example(fractions=(0.0, 1.0) * (MAX_SYMBOLS // 2))
@given(fractions=_FRACTIONS)
def test_random_in_bound_shapes_match_ort(case, fractions):
    model, gm, session = _compiled(case)
    shapes = case.shapes(case.values(fractions))
    _, dtypes = gm.get_input_info()
    feeds = {k: _feed(dtypes[k], s) for k, s in shapes.items()}
    for k, a in feeds.items():
        gm.set_input(k, a)
    gm.run()
    want = session.run(None, feeds)
    for i, w in enumerate(want):
        got = gm.get_output(i).numpy()
        assert got.shape == w.shape, (case.id, shapes, i)
        np.testing.assert_allclose(got, w, atol=case.atol, rtol=1e-4,
                                   err_msg=f"{case.id} at {shapes} output {i}")


# -- refusals ---------------------------------------------------------------------------
def test_out_of_bounds_off_step_and_shared_name_refused():
    """One compiled model (x [b, h] + z [b, h], h on a step of 2): each violation is an
    InputError naming the input, the axis, the dim, its bounds and the value given."""
    case = next(c for c in CASES if c.id == "add_relu_mul_shared")
    model = case.model()
    gm = monolib.GraphModule(compile_model(
        model, dims={"b": (1, 3), "n": (2, 10, 2)})["default"](monolib.cpu()))
    ok = np.zeros((2, 4), np.float32)

    def refused(name, shape, *pieces):
        with pytest.raises(InputError) as err:
            gm.set_input(name, np.zeros(shape, np.float32))
        for p in pieces:
            assert p in str(err.value), (p, str(err.value))

    refused("x", (4, 4), "'x'", "axis 0", "'b'", "[1, 3]", "is 4")  # above the bound
    refused("z", (2, 12), "'z'", "axis 1", "'n'", "[2, 10] step 2", "is 12")
    refused("x", (2, 0), "'x'", "axis 1", "'n'", "[2, 10] step 2", "is 0")  # below
    refused("z", (2, 5), "'z'", "axis 1", "'n'", "[2, 10] step 2", "is 5")  # off step
    # shared name across inputs: checked at run(), before anything runs
    gm.set_input("x", ok)
    gm.set_input("z", np.zeros((3, 4), np.float32))
    with pytest.raises(InputError) as err:
        gm.run()
    for p in ("'x'", "'z'", "axis 0", "'b'", "[1, 3]", "2 and 3"):
        assert p in str(err.value), (p, str(err.value))
    # in bounds again: it runs
    gm.set_input("z", ok)
    gm.run()
    assert gm.get_output(0).numpy().shape == (2, 4)
