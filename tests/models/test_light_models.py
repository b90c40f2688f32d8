"""The ``light`` models of ONNX's backend test suite (``onnx/backend/test/data/light``:
AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19,
ZFNet-512) compiled and run by monolib.

* Every model on ONNX's own input (``Runner.generate_dummy_data``: ``arange / n``)
  against the output ONNX stored next to it, computed by ``onnx.reference``'s
  ``ReferenceEvaluator`` (the suite's check). Their weights are ``ConstantOfShape``
  fills, so these outputs are flat.
* Hence also the small models with the fills replaced by seeded random weights,
  against ONNX Runtime, where every logit differs.

``ReferenceEvaluator`` itself is not the oracle for random weights: on these opset-9
graphs it disagrees with ONNX Runtime (and monolib), e.g. SqueezeNet's Softmax over a
``[1, 1000, 1, 1]`` tensor comes out all ones.

Compiling the nine models takes ~40 s on 2 cores; the stored-output check is what
CI runs for all of them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

from monolib.onnx_backend import MonolibBackend

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512"]
RANDOM_VS_ORT = ["inception_v1", "shufflenet", "squeezenet"]


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(LIGHT / f"light_{name}.onnx"))


def _inputs(model: onnx.ModelProto) -> list[np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    return [Runner.generate_dummy_data(v, seed=0, random=False)
            for v in model.graph.input if v.name not in inits]


def _random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` with each ``ConstantOfShape`` weight fill replaced by a seeded
    random initializer: He-scaled normal for matrices and kernels, uniform in
    [0.5, 1.5] for vectors (biases, batch-norm statistics: variances stay > 0)."""
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(out.ir_version, 7)  # initializers need not be graph inputs
    keep, added = [], []
    for node in out.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            else:
                w = rng.uniform(0.5, 1.5, shape)
            added.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        else:
            keep.append(node)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    out.graph.initializer.extend(added)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_onnx_reference_output(name):
    model = _load(name)
    want = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    (got,) = MonolibBackend.prepare(model, "CPU").run(_inputs(model))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("name", RANDOM_VS_ORT)
def test_light_model_random_weights_vs_onnxruntime(name, ort_run):
    model = _random_weights(_load(name))
    feeds = _inputs(model)
    (got,) = MonolibBackend.prepare(model, "CPU").run(feeds)
    inits = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    (want,) = ort_run(model, dict(zip(names, feeds)))
    assert want.std() > 1e-4  # the random weights make the output informative
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
