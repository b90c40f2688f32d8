"""The ``com.microsoft`` quantization contrib ops (ONNX Runtime's ``ContribOperators.md``)
through the whole compiler, each against ONNX Runtime's own CPU kernel on random data:
MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm, QLinearAdd/Mul, QLinearSigmoid,
QLinearLeakyRelu, QLinearSoftmax, QLinearConcat, QLinearGlobalAveragePool,
QLinearAveragePool, DynamicQuantizeLSTM. Each group of cases is ONE model of many nodes
(one C compile), compared node by node.

Tolerances: integer outputs bit-exact where ORT's arithmetic is specified (the int32
sums and their requantization), otherwise stated at the case (float outputs within a few
ulp: the C compiler may contract ``acc * scale + bias`` to one fused multiply-add; ORT's
table-driven 8-bit ops (QLinearSigmoid/LeakyRelu/Softmax) round through float32 in their
own order: within one step).
All weight types are uint8 x uint8 or int8 x int8 where ORT is the reference, or uint8 x
int8 with 7-bit weights: ORT's uint8 x int8 AVX2 GEMM saturates int16 pair sums otherwise
(``docs/quantization.md``).
"""

from __future__ import annotations

import numpy as np
from harness import add_inputs, run_threads
from onnx import helper, numpy_helper

from monolib.compiler.testing import ort_run, run_model

R = np.random.default_rng(13)
MS = "com.microsoft"


def q(dtype, *shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return R.integers(lo, hi + 1, shape).astype(dtype)


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


class Case:
    """One node: op, inputs in order (None: omitted), attrs, constant inputs, and the
    output (dtype, shape) list."""

    def __init__(self, op, ins, outs, attrs=None, consts=(), domain=MS):
        self.op, self.ins, self.outs = op, ins, outs
        self.attrs, self.consts, self.domain = attrs or {}, set(consts), domain


def build(cases: list[Case]):
    """(model, feeds): every case one node with its own inputs and outputs."""
    nodes, inputs, inits, outputs, feeds = [], [], [], [], {}
    for i, c in enumerate(cases):
        names = add_inputs({f"c{i}_{k}": v for k, v in c.ins.items()},
                           {f"c{i}_{k}" for k in c.consts}, inputs, inits, feeds)
        onames = [f"c{i}_y{j}" for j in range(len(c.outs))]
        for n, (dt, shape) in zip(onames, c.outs):
            outputs.append(
                helper.make_tensor_value_info(
                    n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape
                )
            )
        nodes.append(
            helper.make_node(c.op, names, onames, name=f"n{i}_{c.op}", domain=c.domain, **c.attrs)
        )
    graph = helper.make_graph(nodes, "contrib_quant", inputs, outputs, initializer=inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
        ir_version=10,
    )
    return model, feeds


def run_both(cases: list[Case]):
    """(monolib outputs, ORT outputs), flat in case order."""
    model, feeds = build(cases)
    return run_model(model, feeds), ort_run(model, feeds)


def assert_outputs(cases, got, want, *, rtol=0.0, atol=0.0, steps=0):
    k = 0
    for c in cases:
        for _ in c.outs:
            g, w = got[k], want[k]
            what = f"case {k} {c.op} {[None if v is None else v.shape for v in c.ins.values()]} {c.attrs}"
            assert g.shape == w.shape and g.dtype == w.dtype, what
            if g.dtype.kind in "iu":
                diff = np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0)
                assert diff <= steps, f"{what}: {diff} steps apart"
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)
            k += 1


# -- MatMulIntegerToFloat / DynamicQuantizeMatMul / QGemm -------------------------------

MM_SHAPES = [
    ((7, 33), (33, 17)),
    ((1, 8), (8, 16)),
    ((2, 5, 19), (19, 21)),
    ((2, 3, 4, 6), (2, 1, 6, 5)),
]


def _b(t, *shape):
    """B weights: full range for uint8 / int8 x int8, 7 bits for int8 (ORT exactness)."""
    return q(t, *shape, lo=-64, hi=63) if t == np.int8 else q(t, *shape)


def test_matmul_integer_to_float_matches_ort():
    cases = []
    for ash, bsh in MM_SHAPES:
        n = bsh[-1]
        for ta, tb in ((np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)):
            per_col = len(bsh) == 2
            for consts in ((), ("b", "bs", "bz", "bias")):
                ins = {
                    "a": q(ta, *ash) if ta == np.uint8 else q(ta, *ash, lo=-64, hi=63),
                    "b": _b(tb, *bsh),
                    "as": np.array(0.02, np.float32),
                    "bs": (R.uniform(0.001, 0.01, n) if per_col else np.array(0.004)).astype(
                        np.float32
                    ),
                    "az": np.array(3 if ta == np.uint8 else -2, ta),
                    "bz": (q(tb, n, lo=-5, hi=5) if tb == np.int8 else q(tb, n))
                    if per_col
                    else np.array(0, tb),
                    "bias": f32(n) if per_col else None,
                }
                out = np.broadcast_shapes(ash[:-2], bsh[:-2]) + (ash[-2], n)
                cases.append(Case("MatMulIntegerToFloat", ins, [(np.float32, out)], consts=consts))
    got, want = run_both(cases)
    assert_outputs(cases, got, want, rtol=1e-6, atol=1e-6)


def test_dynamic_quantize_matmul_matches_ort():
    cases = []
    for ash, bsh in MM_SHAPES:
        n = bsh[-1]
        for tb in (np.uint8, np.int8):
            for per_col in (False, True) if len(bsh) == 2 else (False,):
                for consts in ((), ("b", "bs", "bz", "bias")):
                    ins = {
                        "a": f32(*ash, scale=3.0),
                        "b": _b(tb, *bsh),
                        "bs": (R.uniform(0.001, 0.01, n) if per_col else np.array(0.004)).astype(
                            np.float32
                        ),
                        "bz": (q(tb, n, lo=-5, hi=5) if tb == np.int8 else q(tb, n))
                        if per_col
                        else np.array(7 if tb == np.uint8 else 0, tb),
                        "bias": f32(n),
                    }
                    out = np.broadcast_shapes(ash[:-2], bsh[:-2]) + (ash[-2], n)
                    cases.append(
                        Case("DynamicQuantizeMatMul", ins, [(np.float32, out)], consts=consts)
                    )
    # all-positive and all-zero A (scale from max only; zero scale range)
    for a in (np.abs(f32(4, 9)), np.zeros((4, 9), np.float32)):
        ins = {
            "a": a,
            "b": q(np.uint8, 9, 5),
            "bs": np.array(0.01, np.float32),
            "bz": np.array(128, np.uint8),
            "bias": f32(5),
        }
        cases.append(Case("DynamicQuantizeMatMul", ins, [(np.float32, (4, 5))], consts=("b",)))
    got, want = run_both(cases)
    assert_outputs(cases, got, want, rtol=1e-6, atol=1e-6)


def test_qgemm_matches_ort():
    cases = []
    for m, k, n in ((7, 33, 17), (1, 8, 16), (13, 2, 40)):
        for ta, tb in ((0, 0), (1, 0), (0, 1), (1, 1)):
            for t in (np.uint8, np.int8):
                for y in ("u8", "float"):
                    per_col = (m + ta + tb) % 2 == 0
                    ins = {
                        "a": q(t, *((k, m) if ta else (m, k)))
                        if t == np.uint8
                        else q(t, *((k, m) if ta else (m, k)), lo=-64, hi=63),
                        "as": np.array(0.05, np.float32),
                        "az": np.array(5 if t == np.uint8 else -3, t),
                        "b": _b(t, *((n, k) if tb else (k, n))),
                        "bs": (R.uniform(0.001, 0.01, n) if per_col else np.array(0.004)).astype(
                            np.float32
                        ),
                        "bz": (q(t, n, lo=-5, hi=5) if t == np.int8 else q(t, n))
                        if per_col
                        else np.array(0, t),
                        "c": q(np.int32, n, lo=-3000, hi=3000) if (m + k) % 2 else None,
                        "ys": np.array(0.3, np.float32) if y == "u8" else None,
                        "yz": np.array(120 if t == np.uint8 else -7, t) if y == "u8" else None,
                    }
                    if ins["c"] is None and y == "float":
                        del ins["ys"], ins["yz"]
                    elif y == "float":
                        del ins["yz"]
                        ins["ys"] = None
                    out = (t if y == "u8" else np.float32, (m, n))
                    consts = ("b", "bs", "bz", "c") if (ta + tb) % 2 else ()
                    cases.append(
                        Case(
                            "QGemm",
                            ins,
                            [out],
                            attrs={"transA": ta, "transB": tb, "alpha": 0.75},
                            consts=consts,
                        )
                    )
    got, want = run_both(cases)
    assert_outputs(cases, got, want, rtol=1e-6, atol=1e-6)


# -- QLinearAdd / QLinearMul / QLinearSigmoid / QLinearLeakyRelu ------------------------

BINARY_SHAPES = [((3, 37), (3, 37)), ((2, 3, 5, 7), (3, 1, 1)), ((1,), (4, 9)), ((6, 1), (1, 40))]


def _binary_cases(op):
    cases = []
    for k, (ash, bsh) in enumerate(BINARY_SHAPES):
        for t in (np.uint8, np.int8):
            info = np.iinfo(t)
            ins = {
                "a": q(t, *ash),
                "as": np.array(0.02 + 0.01 * k, np.float32),
                "az": np.array(info.min + 100, t),
                "b": q(t, *bsh),
                "bs": np.array(0.035, np.float32),
                "bz": np.array(info.max - 77, t),
                "cs": np.array(0.05 if op == "QLinearAdd" else 0.9, np.float32),
                "cz": np.array(info.min + 128, t),
            }
            if k == 3:  # an omitted (trailing) zero point reads 0
                del ins["cz"]
            consts = ("as", "bs", "cs", "bz") if k % 2 else ()
            cases.append(Case(op, ins, [(t, np.broadcast_shapes(ash, bsh))], consts=consts))
    return cases


def test_qlinear_add_mul_match_ort():
    """Bit-exact, broadcast operands included: the same float32 operations in the same
    order as ORT's MLAS kernels (its fused multiply-adds written out; when A is the
    per-span scalar of a broadcast, ORT's operand roles swap, and so do these)."""
    cases = _binary_cases("QLinearAdd") + _binary_cases("QLinearMul")
    got, want = run_both(cases)
    assert_outputs(cases, got, want, steps=0)


def test_qlinear_sigmoid_leaky_relu_match_ort():
    """LeakyRelu bit-exact; Sigmoid within one step (ORT's logistic is MLAS's polynomial,
    a value at a rounding tie may land one step apart)."""
    cases = []
    for op, attrs in (
        ("QLinearSigmoid", {}),
        ("QLinearLeakyRelu", {"alpha": 0.1}),
        ("QLinearLeakyRelu", {}),
    ):
        for t in (np.uint8, np.int8):
            for shape, consts in (((2, 3, 17), ()), ((256,), ("xs", "xz", "ys", "yz"))):
                x = np.arange(256).astype(t) if shape == (256,) else q(t, *shape)  # every value
                ins = {
                    "x": x,
                    "xs": np.array(0.05, np.float32),
                    "xz": np.array(np.iinfo(t).min + 120, t),
                    "ys": np.array(1 / 256 if op == "QLinearSigmoid" else 0.04, np.float32),
                    "yz": np.array(np.iinfo(t).min + (0 if op == "QLinearSigmoid" else 100), t),
                }
                cases.append(Case(op, ins, [(t, shape)], attrs=attrs, consts=consts))
    got, want = run_both(cases)
    sig = [c for c in cases if c.op == "QLinearSigmoid"]
    rest = [c for c in cases if c.op != "QLinearSigmoid"]
    k = [i for i, c in enumerate(cases) if c.op == "QLinearSigmoid"]
    assert_outputs(sig, [got[i] for i in k], [want[i] for i in k], steps=1)
    k = [i for i, c in enumerate(cases) if c.op != "QLinearSigmoid"]
    assert_outputs(rest, [got[i] for i in k], [want[i] for i in k], steps=0)


# -- QLinearGlobalAveragePool / QLinearAveragePool / QLinearConcat ----------------------


def _qparams(t, xs=0.07, ys=0.05):
    info = np.iinfo(t)
    return (
        np.array(xs, np.float32),
        np.array(info.min + 110, t),
        np.array(ys, np.float32),
        np.array(info.min + 131, t),
    )


def test_qlinear_pools_match_ort():
    """Bit-exact: ORT's integer sums (global) and float32 window sums in its order."""
    cases = []
    for t in (np.uint8, np.int8):
        xs, xz, ys, yz = _qparams(t)
        for shape, last in (((2, 5, 7, 9), 0), ((1, 6, 4, 3), 1), ((2, 3, 20), 0)):
            n = shape[0]
            c = shape[-1] if last else shape[1]
            out = (n, *([1] * (len(shape) - 2)), c) if last else (n, c, *([1] * (len(shape) - 2)))
            ins = {"x": q(t, *shape), "xs": xs, "xz": xz, "ys": ys, "yz": yz}
            cases.append(
                Case("QLinearGlobalAveragePool", ins, [(t, out)], attrs={"channels_last": last})
            )
        for shape, attrs, out in (
            (
                (2, 3, 9, 11),
                {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                (2, 3, 5, 6),
            ),
            (
                (2, 3, 9, 11),
                {
                    "kernel_shape": [3, 2],
                    "strides": [2, 3],
                    "pads": [1, 0, 1, 1],
                    "count_include_pad": 1,
                },
                (2, 3, 5, 4),
            ),
            (
                (1, 4, 7, 7),
                {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
                (1, 4, 4, 4),
            ),
            (
                (1, 7, 8, 5),
                {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "channels_last": 1},
                (1, 7, 8, 5),
            ),
            ((2, 3, 15), {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}, (2, 3, 5)),
        ):
            ins = {"x": q(t, *shape), "xs": xs, "xz": xz, "ys": ys, "yz": yz}
            cases.append(
                Case("QLinearAveragePool", ins, [(t, out)], attrs=attrs, consts=("xs", "ys"))
            )
    got, want = run_both(cases)
    assert_outputs(cases, got, want, steps=0)


def test_qlinear_concat_matches_ort():
    cases = []
    for t in (np.uint8, np.int8):
        info = np.iinfo(t)
        for axis, shapes in (
            (1, [(2, 3, 4), (2, 5, 4), (2, 1, 4)]),
            (-1, [(3, 2), (3, 7)]),
            (0, [(2, 6), (1, 6)]),
        ):
            ins = {"ys": np.array(0.05, np.float32), "yz": np.array(info.min + 128, t)}
            for k, s in enumerate(shapes):
                ins[f"x{k}"] = q(t, *s)
                # the second input shares Y's quantization (ORT copies it)
                ins[f"s{k}"] = np.array(0.05 if k == 1 else 0.02 + 0.04 * k, np.float32)
                ins[f"z{k}"] = np.array(info.min + 128 if k == 1 else info.min + 60 * k + 3, t)
            out = list(shapes[0])
            out[axis] = sum(s[axis] for s in shapes)
            cases.append(
                Case(
                    "QLinearConcat",
                    ins,
                    [(t, tuple(out))],
                    attrs={"axis": axis},
                    consts=("ys", "s0") if axis == 1 else (),
                )
            )
    got, want = run_both(cases)
    assert_outputs(cases, got, want, steps=0)


# -- QLinearSoftmax ----------------------------------------------------------------------


def test_qlinear_softmax_matches_ort():
    """Bit-exact: ORT's float32 exp table aligned to the row maximum, float32 sums."""
    cases = []
    for t in (np.uint8, np.int8):
        info = np.iinfo(t)
        for shape, opset, axis in (
            ((3, 40), 13, -1),
            ((2, 5, 7), 13, 1),
            ((2, 3, 4, 5), 12, 2),
            ((4, 9), 12, None),
            ((6, 300), 13, None),
        ):
            attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
            ins = {
                "x": q(t, *shape),
                "xs": np.array(0.08, np.float32),
                "xz": np.array(info.min + 128, t),
                "ys": np.array(1 / 256, np.float32),
                "yz": np.array(info.min, t),
            }
            cases.append(
                Case(
                    "QLinearSoftmax",
                    ins,
                    [(t, shape)],
                    attrs=attrs,
                    consts=("xs",) if opset == 13 else (),
                )
            )
    got, want = run_both(cases)
    assert_outputs(cases, got, want, steps=0)


# -- DynamicQuantizeLSTM -----------------------------------------------------------------


def test_dynamic_quantize_lstm_matches_ort():
    """Within 2e-3 (measured: 1e-7): the same integer sums, float sums in another order
    and libm's sigmoid/tanh where ORT uses MLAS polynomials; a state value at a rounding
    tie of the next step's run-time quantization would move one step (quant_lstm)."""
    cases = []
    for direction, t, b, i, h, wt, per_col in (
        ("forward", 5, 2, 7, 6, np.int8, False),
        ("reverse", 4, 3, 5, 8, np.uint8, True),
        ("bidirectional", 3, 2, 9, 4, np.int8, True),
    ):
        d = 2 if direction == "bidirectional" else 1
        pshape = (d, 4 * h) if per_col else (d,)
        ins = {
            "x": f32(t, b, i),
            "w": _b(wt, d, i, 4 * h),
            "r": _b(wt, d, h, 4 * h),
            "bias": f32(d, 8 * h, scale=0.1),
            "seq": None,
            "h0": f32(d, b, h, scale=0.5) if direction != "forward" else None,
            "c0": f32(d, b, h, scale=0.5) if direction != "forward" else None,
            "p": None,
            "ws": R.uniform(0.004, 0.01, pshape).astype(np.float32),
            # ORT requires int8 weight zero points to be 0, uint8 ones one value
            "wz": np.full(pshape, 0 if wt == np.int8 else 131, wt),
            "rs": R.uniform(0.004, 0.01, pshape).astype(np.float32),
            "rz": np.full(pshape, 0 if wt == np.int8 else 125, wt),
        }
        outs = [(np.float32, (t, d, b, h)), (np.float32, (d, b, h)), (np.float32, (d, b, h))]
        attrs = {"hidden_size": h, "direction": direction}
        if direction == "reverse":
            attrs["clip"] = 2.5
        cases.append(
            Case(
                "DynamicQuantizeLSTM",
                ins,
                outs,
                attrs=attrs,
                consts=("w", "r", "ws", "wz", "rs", "rz"),
            )
        )
    got, want = run_both(cases)
    assert_outputs(cases, got, want, rtol=0, atol=2e-3)


# -- fused chains and refusals ------------------------------------------------------------


def test_qlinear_elementwise_chain_fuses_and_matches_ort():
    """QLinearAdd -> QLinearMul -> QLinearLeakyRelu: Add and Mul fuse into one loop, the
    LeakyRelu is its own table op (two ops in the graph), all bit for bit ORT's."""
    import monolib

    t = np.uint8
    a, b, c = q(t, 4, 33), q(t, 4, 33), q(t, 4, 33)
    s = lambda v: numpy_helper.from_array(np.array(v, np.float32), f"s{v}".replace(".", "_"))
    z = lambda v: numpy_helper.from_array(np.array(v, t), f"z{v}")
    inits = [s(0.02), s(0.03), s(0.05), s(0.04), z(128), z(100), z(90)]
    add = ["a", "s0_02", "z128", "b", "s0_03", "z100", "s0_05", "z90"]
    mul = ["t1", "s0_05", "z90", "c", "s0_02", "z100", "s0_04", "z128"]
    nodes = [
        helper.make_node("QLinearAdd", add, ["t1"], domain=MS),
        helper.make_node("QLinearMul", mul, ["t2"], domain=MS),
        helper.make_node(
            "QLinearLeakyRelu", ["t2", "s0_04", "z128", "s0_05", "z90"], ["y"], domain=MS, alpha=0.2
        ),
    ]
    vi = lambda n: helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), (4, 33)
    )
    graph = helper.make_graph(
        nodes, "chain", [vi("a"), vi("b"), vi("c")], [vi("y")], initializer=inits
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
        ir_version=10,
    )
    feeds = {"a": a, "b": b, "c": c}
    np.testing.assert_array_equal(run_model(model, feeds)[0], ort_run(model, feeds)[0])
    ops = monolib.compile(model.SerializeToString(), target="c")["get_graph_json"]()["nodes"]
    assert [(n["op"], n.get("fused", [])) for n in ops] == [
        ("QLinearAdd", ["QLinearMul"]),
        ("QLinearLeakyRelu", []),
    ], ops


def test_refusals_name_the_node():
    import monolib
    from monolib.errors import UnsupportedOpError

    ins = {
        "a": q(np.uint8, 3, 4),
        "as": np.array(0.1, np.float32),
        "az": np.array(1, np.uint8),
        "b": q(np.uint8, 4, 5),
        "bs": np.array(0.1, np.float32),
        "bz": np.array(2, np.uint8),
        "c": q(np.int32, 3, 5, lo=-9, hi=9),
    }
    model, _ = build([Case("QGemm", ins, [(np.float32, (3, 5))], consts=("c",))])
    try:
        monolib.compile(model.SerializeToString(), target="c")
    except UnsupportedOpError as e:
        assert "n0_QGemm" in str(e) and "C has shape [3, 5]" in str(e), e
    else:
        raise AssertionError("a C varying along both axes was accepted")
    lstm = {
        "x": f32(2, 1, 3),
        "w": q(np.uint8, 1, 3, 8),
        "r": q(np.uint8, 1, 2, 8),
        "bias": None,
        "seq": None,
        "h0": None,
        "c0": None,
        "p": None,
        "ws": np.array([0.01], np.float32),
        "wz": np.array([128], np.uint8),
        "rs": np.array([0.01], np.float32),
        "rz": np.array([128], np.uint8),
    }
    model, _ = build(
        [
            Case(
                "DynamicQuantizeLSTM",
                lstm,
                [(np.float32, (2, 1, 1, 2))],
                attrs={"hidden_size": 2},
                consts=("r", "ws", "wz", "rs", "rz"),
            )
        ]
    )
    try:
        monolib.compile(model.SerializeToString(), target="c")
    except UnsupportedOpError as e:
        assert "n0_DynamicQuantizeLSTM" in str(e) and "constant" in str(e), e
    else:
        raise AssertionError("a run-time W was accepted")


def test_qlinear_unary_ops_refuse_bad_zero_points():
    """QLinearSigmoid/LeakyRelu, QLinearSoftmax and the pools share one check: a zero
    point is a scalar of X's type (the elementwise ops read element 0 of it)."""
    import monolib
    from monolib.errors import UnsupportedOpError

    x, s = q(np.uint8, 2, 6), np.array(0.05, np.float32)
    for op, xz, what, attrs in (
        ("QLinearSigmoid", np.array([3, 4], np.uint8), "uint8 scalar", {}),
        ("QLinearSoftmax", np.array(3, np.int8), "uint8 scalar", {"opset": 13}),
    ):
        ins = {"x": x, "xs": s, "xz": xz, "ys": s, "yz": np.array(1, np.uint8)}
        model, _ = build([Case(op, ins, [(np.uint8, (2, 6))], attrs=attrs)])
        try:
            monolib.compile(model.SerializeToString(), target="c")
        except UnsupportedOpError as e:
            assert f"n0_{op}" in str(e) and f"zero point input 2 must be a {what}" in str(e), e
        else:
            raise AssertionError(f"{op} accepted zero point {xz!r}")


def test_float_output_gemm_split_over_threads():
    """Big enough for ml_qgemm_par to split the columns over the pool: DynamicQuantizeMatMul
    and QGemm (float Y, per-column scales, bias / C) give the same bits at 1 and 2
    threads, and ORT's values."""
    m, k, n = 96, 200, 304
    dq = {
        "a": f32(m, k),
        "b": _b(np.int8, k, n),
        "bs": R.uniform(0.001, 0.01, n).astype(np.float32),
        "bz": np.zeros(n, np.int8),
        "bias": f32(n),
    }
    qg = {
        "a": q(np.uint8, m, k),
        "as": np.array(0.05, np.float32),
        "az": np.array(7, np.uint8),
        "b": q(np.uint8, n, k),
        "bs": R.uniform(0.001, 0.01, n).astype(np.float32),
        "bz": q(np.uint8, n),
        "c": q(np.int32, n, lo=-999, hi=999),
    }
    cases = [
        Case("DynamicQuantizeMatMul", dq, [(np.float32, (m, n))], consts=("b", "bs", "bz", "bias")),
        Case(
            "QGemm", qg, [(np.float32, (m, n))], attrs={"transB": 1}, consts=("b", "bs", "bz", "c")
        ),
    ]
    model, feeds = build(cases)
    one, two = run_threads(model, feeds)
    for x, y in zip(one, two):
        np.testing.assert_array_equal(x, y)
    assert_outputs(cases, one, ort_run(model, feeds), rtol=1e-6, atol=1e-6)


def test_runtime_rows():
    """DynamicQuantizeMatMul, MatMulIntegerToFloat and QLinearAdd with a run-time row
    count (issue 12's dims): one library answers at several sizes, each equal to ORT."""
    import monolib

    f = lambda name, v: numpy_helper.from_array(v, name)
    inits = [
        f("b", _b(np.int8, 19, 21)),
        f("bs", np.array(0.01, np.float32)),
        f("bz", np.array(0, np.int8)),
        f("bias", f32(21)),
        f("as", np.array(0.02, np.float32)),
        f("az", np.array(3, np.uint8)),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"], domain=MS),
        helper.make_node(
            "MatMulIntegerToFloat", ["aq", "b", "as", "bs", "az", "bz", "bias"], ["y2"], domain=MS
        ),
        helper.make_node(
            "QLinearAdd", ["aq", "as", "az", "aq", "as", "az", "as", "az"], ["y3"], domain=MS
        ),
    ]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "rows",
        [vi("a", 1, ["n", 19]), vi("aq", 2, ["n", 19])],
        [vi("y", 1, ["n", 21]), vi("y2", 1, ["n", 21]), vi("y3", 2, ["n", 19])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
        ir_version=10,
    )
    factory = monolib.compile(
        model.SerializeToString(), target="c", shapes={"a": ((1, 64), 19), "aq": ((1, 64), 19)}
    )
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    for n in (1, 7, 64):
        feeds = {"a": f32(n, 19, scale=2.0), "aq": q(np.uint8, n, 19)}
        gm.run(**feeds)
        got = [gm.get_output(i).numpy() for i in range(3)]
        cases = [Case(nd.op_type, {"a": feeds["a"]}, [None]) for nd in nodes]  # for messages
        assert_outputs(cases, got, ort_run(model, feeds), rtol=1e-6, atol=1e-6)


def test_runtime_spatial_dim():
    """The 8-bit pools, softmax, concat and table ops over a run-time height (issue 12):
    one library at heights 2, 5 and 16, each bit for bit ORT's."""
    import monolib

    def f(name, v):
        return numpy_helper.from_array(v, name)

    inits = [
        f("s", np.array(0.05, np.float32)),
        f("z", np.array(3, np.uint8)),
        f("s2", np.array(0.07, np.float32)),
        f("z2", np.array(9, np.uint8)),
    ]
    q5 = ["x", "s", "z", "s2", "z2"]
    specs = [
        ("QLinearGlobalAveragePool", q5, {}, [1, 4, 1, 1]),
        ("QLinearAveragePool", q5, {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1]}, [1, 4, "h", 8]),
        ("QLinearSoftmax", q5, {"opset": 13, "axis": 2}, [1, 4, "h", 8]),
        ("QLinearSoftmax", q5, {"opset": 12, "axis": 1}, [1, 4, "h", 8]),
        (
            "QLinearConcat",
            ["s2", "z2", "x", "s", "z", "x", "s2", "z"],
            {"axis": 2},
            [1, 4, "h2", 8],
        ),
        ("QLinearSigmoid", q5, {}, [1, 4, "h", 8]),
    ]
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node(op, ins, [f"y{k}"], domain=MS, **attrs)
        for k, (op, ins, attrs, _) in enumerate(specs)
    ]
    outs = [vi(f"y{k}", 2, shape) for k, (_, _, _, shape) in enumerate(specs)]
    graph = helper.make_graph(nodes, "hw", [vi("x", 2, [1, 4, "h", 8])], outs, initializer=inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
        ir_version=10,
    )
    factory = monolib.compile(
        model.SerializeToString(), target="c", shapes={"x": (1, 4, (2, 16), 8)}
    )
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    for h in (2, 5, 16):
        x = q(np.uint8, 1, 4, h, 8)
        gm.run(x=x)
        for k, want in enumerate(ort_run(model, {"x": x})):
            np.testing.assert_array_equal(
                gm.get_output(k).numpy(), want, err_msg=f"{specs[k][0]} at h={h}"
            )
