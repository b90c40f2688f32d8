"""RNN and GRU (and LSTM's layout=1) through monolib against ONNX Runtime (ragged
sequence_lens, linear_before_reset, activations with alpha/beta, clip, bidirectional,
runtime weights) and ``onnx.reference`` (layout=1, which ONNX Runtime does not run)."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(7)
T, B, I, H = 4, 3, 5, 6


def r(*shape):
    return (0.4 * RNG.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize("lbr,direction", [(0, "bidirectional"), (1, "reverse")])
def test_gru_ragged(lbr, direction):
    d = 2 if direction == "bidirectional" else 1
    seq = np.array([T, 1, T - 1], np.int32)
    ins = {"x": r(T, B, I), "w": r(d, 3 * H, I), "r": r(d, 3 * H, H), "b": r(d, 6 * H),
           "seq": seq, "h0": r(d, B, H)}  # all at run time
    check_node("GRU", ins, ["y", "yh"], oracle="ort", hidden_size=H, direction=direction, linear_before_reset=lbr, rtol=1e-4,
               atol=1e-5)


def test_rnn_activation_clip_runtime_weights():
    check_node("RNN", {"x": r(T, B, I), "w": r(1, H, I), "r": r(1, H, H)}, ["y", "yh"],
               oracle="ort", hidden_size=H, activations=["ScaledTanh"],
               activation_alpha=[1.5], activation_beta=[0.7], clip=0.9, rtol=1e-4,
               atol=1e-5)


@pytest.mark.parametrize("op,gates", [("GRU", 3), ("LSTM", 4)])
def test_layout1(op, gates):
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    extra = {"linear_before_reset": 1} if op == "GRU" else {}  # with a constant Rbh
    check_node(op, {"x": r(B, T, I)}, outs, opset=14, layout=1, hidden_size=H, **extra,
               consts={"w": r(1, gates * H, I), "r": r(1, gates * H, H),
                       "b": r(1, 2 * gates * H)}, rtol=1e-4, atol=1e-5)


# -- GRU (linear_before_reset=1) on kernels/lstm.h's packed blocks --------------------------


def _gru_ins(t, b, i, h, d, bias=True, h0=True):
    return [r(t, b, i), r(d, 3 * h, i), r(d, 3 * h, h), r(d, 6 * h) if bias else None, None,
            r(d, b, h) if h0 else None]


@pytest.mark.parametrize("lbr", [1, 0])
@pytest.mark.parametrize(
    "h,b,t,direction,const,bias,h0",
    [
        (37, 3, 4, "forward", [1, 2, 3], True, True),  # blocks 16, 16, 5; 3 rows a pass
        (20, 5, 3, "reverse", [1, 2, 3], True, False),  # 4 rows + 1
        (16, 1, 1, "bidirectional", [1, 2], False, True),  # no bias: Rbh 0
        (53, 2, 6, "bidirectional", [1], True, True),  # R and B at run time
        (5, 6, 2, "forward", [], True, True),  # a tail block only, all at run time
    ],
)
def test_gru_packed_kernel(h, b, t, direction, const, bias, h0, lbr):
    """linear_before_reset 1 (one pass a step, Rbh inside the reset product) and 0 (two
    passes: z and r*h, then the candidate)."""
    from harness import check_node as check

    d = 2 if direction == "bidirectional" else 1
    ins = _gru_ins(t, b, 7, h, d, bias, h0)
    node = check("GRU", ins, {"hidden_size": h, "direction": direction,
                              "linear_before_reset": lbr}, const=const, n_outputs=2,
                 rtol=1e-4, atol=1e-5)
    from harness import NodeContext
    from monolib.compiler.ops.base import op_of

    assert ("ml_gru(" if lbr else "ml_gru0(") in op_of(node).emit(node, NodeContext(node))


@pytest.mark.parametrize("lbr", [1, 0])
def test_gru_packed_kernel_clip_and_vector_width_4(lbr):
    from harness import VECTOR_WIDTHS
    from harness import check_node as check

    h = 21
    check("GRU", _gru_ins(3, 5, 6, h, 1), {"hidden_size": h, "linear_before_reset": lbr,
                                           "clip": 0.3},
          const=[1, 2, 3], n_outputs=2, rtol=1e-4, atol=1e-5, options=VECTOR_WIDTHS["vw4"])


@pytest.mark.parametrize("lbr", [1, 0])
@pytest.mark.parametrize("h,b,t,direction", [(80, 2, 8, "bidirectional"),
                                             (144, 5, 3, "forward")])
def test_gru_threads_bit_identical(h, b, t, direction, lbr):
    """Above ML_RNN_DIR_PAR_MIN the directions run side by side, above ML_LSTM_PAR_MIN a
    step splits by unit blocks: the outputs equal the 1-thread run bit for bit, and
    ORT's within tolerance."""
    from harness import run_threads

    from monolib.compiler.testing import make_node_model, ort_run

    d = 2 if direction == "bidirectional" else 1
    feeds = {"x": r(t, b, 24), "w": 0.5 * r(d, 3 * h, 24), "rw": 0.25 * r(d, 3 * h, h),
             "b": 0.25 * r(d, 6 * h)}
    model = make_node_model("GRU", feeds, {"hidden_size": h, "direction": direction,
                                           "linear_before_reset": lbr},
                            outputs=2, constant_inputs=["w", "rw", "b"])
    one, two = run_threads(model, {"x": feeds["x"]})
    for a, c in zip(one, two):
        np.testing.assert_array_equal(c, a)
    for got, want in zip(one, ort_run(model, {"x": feeds["x"]})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
