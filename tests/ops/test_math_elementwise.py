"""Elementwise math ops against ONNX Runtime: infer, reference and emitted C (with and
without a fused epilogue), over a table of cases."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_op, make_node

from monolib.compiler.ops import op_of
from monolib.errors import ShapeError, UnsupportedOpError

R = np.random.default_rng(1234)


def f32(*shape, lo=-3.0, hi=3.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def i32(*shape, lo=-20, hi=20):
    return R.integers(lo, hi, shape).astype(np.int32)


def b(*shape):
    return R.integers(0, 2, shape).astype(bool)


POS = {"lo": 0.1, "hi": 4.0}

# (op, inputs, attrs, opset, constant_inputs)
CASES = [
    ("Add", [f32(2, 3, 4), f32(3, 1)], {}, 14, ()),
    ("Add", [f32(5), f32()], {}, 13, ()),
    ("Add", [i32(3, 4), i32(4)], {}, 14, ()),
    ("Add", [f32(1, 4, 1, 3), f32(2, 1, 5, 1)], {}, 14, ()),
    ("Sub", [f32(3, 4), np.array(1.5, np.float32)], {}, 14, (1,)),
    (
        "Sub",
        [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([1, 2, 3], np.int64)],
        {},
        14,
        (),
    ),
    ("Mul", [f32(2, 3), f32(2, 1)], {}, 14, ()),
    ("Mul", [f32(4, 4), f32(4)], {}, 7, (1,)),
    ("Div", [f32(3, 4), f32(3, 4, lo=0.5)], {}, 14, ()),
    (
        "Div",
        [np.array([7, -7, 7, -7, 9, 0], np.int32), np.array([2, 2, -2, -2, 3, 5], np.int32)],
        {},
        14,
        (),
    ),
    ("Div", [np.array([7, -7, 100], np.int64), np.array(3, np.int64)], {}, 14, (1,)),
    ("Pow", [f32(3, 4, **POS), np.array(2.0, np.float32)], {}, 15, (1,)),
    ("Pow", [f32(3, 4, **POS), np.array(0.5, np.float32)], {}, 15, (1,)),
    ("Pow", [f32(3, 4, **POS), np.array(1.0, np.float32)], {}, 12, (1,)),
    ("Pow", [f32(3, 4, **POS), np.array(3.0, np.float32)], {}, 12, (1,)),
    ("Pow", [f32(3, 4, **POS), np.array(1.7, np.float32)], {}, 12, (1,)),
    ("Pow", [f32(3, 4, **POS), f32(3, 4)], {}, 15, ()),
    ("Pow", [f32(3, 4, **POS), np.array(2, np.int64)], {}, 15, (1,)),
    ("Max", [f32(3, 4), f32(4), f32(1, 4)], {}, 13, ()),
    ("Max", [i32(5), i32(5)], {}, 13, ()),
    ("Min", [f32(3, 4), f32(3, 1)], {}, 13, ()),
    ("Min", [f32(6)], {}, 13, ()),
    ("Sum", [f32(3, 4), f32(4), f32(3, 1)], {}, 13, ()),
    ("Mean", [f32(3, 4), f32(4)], {}, 13, ()),
    ("Mod", [i32(10), np.array([3, -3, 7, 5, -5, 2, 9, 4, 3, -7], np.int32)], {}, 13, ()),
    ("Mod", [i32(10), np.array([3, -3, 7, 5, -5, 2, 9, 4, 3, -7], np.int32)], {"fmod": 1}, 13, ()),
    ("Mod", [f32(10), f32(10, **POS)], {"fmod": 1}, 13, ()),
    ("Sqrt", [f32(3, 5, **POS)], {}, 13, ()),
    ("Exp", [f32(3, 5)], {}, 13, ()),
    ("Log", [f32(3, 5, **POS)], {}, 13, ()),
    ("Erf", [f32(3, 5)], {}, 13, ()),
    ("Tanh", [f32(3, 5)], {}, 13, ()),
    ("Sin", [f32(7)], {}, 7, ()),
    ("Cos", [f32(7)], {}, 7, ()),
    ("Neg", [f32(3, 5)], {}, 13, ()),
    ("Neg", [i32(7)], {}, 13, ()),
    ("Abs", [f32(3, 5)], {}, 13, ()),
    ("Abs", [i32(9)], {}, 13, ()),
    ("Floor", [f32(3, 5)], {}, 13, ()),
    ("Ceil", [f32(3, 5)], {}, 13, ()),
    ("Round", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1.2, -2.7], np.float32)], {}, 11, ()),
    ("Reciprocal", [f32(3, 5, **POS)], {}, 13, ()),
    ("Sign", [np.array([-2.0, 0.0, 3.5], np.float32)], {}, 13, ()),
    ("Sign", [i32(9)], {}, 13, ()),
    ("Relu", [f32(4, 6)], {}, 14, ()),
    ("Relu", [i32(8)], {}, 14, ()),
    ("LeakyRelu", [f32(4, 6)], {"alpha": 0.2}, 16, ()),
    ("PRelu", [f32(2, 3, 4), f32(3, 1)], {}, 16, (1,)),
    ("Sigmoid", [f32(4, 6, lo=-20, hi=20)], {}, 13, ()),
    ("HardSigmoid", [f32(4, 6, lo=-6, hi=6)], {}, 6, ()),
    ("HardSigmoid", [f32(4, 6, lo=-6, hi=6)], {"alpha": 0.1666667, "beta": 0.5}, 6, ()),
    ("HardSwish", [f32(4, 6, lo=-6, hi=6)], {}, 14, ()),
    ("Elu", [f32(4, 6)], {"alpha": 0.7}, 6, ()),
    ("Selu", [f32(4, 6)], {}, 6, ()),
    ("Softplus", [f32(4, 6, lo=-100, hi=100)], {}, 1, ()),
    ("Softsign", [f32(4, 6)], {}, 1, ()),
    ("Gelu", [f32(4, 6)], {}, 20, ()),
    ("Gelu", [f32(4, 6)], {"approximate": "tanh"}, 20, ()),
    ("Clip", [f32(4, 6)], {"min": -0.5, "max": 0.7}, 6, ()),
    ("Clip", [f32(4, 6), np.array(-0.5, np.float32), np.array(0.5, np.float32)], {}, 12, (1, 2)),
    ("Clip", [f32(4, 6), np.array(0.0, np.float32), np.array(6.0, np.float32)], {}, 11, ()),
    ("Clip", [f32(4, 6), None, np.array(0.5, np.float32)], {}, 13, (2,)),
    ("Clip", [f32(4, 6), np.array(0.5, np.float32)], {}, 13, (1,)),
    ("Clip", [i32(9), np.array(-3, np.int32), np.array(4, np.int32)], {}, 13, (1, 2)),
    ("Clip", [f32(4, 6), np.array(1.0, np.float32), np.array(-1.0, np.float32)], {}, 13, (1, 2)),
    ("Equal", [i32(3, 4, lo=0, hi=3), i32(4, lo=0, hi=3)], {}, 13, ()),
    ("Equal", [np.array([1.0, 2.0], np.float32), np.array([1.0, 3.0], np.float32)], {}, 11, ()),
    ("Equal", [b(6), b(6)], {}, 11, ()),
    ("Less", [f32(3, 4), f32(4)], {}, 13, ()),
    ("Greater", [i32(3, 4), i32(3, 1)], {}, 13, ()),
    ("LessOrEqual", [i32(3, 4, lo=0, hi=3), i32(3, 4, lo=0, hi=3)], {}, 16, ()),
    ("GreaterOrEqual", [i32(3, 4, lo=0, hi=3), i32(3, 4, lo=0, hi=3)], {}, 16, ()),
    ("Not", [b(3, 4)], {}, 1, ()),
    ("And", [b(3, 4), b(4)], {}, 7, ()),
    ("Or", [b(3, 4), b(3, 1)], {}, 7, ()),
    ("Xor", [b(3, 4), b(3, 4)], {}, 7, ()),
    ("Where", [b(3, 4), f32(3, 4), f32(4)], {}, 16, ()),
    ("Where", [b(4), np.array(1, np.int64), i32(3, 4).astype(np.int64)], {}, 16, ()),
    ("Cast", [f32(3, 4, lo=-100, hi=100)], {"to": 7}, 13, ()),
    ("Cast", [f32(3, 4, lo=-100, hi=100)], {"to": 6}, 19, ()),
    ("Cast", [f32(3, 4, lo=-100, hi=100)], {"to": 3}, 13, ()),
    ("Cast", [np.array([0.0, 1.5, -2.0, 0.0], np.float32)], {"to": 9}, 13, ()),
    ("Cast", [b(5)], {"to": 1}, 13, ()),
    ("Cast", [i32(5)], {"to": 1}, 13, ()),
    ("Cast", [i32(5)], {"to": 7}, 6, ()),
    ("Cast", [np.arange(5, dtype=np.int64)], {"to": 9}, 13, ()),
    ("Cast", [f32(4)], {"to": 11}, 13, ()),
    ("CastLike", [f32(4, lo=-9, hi=9), np.zeros(1, np.int64)], {}, 15, ()),
]


def _id(case):
    op, ins, attrs, opset, _ = case
    shapes = "x".join("_".join(map(str, x.shape)) if x is not None else "none" for x in ins)
    return f"{op}{opset}-{shapes}-{'-'.join(f'{k}{v}' for k, v in attrs.items())}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_elementwise_matches_ort(case):
    op, ins, attrs, opset, consts = case
    tol = {"rtol": 2e-6, "atol": 2e-6}
    if op in ("Erf", "Gelu", "Pow", "Softplus", "Selu", "Elu"):
        tol = {"rtol": 1e-5, "atol": 1e-6}
    check_op(op, ins, attrs, opset=opset, const=consts, **tol)


def test_elementwise_flags_and_c_expr_specializations():
    x = f32(3, 4, **POS)
    for e, text in ((2.0, "*"), (0.5, "sqrtf"), (1.0, None)):
        node = make_node("Pow", [x, np.array(e, np.float32)], {}, 15, const=(1,))
        op = op_of(node)
        assert op.elementwise
        expr = op.c_expr(node, ["x", "2.0f"])
        assert "powf" not in expr
        if text:
            assert text in expr
        else:
            assert expr == "x"
    node = make_node("Relu", [x], {}, 14)
    # an argument with a call is evaluated once (bound to a temporary)
    expr = op_of(node).c_expr(node, ["expf(v)"])
    assert expr.count("expf(v)") == 1


def test_broadcast_error_names_node():
    node_in = [f32(3, 4), f32(5)]
    with pytest.raises(ShapeError, match="Add"):
        make_node("Add", node_in, {}, 14)


def test_mixed_dtypes_rejected():
    with pytest.raises(ShapeError, match="different dtypes"):
        make_node("Add", [f32(3), i32(3)], {}, 14)


def test_float_only_op_rejects_ints():
    with pytest.raises(UnsupportedOpError, match="Sqrt"):
        make_node("Sqrt", [i32(3)], {}, 13)


def test_cast_to_string_unsupported():
    with pytest.raises(UnsupportedOpError, match="STRING"):
        make_node("Cast", [f32(3)], {"to": 8}, 13)


def test_int_division_by_zero_gives_zero_not_a_trap():
    from harness import run_c

    a = np.array([5, -5, 0], np.int32)
    z = np.zeros(3, np.int32)
    node = make_node("Div", [a, z], {}, 14)
    (got,) = run_c(node, [a, z])
    np.testing.assert_array_equal(got, [0, 0, 0])
    np.testing.assert_array_equal(op_of(node).reference(node, [a, z])[0], [0, 0, 0])


def test_int_min_divided_by_minus_one_does_not_trap():
    from harness import run_c

    for dt in (np.int32, np.int64):
        lo = np.iinfo(dt).min
        a = np.array([lo, 7, lo], dt)
        b = np.array([-1, -1, 3], dt)
        for op in ("Div", "Mod"):
            node = make_node(op, [a, b], {}, 13)
            (got,) = run_c(node, [a, b])
            with np.errstate(all="ignore"):
                (want,) = op_of(node).reference(node, [a, b])
            np.testing.assert_array_equal(got, want)


EXTRA = [
    ("Tan", [f32(6, lo=-1, hi=1)], {}, 7, ()),
    ("Asin", [f32(6, lo=-0.9, hi=0.9)], {}, 7, ()),
    ("Acos", [f32(6, lo=-0.9, hi=0.9)], {}, 7, ()),
    ("Atan", [f32(6)], {}, 7, ()),
    ("Sinh", [f32(6)], {}, 9, ()),
    ("Cosh", [f32(6)], {}, 9, ()),
    ("Asinh", [f32(6)], {}, 9, ()),
    ("Acosh", [f32(6, lo=1.1, hi=5)], {}, 9, ()),
    ("Atanh", [f32(6, lo=-0.9, hi=0.9)], {}, 9, ()),
    ("IsNaN", [np.array([1.0, np.nan, np.inf, -np.inf], np.float32)], {}, 13, ()),
    ("IsInf", [np.array([1.0, np.nan, np.inf, -np.inf], np.float32)], {}, 10, ()),
    (
        "IsInf",
        [np.array([1.0, np.nan, np.inf, -np.inf], np.float32)],
        {"detect_negative": 0},
        10,
        (),
    ),
    ("Mish", [f32(3, 4)], {}, 18, ()),
    ("ThresholdedRelu", [f32(3, 4)], {"alpha": 0.5}, 10, ()),
    ("Celu", [f32(3, 4)], {"alpha": 0.7}, 12, ()),
    ("Shrink", [f32(3, 4)], {"lambd": 0.8, "bias": 0.3}, 9, ()),
    ("BitwiseAnd", [i32(3, 4, lo=0, hi=99), i32(4, lo=0, hi=99)], {}, 18, ()),
    ("BitwiseOr", [i32(3, 4), i32(3, 4)], {}, 18, ()),
    ("BitwiseXor", [i32(3, 4), i32(1)], {}, 18, ()),
    ("BitwiseNot", [i32(5)], {}, 18, ()),
    (
        "BitShift",
        [np.array([16, 4, 1], np.uint32), np.array([1, 2, 3], np.uint32)],
        {"direction": "RIGHT"},
        11,
        (),
    ),
    (
        "BitShift",
        [np.array([16, 4, 1], np.uint8), np.array([1, 2, 3], np.uint8)],
        {"direction": "LEFT"},
        11,
        (),
    ),
]


@pytest.mark.parametrize("case", EXTRA, ids=[_id(c) for c in EXTRA])
def test_extra_elementwise_matches_ort(case):
    op, ins, attrs, opset, consts = case
    check_op(op, ins, attrs, opset=opset, const=consts, rtol=1e-5, atol=1e-6)


def test_signed_bitshift_by_width_or_more():
    from harness import run_c

    x = np.array([-128, 64, -3, 5], np.int8)
    y = np.array([9, 8, 1, 2], np.int8)
    for direction in ("LEFT", "RIGHT"):
        node = make_node("BitShift", [x, y], {"direction": direction}, 11)
        (got,) = run_c(node, [x, y])
        (want,) = op_of(node).reference(node, [x, y])
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, [-1, 0, -2, 1])


def test_c_expr_is_deterministic():
    node = make_node("HardSwish", [f32(3)], {}, 14)
    op = op_of(node)
    assert op.c_expr(node, ["expf(v)"]) == op.c_expr(node, ["expf(v)"])


@pytest.mark.parametrize("op", ["PRelu", "Max", "Min"])
def test_selects_read_their_operands_unconditionally(op):
    """A ternary that reads an array element in one arm only (PRelu's slope, Max's y)
    stays a branch per element (gcc does not speculate the load: PRelu over 64 x 112 x
    112 ran 3.7 ms); their C expressions bind every array element to a temporary read
    first, and Max/Min combine their NaN test with ``|``, not ``||``."""
    x, s = f32(2, 3, 4), f32(3, 1)
    node = make_node(op, [x, s] if op == "PRelu" else [x, x], {}, 16)
    expr = op_of(node).c_expr(node, ["in0[i]", "in1[c]"])
    assert "float ml_t0_" in expr and "float ml_t1_" in expr, expr
    assert "||" not in expr, expr
