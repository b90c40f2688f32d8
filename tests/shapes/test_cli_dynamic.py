"""The command line round trip of a library with run-time dims (issue 12):
``monolib compile m.onnx -o m.so --shape x=1..8,3,48,192 [--opt ...]``, then
``monolib run m.so --input x=a.npy`` at two sizes (and one out of bounds), and
``monolib inspect`` showing the bounded dim and the specialized shape."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monolib.cli import main

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

W = np.array([-1.0, 0.5, 2.0], np.float32).reshape(3, 1, 1)


def _reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x * W, 0)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    """x [N, 3, 48, 192] -> Relu(x * w) (w per channel); N is the model's dim_param."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "scale_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 48, 192])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 48, 192])],
        [numpy_helper.from_array(W, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path_factory.mktemp("cli_dyn") / "m.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.fixture(scope="module")
def libs(model_path, tmp_path_factory) -> dict[str, str]:
    """The generic library and one with an --opt specialization at batch 2."""
    out = tmp_path_factory.mktemp("cli_dyn_libs")
    paths = {"generic": str(out / "m.so"), "opt": str(out / "m_opt.so")}
    assert main(["compile", model_path, "-o", paths["generic"],
                 "--shape", "x=1..8,3,48,192"]) == 0
    assert main(["compile", model_path, "-o", paths["opt"], "--shape", "x=1..8,3,48,192",
                 "--opt", "x=2,3,48,192"]) == 0
    return paths


@pytest.mark.parametrize("which", ["generic", "opt"])
def test_run_at_two_sizes(libs, which, tmp_path, capsys):
    for batch in (2, 8):  # the opt library's specialized batch, then the upper bound
        x = np.random.default_rng(batch).standard_normal((batch, 3, 48, 192)).astype(np.float32)
        np.save(tmp_path / "a.npy", x)
        out = tmp_path / f"o{batch}.npz"
        assert main(["run", libs[which], "--input", f"x={tmp_path / 'a.npy'}",
                     "--output", str(out)]) == 0
        assert f"[{batch}, 3, 48, 192]" in capsys.readouterr().out
        with np.load(out) as npz:
            assert npz["y"].shape == (batch, 3, 48, 192)
            np.testing.assert_allclose(npz["y"], _reference(x), rtol=1e-6)


def test_run_out_of_bounds_names_input_axis_dim_and_bounds(libs, tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.zeros((9, 3, 48, 192), np.float32))
    assert main(["run", libs["generic"], "--input", f"x={tmp_path / 'a.npy'}"]) == 1
    err = capsys.readouterr().err
    assert "input 'x' axis 0 (dim 'N') is 9, outside its bounds [1, 8]" in err, err
    np.save(tmp_path / "b.npy", np.zeros((2, 3, 48, 96), np.float32))  # a static dim
    assert main(["run", libs["generic"], "--input", f"x={tmp_path / 'b.npy'}"]) == 1
    assert "input 'x' axis 3 is 96, the model expects 192" in capsys.readouterr().err


def test_inspect_shows_bounded_dims_and_specialization(libs, capsys):
    assert main(["inspect", libs["opt"]]) == 0
    text = capsys.readouterr().out
    assert "N\u2208[1,8]" in text and "specialized for: N=2" in text
    assert "at the upper bounds" in text
    assert main(["inspect", "--json", libs["generic"]]) == 0
    (graph,) = json.loads(capsys.readouterr().out)["graphs"].values()
    assert graph["symbols"] == [{"name": "N", "lo": 1, "hi": 8, "step": 1}]
    assert graph["inputs"][0]["shape"] == ["N", 3, 48, 192]
    assert graph["specializations"] == []
