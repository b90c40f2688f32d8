"""DFT (forward, inverse, one-sided, irfft, cut/padded lengths, complex input), STFT,
the window generators and MelWeightMatrix against ``onnx.reference``; a real STFT (also
as ``[B, L]``, the form ``torch.stft`` exports) as one GEMM against ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from refnode import check_node

from monolib.compiler.build import lower

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("cin,length,inverse,onesided,axis", [
    (2, 7, 0, 0, 1),   # complex, zero-padded to 7
    (1, 4, 0, 1, 2),   # real, cut to 4, one-sided
    (2, 9, 1, 1, 1),   # irfft of odd length
])
def test_dft(cin, length, inverse, onesided, axis):
    x = RNG.standard_normal((2, 5, 6, cin)).astype(np.float32)
    check_node("DFT", {"x": x}, ["y"], opset=20, inverse=inverse, onesided=onesided,
               consts={"n": np.array(length), "axis": np.array(axis)}, rtol=1e-4, atol=1e-5)


def test_stft_window_complex():
    x = RNG.standard_normal((2, 40, 2)).astype(np.float32)
    check_node("STFT", {"x": x}, ["y"], opset=17, onesided=0, rtol=1e-4, atol=1e-4,
               consts={"step": np.array(6), "w": np.hanning(10).astype(np.float32)})


@pytest.mark.parametrize("shape", [(2, 400), (1, 400, 1)])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_real_as_gemm(shape, onesided):
    """Overlapping frames (step 24 < 64) read in place as the GEMM's rows, the window
    folded into the basis; [B, L] is a real signal, as ONNX Runtime takes it."""
    x = RNG.standard_normal(shape).astype(np.float32)
    check_node("STFT", {"x": x}, ["y"], opset=17, onesided=onesided, rtol=1e-4, atol=1e-4,
               oracle="ort", consts={"step": np.array(24), "w": np.hamming(64).astype(np.float32),
                                     "fl": np.array(64)})


def test_stft_real_emits_one_gemm():
    """The real float32 STFT with a constant window is a GEMM, not the direct sums."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 800])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 201, 2])
    g = helper.make_graph([helper.make_node("STFT", ["x", "step", "w"], ["y"])], "g", [x], [y],
                          [numpy_helper.from_array(np.array(160, np.int64), "step"),
                           numpy_helper.from_array(np.hanning(400).astype(np.float32), "w")])
    source, _, _ = lower(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                         None, None)
    assert "ml_sgemm_par(" in source and "ml_dft_float(" not in source


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows(op):
    for periodic in (0, 1):
        check_node(op, {}, ["y"], opset=17, periodic=periodic, output_datatype=11,
                   consts={"n": np.array(9, np.int32)})


def test_mel_weight_matrix():
    consts = {"bins": np.array(6), "dft": np.array(64), "rate": np.array(8000),
              "lo": np.array(20.0, np.float32), "hi": np.array(3500.0, np.float32)}
    check_node("MelWeightMatrix", {}, ["y"], opset=17, consts=consts)
