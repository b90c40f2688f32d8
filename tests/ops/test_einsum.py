"""Einsum against ``onnx.reference`` (``numpy.einsum``): matmul-like, implicit output,
ellipsis broadcast, diagonals, three operands, full reduction, int32, and equation
errors."""

import numpy as np
import pytest
from refnode import check_node

from monolib.compiler.ops.math.einsum import parse_einsum
from monolib.errors import ShapeError

RNG = np.random.default_rng(29)


def _r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("eq,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ii->i", [(4, 4)]),
    ("bii->b", [(3, 4, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijk->", [(2, 3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
])
def test_einsum(eq, shapes):
    ins = {f"x{i}": _r(*s) for i, s in enumerate(shapes)}
    check_node("Einsum", ins, ["y"], opset=12, rtol=1e-5, atol=1e-5, equation=eq)


def test_einsum_int32():
    ins = {"a": RNG.integers(-5, 5, (3, 4)).astype(np.int32),
           "b": RNG.integers(-5, 5, (4, 2)).astype(np.int32)}
    check_node("Einsum", ins, ["y"], opset=28, equation="ij,jk->ik")


def test_einsum_bad_equations():
    with pytest.raises(ShapeError, match="label j has sizes 4 and 5"):
        parse_einsum("ij,jk->ik", [(3, 4), (5, 2)])
    with pytest.raises(ShapeError, match="does not fit an operand of rank 3"):
        parse_einsum("ij->i", [(3, 4, 5)])
    with pytest.raises(ShapeError, match="names labels absent"):
        parse_einsum("ij->iz", [(3, 4)])
