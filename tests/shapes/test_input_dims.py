"""Run-time dims at the frontend: ``shapes=`` bounds, ``dims=``, ``opt_shapes=`` and the
CLI's ``--shape/--dim/--opt``, with errors by type and message (issue 12)."""

from __future__ import annotations

import argparse

import pytest
from onnx import TensorProto, helper

from monolib.cli import parse_dim, parse_opt, parse_shape
from monolib.compiler.frontend.onnx import import_model
from monolib.compiler.ir import is_static, max_shape, nbytes_at_bounds
from monolib.compiler.symbolic import Dim
from monolib.errors import CompileError, ShapeError

F = TensorProto.FLOAT


def _model(dims_x, dims_z=None):
    """y = Identity(x) (and w = Identity(z) when ``dims_z`` is given)."""
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    ins = [helper.make_tensor_value_info("x", F, dims_x)]
    outs = [helper.make_tensor_value_info("y", F, [None] * len(dims_x))]
    if dims_z is not None:
        nodes.append(helper.make_node("Identity", ["z"], ["w"]))
        ins.append(helper.make_tensor_value_info("z", F, dims_z))
        outs.append(helper.make_tensor_value_info("w", F, [None] * len(dims_z)))
    g = helper.make_graph(nodes, "g", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _sym(d: Dim):
    (s,) = d.symbols()
    return s.name, s.lo, s.hi, s.step


def test_bounds_from_shapes_and_dims():
    g = import_model(
        _model(["batch", 3, "h", None]),
        shapes={"x": ((1, 8), 3, (32, 1280, 32), (32, 1280, 32))},
    )
    shape = g.inputs[0].shape
    assert shape[1] == 3 and not is_static(shape)
    assert _sym(shape[0]) == ("batch", 1, 8, 1)
    assert _sym(shape[2]) == ("h", 32, 1280, 32)
    assert _sym(shape[3]) == ("x_3", 32, 1280, 32)  # no dim_param: <input>_<axis>
    assert [s.name for s in g.symbols] == ["batch", "h", "x_3"]
    assert max_shape(shape) == (8, 3, 1280, 1280)
    assert nbytes_at_bounds(g.inputs[0]) == 8 * 3 * 1280 * 1280 * 4
    assert g.outputs[0].shape == shape


def test_dims_bind_every_dim_param_and_share_it():
    g = import_model(_model(["batch", 4], ["batch", 2]), dims={"batch": (1, 8)})
    bx, bz = g.inputs[0].shape[0], g.inputs[1].shape[0]
    assert bx == bz and _sym(bx) == ("batch", 1, 8, 1) and len(g.symbols) == 1
    # a static size for one input pins only that input
    g = import_model(_model(["batch", 4], ["batch", 2]), shapes={"x": (2, 4)},
                     dims={"batch": (1, 8)})
    assert g.inputs[0].shape == (2, 4) and isinstance(g.inputs[1].shape[0], Dim)


def test_static_shapes_unchanged():
    g = import_model(_model(["N", 3]), shapes={"x": (2, 3)})
    assert g.inputs[0].shape == (2, 3) and is_static(g.inputs[0].shape)
    assert len(g.symbols) == 0 and g.specializations == []


def test_opt_shapes_become_specializations():
    g = import_model(
        _model(["batch", 3, "h", "w"]),
        shapes={"x": ((1, 8), 3, (32, 1280, 32), (32, 1280, 32))},
        opt_shapes={"x": [(1, 3, 640, 640), (1, 3, 960, 960), (1, 3, 640, 640)]},
    )
    assert g.specializations == [
        {"batch": 1, "h": 640, "w": 640},
        {"batch": 1, "h": 960, "w": 960},
    ]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"shapes": {"x": ((0, 8), 3)}}, r"input 'x', axis 0: bounds \(0, 8\) need 1 <= lo"),
        ({"shapes": {"x": ((9, 8), 3)}}, r"axis 0: bounds \(9, 8\)"),
        ({"shapes": {"x": ((1, 8, 0), 3)}}, r"step >= 1"),
        ({"shapes": {"x": ((33, 40, 32), 3)}}, r"axis 0: no multiple of 32 lies in \[33, 40\]"),
        ({"shapes": {"x": ((1, 2, 3, 4), 3)}}, r"axis 0: .* neither an int nor \(lo, hi\)"),
        ({"shapes": {"x": ((1, 8), (1, 4))}}, r"axis 1: bounds \(1, 4\) given, .* static size 3"),
        ({"shapes": {"x": ((1, 8),)}}, r"input 'x': shape .* has rank 1, the model declares rank 2"),
        ({"shapes": {"x": ((1, 8), 3)}, "dims": {"N": (1, 4)}}, r"contradict dims\['N'\]"),
        ({}, r"input 'x': dim 0 \(symbolic 'N'\) is dynamic .*dims=\{'N'"),
        ({"dims": {"N": (1, 4, 8)}}, r"dims\['N'\]: no multiple of 8"),
        (
            {"dims": {"N": (1, 8)}, "opt_shapes": {"x": [(9, 3)]}},
            r"opt_shapes\['x'\]\[0\], axis 0 \(N\): 9 is outside N in \[1, 8\]",
        ),
        (
            {"dims": {"N": (2, 8, 2)}, "opt_shapes": {"x": [(3, 3)]}},
            r"axis 0 \(N\): 3 is outside N in \[2, 8\] step 2",
        ),
        ({"dims": {"N": (1, 8)}, "opt_shapes": {"x": [(2, 4)]}}, r"axis 1: 4 given, .* size is 3"),
        ({"dims": {"N": (1, 8)}, "opt_shapes": {"y": [(2, 3)]}}, r"'y' is not a runtime input"),
        ({"shapes": {"x": (2, 3)}, "opt_shapes": {"x": [(2, 3)]}}, r"no run-time dims"),
    ],
)
def test_shape_errors(kwargs, match):
    with pytest.raises(ShapeError, match=match):
        import_model(_model(["N", 3]), **kwargs)


def test_shared_name_bounds_and_unknown_dims():
    with pytest.raises(ShapeError, match=r"dim 'b' is bounded twice, b in \[1, 8\] and b in \[1, 4\]"):
        import_model(_model(["b", 3], ["b", 2]), shapes={"x": ((1, 8), 3), "z": ((1, 4), 2)})
    with pytest.raises(CompileError, match=r"dims: \['batch'\] name no dim .*\['N'\]"):
        import_model(_model(["N", 3]), dims={"batch": (1, 8)})
    with pytest.raises(ShapeError, match=r"run-time dim\(s\) \['b'\] are not fixed"):
        import_model(_model(["a", 3], ["b", 2]), dims={"a": (1, 8), "b": (1, 8)},
                     opt_shapes={"x": [(2, 3)]})


def test_cli_parsing():
    assert parse_shape("x=1..8,3,32..1280:32,32..1280:32") == (
        "x", ((1, 8), 3, (32, 1280, 32), (32, 1280, 32)))
    assert parse_shape("x=1,3,48,320") == ("x", (1, 3, 48, 320))
    assert parse_dim("batch=1..8") == ("batch", (1, 8))
    assert parse_dim("w=32..1280:32") == ("w", (32, 1280, 32))
    assert parse_opt("x=1,3,640,640") == ("x", (1, 3, 640, 640))
    for bad, fn in (("x=1..", parse_shape), ("batch=8", parse_dim), ("x=1..8,3", parse_opt),
                    ("x=a..b", parse_shape), ("=1..8", parse_dim)):
        with pytest.raises(argparse.ArgumentTypeError, match="bad --"):
            fn(bad)


def test_cli_passes_dims_and_opt(monkeypatch, tmp_path):
    """``monolib compile`` hands --shape/--dim/--opt to compile() as the Python API takes them."""
    import monolib.compiler.build as build
    from monolib.cli import main

    seen = {}

    class _Lib:
        def export_library(self, path, progress=None):
            open(path, "wb").close()
            return path

    def fake_compile(model, **kw):
        seen.update(kw)
        return _Lib()

    monkeypatch.setattr(build, "compile", fake_compile)
    rc = main(["compile", "m.onnx", "-o", str(tmp_path / "m.so"), "--shape",
               "x=1..8,3,32..1280:32,32..1280:32", "--dim", "batch=1..8",
               "--opt", "x=1,3,640,640", "--opt", "x=2,3,64,64"])
    assert rc == 0
    assert seen["shapes"] == {"x": ((1, 8), 3, (32, 1280, 32), (32, 1280, 32))}
    assert seen["dims"] == {"batch": (1, 8)}
    assert seen["opt_shapes"] == {"x": [(1, 3, 640, 640), (2, 3, 64, 64)]}


def test_symbol_names_are_c_identifiers():
    g = import_model(_model(["p2o.DynamicDimension.0", 3]),
                     dims={"p2o.DynamicDimension.0": (1, 8)})
    assert _sym(g.inputs[0].shape[0]) == ("p2o_DynamicDimension_0", 1, 8, 1)
    g = import_model(_model(["p2o.D.0", "7x"]), shapes={"x": ((1, 4), (2, 9))})
    assert [s.name for s in g.symbols] == ["p2o_D_0", "d_7x"]
