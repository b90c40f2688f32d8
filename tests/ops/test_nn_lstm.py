"""LSTM vs ONNX Runtime and the NumPy reference: forward, reverse, bidirectional,
initial states, peepholes, clip, constant and runtime weights, omitted outputs, and the
Silero VAD shape (hidden 128, one step), ragged sequence_lens and other activations
(layout=1, which ONNX Runtime lacks, is in test_nn_rnn.py against onnx.reference)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from harness import VECTOR_WIDTHS, check_node, make_node

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
    # a shorter entry runs fewer steps, Y is 0 after (lstm.h, row by row)
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
    ML_LSTM_PAR_MIN): at 2 threads each step is split by blocks of units over the
    pool; every unit keeps its one-thread sums, so the outputs equal the 1-thread
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


# -- the packed-block kernel (kernels/lstm.h): tails, batch groups, vector widths, threads --


@pytest.mark.parametrize(
    "h,b,t,direction,const",
    [
        (37, 3, 4, "forward", [1, 2, 3]),  # blocks 16, 16, 5; 3 rows in one group
        (20, 5, 3, "reverse", [1, 2, 3]),  # a group of 4 rows and one of 1
        (16, 1, 1, "bidirectional", [1, 2, 3]),
        (53, 2, 6, "bidirectional", [1, 3]),  # R at run time: ml_rnn_pack_r
        (5, 6, 2, "forward", []),  # a tail block only, everything at run time
    ],
)
def test_lstm_odd_hidden_batches_directions(h, b, t, direction, const) -> None:
    d = 2 if direction == "bidirectional" else 1
    check_node(
        "LSTM",
        [r(t, b, 9), r(d, 4 * h, 9), r(d, 4 * h, h), r(d, 8 * h), None, r(d, b, h), r(d, b, h)],
        {"hidden_size": h, "direction": direction},
        const=const,
        n_outputs=3,
        rtol=1e-4,
        atol=1e-5,
    )


def test_lstm_odd_hidden_peepholes_clip() -> None:
    h = 37
    check_node(
        "LSTM",
        [r(4, 3, 6), r(2, 4 * h, 6), r(2, 4 * h, h), r(2, 8 * h), None, None, r(2, 3, h),
         r(2, 3 * h)],
        {"hidden_size": h, "direction": "bidirectional", "clip": 0.4},
        const=[1, 2, 3, 7],
        n_outputs=3,
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("width", sorted(VECTOR_WIDTHS))
def test_lstm_other_vector_widths(width: str) -> None:
    """ML_VW 4 (16 vectors a block, one row a pass) and 16 (4 rows a pass)."""
    h = 21
    check_node(
        "LSTM",
        [r(3, 5, 7), r(1, 4 * h, 7), r(1, 4 * h, h), r(1, 8 * h), None, r(1, 5, h), r(1, 5, h)],
        {"hidden_size": h},
        const=[1, 2, 3],
        n_outputs=3,
        rtol=1e-4,
        atol=1e-5,
        options=VECTOR_WIDTHS[width],
    )


def _kernel_lib():
    from monolib.compiler.backends.c.headers import kernel_header
    from monolib.compiler.testing import build_shared

    src = (
        "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n"
        + kernel_header("vmath.h") + kernel_header("threadpool.h")
        + kernel_header("gemm.h") + kernel_header("lstm.h")
        + "void tanh_all(const float* x, float* y, int64_t n) {\n"
        "  for (int64_t i = 0; i < n; ++i) y[i] = ml_tanhf(x[i]); }\n"
        "void pack(int64_t h, const float* r, float* rp) { ml_rnn_pack_r(h, 4, r, rp); }\n"
    )
    lib = build_shared(src)
    lib.tanh_all.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.pack.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def test_lstm_tanh_within_six_ulp() -> None:
    """The cells' ml_tanhf (vmath.h's rational tanh, built here with lstm.h as a model's
    library builds it) against float64 tanh: at most 6 ulp over [-12, 12] (5.5 over all
    float32), odd, exact for tiny inputs, +-1 at +-inf, NaN kept."""
    x = np.concatenate([
        np.linspace(-12, 12, 400001, dtype=np.float32),
        np.nextafter(np.float32(0.625), np.float32([0, 1])), np.float32([0.625, -0.625]),
        np.float32([0.0, -0.0, 1e-30, -1e-38, 1e-45, 3.0e-4, 90.0, -90.0]),
    ]).astype(np.float32)
    y = np.empty_like(x)
    _kernel_lib().tanh_all(x.ctypes.data, y.ctypes.data, x.size)
    want = np.tanh(x.astype(np.float64))
    ulp = np.abs(y - want) / np.spacing(np.abs(want).astype(np.float32).clip(1e-38))
    assert ulp.max() <= 6.0, x[np.argmax(ulp)]
    np.testing.assert_array_equal(y[x == 0], x[x == 0])
    special = np.float32([np.inf, -np.inf, np.nan])
    out = np.empty_like(special)
    _kernel_lib().tanh_all(special.ctypes.data, out.ctypes.data, 3)
    assert out[0] == 1 and out[1] == -1 and np.isnan(out[2])


@pytest.mark.parametrize("h", [5, 16, 37])
def test_lstm_pack_r_matches_the_compile_time_packing(h: int) -> None:
    """The run-time packing of lstm.h and rnn.py's pack_recurrent give one layout, and it
    is the documented one: unit block u0, row k, gate q, unit u at u0*4H + (k*4 + q)*w + u."""
    from monolib.compiler.ops.nn.rnn import pack_recurrent

    rr = r(4 * h, h)
    got = np.empty(4 * h * h, np.float32)
    _kernel_lib().pack(h, rr.ctypes.data, got.ctypes.data)
    want = pack_recurrent(rr)
    np.testing.assert_array_equal(got, want)
    u0, w, k, q, u = 16 * ((h - 1) // 16), h - 16 * ((h - 1) // 16), h - 1, 2, 0
    assert want[u0 * 4 * h + (k * 4 + q) * w + u] == rr[q * h + u0 + u, k]


@pytest.mark.parametrize(
    "h,b,t,direction",
    [(64, 2, 8, "bidirectional"),  # the two directions side by side
     (144, 5, 3, "reverse")],  # one step over 2 tasks of 5 and 4 blocks, 4 + 1 rows
)
def test_lstm_threads_bit_identical(h, b, t, direction) -> None:
    """Above ML_RNN_DIR_PAR_MIN the pool runs the directions side by side, above
    ML_LSTM_PAR_MIN each step's unit blocks split; every unit is computed as on one
    thread, so the outputs equal the 1-thread run bit for bit, and ONNX Runtime's within
    float32 tolerance."""
    from harness import run_threads

    from monolib.compiler.testing import make_node_model, ort_run

    d = 2 if direction == "bidirectional" else 1
    feeds = {"x": r(t, b, 24), "w": r(d, 4 * h, 24, scale=0.2), "rw": r(d, 4 * h, h, scale=0.1),
             "b": r(d, 8 * h, scale=0.1)}
    model = make_node_model("LSTM", feeds, {"hidden_size": h, "direction": direction},
                            outputs=3, constant_inputs=["w", "rw", "b"])
    one, two = run_threads(model, {"x": feeds["x"]})
    for a, c in zip(one, two):
        np.testing.assert_array_equal(c, a)
    for got, want in zip(one, ort_run(model, {"x": feeds["x"]})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "direction,seq,const",
    [("reverse", [T, 1, 3], [1, 2, 3]),  # sequence_lens at run time
     ("bidirectional", [2, T, T], [1, 2, 3, 4]),  # constant but ragged
     ("forward", [4, T, 1], [])],  # everything at run time
)
def test_lstm_ragged_lengths_row_by_row(direction, seq, const) -> None:
    """Ragged sequence_lens in lstm.h: each row runs its own steps (a reverse direction
    from its last one), Y is 0 past them, Y_h and Y_c hold the state after them."""
    d = 2 if direction == "bidirectional" else 1
    h = 19
    node = check_node(
        "LSTM",
        [r(T, 3, I), r(d, 4 * h, I), r(d, 4 * h, h), r(d, 8 * h), np.array(seq, np.int32),
         r(d, 3, h), r(d, 3, h), r(d, 3 * h)],
        {"hidden_size": h, "direction": direction},
        const=const,
        n_outputs=3,
        rtol=1e-4,
        atol=1e-5,
    )
    from harness import NodeContext

    from monolib.compiler.ops.base import op_of

    assert "ml_lstm(" in op_of(node).emit(node, NodeContext(node))


def test_lstm_bidirectional_lockstep_at_four_threads() -> None:
    """With more threads than directions a bidirectional LSTM runs both directions'
    steps in lockstep, split by unit blocks: bit-identical to 1 thread and to 2 (the
    directions side by side), and ORT's within tolerance."""
    from harness import run_threads

    from monolib.compiler.testing import make_node_model, ort_run

    h = 64  # a step of both directions: 2 x 3 x 64 x 256 = 98K >= ML_LSTM_PAR_MIN
    feeds = {"x": r(5, 3, 16), "w": r(2, 4 * h, 16), "rw": r(2, 4 * h, h, scale=0.1),
             "b": r(2, 8 * h, scale=0.1)}
    model = make_node_model("LSTM", feeds, {"hidden_size": h, "direction": "bidirectional"},
                            outputs=3, constant_inputs=["w", "rw", "b"])
    runs = run_threads(model, {"x": feeds["x"]}, threads=(1, 2, 4))
    for outs in runs[1:]:
        for a, c in zip(runs[0], outs):
            np.testing.assert_array_equal(c, a)
    for got, want in zip(runs[0], ort_run(model, {"x": feeds["x"]})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
