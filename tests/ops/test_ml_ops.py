"""Binarizer and ArrayFeatureExtractor (ai.onnx.ml) against ``onnx.reference``."""

import numpy as np
from refnode import check_node

RNG = np.random.default_rng(31)


def test_binarizer_int():
    x = RNG.integers(-5, 5, (4, 6)).astype(np.int32)
    check_node("Binarizer", {"x": x}, ["y"], domain="ai.onnx.ml", threshold=1.0)


def test_array_feature_extractor_1d_and_3d():
    idx = np.array([[3, 0, 3]], np.int64)
    check_node("ArrayFeatureExtractor", {"x": RNG.standard_normal(5).astype(np.float32),
                                         "i": idx}, ["y"], domain="ai.onnx.ml")
    check_node("ArrayFeatureExtractor", {"x": RNG.standard_normal((2, 3, 5)).astype(np.float32),
                                         "i": idx[0]}, ["y"], domain="ai.onnx.ml")
