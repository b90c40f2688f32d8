"""Binarizer and ArrayFeatureExtractor (ai.onnx.ml) against ``onnx.reference``;
TfIdfVectorizer and TreeEnsemble (ai.onnx.ml 5) against ONNX Runtime."""

import numpy as np
import pytest
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


# ---- TfIdfVectorizer (ONNX 9; ops/math/tfidf.py) against ONNX Runtime ----------------

_POOL = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 5, 5, 2, 3],  # 4 unigrams, 5 bigrams
             ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7, 8])


def _tokens(shape, dtype=np.int64):
    return RNG.integers(2, 9, shape).astype(dtype)


def test_tfidf_modes_and_weights_match_ort():
    x = _tokens((3, 12))
    w = (RNG.uniform(0.5, 2.0, 9)).astype(np.float32).tolist()
    for mode in ("TF", "IDF", "TFIDF"):
        for weights in ({}, {"weights": w}):
            check_node("TfIdfVectorizer", {"x": x}, ["y"], oracle="ort", mode=mode,
                       min_gram_length=1, max_gram_length=2, max_skip_count=2, **_POOL,
                       **weights)


def test_tfidf_int32_1d_bigrams_only_with_skips():
    x = _tokens(40, np.int32)
    y = check_node("TfIdfVectorizer", {"x": x}, ["y"], oracle="ort", mode="TF",
                   min_gram_length=2, max_gram_length=2, max_skip_count=3, **_POOL)[0]
    assert y.shape == (9,) and y[:4].sum() == 0 and y.sum() > 0  # no unigram counted


def test_tfidf_refuses_strings():
    from monolib.compiler.ir import Node, Value
    from monolib.compiler.ops import op_of
    from monolib.errors import UnsupportedOpError
    x = Value("x", (3,), np.dtype(object))
    node = Node("TfIdfVectorizer", "tf", [x], [Value("y", (), np.dtype(np.float32))],
                {"mode": "TF", "min_gram_length": 1, "max_gram_length": 1,
                 "max_skip_count": 0, "ngram_counts": [0], "ngram_indexes": [0],
                 "pool_strings": ["a"]}, "", 9)
    with pytest.raises(UnsupportedOpError, match="'tf'.*tokens"):
        op_of(node).infer(node)
