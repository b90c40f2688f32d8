"""Storage types (float16, bfloat16, float8, float4, int4/uint4, int2/uint2): the C
conversions of ``backends/c/kernels/types.h`` against ONNX's reference Cast
(``onnx.reference``, built on ``ml_dtypes``) bit for bit, over every code of each type
and over float32 values that hit each rounding tie and each overflow rule; float16 and
bfloat16 through the usual ops (convert, compute in float32, convert back); and the
runtime handing these dtypes out without importing ``ml_dtypes`` up front.
"""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import monolib

FLOATS = {  # ONNX type -> ml_dtypes dtype, for the small float formats
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    TensorProto.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    TensorProto.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    TensorProto.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
}
INTS = {
    TensorProto.INT4: np.dtype(ml_dtypes.int4),
    TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
    TensorProto.INT2: np.dtype(ml_dtypes.int2),
    TensorProto.UINT2: np.dtype(ml_dtypes.uint2),
}
FLOAT8 = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
          TensorProto.FLOAT8E5M2FNUZ}


def _codes(dt: np.dtype) -> np.ndarray:
    """Every bit pattern of ``dt`` (4- and 2-bit types: the low bits of a byte)."""
    bits = {np.float16: 16, ml_dtypes.bfloat16: 16}.get(dt.type, 8)
    if dt.name.endswith(("4", "e2m1fn")):
        bits = 4
    elif dt.name.endswith("2") and "int" in dt.name:
        bits = 2
    raw = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    return raw.view(dt)


def _probe_values(rng) -> np.ndarray:
    """float32 values covering every format's ties, overflows and specials: all
    decoded values of each format, the midpoints between neighbours, a little above
    and below the largest, plus random values over the whole exponent range."""
    vals = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38],
                     np.float32)]
    for dt in FLOATS.values():
        v = _codes(dt).astype(np.float32)
        v = np.unique(v[np.isfinite(v)])
        if v.size > 4096:
            v = rng.choice(v, 4096, replace=False)
            v.sort()
        mids = (v[:-1].astype(np.float64) + v[1:]) / 2
        top = float(ml_dtypes.finfo(dt).max)
        big = np.array([top * 1.01, top * 1.1, -top * 1.1, top * 2, -top * 4])
        vals += [v, mids.astype(np.float32), np.clip(big, -3.4e38, 3.4e38).astype(np.float32)]
    exps = rng.uniform(-40, 40, 3000)
    vals.append((rng.choice([-1, 1], 3000) * 2.0 ** exps).astype(np.float32))
    vals.append(np.arange(-20, 20, 0.5, dtype=np.float32))
    return np.concatenate(vals).astype(np.float32)


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    factory = monolib.compile(model, target="c")
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    for name, value in feeds.items():
        gm.set_input(name, value)
    gm.run()
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal dtype, and equal values read as float32: bit for bit (signed zeros
    included) except that any NaN matches any NaN."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    bad = np.flatnonzero((np.isnan(g) != nan) | (~nan & (g.view(np.uint32) != w.view(np.uint32))))
    assert bad.size == 0, f"{what}: {bad.size} differ, first at {bad[:5]}: {g[bad[:5]]} vs {w[bad[:5]]}"


@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
def test_every_cast_to_and_from_storage_types_matches_onnx_reference(rng):
    x = _probe_values(rng)
    n = x.size
    nodes, outputs, inputs, feeds = [], [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])], {"x": x}
    for to in [*FLOATS, *INTS]:
        for sat in ((0, 1) if to in FLOAT8 else (1,)):
            name = f"to_{to}_{sat}"
            nodes.append(helper.make_node("Cast", ["x"], [name], to=to, saturate=sat))
            outputs.append(helper.make_tensor_value_info(name, to, [n]))
    for mode in ("up", "down", "nearest"):
        for sat in (0, 1):
            name = f"to_e8m0_{mode}_{sat}"
            nodes.append(helper.make_node("Cast", ["xpos"], [name], to=TensorProto.FLOAT8E8M0,
                                          saturate=sat, round_mode=mode))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT8E8M0, [n]))
    inputs.append(helper.make_tensor_value_info("xpos", TensorProto.FLOAT, [n]))
    feeds["xpos"] = np.abs(x)  # e8m0 of a negative value is undefined by the spec
    for code, dt in [*FLOATS.items(), *INTS.items(), (TensorProto.FLOAT8E8M0,
                                                       np.dtype(ml_dtypes.float8_e8m0fnu))]:
        codes = _codes(dt)
        name = f"c{code}"
        inputs.append(helper.make_tensor_value_info(name, code, [codes.size]))
        feeds[name] = codes
        nodes.append(helper.make_node("Cast", [name], [f"{name}_f"], to=TensorProto.FLOAT))
        outputs.append(helper.make_tensor_value_info(f"{name}_f", TensorProto.FLOAT, [codes.size]))
        if code != TensorProto.FLOAT16:  # storage -> storage goes through float32
            nodes.append(helper.make_node("Cast", [name], [f"{name}_h"], to=TensorProto.FLOAT16))
            outputs.append(helper.make_tensor_value_info(f"{name}_h", TensorProto.FLOAT16,
                                                         [codes.size]))
    model = helper.make_model(helper.make_graph(nodes, "casts", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 25)])
    got = _run(model, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want) == len(outputs)
    for g, w, info in zip(got, want, outputs):
        _same(g, np.asarray(w), info.name)


def _model(nodes, inputs, outputs, inits=()):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("elem, dt, rtol", [(TensorProto.FLOAT16, np.float16, 2e-3),
                                            (TensorProto.BFLOAT16, ml_dtypes.bfloat16, 1.6e-2)])
def test_half_types_flow_through_common_ops(elem, dt, rtol, rng):
    """MatMul, Add, Relu, Conv, ReduceMean, Softmax, Concat, Transpose on float16 /
    bfloat16: outputs of the same type, equal to the float32 computation rounded once."""
    dt = np.dtype(dt)
    a = rng.standard_normal((2, 8, 16)).astype(dt)
    w = rng.standard_normal((16, 8)).astype(dt)
    img = rng.standard_normal((1, 3, 6, 6)).astype(dt)
    k = rng.standard_normal((4, 3, 3, 3)).astype(dt)
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "bias"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1),
        helper.make_node("ReduceMean", ["a", "axes"], ["m"], keepdims=0),
        helper.make_node("Conv", ["img", "k"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 3, 1]),
        helper.make_node("Concat", ["m", "m"], ["cat"], axis=1),
        helper.make_node("Greater", ["a", "zero"], ["pos"]),
    ]
    bias = np.linspace(-1, 1, 8).astype(dt)
    zero = np.zeros((), dt)
    model = _model(
        nodes,
        [helper.make_tensor_value_info("a", elem, a.shape),
         helper.make_tensor_value_info("img", elem, img.shape)],
        [helper.make_tensor_value_info("y", elem, [2, 8, 8]),
         helper.make_tensor_value_info("m", elem, [2, 8]),
         helper.make_tensor_value_info("ct", elem, [1, 6, 6, 4]),
         helper.make_tensor_value_info("cat", elem, [2, 16]),
         helper.make_tensor_value_info("pos", TensorProto.BOOL, a.shape)],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(k, "k"),
         onnx.numpy_helper.from_array(bias, "bias"), onnx.numpy_helper.from_array(zero, "zero"),
         onnx.numpy_helper.from_array(np.array([2], np.int64), "axes")],
    )
    got = _run(model, {"a": a, "img": img})
    # the same graph in float32 on the same (exactly widened) values
    f32 = onnx.ModelProto()
    f32.CopyFrom(model)
    for v in [*f32.graph.input, *f32.graph.output]:
        if v.type.tensor_type.elem_type == elem:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    for t in f32.graph.initializer:
        if t.data_type != elem:
            continue
        t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t).astype(np.float32),
                                                t.name))
    want = ReferenceEvaluator(f32).run(None, {"a": a.astype(np.float32),
                                              "img": img.astype(np.float32)})
    for g, w, info in zip(got, want, model.graph.output):
        if info.type.tensor_type.elem_type == TensorProto.BOOL:
            np.testing.assert_array_equal(g, w, err_msg=info.name)
            continue
        assert g.dtype == dt, f"{info.name}: {g.dtype}"
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=rtol, atol=rtol,
                                   err_msg=info.name)


def test_runtime_imports_ml_dtypes_only_for_such_a_library(tmp_path):
    """``import monolib.runtime`` stays light; a library with bfloat16 inputs and
    params loads in a fresh process (ml_dtypes imported on meeting the dtype) and runs."""
    w = np.array([1.5, -2.0, 0.25, 3.0], ml_dtypes.bfloat16)
    model = _model([helper.make_node("Mul", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [4])],
                   [onnx.numpy_helper.from_array(w, "w")])
    path = tmp_path / "bf16.so"
    monolib.compile(model, target="c").export_library(str(path))
    code = f"""
import sys
import monolib.runtime
assert "ml_dtypes" not in sys.modules, "import monolib.runtime imported ml_dtypes"
import monolib
gm = monolib.GraphModule(monolib.load_module({str(path)!r})["default"](monolib.cpu()))
import ml_dtypes, numpy as np
x = np.array([2.0, 2.0, -4.0, 1.0], ml_dtypes.bfloat16)
gm.set_input("x", x)
gm.run()
y = gm.get_output(0).numpy()
assert y.dtype == ml_dtypes.bfloat16, y.dtype
print(y.astype(np.float32).tolist())
"""
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[3.0, -4.0, -1.0, 3.0]"
