"""Property tests: random shapes, permutations, slices, axes and broadcasts through the
emitted C of Transpose, Slice, Concat, the reductions and a broadcast Add, checked
against each op's NumPy reference (itself checked against ONNX Runtime elsewhere)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from harness import apply_test_epilogue, assert_close, run_variants, make_node

from monolib.compiler.ops import op_of

SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)

dims = st.lists(st.integers(0, 5), min_size=0, max_size=4)
nonzero_dims = st.lists(st.integers(1, 5), min_size=1, max_size=4)


def _check(op_type, inputs, attrs, opset=13, consts=(), rtol=1e-5, atol=1e-5):
    node = make_node(op_type, inputs, attrs, opset, consts)
    op = op_of(node)
    ref = op.reference(node, list(inputs))
    plain, epi = run_variants(node, inputs, (None, "index"))
    assert_close(plain[0], ref[0], rtol, atol, f"{op_type} {attrs}")
    assert_close(epi[0], apply_test_epilogue(ref[0]), rtol, atol * 4, f"{op_type} {attrs} epilogue")


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@SETTINGS
@given(shape=dims, data=st.data())
def test_transpose_random(shape, data):
    perm = data.draw(st.permutations(range(len(shape))))
    _check("Transpose", [_data(shape)], {"perm": list(perm)} if perm else {})


@SETTINGS
@given(shape=nonzero_dims, data=st.data())
def test_slice_random(shape, data):
    rank = len(shape)
    axes = data.draw(
        st.lists(
            st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank
        )
    )
    starts = [data.draw(st.integers(-7, 7)) for _ in axes]
    ends = [data.draw(st.sampled_from([-(2**63), -7, -1, 0, 2, 7, 2**63 - 1])) for _ in axes]
    steps = [data.draw(st.sampled_from([-3, -1, 1, 2])) for _ in axes]
    ins = [_data(shape)] + [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
    _check("Slice", ins, {}, consts=(1, 2, 3, 4))


@SETTINGS
@given(shape=dims, op=st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"]),
       keep=st.integers(0, 1), data=st.data())  # fmt: skip
def test_reduce_random(shape, op, keep, data):
    rank = len(shape)
    if op in ("ReduceMax", "ReduceMean") and 0 in shape:
        shape = [max(d, 1) for d in shape]  # empty max is -inf, empty mean NaN: covered elsewhere
    axes = (
        data.draw(st.lists(st.integers(0, max(rank - 1, 0)), max_size=rank, unique=True))
        if rank
        else []
    )
    attrs = {"keepdims": keep}
    if axes:
        attrs["axes"] = axes
    _check(op, [_data(shape)], attrs, opset=13 if op != "ReduceSum" else 11, atol=1e-4)


@SETTINGS
@given(a=dims, data=st.data())
def test_broadcast_add_random(a, data):
    # b: a suffix of a's dims, some replaced by 1
    k = data.draw(st.integers(0, len(a)))
    b = [d if data.draw(st.booleans()) else 1 for d in a[len(a) - k :]]
    if data.draw(st.booleans()):
        a, b = b, a
    _check("Add", [_data(a, 1), _data(b, 2)], {})


@SETTINGS
@given(shape=nonzero_dims, n=st.integers(1, 3), data=st.data())
def test_concat_random(shape, n, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = []
    for i in range(n):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        parts.append(_data(s, i))
    _check("Concat", parts, {"axis": axis})
