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
