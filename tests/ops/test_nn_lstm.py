"""LSTM vs ONNX Runtime and the NumPy reference: forward, reverse, bidirectional,
initial states, peepholes, clip, constant and runtime weights, omitted outputs, and the
Silero VAD shape (hidden 128, one step), ragged sequence_lens and other activations
(layout=1, which ONNX Runtime lacks, is in test_nn_rnn.py against onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_node, make_node

RNG = np.random.default_rng(5)
T, B, I, H = 5, 2, 7, 16


def r(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def test_lstm_forward_full() -> None:
    check_node(
        "LSTM",
        [r(T, B, I), r(1, 4 * H, I), r(1, 4 * H, H), r(1, 8 * H), None, r(1, B, H), r(1, B, H)],
        {"hidden_size": H},
        const=[1, 2, 3],
        n_outputs=3,
    )


def test_lstm_runtime_weights_no_bias_no_state() -> None:
    check_node(
        "LSTM", [r(T, B, I), r(1, 4 * H, I), r(1, 4 * H, H)], {"hidden_size": H}, n_outputs=3
    )


def test_lstm_runtime_bias() -> None:
    check_node(
        "LSTM",
        [r(T, B, I), r(1, 4 * H, I), r(1, 4 * H, H), r(1, 8 * H)],
        {"hidden_size": H},
        n_outputs=3,
    )


def test_lstm_bidirectional_peepholes_clip() -> None:
    check_node(
        "LSTM",
        [
            r(T, B, I),
            r(2, 4 * H, I),
            r(2, 4 * H, H),
            r(2, 8 * H),
            None,
            r(2, B, H),
            r(2, B, H),
            r(2, 3 * H),
        ],
        {"hidden_size": H, "direction": "bidirectional", "clip": 0.5},
        const=[1, 2, 3, 7],
        n_outputs=3,
    )


def test_lstm_reverse_two_outputs() -> None:
    check_node(
        "LSTM",
        [r(T, B, I), r(1, 4 * H, I), r(1, 4 * H, H), r(1, 8 * H)],
        {"hidden_size": H, "direction": "reverse"},
        const=[1, 2],
        n_outputs=2,
    )


def test_lstm_silero_shape() -> None:
    check_node(
        "LSTM",
        [
            r(1, 1, 128),
            r(1, 512, 128),
            r(1, 512, 128),
            r(1, 1024),
            None,
            r(1, 1, 128),
            r(1, 1, 128),
        ],
        {"hidden_size": 128},
        const=[1, 2, 3],
        n_outputs=3,
        opset=14,
    )


def test_lstm_full_sequence_lens_accepted() -> None:
    seq = np.full(B, T, np.int32)
    check_node(
        "LSTM",
        [r(T, B, I), r(1, 4 * H, I), r(1, 4 * H, H), r(1, 8 * H), seq],
        {"hidden_size": H},
        const=[1, 2, 3, 4],
        n_outputs=3,
    )


def test_lstm_ragged_sequence_lens_bidirectional() -> None:
    # the generic recurrence of rnn.py: a shorter entry runs fewer steps, Y is 0 after
    seq = np.array([T, T - 2], np.int32)
    check_node(
        "LSTM",
        [r(T, B, I), r(2, 4 * H, I), r(2, 4 * H, H), r(2, 8 * H), seq],
        {"hidden_size": H, "direction": "bidirectional"},
        const=[1, 2],
        n_outputs=3,
    )


def test_lstm_other_activations() -> None:
    check_node(
        "LSTM",
        [r(T, B, I), r(1, 4 * H, I), r(1, 4 * H, H)],
        {"hidden_size": H, "activations": ["HardSigmoid", "Tanh", "Softsign"],
         "activation_alpha": [0.3], "activation_beta": [0.4]},
        const=[1, 2],
        n_outputs=3,
    )


def test_lstm_bad_weight_shape_is_shape_error() -> None:
    from monolib.errors import ShapeError

    with pytest.raises(ShapeError, match="LSTM node"):
        make_node("LSTM", [r(T, B, I), r(1, 4 * H, I + 1), r(1, 4 * H, H)], {"hidden_size": H})


def test_lstm_recurrence_split_over_threads_is_bit_identical() -> None:
    """Hidden 256 (a 256 x 1024 recurrent product per step, above lstm.h's
    ML_LSTM_PAR_MIN): at 2 threads each step's product is split by column ranges over the
    pool; every gate column keeps its one-thread sum, so the outputs equal the 1-thread
    run bit for bit, and ONNX Runtime's within float32 tolerance."""
    import os

    import monolib
    from monolib.compiler.testing import make_node_model, ort_run
    from monolib.runtime import set_num_threads

    h = 256
    feeds = {"x": r(3, 1, 32), "w": r(1, 4 * h, 32, scale=0.1), "rw": r(1, 4 * h, h, scale=0.1),
             "b": r(1, 8 * h, scale=0.1)}
    model = make_node_model("LSTM", feeds, {"hidden_size": h}, outputs=3,
                            constant_inputs=["w", "rw", "b"])
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    runs = []
    try:
        for n in (1, 2):
            set_num_threads(n)
            gm.run(x=feeds["x"])
            runs.append([gm.get_output(i).numpy().copy() for i in range(3)])
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    for one, two in zip(*runs):
        np.testing.assert_array_equal(two, one)
    for got, want in zip(runs[0], ort_run(model, {"x": feeds["x"]})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
