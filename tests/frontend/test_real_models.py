"""The real models of MODELS.md through the frontend: every If/Constant/Shape gone,
output names, shapes and dtypes equal to ONNX Runtime's, sensible op counts; and
the imported graph evaluated with the ops' NumPy references against ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import simplify
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Case:
    key: str
    shapes: dict
    constants: dict = field(default_factory=dict)
    #: op type -> exact count expected after import (ops not listed: unchecked)
    counts: dict = field(default_factory=dict)


CASES = {
    "det": Case(
        "ppocr_det",
        {"x": (1, 3, 640, 640)},
        counts={"Conv": 62, "ConvTranspose": 2, "Resize": 6, "BatchNormalization": 3},
    ),
    "rec": Case(
        "ppocr_rec",
        {"x": (1, 3, 48, 320)},
        counts={"Conv": 38, "MatMul": 13, "Softmax": 3, "Cast": 0, "Shape": 0},
    ),
    "cls": Case("ppocr_cls", {"x": (1, 3, 48, 192)}, counts={"Conv": 53, "MatMul": 1}),
    "silero": Case(
        "silero_vad",
        {"input": (1, 576), "state": (2, 1, 128)},
        {"sr": 16000},
        counts={"LSTM": 1, "Conv": 6},
    ),
    "silero_seq": Case(
        "silero_vad_sequence",
        {"input": (32, 576), "h": (1, 1, 128), "c": (1, 1, 128)},
        counts={"LSTM": 1},
    ),
    "magika": Case("magika", {"bytes": (1, 2048)}, counts={"Conv": 1, "MatMul": 2}),
}

GONE = {"If", "Constant", "Shape", "Size", "Identity", "Dropout", "ConstantOfShape"}


def _load(case: Case) -> onnx.ModelProto:
    from monolib.errors import FetchError
    from monolib.models import fetch_model

    try:
        return onnx.load(str(fetch_model(case.key)))
    except FetchError as e:  # pragma: no cover - offline machine without a cache
        pytest.skip(f"model {case.key} unavailable: {e}")


def _feeds(model: onnx.ModelProto, case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the right dtypes (bytes 0..256 for Magika's int32 input)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    inits = {t.name for t in model.graph.initializer}
    for info in model.graph.input:
        if info.name in inits or info.name in case.constants:
            continue
        dt = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        shape = case.shapes[info.name]
        if np.dtype(dt).kind == "f":
            feeds[info.name] = rng.standard_normal(shape).astype(dt) * 0.5
        else:
            feeds[info.name] = rng.integers(0, 257, shape).astype(dt)
    return feeds


def _ort_feeds(model, case, feeds):
    out = dict(feeds)
    for info in model.graph.input:
        if info.name in case.constants:
            dt = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
            out[info.name] = np.asarray(case.constants[info.name], dtype=dt)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_real_model_imports_static(name):
    case = CASES[name]
    model = _load(case)
    g = import_model(model, shapes=case.shapes, constants=case.constants or None)
    counts = g.op_counts()
    assert not GONE & set(counts), counts
    for op, n in case.counts.items():
        assert counts.get(op, 0) == n, (op, counts)
    assert len(g.nodes) < len(model.graph.node)
    assert [v.name for v in g.inputs] == [
        i.name for i in model.graph.input if i.name not in case.constants
    ]
    feeds = _feeds(model, case)
    want = ort_run(model, _ort_feeds(model, case, feeds))
    assert [v.name for v in g.outputs] == [o.name for o in model.graph.output]
    for v, w in zip(g.outputs, want):
        assert (v.shape, v.dtype) == (w.shape, w.dtype), v.name
    for v in g.values():
        assert all(d >= 0 for d in v.shape), v
    if name in ("det", "rec"):
        assert g.metadata or name == "det"  # the recognizer keeps its character list
    simplify(g)
    assert "BatchNormalization" not in g.op_counts()


@pytest.mark.parametrize("name", ["cls", "silero", "silero_seq", "magika", "rec", "det"])
def test_real_model_reference_matches_ort(name):
    case = CASES[name]
    model = _load(case)
    g = import_model(model, shapes=case.shapes, constants=case.constants or None)
    feeds = _feeds(model, case, seed=1)
    want = ort_run(model, _ort_feeds(model, case, feeds))
    got = evaluate(g, feeds)
    for v, a, b in zip(g.outputs, got, want):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=v.name)
    simplify(g, onehot_gather=True)
    got2 = evaluate(g, feeds)
    for v, a, b in zip(g.outputs, got2, want):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=f"{v.name} (simplified)")
    if name == "magika":  # its byte embedding is a one-hot MatMul
        assert g.op_counts().get("Gather") == 1 and g.op_counts().get("MatMul") == 1
