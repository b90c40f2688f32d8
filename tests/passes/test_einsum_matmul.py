"""EinsumToMatMul: two-operand Einsum contractions (attention's ``bhqd,bhkd->bhqk`` and
``bhqk,bhkd->bhqd``, a weight ``bnd,dk->bnk``, permuted batch axes, several summed
labels, an outer product, a dot product) become Transpose/Reshape/MatMul with
numpy.einsum's values, in a compiled model too; diagonals, one or three operands,
labels summed over one operand alone and broadcast size-1 axes stay Einsum."""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from onnx import helper, numpy_helper

import monolib
from monolib.compiler.frontend import import_model
from monolib.compiler.passes import EinsumToMatMul
from monolib.compiler.passes.einsum_matmul import contraction_groups

RNG = np.random.default_rng(31)

REWRITTEN = [
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 7), (2, 3, 7, 8)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("bqhd,bkhd->bhqk", [(2, 5, 3, 8), (2, 7, 3, 8)]),
    ("abcd,cd->ab", [(2, 3, 4, 5), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(6,), (6,)]),
    ("ij,j->i", [(3, 4), (4,)]),
]
KEPT = [
    ("bii,bi->b", [(2, 3, 3), (2, 3)], "a diagonal"),
    ("ij,jk->i", [(3, 4), (4, 5)], "k summed over B alone"),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], "a broadcast size-1 axis"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)], "three operands"),
]


def _model(eq, shapes, const_b=False):
    out = np.einsum(eq, *[np.zeros(s, np.float32) for s in shapes]).shape
    ins = [(f"x{i}", F32, list(s)) for i, s in enumerate(shapes)]
    inits = {}
    if const_b:
        inits["x1"] = RNG.standard_normal(shapes[1]).astype(np.float32)
        ins = ins[:1]
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"],
                            equation=eq)
    return make_model([node], ins, [("y", F32, list(out))], inits, opset=12)


def _ops(model) -> list[str]:
    graph = import_model(model)
    EinsumToMatMul()(graph)
    return [n.op_type for n in graph.nodes]


@pytest.mark.parametrize("eq, shapes", REWRITTEN, ids=[e for e, _ in REWRITTEN])
@pytest.mark.parametrize("const_b", [False, True], ids=["runtime", "weight"])
def test_contraction_becomes_matmul(eq, shapes, const_b) -> None:
    model = _model(eq, shapes, const_b)
    ops = _ops(model)
    assert "Einsum" not in ops and ops.count("MatMul") == 1, ops
    feeds = {f"x{i}": RNG.standard_normal(s).astype(np.float32)
             for i, s in enumerate(shapes) if not (const_b and i == 1)}
    b = feeds.get("x1")
    if b is None:
        b = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "x1"))
    want = np.einsum(eq, feeds["x0"].astype(np.float64), b.astype(np.float64))
    gm = monolib.GraphModule(monolib.compile(model, target="c")["default"](monolib.cpu()))
    gm.run(**feeds)
    got = gm.get_output(0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq, shapes, why", KEPT, ids=[e for e, _, _ in KEPT])
def test_other_einsums_stay(eq, shapes, why) -> None:
    assert "Einsum" in _ops(_model(eq, shapes)), why


def test_contraction_groups() -> None:
    b, h, q, k, d = (ord(c) for c in "bhqkd")
    assert contraction_groups([[b, h, q, d], [b, h, k, d]], [b, h, q, k]) == (
        [b, h], [q], [k], [d])
    assert contraction_groups([[b, q, h, d], [b, k, h, d]], [b, h, q, k]) == (
        [b, h], [q], [k], [d])
    assert contraction_groups([[q, q], [q]], [q]) is None  # a diagonal
    assert contraction_groups([[q, d], [d, k]], [q]) is None  # k summed over B alone
