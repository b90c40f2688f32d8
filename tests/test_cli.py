"""The ``monolib`` command: compile, run, inspect (in-process and as a console script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "runtime"))
from tinylib import reference, tiny_factory

import monolib
from monolib.cli import main, parse_const, parse_shape


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> str:
    return tiny_factory().export_library(str(tmp_path_factory.mktemp("cli") / "tiny.so"))


def test_parse_arguments():
    assert parse_shape("x=1,3,48,320") == ("x", (1, 3, 48, 320))
    assert parse_const("sr=16000") == ("sr", 16000)
    assert parse_const("k=1,2.5") == ("k", [1, 2.5])
    with pytest.raises(SystemExit):
        main(["compile", "m.onnx", "-o", "x.so", "--shape", "x=a,b"])


def test_inspect_json(lib, capsys):
    assert main(["inspect", lib, "--json", "--verify"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["container"]["format_version"] == 2
    assert report["verified"] and report["binary"].startswith("ELF64")
    assert [m["type_key"] for m in report["modules"]] == ["graph_executor_factory", "library"]
    assert report["modules"][0]["imports"] == [1]
    names = [s["name"] for s in report["modules"][0]["sections"]]
    assert names == ["graph", "head", "params"]
    assert all(len(s["sha256"]) == 64 for s in report["modules"][0]["sections"])
    g = report["graphs"]["0"]
    assert g["inputs"] == [{"name": "x", "shape": [2, 3], "dtype": "float32"}]
    assert g["fused_ops"] == 1 and g["onnx_ops"] == {"Mul": 1, "Add": 1}
    assert g["params_count"] == 2 and g["params_bytes"] == 128
    assert report["file_size"] == os.path.getsize(lib)
    assert report["exports"]["abi_complete"]
    assert "monolib_run" in report["exports"]["symbols"]


def test_inspect_table(lib, capsys):
    assert main(["inspect", lib]) == 0
    out = capsys.readouterr().out
    words = (
        "format v2",
        "graph_executor_factory",
        "library",
        "params",
        "fused ops: 1",
        "exports: __monolib_container_end",
    )
    for word in words:
        assert word in out
    from monolib.tools.inspect import inspect_library

    for sec in inspect_library(lib)["modules"][0]["sections"]:
        assert sec["sha256"] in out, "full digests are shown"
    assert f"size {os.path.getsize(lib) / 1024:.1f} KiB" in out


def test_inspect_never_dlopens(lib, tmp_path, capsys):
    """A library whose constructor would abort still inspects fine."""
    from monolib.export.csource import CSourceModule
    from monolib.runtime import GraphExecutorFactoryModule

    graph = tiny_factory().graph_json
    src = tiny_factory().imported_modules[0].source
    src += (
        "\n#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n"
    )
    path = GraphExecutorFactoryModule(
        graph, tiny_factory().params, CSourceModule(src)
    ).export_library(str(tmp_path / "boom.so"))
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graphs"]["0"]["name"] == "tiny"


def test_inspect_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.so"
    bad.write_text("hello")
    assert main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.so" in err and "not a shared library" in err


def test_run_with_inputs_and_output(lib, tmp_path, capsys):
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert (
        main(
            [
                "run",
                lib,
                "--input",
                f"x={tmp_path / 'x.npy'}",
                "--output",
                str(out),
                "--repeat",
                "3",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "y" in text and "[2, 3]" in text and "2 more runs" in text
    with np.load(out) as npz:
        np.testing.assert_allclose(npz["y"], reference(x), rtol=1e-6)


def test_run_input_errors(lib, tmp_path, capsys):
    assert main(["run", lib]) == 1
    assert "missing inputs ['x']" in capsys.readouterr().err
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    assert main(["run", lib, "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    assert "expects [2, 3]" in capsys.readouterr().err
    assert main(["run", lib, "--input", f"x={tmp_path / 'nope.npy'}"]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["run", lib, "--random"]) == 0


def test_compile_steps_with_a_stand_in_compiler(tmp_path, monkeypatch, capsys):
    """The CLI's contract with build.compile: arguments and progress steps."""
    from monolib.compiler import build

    seen = {}

    def fake_compile(model, target, shapes, constants, progress, dims, opt_shapes):
        seen.update(model=model, target=target, shapes=shapes, constants=constants)
        progress("import")
        progress("generate C")
        return tiny_factory()

    monkeypatch.setattr(build, "compile", fake_compile)
    out = tmp_path / "m"
    assert (
        main(
            [
                "compile",
                "m.onnx",
                "-o",
                str(out),
                "--shape",
                "x=2,3",
                "--const",
                "sr=16000",
                "--target",
                "c",
            ]
        )
        == 0
    )
    assert seen == {
        "model": "m.onnx",
        "target": "c",
        "shapes": {"x": (2, 3)},
        "constants": {"sr": 16000},
    }
    text = capsys.readouterr().out
    for step in ("import", "generate C", "pack container", "compile and link"):
        assert step in text
    assert (tmp_path / "m.so").exists() and os.listdir(tmp_path) == ["m.so"]


def test_compile_real_model_console_script(tmp_path):
    """End to end through the installed console script: a small ONNX model."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "addrelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, tmp_path / "m.onnx")
    exe = os.path.join(os.path.dirname(sys.executable), "monolib")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "monolib.cli"]
    res = subprocess.run(
        cmd
        + ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.so"), "--shape", "x=4,3"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    x = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = subprocess.run(
        cmd
        + [
            "run",
            str(tmp_path / "m.so"),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--output",
            str(tmp_path / "o.npz"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    with np.load(tmp_path / "o.npz") as npz:
        np.testing.assert_allclose(npz["y"], np.maximum(x + w, 0), rtol=1e-6)


def test_run_profile(lib, capsys):
    assert main(["run", lib, "--random", "--repeat", "4", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "slowest ops (of 1" in out and "Mul+Add" in out and "3 more runs" in out


def test_run_profile_in_run(lib, tmp_path, capsys):
    """Each op timed inside whole runs (monolib_run_timed) of a compiled library; the
    hand-written test library has no such function: a clear error, exit 1."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Exp", ["r"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)])
    compiled = str(tmp_path / "relu_exp.so")
    monolib.compile(model).export_library(compiled)
    assert main(["run", compiled, "--random", "--repeat", "3", "--profile-in-run"]) == 0
    out = capsys.readouterr().out
    assert "slowest ops (of 1" in out and "Relu+Exp" in out and "100.0%" in out
    assert main(["run", lib, "--random", "--profile-in-run"]) == 1
    assert "cannot time its ops inside runs" in capsys.readouterr().err


def test_run_inputs_from_npz(lib, tmp_path, capsys):
    x = np.full((2, 3), 2.0, np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    out = tmp_path / "o.npz"
    assert main(["run", lib, "--input", str(tmp_path / "in.npz"), "-o", str(out)]) == 0
    with np.load(out) as npz:
        np.testing.assert_allclose(npz["y"], reference(x), rtol=1e-6)


def test_compile_failure_names_the_step(tmp_path, monkeypatch, capsys):
    from monolib.compiler import build
    from monolib.errors import UnsupportedOpError

    def failing(model, target, shapes, constants, progress, dims, opt_shapes):
        progress("import")
        raise UnsupportedOpError("1 unsupported operator(s) in the model: Foo (opset 17)")

    monkeypatch.setattr(build, "compile", failing)
    assert main(["compile", "m.onnx", "-o", str(tmp_path / "m.so")]) == 1
    captured = capsys.readouterr()
    assert "✗ import" in captured.out and "unsupported operator" in captured.err
    assert os.listdir(tmp_path) == []


def test_inspect_reports_a_missing_abi(tmp_path, capsys):
    from monolib.export.csource import CSourceModule

    path = CSourceModule("int f(void) { return 1; }\n").export_library(str(tmp_path / "f.so"))
    assert main(["inspect", path, "--json"]) == 0
    exports = json.loads(capsys.readouterr().out)["exports"]
    assert not exports["abi_complete"] and "monolib_run" not in exports["symbols"]
    assert main(["inspect", path]) == 0
    assert "MISSING monolib_run" in capsys.readouterr().out


def test_run_device_option(lib, tmp_path, capsys):
    """--device picks the executor's device: a host library asked to run on OpenCL is
    refused with a message naming both, and cpu (the default) runs."""
    assert main(["run", lib, "--random", "--device", "opencl"]) == 1
    err = capsys.readouterr().err
    assert "cpu" in err and "opencl" in err
    assert main(["run", lib, "--random", "--device", "cpu"]) == 0
