"""ONNX's ``light`` models (files in the ``onnx`` wheel) as benchmark entries.

The nine CNNs of ``onnx/backend/test/data/light`` (ResNet-50, VGG-19, DenseNet-121,
Inception v1/v2, ShuffleNet, SqueezeNet, AlexNet, ZFNet-512) are opset 9 with weights
made by ``ConstantOfShape``: each is converted to opset :data:`OPSET` with
``onnx.version_converter`` here, in the benchmark (monolib and ONNX Runtime run the
same converted model), and fed a seeded uniform [0, 1) input of its declared shape.
Each entry has the interface of ``bench_inputs.BenchModel`` that ``bench/run.py`` uses
(``shapes``, ``constants``, ``make()``) plus ``load()`` (the converted ModelProto)
instead of a fetch key.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field

import numpy as np

__all__ = ["LIGHT_MODELS", "OPSET", "LightModel", "light_dir"]

logger = logging.getLogger(__name__)

#: The opset the models are converted to.
OPSET = 13

NAMES = ("resnet50", "vgg19", "densenet121", "inception_v1", "inception_v2", "shufflenet",
         "squeezenet", "bvlc_alexnet", "zfnet512")


def light_dir() -> str:
    """The folder of the light models inside the installed ``onnx`` package."""
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@functools.cache
def _converted(name: str):
    import onnx
    from onnx import version_converter

    model = onnx.load(os.path.join(light_dir(), f"light_{name}.onnx"))
    if model.opset_import[0].version < OPSET:
        model = version_converter.convert_version(model, OPSET)
    return model


@dataclass(frozen=True)
class LightModel:
    """One light model (``name`` as in ``light_<name>.onnx``), ``seed`` of its input."""

    name: str
    seed: int = 0
    constants: dict = field(default_factory=dict)

    def load(self):
        """The model converted to opset :data:`OPSET` (cached per process)."""
        return _converted(self.name)

    @property
    def inputs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Input name -> (declared shape, NumPy dtype); initializers listed as graph
        inputs (opset 9 style) are left out."""
        from onnx import helper

        g = self.load().graph
        init = {t.name for t in g.initializer}
        return {
            i.name: (tuple(int(d.dim_value) for d in i.type.tensor_type.shape.dim),
                     np.dtype(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)))
            for i in g.input if i.name not in init
        }

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Input name -> declared shape (static in every light model)."""
        return {k: shape for k, (shape, _) in self.inputs.items()}

    def make(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(monolib feeds, ORT feeds): the same seeded uniform [0, 1) arrays."""
        rng = np.random.default_rng(self.seed)
        feeds = {k: rng.random(shape).astype(dtype) for k, (shape, dtype) in self.inputs.items()}
        return feeds, feeds


#: ``"light_<name>"`` -> entry, in :data:`NAMES` order.
LIGHT_MODELS: dict[str, LightModel] = {f"light_{n}": LightModel(n) for n in NAMES}
