"""Fixtures shared by every test directory (directory-specific ones live beside
their tests, e.g. ``tests/models/conftest.py``)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A NumPy generator with a fixed seed, so failures reproduce."""
    return np.random.default_rng(20261121)


@pytest.fixture(scope="session")
def ort_run():
    """``ort_run(model, feeds) -> [outputs]``: ONNX Runtime, one thread, on an
    ``onnx.ModelProto`` (or a path), the reference every op is checked against."""
    ort = pytest.importorskip("onnxruntime")

    def run(model, feeds: dict) -> list[np.ndarray]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        data = model if isinstance(model, str) else model.SerializeToString()
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)

    return run
