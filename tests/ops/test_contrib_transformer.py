"""``com.microsoft`` transformer contrib ops against ONNX Runtime's own kernels.

Each case builds a one-node model with ``onnx.helper`` (opset import ``com.microsoft``
v1), runs ONNX Runtime (its CPU contrib kernels) and monolib's compiled library on the
same random float32 data, and compares. The ops: Gelu, FastGelu, BiasGelu, QuickGelu,
SkipLayerNormalization, SkipSimplifiedLayerNormalization, EmbedLayerNormalization,
FusedMatMul, RotaryEmbedding; then a small BERT-like graph fused by ONNX Runtime's
transformer optimizer, and the one refusal for another ``com.microsoft`` op.
"""

from __future__ import annotations

import numpy as np
import pytest
from harness import add_inputs
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.testing import ort_run, run_model

MS = "com.microsoft"
RNG = np.random.default_rng(13)


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _ms_model(op, inputs, attrs=None, n_outputs=1, consts=(), extra_nodes=()):
    """A model of one ``com.microsoft`` node ``op``: ``inputs`` is a list of arrays
    (``None``: omitted optional input); input ``i`` is graph input ``in{i}``, or an
    initializer when ``i`` is in ``consts``. Outputs ``out0..``, ``""`` for a skipped
    output given as ``None`` in ``n_outputs`` (a list of bools)."""
    outs_used = n_outputs if isinstance(n_outputs, list) else [True] * n_outputs
    g_in, inits, feeds = [], [], {}
    names = add_inputs({f"in{i}": x for i, x in enumerate(inputs)}, {f"in{i}" for i in consts},
                       g_in, inits, feeds)
    out_names = [f"out{i}" if u else "" for i, u in enumerate(outs_used)]
    node = helper.make_node(op, names, out_names, domain=MS, **(attrs or {}))
    g_out = [helper.make_empty_tensor_value_info(n) for n in out_names if n]
    graph = helper.make_graph([node, *extra_nodes], "g", g_in, g_out, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10
    )
    return model, feeds


def _check(model, feeds, rtol=1e-5, atol=1e-5):
    want = ort_run(model, feeds, optimize=False)
    for vi, w in zip(model.graph.output, want):  # the ONNX checker wants typed outputs
        vi.CopyFrom(helper.make_tensor_value_info(
            vi.name, helper.np_dtype_to_tensor_dtype(w.dtype), w.shape))
    got = run_model(model, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {i}: shape {g.shape} != ORT {w.shape}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != ORT {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return got


# -- the GELU family ---------------------------------------------------------------------


def test_gelu_erf():
    _check(*_ms_model("Gelu", [_f32(2, 3, 8, scale=2)]))


@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu(with_bias):
    x = _f32(2, 5, 16, scale=2)
    inputs = [x, _f32(16)] if with_bias else [x]
    _check(*_ms_model("FastGelu", inputs, consts=(1,)), rtol=1e-4, atol=1e-5)


def test_bias_gelu():
    _check(*_ms_model("BiasGelu", [_f32(3, 4, 12, scale=2), _f32(12)]))


@pytest.mark.parametrize("alpha", [None, 1.25])
def test_quick_gelu(alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    _check(*_ms_model("QuickGelu", [_f32(4, 10, scale=3)], attrs))


def test_bias_gelu_fuses_after_matmul():
    """BiasGelu after a MatMul is fused into the GEMM's epilogue (one op) and still
    matches ORT."""
    w = numpy_helper.from_array(_f32(8, 12), "w")
    mm = helper.make_node("MatMul", ["x", "w"], ["h"])
    bg = helper.make_node("BiasGelu", ["h", "b"], ["y"], domain=MS)
    graph = helper.make_graph(
        [mm, bg], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, numpy_helper.from_array(_f32(12), "b")])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)
    _check(model, {"x": _f32(2, 3, 8)}, rtol=1e-4, atol=1e-5)
    from monolib.compiler.build import lower

    _, graph_json, _ = lower(model)
    assert [n["op"] for n in graph_json["nodes"]] == ["MatMul"], graph_json["nodes"]


# -- SkipLayerNormalization, SkipSimplifiedLayerNormalization ----------------------------


@pytest.mark.parametrize(
    "skip_shape,beta,bias,outs",
    [
        ((2, 3, 16), True, True, 4),
        ((3, 16), True, False, [True, False, False, True]),
        ((1, 3, 16), False, True, 1),
        ((2, 3, 16), True, True, [True, True, True]),
    ],
)
def test_skip_layer_norm(skip_shape, beta, bias, outs):
    inputs = [_f32(2, 3, 16, scale=2), _f32(*skip_shape), _f32(16), _f32(16) if beta else None,
              _f32(16) if bias else None]
    while inputs[-1] is None:
        inputs.pop()
    _check(*_ms_model("SkipLayerNormalization", inputs, {"epsilon": 1e-5}, outs, consts=(2, 3, 4)),
           rtol=1e-4, atol=1e-5)


def test_skip_layer_norm_2d_default_epsilon():
    inputs = [_f32(5, 24), _f32(5, 24), _f32(24), _f32(24)]
    _check(*_ms_model("SkipLayerNormalization", inputs, None, 1, consts=(2, 3)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias,outs", [(True, 4), (False, 1)])
def test_skip_simplified_layer_norm(bias, outs):
    inputs = [_f32(2, 4, 16), _f32(2, 4, 16), _f32(16)] + ([_f32(16)] if bias else [])
    _check(*_ms_model("SkipSimplifiedLayerNormalization", inputs, {"epsilon": 1e-6}, outs, consts=(2, 3)),
           rtol=1e-4, atol=1e-5)


# -- EmbedLayerNormalization -------------------------------------------------------------


@pytest.mark.parametrize(
    "segments,mask,pos_ids,outs",
    [
        (True, True, None, 3),
        (False, True, "batch", 2),
        (True, False, "row", 3),
        (True, True, "full", [True, False, True]),
        (False, False, None, 2),
    ],
)
def test_embed_layer_norm(segments, mask, pos_ids, outs):
    b, s, h, vocab, npos, nseg = 2, 5, 16, 11, 7, 2
    i32 = np.int32
    ids = RNG.integers(0, vocab, (b, s)).astype(i32)
    inputs = [
        ids,
        RNG.integers(0, nseg, (b, s)).astype(i32) if segments else None,
        _f32(vocab, h), _f32(npos, h), _f32(nseg, h) if segments else None,
        _f32(h), _f32(h),
        np.array([[1, 2, 0, 1, 0], [1, 0, 1, 1, 1]], i32) if mask else None,  # counts the 1s
    ]
    if pos_ids == "row":
        inputs.append(RNG.integers(0, npos, (1, s)).astype(i32))
    elif pos_ids in ("batch", "full"):
        inputs.append(RNG.integers(0, npos, (b, s)).astype(i32))
    while inputs[-1] is None:
        inputs.pop()
    _check(*_ms_model("EmbedLayerNormalization", inputs, {"epsilon": 1e-5}, outs, consts=(2, 3, 4, 5, 6)),
           rtol=1e-4, atol=1e-5)


# -- FusedMatMul -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sa,sb,attrs,consts",
    [
        ((2, 3, 8), (8, 5), {"alpha": 0.125}, (1,)),  # batches of A folded into M
        ((2, 3, 4, 8), (2, 3, 5, 8), {"transB": 1, "alpha": 0.35}, ()),  # Q @ K^T
        ((2, 8, 4), (8, 6), {"transA": 1}, ()),
        ((2, 8, 4), (8, 6), {"transA": 1, "transB": 0}, (0, 1)),
        ((2, 3, 4, 5), (3, 4, 5, 6), {"transBatchA": 1}, ()),
        ((2, 5, 3), (5, 2, 4), {"transBatchA": 1, "transA": 1, "alpha": 2.0}, ()),
        ((2, 3, 5), (5, 2, 6), {"transBatchB": 1}, (1,)),
        ((2, 3, 5), (6, 2, 5), {"transBatchB": 1, "transB": 1}, ()),
        ((4, 7), (7,), {"alpha": -1.5}, ()),
        ((7,), (2, 7, 3), {}, ()),
    ],
)
def test_fused_matmul(sa, sb, attrs, consts):
    _check(*_ms_model("FusedMatMul", [_f32(*sa), _f32(*sb)], attrs, consts=consts), rtol=1e-4, atol=1e-4)


# -- RotaryEmbedding (com.microsoft) -----------------------------------------------------


@pytest.mark.parametrize(
    "layout,interleaved,ids,rdim",
    [
        ("bsh", 0, "full", 0),
        ("bsh", 1, "offset", 0),
        ("bnsd", 0, "offset", 0),
        ("bnsd", 1, "full", 0),
        ("bsh", 0, "full", 4),  # partial rotation: features from 4 on are copied
        ("bsh", 1, "offset", 4),
    ],
)
def test_rotary_embedding(layout, interleaved, ids, rdim):
    b, s, n, d, npos = 2, 3, 2, 8, 12
    r = rdim or d
    x = _f32(b, s, n * d) if layout == "bsh" else _f32(b, n, s, d)
    pos = RNG.integers(0, npos, (b, s)) if ids == "full" else np.array([4])
    angles = np.arange(npos)[:, None] * (1e-2 ** (np.arange(r // 2) / (r // 2)))[None, :]
    attrs = {"interleaved": interleaved}
    if rdim:
        attrs.update(rotary_embedding_dim=rdim, num_heads=n)
    inputs = [x, pos.astype(np.int64), np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]
    _check(*_ms_model("RotaryEmbedding", inputs, attrs, consts=(2, 3)), rtol=1e-5, atol=1e-5)


# -- a BERT-like layer fused by ONNX Runtime's transformer optimizer ---------------------


def _bert_like(b=2, s=8, hid=32, heads=2, vocab=50, ffn=64, seed=3):
    """Embeddings (word + segment + position, LayerNormalization) and one encoder layer
    (unfused multi-head self-attention, residual + LayerNormalization, an erf-GELU FFN,
    residual + LayerNormalization), as BERT exports look before ORT fuses them."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def w(*shape, sc=0.2):
        return (rng.standard_normal(shape) * sc).astype(np.float32)

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], name=out + "_n", **kw))
        return out

    dh = hid // heads
    init("word", w(vocab, hid)), init("posemb", w(16, hid)), init("segemb", w(2, hid))
    init("one_i", np.array(1, np.int64)), init("ax0", np.array([0], np.int64))
    init("ax1", np.array([1], np.int64)), init("pos_buffer", np.arange(16, dtype=np.int64)[None])
    # position ids as BERT exports slice them: Shape -> Gather(1) -> Unsqueeze -> Slice
    node("Shape", ["input_ids"], "ids_shape")
    node("Gather", ["ids_shape", "one_i"], "seq_len", axis=0)
    node("Unsqueeze", ["seq_len", "ax0"], "seq_end")
    node("Slice", ["pos_buffer", "ax0", "seq_end", "ax1", "ax1"], "pos_ids")
    node("Gather", ["word", "input_ids"], "we", axis=0)
    node("Gather", ["segemb", "token_type_ids"], "se", axis=0)
    node("Gather", ["posemb", "pos_ids"], "pe", axis=0)
    node("Add", ["we", "se"], "e1")
    node("Add", ["e1", "pe"], "e2")

    def layer_norm(x, out):
        init(out + "_g", 1 + w(hid, sc=0.1)), init(out + "_b", w(hid, sc=0.1))
        return node("LayerNormalization", [x, out + "_g", out + "_b"], out, axis=-1, epsilon=1e-12)

    def dense(x, n_in, n_out, out):
        init(out + "_w", w(n_in, n_out)), init(out + "_bias", w(n_out, sc=0.1))
        return node("Add", [node("MatMul", [x, out + "_w"], out + "_mm"), out + "_bias"], out)

    emb = layer_norm("e2", "emb")
    init("split_shape", np.array([b, s, heads, dh], np.int64))
    init("merge_shape", np.array([b, s, hid], np.int64))
    qkv = {}
    for t in "qkv":
        r = node("Reshape", [dense(emb, hid, hid, t), "split_shape"], t + "_r")
        qkv[t] = node("Transpose", [r], t + "_t", perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])
    init("scale", np.array(np.sqrt(dh), np.float32))
    scores = node("Div", [node("MatMul", [qkv["q"], qkv["k"]], "qk"), "scale"], "qk_scaled")
    probs = node("Softmax", [scores], "probs", axis=-1)
    ctx = node("Transpose", [node("MatMul", [probs, qkv["v"]], "pv")], "ctx_t", perm=[0, 2, 1, 3])
    ctx = node("Reshape", [ctx, "merge_shape"], "ctx")
    attn = layer_norm(node("Add", [dense(ctx, hid, hid, "attn_out"), emb], "res1"), "ln1")
    init("sqrt2", np.array(np.sqrt(2), np.float32)), init("onef", np.array(1, np.float32))
    init("half", np.array(0.5, np.float32))
    h1 = dense(attn, hid, ffn, "ffn1")
    g = node("Add", [node("Erf", [node("Div", [h1, "sqrt2"], "g1")], "g2"), "onef"], "g3")
    g = node("Mul", [node("Mul", [h1, g], "g4"), "half"], "gelu")
    layer_norm(node("Add", [dense(g, ffn, hid, "ffn2"), attn], "res2"), "out")
    graph = helper.make_graph(
        nodes, "bert_like",
        [helper.make_tensor_value_info(n, TensorProto.INT64, [b, s]) for n in ("input_ids", "token_type_ids")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [b, s, hid])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("gelu_approximation", [False, True])
def test_bert_like_optimized_by_ort(gelu_approximation, tmp_path):
    """ORT's transformer optimizer (model_type="bert", attention fusion off) turns the
    layer into EmbedLayerNormalization, SkipLayerNormalization and BiasGelu (FastGelu
    with gelu_approximation); ORT's own extended graph optimizations then make the
    scaled Q @ K^T a FusedMatMul. That model compiles and matches ORT."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    model = _bert_like()
    opts = FusionOptions("bert")
    opts.enable_attention = False  # Attention is another op's test
    opts.enable_gelu_approximation = gelu_approximation
    optimizer = optimize_model(model, model_type="bert", num_heads=2, hidden_size=32,
                               optimization_options=opts, opt_level=0)
    optimizer.save_model_to_file(str(tmp_path / "fused.onnx"))  # adds the com.microsoft import
    fused = onnx.load(str(tmp_path / "fused.onnx"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "extended.onnx")
    ort.InferenceSession(fused.SerializeToString(), so, providers=["CPUExecutionProvider"],
                         disabled_optimizers=["AttentionFusion"])
    extended = onnx.load(so.optimized_model_filepath)
    ops = {n.op_type for n in extended.graph.node if n.domain == MS}
    gelu = "FastGelu" if gelu_approximation else "BiasGelu"
    assert {"EmbedLayerNormalization", "SkipLayerNormalization", gelu, "FusedMatMul"} <= ops, ops
    feeds = {"input_ids": RNG.integers(0, 50, (2, 8)).astype(np.int64),
             "token_type_ids": RNG.integers(0, 2, (2, 8)).astype(np.int64)}
    want = ort_run(fused, feeds, optimize=False)[0]
    if not gelu_approximation:  # the fusions are exact: the unfused model agrees
        np.testing.assert_allclose(want, ort_run(model, feeds, optimize=False)[0], rtol=1e-4, atol=1e-4)
    # the extended model holds every op of the fused one, and FusedMatMul
    np.testing.assert_allclose(run_model(extended, feeds)[0], want, rtol=1e-4, atol=1e-4)


def test_other_contrib_ops_get_one_refusal():
    """A model with com.microsoft ops monolib lacks gets ONE error naming each of them
    (domain, opset, nodes), not the supported FastGelu beside them."""
    from monolib import compile as ml_compile
    from monolib.errors import UnsupportedOpError

    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("FastGelu", ["x"], ["a"], name="gelu", domain=MS),
        helper.make_node("CDist", ["a", "a"], ["d"], name="dist", domain=MS),
        helper.make_node("WordConvEmbedding", ["ids", "w", "b", "c"], ["e"], name="wce", domain=MS),
        helper.make_node("CDist", ["d", "d"], ["y"], name="dist2", domain=MS),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [vi("x", TensorProto.FLOAT, [4, 3]), vi("ids", TensorProto.INT32, [2, 3, 5])],
        [vi("y", TensorProto.FLOAT, [4, 4]), vi("e", TensorProto.FLOAT, [2, 3, 8])],
        [numpy_helper.from_array(_f32(*s), n) for n, s in (("w", (8, 1, 2, 4)), ("b", (8,)), ("c", (10, 4)))])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)
    with pytest.raises(UnsupportedOpError) as err:
        ml_compile(model)
    msg = str(err.value)
    assert msg.startswith("2 unsupported operator(s)"), msg
    assert "com.microsoft::CDist (opset 1): node(s) 'dist', 'dist2'" in msg, msg
    assert "com.microsoft::WordConvEmbedding (opset 1): node(s) 'wce'" in msg, msg
    assert "FastGelu" not in msg, msg


def _run_time_case(op):
    """(inputs, attrs, consts, bounds, feeds per run, output types) of a one-node model
    whose batch and sequence dims are run-time dims."""
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    runs = ((1, 3), (4, 8))
    if op == "SkipLayerNormalization":
        return ([_f32(2, 3, 16), _f32(2, 3, 16), _f32(16), _f32(16), _f32(16)], {"epsilon": 1e-5}, (2, 3, 4),
                {"in0": ((1, 4), (1, 8), 16), "in1": ((1, 4), (1, 8), 16)},
                [{"in0": _f32(b, s, 16), "in1": _f32(b, s, 16)} for b, s in runs],
                [(f, ["b", "s", 16]), (f, ["b", "s", 1]), (f, ["b", "s", 1]), (f, ["b", "s", 16])])
    if op == "EmbedLayerNormalization":
        ids = [RNG.integers(0, 10, (b, s)).astype(np.int32) for b, s in runs]
        return ([ids[0], None, _f32(10, 16), _f32(8, 16), None, _f32(16), _f32(16), (ids[0] > 4).astype(np.int32)],
                {}, (2, 3, 5, 6), {"in0": ((1, 4), (1, 8)), "in7": ((1, 4), (1, 8))},
                [{"in0": x, "in7": (x > 4).astype(np.int32)} for x in ids], [(f, ["b", "s", 16]), (i32, ["b"])])
    return ([_f32(2, 3, 16), _f32(16, 5)], {"alpha": 0.5}, (1,), {"in0": ((1, 4), (1, 8), 16)},
            [{"in0": _f32(b, s, 16)} for b, s in runs], [(f, ["b", "s", 5])])


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "EmbedLayerNormalization", "FusedMatMul"])
def test_run_time_batch_and_sequence(op):
    """One library serves every batch and sequence length in the bounds (issue 12's
    run-time dims through these ops), each run matching ORT."""
    import monolib

    inputs, attrs, consts, bounds, runs, out_types = _run_time_case(op)
    model, _ = _ms_model(op, inputs, attrs, len(out_types), consts=consts)
    for vi in model.graph.input:
        for name, d in zip("bs", vi.type.tensor_type.shape.dim):
            d.dim_param = name
    for vi, (t, shape) in zip(model.graph.output, out_types):
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, t, shape))
    gm = monolib.GraphModule(monolib.compile(model, shapes=bounds)["default"](monolib.cpu()))
    for feeds in runs:
        gm.run(**feeds)
        for i, want in enumerate(ort_run(model, feeds, optimize=False)):
            got = gm.get_output(i).numpy()
            assert got.shape == want.shape, (i, got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "FusedMatMul", "EmbedLayerNormalization"])
def test_elementwise_tail_fuses_into_the_op(op):
    """An elementwise tail (Mul by a per-column vector, then Relu) runs as the op's
    epilogue: one fused op in the library, results still ORT's."""
    if op == "SkipLayerNormalization":
        inputs, consts, n = [_f32(2, 3, 16), _f32(3, 16), _f32(16), _f32(16)], (2, 3), 16
    elif op == "FusedMatMul":  # the per-batch GEMM path (transB, both operands batched)
        inputs, consts, n = [_f32(2, 3, 4, 8), _f32(2, 3, 16, 8)], (), 16
    else:
        ids = RNG.integers(0, 10, (2, 5)).astype(np.int32)
        inputs, consts, n = [ids, None, _f32(10, 16), _f32(6, 16), None, _f32(16), _f32(16)], (2, 3, 5, 6), 16
    attrs = {"transB": 1, "alpha": 0.5} if op == "FusedMatMul" else {}
    tail = [helper.make_node("Mul", ["out0", "scale"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model, feeds = _ms_model(op, inputs, attrs, 2 if op.startswith("Embed") else 1, consts=consts,
                             extra_nodes=tail)
    model.graph.initializer.append(numpy_helper.from_array(_f32(n), "scale"))
    keep = [vi for vi in model.graph.output if vi.name != "out0"]  # y (and mask_index)
    del model.graph.output[:]
    model.graph.output.extend([helper.make_empty_tensor_value_info("y"), *keep])
    _check(model, feeds, rtol=1e-4, atol=1e-5)
    from monolib.compiler.build import lower

    _, graph_json, _ = lower(model)
    assert [nd["op"] for nd in graph_json["nodes"]] == [op], graph_json["nodes"]
    assert graph_json["nodes"][0]["fused"] == ["Mul", "Relu"], graph_json["nodes"][0]


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "BiasGelu", "FusedMatMul", "EmbedLayerNormalization",
                                "RotaryEmbedding"])
def test_float16_model(op):
    """A float16 model (what ORT's optimizer writes with float16=True) computes in
    float32 between Casts (frontend/storage.py widens com.microsoft ops as ONNX's) and
    matches ORT's float16 kernels to float16 precision."""
    def h16(*shape):
        return _f32(*shape).astype(np.float16)

    cases = {
        "SkipLayerNormalization": ([h16(2, 3, 16), h16(2, 3, 16), h16(16), h16(16)], (2, 3), 1),
        "BiasGelu": ([h16(2, 3, 16), h16(16)], (1,), 1),
        "FusedMatMul": ([h16(2, 3, 16), h16(16, 4)], (1,), 1),
        "EmbedLayerNormalization": ([RNG.integers(0, 5, (2, 3)).astype(np.int32), None, h16(5, 16),
                                     h16(4, 16), None, h16(16), h16(16)], (2, 3, 5, 6), 2),
        "RotaryEmbedding": ([h16(1, 3, 16), np.array([1]), h16(8, 4), h16(8, 4)], (2, 3), 1),
    }
    inputs, consts, n_out = cases[op]
    _check(*_ms_model(op, inputs, {}, n_out, consts=consts), rtol=1e-2, atol=1e-2)
