"""Offline batch inference: ``monolib.serve.Predictor`` (issue 16).

Without Ray: a tiny model with a run-time batch dim runs a batch in chunks of at most
its bound (a short tail padded up to the lower bound), a model without one row by
row; both equal one ``GraphModule`` run per row. With Ray Data: 1,000 rows of the
PP-OCR line classifier (compiled with a batch dim 1..8) through ``map_batches`` equal
in-process runs.
"""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.errors import InputError
from monolib.serve import Predictor

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _tiny(batch) -> "onnx.ModelProto":
    """y = relu(x @ W), z = sum(x) per row: two outputs, x [batch, 3]."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.5
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["z"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch])],
        [helper.make_tensor("W", TensorProto.FLOAT, [3, 4], w.ravel()),
         helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def tiny_libs(tmp_path_factory):
    """The tiny model with a batch dim 2..4, and with a static batch of 1."""
    d = tmp_path_factory.mktemp("predictor")
    batched, single = d / "batched.so", d / "single.so"
    monolib.compile(_tiny("N"), shapes={"x": ((2, 4), 3)}).export_library(str(batched))
    monolib.compile(_tiny(1), shapes={"x": (1, 3)}).export_library(str(single))
    return batched, single


def _per_row(path, x):
    """One GraphModule run per row (batch 1 where the model allows it; the batched
    library's lower bound is 2, so a row runs with a copy of itself)."""
    gm = monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))
    shapes, _ = gm.get_input_info()
    lo = shapes["x"][0][1] if isinstance(shapes["x"][0], tuple) else 1
    ys, zs = [], []
    for row in x:
        gm.run(x=np.repeat(row[None], lo, 0))
        ys.append(gm.get_output(0).numpy()[0].copy())
        zs.append(gm.get_output(1).numpy()[0].copy())
    return np.stack(ys), np.stack(zs)


def test_batched_chunks_at_most_the_bound(tiny_libs, rng):
    batched, _ = tiny_libs
    pred = Predictor(batched)
    assert pred.batch[0] == 4 and (pred.batch[1].lo, pred.batch[1].hi) == (2, 4)
    runs = []
    run = pred.backend.run
    pred.backend.run = lambda feeds: (runs.append(feeds["x"].shape[0]), run(feeds))[1]
    x = rng.standard_normal((11, 3)).astype(np.float32)
    ids = np.arange(11)
    out = pred({"x": x, "id": ids})
    # 11 rows: 4 + 4 + 3 (chunks of the bound); 1 row: padded up to the lower bound 2
    assert runs == [4, 4, 3]
    y, z = _per_row(batched, x)
    np.testing.assert_array_equal(out["y"], y)  # batched: the same bits as row by row
    np.testing.assert_array_equal(out["z"], z)
    np.testing.assert_array_equal(out["id"], ids)  # other columns pass through
    assert "x" not in out
    runs.clear()
    one = pred({"x": x[:1]})
    assert runs == [2] and one["y"].shape == (1, 4)
    np.testing.assert_array_equal(one["y"], y[:1])


def test_max_batch_and_float64_cast(tiny_libs, rng):
    batched, _ = tiny_libs
    pred = Predictor(batched, max_batch=3)
    assert pred.batch[0] == 3
    x = rng.standard_normal((7, 3))  # float64: same kind, cast to the model's float32
    out = pred({"x": x})
    y, _ = _per_row(batched, x.astype(np.float32))
    assert out["y"].dtype == np.float32 and out["y"].shape == (7, 4)
    np.testing.assert_array_equal(out["y"], y)
    with pytest.raises(InputError, match="lower bound 2"):
        Predictor(batched, max_batch=1)


def test_no_batch_dim_runs_row_by_row(tiny_libs, rng):
    _, single = tiny_libs
    pred = Predictor(single)
    assert pred.batch is None  # x is [1, 3]: a static dim, no batch to stack
    x = rng.standard_normal((5, 3)).astype(np.float32)
    out = pred({"x": x})  # rows of [3] take the model's leading 1
    y, z = _per_row(single, x)
    assert out["y"].shape == (5, 1, 4)
    np.testing.assert_allclose(out["y"][:, 0], y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["z"][:, 0], z, rtol=1e-6, atol=1e-6)


def test_bad_columns_name_the_input(tiny_libs):
    batched, _ = tiny_libs
    pred = Predictor(batched)
    with pytest.raises(InputError, match="no column for input.*x"):
        pred({"image": np.zeros((2, 3), np.float32)})
    with pytest.raises(InputError, match="'x' is int32"):
        pred({"x": np.zeros((2, 3), np.int32)})


def _make_rows():
    """A function of a batch of row ids -> deterministic line-classifier inputs, made
    where the rows are (local, so Ray ships it by value: tests are no package)."""

    def rows(batch: dict) -> dict:
        ids = batch["id"]
        x = np.stack([np.random.default_rng(int(i)).random((3, 48, 192), np.float32) for i in ids])
        return {"id": ids, "x": x * 2 - 1}

    return rows


def test_map_batches_1000_rows_equal_in_process(ray_session, cls_lib):
    """The session's Ray (2 CPUs, maybe with a served model holding one): the rows are
    made by tasks and run by two actors of a quarter CPU each."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = ray.data.from_items([{"id": i} for i in range(1000)], override_num_blocks=4)
    ds = ds.map_batches(_make_rows(), batch_size=125, num_cpus=0.25)
    out = ds.map_batches(
        Predictor, fn_constructor_args=(str(cls_lib),), batch_size=100, concurrency=2,
        num_cpus=0.25,
    ).take_all()
    assert len(out) == 1000
    ids = np.array([r["id"] for r in out])
    got = np.stack([r["save_infer_model/scale_0.tmp_1"] for r in out])[np.argsort(ids)]
    assert np.array_equal(np.sort(ids), np.arange(1000))
    gm = monolib.GraphModule(monolib.load_module(str(cls_lib))["default"](monolib.cpu()))
    want = []
    for start in range(0, 1000, 8):
        gm.run(x=_make_rows()({"id": np.arange(start, min(start + 8, 1000))})["x"])
        want.append(gm.get_output(0).numpy().copy())
    want = np.concatenate(want)
    # the same library in other chunks (batches of 100 split 8 x 12 + 4): batch-invariant
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got.sum(1), 1, rtol=1e-5)  # softmax over 0 / 180 degrees


def test_signed_library_verified_and_found_by_name(tiny_libs, tmp_path, monkeypatch):
    """trusted_keys: a library signed by another key is refused before it loads; a
    path missing on this node is looked up by file name in the working directory (Ray's
    runtime_env working_dir)."""
    pytest.importorskip("cryptography")
    from monolib.errors import SignatureError
    from monolib.tools.sign import generate_keypair, sign_file

    batched, _ = tiny_libs
    key, pub = generate_keypair(str(tmp_path / "k"))
    _, other = generate_keypair(str(tmp_path / "o"))
    lib = tmp_path / "signed.so"
    lib.write_bytes(batched.read_bytes())
    sign_file(str(lib), key)
    x = np.ones((3, 3), np.float32)
    want = Predictor(batched)({"x": x})["y"]
    np.testing.assert_array_equal(Predictor(lib, trusted_keys=[pub])({"x": x})["y"], want)
    with pytest.raises(SignatureError):
        Predictor(lib, trusted_keys=[other])
    monkeypatch.chdir(tmp_path)
    pred = Predictor("/nowhere/on/this/node/signed.so")
    np.testing.assert_array_equal(pred({"x": x})["y"], want)
