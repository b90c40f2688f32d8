"""The random ops (RandomUniform/Normal and their Like forms, Bernoulli, Multinomial)
and training-mode Dropout, compiled whole (C in the library, the generator state in
the arena): a seeded op draws exactly NumPy's ``RandomState(seed)`` values (the
reference), in every run, library and process; an unseeded one draws new values each
run and per executor; distributions checked on 1e5 samples."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.ops import op_of
from monolib.compiler.ir import Node, Value

N = 100_000


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "rnd", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10)


def _gm(model, **kw):
    factory = monolib.compile(model, **kw)
    return monolib.GraphModule(factory["default"](monolib.cpu()))


def _run(gm, **inputs):
    gm.run(**inputs)
    return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]


def _gen(op, shape, dtype=TensorProto.FLOAT, **attrs):
    node = helper.make_node(op, [], ["y"], shape=list(shape), dtype=dtype, **attrs)
    return _model([node], [], [helper.make_tensor_value_info("y", dtype, list(shape))])


def _reference(op_type, attrs, inputs=(), opset=17):
    """The op class's NumPy reference (NumPy's RandomState) on a throwaway Node."""
    ins = [Value(f"x{i}", a.shape, a.dtype, a) for i, a in enumerate(inputs)]
    node = Node(op_type, "n", ins, [Value("y", (), np.dtype(np.float32))], dict(attrs), "", opset)
    return op_of(node).reference(node, list(inputs))[0]


@pytest.mark.parametrize("op,dtype,attrs", [
    ("RandomNormal", TensorProto.FLOAT, {"mean": 1.5, "scale": 0.25}),
    ("RandomNormal", TensorProto.DOUBLE, {"mean": -2.0, "scale": 3.0}),
    ("RandomUniform", TensorProto.FLOAT, {"low": -1.0, "high": 3.0}),
    ("RandomUniform", TensorProto.DOUBLE, {"low": 0.5, "high": 0.75}),
])
def test_seeded_generators_draw_numpys_values_every_run(op, dtype, attrs):
    gm = _gm(_gen(op, (3, 7), dtype, seed=5.0, **attrs))
    (y1,), (y2,) = _run(gm), _run(gm)
    full = {"mean": 0.0, "scale": 1.0, "low": 0.0, "high": 1.0, **attrs, "seed": 5.0,
            "shape": [3, 7], "dtype": dtype}
    want = _reference(op, full)
    assert y1.dtype == want.dtype == onnx.helper.tensor_dtype_to_np_dtype(dtype)
    np.testing.assert_array_equal(y1, want)  # bit for bit
    np.testing.assert_array_equal(y2, want)  # re-seeded each run
    state = np.random.RandomState(5)
    raw = state.standard_normal((3, 7)) if op == "RandomNormal" else state.random_sample((3, 7))
    assert np.corrcoef(raw.ravel(), y1.ravel().astype(np.float64))[0, 1] > 0.999


def test_seeded_values_are_the_same_in_another_library_and_process(tmp_path):
    model = _gen("RandomNormal", (4, 5), seed=11.0)
    path = tmp_path / "rnd.so"
    monolib.compile(model).export_library(str(path))
    here = _run(_gm(model))[0]
    code = ("import sys, numpy as np, monolib\n"
            "m = monolib.GraphModule(monolib.load_module(sys.argv[1])['default'](monolib.cpu()))\n"
            "m.run(); sys.stdout.write(m.get_output(0).numpy().tobytes().hex())\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True).stdout
    there = np.frombuffer(bytes.fromhex(out), np.float32).reshape(4, 5)
    np.testing.assert_array_equal(here, there)
    np.testing.assert_array_equal(here, np.random.RandomState(11).standard_normal((4, 5))
                                  .astype(np.float32))


def test_unseeded_runs_and_executors_differ():
    factory = monolib.compile(_gen("RandomUniform", (64,)))
    a = monolib.GraphModule(factory["default"](monolib.cpu()))
    b = monolib.GraphModule(factory["default"](monolib.cpu()))
    a1, a2, b1 = _run(a)[0], _run(a)[0], _run(b)[0]
    assert not np.array_equal(a1, a2)  # the state draws on from run to run
    assert not np.array_equal(a1, b1)  # each executor seeds its own state
    for y in (a1, a2, b1):
        assert ((y >= 0) & (y < 1)).all()


def test_normal_and_uniform_moments():
    (g,) = _run(_gm(_gen("RandomNormal", (N,), TensorProto.DOUBLE, mean=2.0, scale=0.5)))
    # mean within 5 standard errors, variance within 5 of its standard errors
    assert abs(g.mean() - 2.0) < 5 * 0.5 / np.sqrt(N)
    assert abs(g.var() - 0.25) < 5 * 0.25 * np.sqrt(2 / N)
    assert abs(((g - 2.0) ** 3).mean()) < 5 * 0.125 * np.sqrt(15 / N)  # symmetric
    (u,) = _run(_gm(_gen("RandomUniform", (N,), low=-2.0, high=4.0)))
    assert u.min() >= -2 and u.max() < 4
    assert abs(u.mean() - 1.0) < 5 * np.sqrt(3.0 / N)
    assert abs(u.var() - 3.0) < 5 * np.sqrt((36.0 ** 2 / 80 - 9) / N)
    assert np.histogram(u, 10, (-2, 4))[0].min() > N / 10 - 5 * np.sqrt(N * 0.09)


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike"])
def test_like_forms_take_the_input_shape_and_dtype_attr(op):
    x = np.zeros((2, 3, 4), np.float32)
    node = helper.make_node(op, ["x"], ["y"], dtype=TensorProto.DOUBLE, seed=3.0)
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 3, 4])])
    (y,) = _run(_gm(model), x=x)
    assert y.shape == (2, 3, 4) and y.dtype == np.float64
    attrs = {"dtype": TensorProto.DOUBLE, "seed": 3.0, "mean": 0.0, "scale": 1.0,
             "low": 0.0, "high": 1.0}
    np.testing.assert_array_equal(y, _reference(op, attrs, [x]))


def _bernoulli(dtype=None, seed=None, in_type=TensorProto.FLOAT, n=10):
    attrs = {k: v for k, v in (("dtype", dtype), ("seed", seed)) if v is not None}
    node = helper.make_node("Bernoulli", ["p"], ["y"], **attrs)
    return _model([node], [helper.make_tensor_value_info("p", in_type, [n])],
                  [helper.make_tensor_value_info("y", dtype or in_type, [n])], opset=15)


def test_bernoulli_seeded_is_numpys_binomial():
    p = np.random.default_rng(0).uniform(0, 1, 200).astype(np.float32)
    p[:4] = [0.0, 1.0, 0.5, 0.25]
    gm = _gm(_bernoulli(TensorProto.INT32, seed=7.0, n=200))
    (y,) = _run(gm, p=p)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.random.RandomState(7).binomial(1, p.astype(np.float64)))
    assert y[0] == 0 and y[1] == 1
    np.testing.assert_array_equal(_run(gm, p=p)[0], y)


def test_bernoulli_frequencies_and_dtypes():
    p = np.tile(np.array([0.1, 0.5, 0.9, 0.3], np.float64), N // 4)
    (y,) = _run(_gm(_bernoulli(in_type=TensorProto.DOUBLE, n=N)), p=p)
    assert y.dtype == np.float64 and set(np.unique(y)) <= {0.0, 1.0}
    for k, q in enumerate([0.1, 0.5, 0.9, 0.3]):
        assert abs(y[k::4].mean() - q) < 5 * np.sqrt(q * (1 - q) / (N // 4))
    (b,) = _run(_gm(_bernoulli(TensorProto.BOOL, n=8)), p=np.full(8, 1.0, np.float32))
    assert b.dtype == np.bool_ and b.all()


def _multinomial(batch, classes, samples, dtype=TensorProto.INT32, seed=None):
    attrs = {"sample_size": samples, "dtype": dtype, **({"seed": seed} if seed is not None else {})}
    node = helper.make_node("Multinomial", ["x"], ["y"], **attrs)
    return _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, classes])],
                  [helper.make_tensor_value_info("y", dtype, [batch, samples])])


def test_multinomial_frequencies_follow_softmax():
    logits = np.array([[0.0, 1.0, 2.0, -1.0, -np.inf], [3.0, 3.0, 0.0, 0.0, 0.0]], np.float32)
    (y,) = _run(_gm(_multinomial(2, 5, N // 2, TensorProto.INT64)), x=logits)
    assert y.shape == (2, N // 2) and y.dtype == np.int64
    for b in range(2):
        z = np.exp(logits[b].astype(np.float64) - logits[b].max())
        prob = z / z.sum()
        freq = np.bincount(y[b], minlength=5) / (N // 2)
        assert np.all(np.abs(freq - prob) < 5 * np.sqrt(prob * (1 - prob) / (N // 2)) + 1e-12)
    assert not (y[0] == 4).any()  # probability 0 is never drawn


def test_multinomial_seeded_matches_reference():
    logits = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    gm = _gm(_multinomial(3, 6, 50, seed=9.0))
    (y,) = _run(gm, x=logits)
    want = _reference("Multinomial", {"sample_size": 50, "dtype": TensorProto.INT32,
                                      "seed": 9.0}, [logits])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(_run(gm, x=logits)[0], y)


def _dropout(seed=None, mask=True, shape=(4, 50)):
    attrs = {"seed": seed} if seed is not None else {}
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"] if mask else ["y"], **attrs)
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    if mask:
        outs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, list(shape)))
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape)),
           helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
           helper.make_tensor_value_info("t", TensorProto.BOOL, [])]
    return _model([node], ins, outs, opset=13)


def test_training_dropout_with_run_time_mode_and_ratio():
    x = np.random.default_rng(2).standard_normal((4, 50)).astype(np.float32)
    gm = _gm(_dropout(seed=4))
    for r in (0.25, 0.75):
        y, m = _run(gm, x=x, r=np.array(r, np.float32), t=np.array(True))
        keep = np.random.RandomState(4).random_sample(x.shape) >= r
        np.testing.assert_array_equal(m, keep)
        np.testing.assert_array_equal(y, keep * x * (1 / (1 - np.float32(r))))
    y, m = _run(gm, x=x, r=np.array(0.5, np.float32), t=np.array(False))
    np.testing.assert_array_equal(y, x)
    assert m.dtype == np.bool_ and m.all()


def test_training_dropout_constant_mode_unseeded_keeps_the_ratio():
    x = np.ones((4, 25_000), np.float32)
    model = _dropout(mask=False, shape=(4, 25_000))
    gm = _gm(model, constants={"t": np.array(True)})
    (y1,) = _run(gm, x=x, r=np.array(0.3, np.float32))
    (y2,) = _run(gm, x=x, r=np.array(0.3, np.float32))
    assert not np.array_equal(y1, y2)
    kept = (y1 != 0).mean()
    assert abs(kept - 0.7) < 5 * np.sqrt(0.21 / N)
    np.testing.assert_allclose(y1[y1 != 0], np.float32(1 / np.float32(0.7)))


def test_bad_seed_and_dtype_are_refused_naming_the_node():
    with pytest.raises(monolib.errors.CompileError, match="RandomNormal_0.*seed"):
        monolib.compile(_gen("RandomNormal", (2,), seed=-1.0))
    with pytest.raises(monolib.errors.UnsupportedOpError, match="int32"):
        monolib.compile(_gen("RandomUniform", (2,), TensorProto.INT32))


@pytest.mark.parametrize("opt", [False, True])
def test_run_time_dims_and_a_specialization(opt):
    """Like forms, Bernoulli and Dropout over a run-time batch (and through an
    ``opt_shapes`` specialization, whose plan moves the generator states)."""
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["n"], seed=2.0),
             helper.make_node("Bernoulli", ["p"], ["b"], seed=3.0),
             helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=4)]
    f32 = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("x", f32, ["n", 3]),
           helper.make_tensor_value_info("p", f32, ["n", 3]),
           helper.make_tensor_value_info("r", f32, []),
           helper.make_tensor_value_info("t", TensorProto.BOOL, [])]
    outs = [helper.make_tensor_value_info(k, TensorProto.BOOL if k == "m" else f32, ["n", 3])
            for k in "nbym"]
    model = _model(nodes, ins, outs)
    kw = {"opt_shapes": {"x": [(4, 3)], "p": [(4, 3)]}} if opt else {}
    gm = _gm(model, dims={"n": (1, 8)}, **kw)
    for n in (2, 4, 7):
        x, p = np.ones((n, 3), np.float32), np.full((n, 3), 0.5, np.float32)
        g, b, y, m = _run(gm, x=x, p=p, r=np.array(0.5, np.float32), t=np.array(True))
        assert g.shape == b.shape == y.shape == m.shape == (n, 3)
        np.testing.assert_array_equal(
            g, np.random.RandomState(2).standard_normal((n, 3)).astype(np.float32))
        np.testing.assert_array_equal(b, np.random.RandomState(3).binomial(1, p.astype(float)))
        keep = np.random.RandomState(4).random_sample((n, 3)) >= 0.5
        np.testing.assert_array_equal(m, keep)
        np.testing.assert_array_equal(y, keep * np.float32(2))


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_half_types_round_each_step_as_numpy(op, dtype):
    attrs = {"mean": 0.3, "scale": 1.7} if op == "RandomNormal" else {"low": -0.7, "high": 2.1}
    (y,) = _run(_gm(_gen(op, (2000,), dtype, seed=6.0, **attrs)))
    full = {"mean": 0.0, "scale": 1.0, "low": 0.0, "high": 1.0, **attrs, "seed": 6.0,
            "shape": [2000], "dtype": dtype}
    want = _reference(op, full)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


def test_generator_state_region_is_never_shared():
    """The plan gives each random op's state a region no value and no scratch block
    touches (it must survive from run to run)."""
    from monolib.compiler.ir import nbytes_at_bounds
    from monolib.compiler.ops.math.random import STATE_BYTES
    from monolib.compiler.passes.plan_memory import plan_memory
    from monolib.compiler.pipeline import prepare

    nodes = [helper.make_node("RandomNormal", [], ["a"], shape=[64, 64], name="gen"),
             helper.make_node("MatMul", ["a", "a"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("MatMul", ["c", "a"], ["d"]),
             helper.make_node("Bernoulli", ["x"], ["e"], name="coin"),
             helper.make_node("Add", ["d", "e"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], opset=15)
    graph, fusion, _ = prepare(model)
    plan = plan_memory(fusion, {t: 8192 for t in range(len(fusion.ops))})
    assert set(plan.state) == {"gen", "coin"}
    regions = [(plan.offsets[v.uid], nbytes_at_bounds(v)) for f in fusion.ops
               for v in f.reads() + f.writes() if v.uid in plan.offsets]
    regions += [(o, plan.scratch_sizes[t]) for t, o in plan.scratch.items()]
    regions += [(o, STATE_BYTES) for o in plan.state.values()]
    for name, off in plan.state.items():
        for o, n in regions:
            if (o, n) != (off, STATE_BYTES):
                assert o + n <= off or off + STATE_BYTES <= o, (name, off, o, n)
    assert max(plan.state.values()) + STATE_BYTES <= plan.arena_bytes
