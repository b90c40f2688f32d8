"""monolib.compiler.symbolic: run-time dims as canonical integer expressions.

Property tests (hypothesis): random expressions evaluated at random in-bound points
match Python integer arithmetic, their bounds hold, decided comparisons are true at
every point, and the C rendering computes the same value.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monolib.compiler.symbolic import (
    Dim,
    Symbol,
    SymbolTable,
    dim_max,
    dim_min,
    evaluate,
    size_hint,
)
from monolib.errors import CompileError, ShapeError, UndecidableDimError

B = Symbol("batch", 1, 8)
X = Symbol("x_2", 32, 1280, 32)
H = Symbol("h", 3, 50)
SYMS = (B, X, H)
b, x, h = (Dim.of(s) for s in SYMS)


def test_canonical_simplifications():
    assert str(b) == "batch" and str(x) == "x_2"
    assert (b * 3 * h * x) // (b * 3) == h * x
    assert (x // 2) // 2 == x // 4
    assert str(x // 4) == "(x_2 / 4)"
    assert x % 8 == 0 and isinstance(x % 8, int)  # steps of 32
    assert b - b == 0 and isinstance(b - b, int)
    assert (b + 1) * 2 - 2 == 2 * b
    assert (6 * h + 4) // 2 == 3 * h + 2
    assert (h * 4 + 1) // 4 == h  # 0 <= 1 < 4
    assert x // x == 1 and (b * h) // h == b
    assert dim_min(b, 100) == b and dim_max(b, 0) == b
    assert str(dim_min(b, h)) == "min(batch, h)"
    assert {b: 1}[Dim.of(Symbol("batch", 1, 8))] == 1  # structural hash and ==


def test_bounds_divisibility_hint():
    assert (b.lo, b.hi) == (1, 8) and (x.lo, x.hi) == (32, 1280)
    assert ((x // 4) * b).hi == 320 * 8
    assert x.divides(32) and x.divides(8) and not x.divides(64)
    assert (3 * b * x).divides(96)
    assert (x * b + 2).hint == 1280 * 8 + 2
    assert size_hint(7) == 7 and size_hint(x // 4) == 320
    assert Symbol("w", 30, 100, 32).qlo == 1  # 32 is the first in-bound value


def test_comparisons_decide_or_raise():
    assert b < 9 and b <= 8 and b >= 1 and not (b > 8) and b != 0 and bool(b)
    assert x != 33  # no multiple of 32 is 33
    assert b == b and not (b != b)
    for question in (lambda: b == 1, lambda: b < 4, lambda: b == h, lambda: bool(b - 2)):
        with pytest.raises(UndecidableDimError, match="batch"):
            question()
    with pytest.raises(UndecidableDimError, match=r"batch.*no compile-time value"):
        int(b)
    with pytest.raises(UndecidableDimError):
        range(b)
    with pytest.raises(UndecidableDimError):
        np.zeros((b, 3))
    assert issubclass(UndecidableDimError, CompileError)
    assert (b == "batch") is False  # other types compare unequal, no error


def test_numpy_object_arrays_compute():
    shape = np.array([b, 3, x, x], dtype=object)
    assert np.prod(shape) == 3 * b * x * x
    assert list(shape[[0, 2]] * 2) == [2 * b, 2 * x]
    assert np.concatenate([shape[:1], np.array([-1], dtype=object)])[0] == b


def test_c_expr_and_symbols():
    t = SymbolTable(SYMS)
    assert (x // 4).c_expr(t) == "(S[1] / 4)"
    assert (3 * b * x).c_expr(t, "sym") == "3*sym[0]*sym[1]"
    assert [s.name for s in (b * x + h).symbols()] == ["batch", "h", "x_2"]
    assert t.as_json()[1] == {"name": "x_2", "lo": 32, "hi": 1280, "step": 32}
    with pytest.raises(ShapeError, match="different bounds"):
        t.add(Symbol("batch", 1, 16))


def test_symbol_validation():
    for lo, hi, step in ((0, 8, 1), (9, 8, 1), (1, 8, 0), (33, 40, 32)):
        with pytest.raises(ShapeError):
            Symbol("d", lo, hi, step)
    assert X.contains(64) and not X.contains(65) and not X.contains(1312)


# -- properties -------------------------------------------------------------------------
_leaves = st.one_of(
    st.integers(-20, 40),
    st.sampled_from(SYMS).map(Dim.of),
)


def _combine(children):
    ops = st.sampled_from(["+", "-", "*", "//", "%", "min", "max"])
    return st.tuples(ops, children, children)


_exprs = st.recursive(_leaves, _combine, max_leaves=8)
_points = st.tuples(
    st.integers(B.qlo, B.qhi), st.integers(X.qlo, X.qhi), st.integers(H.qlo, H.qhi)
).map(lambda q: {s.name: v * s.step for s, v in zip(SYMS, q)})


def _build(tree, env):
    """(symbolic value, Python value at env) of an expression tree; None where a
    division would be by a possibly non-positive value."""
    if not isinstance(tree, tuple):
        return tree, evaluate(tree, env)
    op, l, r = tree
    a, va = _build(l, env)
    c, vc = _build(r, env)
    if a is None or c is None:
        return None, None
    if op in ("//", "%"):
        lo = c.lo if isinstance(c, Dim) else c
        if lo < 1:
            return None, None
        f = operator.floordiv if op == "//" else operator.mod
        return f(a, c), f(va, vc)
    if op in ("min", "max"):
        sym = dim_min if op == "min" else dim_max
        return sym(a, c), (min if op == "min" else max)(va, vc)
    f = {"+": operator.add, "-": operator.sub, "*": operator.mul}[op]
    return f(a, c), f(va, vc)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_exprs, _points)
def test_random_expressions_match_python(tree, env):
    d, want = _build(tree, env)
    if d is None:
        return
    assert evaluate(d, env) == want
    if isinstance(d, Dim):
        assert d.lo <= want <= d.hi
        for k in (2, 3, 8, 32):
            if d.divides(k):
                assert want % k == 0
        _check_decided(d, want)
    else:
        assert d == want


@settings(max_examples=300, deadline=None)
@given(_exprs, _points)
def test_display_text_is_a_graph_json_expression(tree, env):
    """The display text parses as a dim expression of the graph JSON (no unary minus) and
    the graph JSON's evaluator (``abi.symbols.evaluate``) gives the same value."""
    from monolib.abi.symbols import check_expression
    from monolib.abi.symbols import evaluate as json_evaluate

    d, want = _build(tree, env)
    if not isinstance(d, Dim):
        return
    text = d.display()
    check_expression(text, {s.name: s for s in SYMS}, "test")
    assert json_evaluate(text, env) == want, text  # both divide with Python's floor


def _check_decided(d: Dim, want: int) -> None:
    """A comparison that answers must be right at this point."""
    for k in (0, 1, 7, 100):
        for op in (operator.eq, operator.lt, operator.le, operator.gt, operator.ge):
            try:
                got = op(d, k)
            except UndecidableDimError:
                continue
            assert got == op(want, k), (str(d), k, op)


def _random_tree(rnd, depth=0):
    if depth > 3 or rnd.random() < 0.3:
        return rnd.choice([rnd.randint(-20, 40), *(Dim.of(s) for s in SYMS)])
    op = rnd.choice(["+", "-", "*", "//", "%", "min", "max"])
    return (op, _random_tree(rnd, depth + 1), _random_tree(rnd, depth + 1))


def test_c_rendering_matches(tmp_path):
    """Dim.c_expr compiled by the C compiler gives Python's value at in-bound points
    (floor division of possibly negative numerators included)."""
    import random
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    rnd = random.Random(12)
    t = SymbolTable(SYMS)
    points = [{"batch": bv, "x_2": xv, "h": hv} for bv, xv, hv in
              ((1, 32, 3), (8, 1280, 50), (3, 640, 17), (5, 96, 4))]
    exprs, wants = [], []
    while len(exprs) < 150:
        tree = _random_tree(rnd)
        d, _ = _build(tree, points[0])
        if isinstance(d, Dim):
            exprs.append(d)
            wants.append([_build(tree, p)[1] for p in points])
    body = "\n".join(f'  printf("%lld\\n", (long long)({d.c_expr(t)}));' for d in exprs)
    src = tmp_path / "dims.c"
    src.write_text(
        "#include <stdio.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
        "int main(int argc, char** argv) {\n  int64_t S[3];\n"
        "  for (int i = 0; i < 3; ++i) S[i] = atoll(argv[i + 1]);\n"
        f"{body}\n  return 0;\n}}\n"
    )
    exe = tmp_path / "dims"
    subprocess.run([cc, "-O0", "-o", str(exe), str(src)], check=True)
    for k, p in enumerate(points):
        args = [str(p[s.name]) for s in SYMS]
        got = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True)
        values = [int(v) for v in got.stdout.split()]
        assert values == [w[k] for w in wants]


def test_structural_helpers_and_c_rendering():
    from monolib.compiler.symbolic import c_rendering, is_one, same, same_shape

    assert same(b * 2, b + b) and not same(b, h) and same(3, 3) and not same(b, 3)
    assert same_shape((b, 3), (b, 3)) and not same_shape((b, 3), (h, 3))
    assert is_one(1) and not is_one(b) and not is_one(2)
    t = SymbolTable(SYMS)
    with c_rendering(t):
        assert f"{b} {x // 4} {3 * b} {b + 1}" == "S[0] (S[1] / 4) (3*S[0]) (S[0] + 1)"
        assert str(b * h) == "(S[0]*S[2])"  # str() writes C too while rendering
        assert (b * h).display() == "batch*h"
    assert str(b * h) == "batch*h" and f"{x // 4}" == "(x_2 / 4)"
