"""Binarizer and ArrayFeatureExtractor (ai.onnx.ml) against ``onnx.reference``;
TfIdfVectorizer and TreeEnsemble (ai.onnx.ml 5) against ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from refnode import check_node

import monolib

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


# ---- TreeEnsemble (ai.onnx.ml 5; ops/math/tree_ensemble.py) against ONNX Runtime -----

def _forest(rng, trees, depth, features, n_targets, dtype=np.float32):
    """Random full trees of every mode (MEMBER sets NaN-separated in node order), NaN
    routing where nodes_missing_value_tracks_true says so."""
    a = {k: [] for k in ("nodes_featureids", "nodes_modes", "nodes_splits",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs",
                         "nodes_falseleafs", "nodes_missing_value_tracks_true",
                         "leaf_targetids", "leaf_weights", "tree_roots")}
    members = []

    def grow(d):
        i = len(a["nodes_modes"])
        mode = int(rng.integers(0, 7))
        a["nodes_modes"].append(mode)
        a["nodes_featureids"].append(int(rng.integers(0, features)))
        a["nodes_splits"].append(float(np.round(rng.normal(), 1)))
        a["nodes_missing_value_tracks_true"].append(int(rng.integers(0, 2)))
        for k in ("nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs",
                  "nodes_falseleafs"):
            a[k].append(0)
        if mode == 6:
            # ONNX Runtime takes integer members only, and reads negative ones otherwise
            # than the spec; 0 is in (ONNX's reference ends a set at a 0)
            members.extend(rng.integers(0, 4, 3).astype(float).tolist() + [np.nan])
        for side in ("true", "false"):
            if d + 1 >= depth or rng.random() < 0.2:
                a[f"nodes_{side}leafs"][i] = 1
                a[f"nodes_{side}nodeids"][i] = len(a["leaf_weights"])
                a["leaf_weights"].append(float(rng.normal()))
                a["leaf_targetids"].append(int(rng.integers(0, n_targets)))
            else:
                a[f"nodes_{side}nodeids"][i] = grow(d + 1)
        return i

    for _ in range(trees):
        a["tree_roots"].append(grow(0))
    tensor = {"nodes_modes": np.uint8, "nodes_splits": dtype, "leaf_weights": dtype}
    attrs = {k: (helper.make_tensor(k, helper.np_dtype_to_tensor_dtype(np.dtype(tensor[k])),
                                    [len(v)], np.asarray(v, tensor[k]).tolist())
                 if k in tensor else v) for k, v in a.items()}
    if members:
        attrs["membership_values"] = helper.make_tensor(
            "membership_values", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
            [len(members)], np.asarray(members, dtype).tolist())
    return attrs


def _tree_model(attrs, rows, features, n_targets, dtype, **extra):
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml",
                            n_targets=n_targets, **attrs, **extra)
    graph = helper.make_graph([node], "te", [helper.make_tensor_value_info("X", t, [rows, features])],
                              [helper.make_tensor_value_info("Y", t, [rows, n_targets])])
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])


@pytest.mark.parametrize("agg,post,n_targets", [
    (1, 0, 3), (0, 0, 3), (2, 0, 1), (3, 0, 1), (1, 1, 3), (1, 2, 3), (1, 3, 3), (1, 4, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_matches_ort(agg, post, n_targets, dtype):
    from monolib.compiler.testing import ort_run, run_model
    rng = np.random.default_rng(agg * 10 + post)
    attrs = _forest(rng, trees=4, depth=5, features=3, n_targets=n_targets, dtype=dtype)
    x = (np.round(rng.normal(size=(40, 3)) * 2) / 2).astype(dtype)  # integers now and then
    x[::7, 1] = np.nan
    if post == 4:  # PROBIT wants probabilities
        attrs["leaf_weights"] = helper.make_tensor(
            "leaf_weights", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
            [len(attrs["leaf_targetids"])],
            rng.uniform(0.02, 0.24, len(attrs["leaf_targetids"])).astype(dtype).tolist())
    model = _tree_model(attrs, 40, 3, n_targets, dtype, aggregate_function=agg,
                        post_transform=post)
    (got,) = run_model(model, {"X": x})
    # ONNX Runtime 1.32 reads post_transform 1 as LOGISTIC and 2 as SOFTMAX (its own
    # enum's order); the spec (and monolib): 1 SOFTMAX, 2 LOGISTIC
    ort_model = _tree_model(attrs, 40, 3, n_targets, dtype, aggregate_function=agg,
                            post_transform={1: 2, 2: 1}.get(post, post))
    (want,) = ort_run(ort_model, {"X": x})
    assert got.dtype == want.dtype == dtype
    # PROBIT: the float32 erfinv approximation cancels near p = 0.5 (ORT's order of
    # operations may differ in the last bits there)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 if post == 4 else 1e-6)


def test_tree_ensemble_refuses_a_cycle_naming_the_node():
    from monolib.errors import ShapeError
    attrs = dict(nodes_featureids=[0, 0], nodes_modes=helper.make_tensor(
        "m", TensorProto.UINT8, [2], [0, 0]), nodes_splits=helper.make_tensor(
        "s", TensorProto.FLOAT, [2], [0.0, 1.0]), nodes_truenodeids=[1, 0],
        nodes_falsenodeids=[0, 0], nodes_trueleafs=[0, 0], nodes_falseleafs=[1, 1],
        leaf_targetids=[0], leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0]),
        tree_roots=[0])
    with pytest.raises(ShapeError, match="'te0'.*cycle"):
        m = _tree_model(attrs, 2, 1, 1, np.float32)
        m.graph.node[0].name = "te0"
        monolib.compile(m)
