"""GatherND with batch_dims, ReverseSequence (both axis orders, lengths read at run
time) and MaxUnpool (with and without a larger output_shape) against
``onnx.reference``."""

import numpy as np
from refnode import check_node

RNG = np.random.default_rng(11)


def test_gather_nd_batch_dims_2():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    idx = RNG.integers(-4, 4, (2, 3, 6, 1)).astype(np.int64)
    check_node("GatherND", {"x": x, "i": idx}, ["y"], opset=13, batch_dims=2)


def test_reverse_sequence_batch_major():
    x = RNG.standard_normal((3, 5, 2)).astype(np.float32)
    check_node("ReverseSequence", {"x": x, "n": np.array([5, 0, 3])}, ["y"], opset=10,
               batch_axis=0, time_axis=1)


def test_max_unpool_roundtrip_with_output_shape():
    x = RNG.permutation(36).astype(np.float32).reshape(1, 1, 6, 6)
    # MaxPool's values and indices feed MaxUnpool
    import onnx.reference
    from onnx import TensorProto, helper
    pool = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2])],
        "p", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in "vi"])
    v, i = onnx.reference.ReferenceEvaluator(helper.make_model(pool)).run(None, {"x": x})
    check_node("MaxUnpool", {"v": v, "i": i}, ["y"], opset=11, kernel_shape=[2, 2],
               strides=[2, 2], consts={"s": np.array([1, 1, 7, 8])})
