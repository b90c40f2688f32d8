"""DFT (forward, inverse, one-sided, irfft, cut/padded lengths, complex input), STFT,
the window generators and MelWeightMatrix against ``onnx.reference``."""

import numpy as np
import pytest
from refnode import check_node

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


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows(op):
    for periodic in (0, 1):
        check_node(op, {}, ["y"], opset=17, periodic=periodic, output_datatype=11,
                   consts={"n": np.array(9, np.int32)})


def test_mel_weight_matrix():
    consts = {"bins": np.array(6), "dft": np.array(64), "rate": np.array(8000),
              "lo": np.array(20.0, np.float32), "hi": np.array(3500.0, np.float32)}
    check_node("MelWeightMatrix", {}, ["y"], opset=17, consts=consts)
