"""Grouped (not depthwise) Conv whose groups run as thread-pool tasks (conv.h's
``ml_conv_groups``): one group's GEMM is below the pool's split threshold while the
op's work is above it, or the groups share out evenly over the threads (else each
large group is split in turn). Results vs ONNX Runtime at 1 and 2 threads, bit-identical
between thread counts, and the split emitted only where the work calls for it."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.ops.nn import conv
from monolib.compiler.tuning.select import Candidate
from monolib.compiler.testing import ort_run

from harness import run_threads

RNG = np.random.default_rng(14)


def _model(c, m, group, hw, k=1, pad=0, stride=1, bias=True):
    w = (RNG.standard_normal((m, c // group, k, k)) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b"))
        ins.append("b")
    conv = helper.make_node("Conv", ins, ["c"], group=group, pads=[pad] * 4,
                            strides=[stride, stride])
    relu = helper.make_node("Relu", ["c"], ["y"])
    oh = (hw + 2 * pad - k) // stride + 1  # a fused epilogue, per-group channels
    graph = helper.make_graph(
        [conv, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, oh, oh])], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])


def _source(model):
    return monolib.compile(model).imported_modules[0].get_source()


@pytest.mark.parametrize("c,m,group,hw,k,pad,stride,bias", [
    (272, 272, 4, 14, 1, 0, 1, True),   # ShuffleNet-like 1x1: 68x196x68 per group
    (240, 168, 3, 17, 1, 0, 1, False),  # odd pixel tail (289 columns), no bias
    (128, 96, 4, 15, 3, 1, 1, True),    # 3x3 padded: im2col from the padded image
    (120, 72, 6, 27, 3, 0, 2, True),    # strided, unpadded im2col, 6 groups
    (96, 256, 2, 27, 5, 2, 1, True),    # AlexNet's 5x5: 2 large groups, one a thread
    (192, 192, 3, 28, 3, 1, 1, True),   # 3 large groups on 2 threads: each group split
])
def test_grouped_conv_threads(c, m, group, hw, k, pad, stride, bias, monkeypatch):
    # the implicit-im2col GEMM (the rule may take direct or Winograd for 3x3 windows)
    monkeypatch.setattr(conv, "_rule", lambda node, d, group, blocked=False, blocked_in=False:
                        Candidate("gemm"))
    model = _model(c, m, group, hw, k, pad, stride, bias)
    feeds = {"x": RNG.standard_normal((1, c, hw, hw)).astype(np.float32)}
    assert "ml_conv_groups(&gj_)" in _source(model)  # the path under test
    want = ort_run(model, feeds)[0]
    one, two = run_threads(model, feeds, (1, 2))
    np.testing.assert_allclose(one[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[0], two[0])  # groups split whole: same sums


def test_group_tasks_emitted_only_when_large():
    split = _source(_model(272, 272, 4, 14))      # 68x196x68: 0.9M per group, 3.6M in all
    tiny = _source(_model(16, 16, 4, 7))          # 4x49x4 per group: stays serial
    big_group = _source(_model(544, 544, 4, 28))  # 136x784x136 = 14.5M per group: the
    # run time chooses (group tasks where the groups share out evenly over the threads,
    # else ml_sgemm_par splits each group's GEMM itself)
    assert "ml_conv_groups(&gj_)" in split
    assert "ml_conv_groups(&gj_)" not in tiny
    assert "ml_conv_groups(&gj_)" in big_group
