"""String tensors end to end (issue 13): fixed-width UTF-8 slots (``S<n>``), the string
ops of ``compiler/ops/text/`` as C in the generated library, against ONNX Runtime on
real text (UTF-8, empty strings), the executor's conversions and the errors."""


import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import monolib
from monolib.compiler.ir import Node
from monolib.compiler.ops import lookup
from monolib.compiler.testing import ort_run
from monolib.runtime.params import load_params, save_params
from monolib.runtime.strings import to_utf8
from monolib.errors import CompileError, InputError, UnsupportedOpError

WORDS = np.array([["www.google.com", "", "été à Paris"], ["中文.测试", "a.b..c", " x  y "]],
                 dtype=object)


def _s(name, shape):
    return helper.make_tensor_value_info(name, T.STRING, shape)


def _model(nodes, inputs, outputs, inits=(), opset=20, ml=None):
    graph = helper.make_graph(nodes, "strings", inputs, outputs, initializer=list(inits))
    opsets = [helper.make_opsetid("", opset)]
    if ml:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ml))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _compile(model, widths):
    shapes = {}
    for i in model.graph.input:
        if i.type.tensor_type.elem_type == T.STRING:
            dims = tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
            shapes[i.name] = {"shape": dims, "width": widths.get(i.name, 32)}
    lib = monolib.compile(model, shapes=shapes)
    return lib, monolib.GraphModule(lib["default"](monolib.cpu()))


def _check(model, feeds, widths=None, runs=None):
    """Compile once, then each feed set: outputs equal ONNX Runtime's (dtype, shape,
    values; strings come back as object arrays of str)."""
    lib, gm = _compile(model, widths or {})
    for f in (runs or [feeds]):
        want = ort_run(model, f)
        gm.run(**f)
        for i, w in enumerate(want):
            got = gm.get_output(i).numpy()
            assert got.dtype == w.dtype, (i, got.dtype, w.dtype)
            assert got.shape == w.shape, (i, got.shape, w.shape)
            assert (got == w).all(), (i, got, w)
    return lib


def test_string_concat_broadcast_utf8_widths():
    m = _model([helper.make_node("StringConcat", ["x", "y"], ["z"])],
               [_s("x", [2, 3]), _s("y", [3])], [_s("z", [2, 3])])
    lib = _check(m, {"x": WORDS, "y": np.array(["!", "", "ß"], dtype=object)},
                 widths={"x": 20, "y": 4})
    graph = lib.get_graph_json()
    assert graph["outputs"][0]["dtype"] == "S24"  # the sum of the input widths


def test_equal_strings_and_a_constant():
    c = numpy_helper.from_array(np.array(["", "a.b..c", "été à Paris"], dtype=object), "c")
    m = _model([helper.make_node("Equal", ["x", "c"], ["y"])], [_s("x", [2, 3])],
               [helper.make_tensor_value_info("y", T.BOOL, [2, 3])], inits=[c], opset=19)
    lib = _check(m, {"x": WORDS})
    # the constant lies in the params as its bytes: safetensors takes it
    assert load_params(save_params(lib.get_params()))["c"].shape == (3, 14)  # "été à Paris": 14 bytes


def _split_model(attrs, rank=2):
    shape = [2, 3][:rank] if rank else []
    return _model([helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs)],
                  [_s("x", shape)],
                  [_s("y", [*shape, "k"]), helper.make_tensor_value_info("n", T.INT64, shape)])


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "."}, {"delimiter": ".", "maxsplit": 1},
                                   {"delimiter": "测"}, {"maxsplit": 1}])
def test_string_split_computed_dim(attrs):
    # ONNX Runtime agrees with ONNX's reference on these (see the next test)
    x = np.array([["www.google.com", "a b", "été à Paris"], ["中文.测试", "a.b..c", " x  y"]],
                 dtype=object)
    other = np.array([["a", "b c", "b"], [".", "c", "测"]], dtype=object)
    # one library, two inputs with a different most-pieces count K (a computed dim)
    _check(_split_model(attrs), None, runs=[{"x": x}, {"x": other}])


@pytest.mark.parametrize("attrs,x", [
    ({"delimiter": "."}, ["", "a.", ".", "x"]),  # "" is one empty piece (ORT: none)
    ({"maxsplit": 1}, [" x  y ", "a\tb\nc", "", "\x0b"]),  # ORT splits at spaces only
])
def test_string_split_follows_onnx_reference(attrs, x):
    """Where ONNX Runtime departs from ONNX's reference (Python's str.split), monolib
    follows the reference."""
    from onnx.reference import ReferenceEvaluator

    m = _split_model(attrs, rank=1)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = len(x)
    feeds = {"x": np.array(x, dtype=object)}
    y_want, n_want = ReferenceEvaluator(m).run(None, feeds)
    _, gm = _compile(m, {})
    gm.run(**feeds)
    assert gm.get_output(0).numpy().tolist() == y_want.tolist()
    assert gm.get_output(1).numpy().tolist() == n_want.tolist()


def test_string_normalizer_stopwords_case():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER",
                            is_case_sensitive=0, stopwords=["MONDAY", "中文"], locale="C")
    m = _model([node], [_s("x", [1, 4])], [_s("y", [1, "k"])], opset=17)
    # locale "C": ONNX Runtime changes ASCII letters only, as monolib does at any locale
    runs = [{"x": np.array([["monday", "Tuesday été", "中文", "x-1"]], dtype=object)},
            {"x": np.array([["Monday", "mONDAY", "中文", "monday"]], dtype=object)}]  # none kept
    _check(m, None, runs=runs)


def test_string_normalizer_lower_no_stopwords():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER",
                            locale="C")
    m = _model([node], [_s("x", [3])], [_s("y", [3])], opset=17)
    _check(m, {"x": np.array(["ABC def", "", "Q-9 中 ÉTÉ"], dtype=object)})


@pytest.mark.parametrize("pattern", [
    r"www\.[\w.-]+\.\bcom\b", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", r".*",
    r"[^a-z]*", r"\s*x\s+y\s*", r"(a|b|)+\.?.*", r"中.{2,3}", r"\d{0,3}",
    r"(?i)[a-c]@GMAIL\.COM", r"(?i:été)|[[:digit:]]+", r"[[:^alpha:][:space:]]*\z",
    r"(?s).*\..*", r"x(?i:K)",
])
def test_regex_full_match_vs_ort(pattern):
    """The C NFA and the op's reference (the same program in Python) agree with
    ONNX Runtime's RE2."""
    m = _model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)],
               [_s("x", [3, 4])], [helper.make_tensor_value_info("y", T.BOOL, [3, 4])])
    x = np.array([["www.google.com", "", "a@gmail.com", " x  y "],
                  ["中文.测\n试", "a.b..c", "123", "ÉTÉ"], ["x\u212a", "xk", "1 2\n", "B@Gmail.com"]],
                 dtype=object)
    _check(m, {"x": x})
    node = Node("RegexFullMatch", "rx", [], [], {"pattern": pattern})
    want = ort_run(m, {"x": x})[0]
    assert (lookup("RegexFullMatch", 20).reference(node, [to_utf8(x)])[0] == want).all()


@pytest.mark.parametrize("pattern,what", [(r"(a)\1", "backreferences"),
                                          (r"a(?=b)", "lookahead"), (r"(?m)^a$", "MULTILINE"),
                                          (r"\pL", "does not parse"), (r"[[:nope:]]", "POSIX")])
def test_regex_refuses_unsupported(pattern, what):
    m = _model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern, name="rx")],
               [_s("x", [2])], [helper.make_tensor_value_info("y", T.BOOL, [2])])
    with pytest.raises(CompileError, match=f"rx.*{what}"):
        _compile(m, {})


@pytest.mark.parametrize("attrs,xtype,x", [
    ({"keys_strings": ["a", "été", ""], "values_int64s": [5, 6, 7], "default_int64": 9},
     T.STRING, np.array(["été", "", "b", "a"], dtype=object)),
    ({"keys_int64s": [3, 1, 2], "values_strings": ["three", "un", "二"],
      "default_string": "?"}, T.INT64, np.array([1, 4, 2, 3], np.int64)),
    ({"keys_strings": ["x", "y"], "values_strings": ["longer value", ""]},
     T.STRING, np.array(["y", "x", "z", ""], dtype=object)),
    ({"keys_floats": [0.5, -1.0], "values_strings": ["half", "minus"]},
     T.FLOAT, np.array([0.5, 2.0, -1.0, np.nan], np.float32)),
])
def test_label_encoder_vs_ort(attrs, xtype, x):
    vtype = T.STRING if "values_strings" in attrs else T.INT64
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    m = _model([node], [helper.make_tensor_value_info("x", xtype, [4])],
               [helper.make_tensor_value_info("y", vtype, [4])], ml=2)
    _check(m, {"x": x})


def test_element_moving_ops_on_strings():
    """Transpose, Gather and Where only move elements: whole ``ml_str<n>`` structs."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"]),
             helper.make_node("Gather", ["t", "i"], ["g"], axis=0),
             helper.make_node("Where", ["c", "g", "k"], ["y"])]
    k = numpy_helper.from_array(np.array(["k"], dtype=object), "k")
    m = _model(nodes, [_s("x", [2, 3]), helper.make_tensor_value_info("i", T.INT64, [2]),
                       helper.make_tensor_value_info("c", T.BOOL, [2, 2])],
               [_s("y", [2, 2])], inits=[k])
    feeds = {"x": WORDS, "i": np.array([2, 0], np.int64), "c": np.array([[1, 0], [1, 1]], bool)}
    # NumPy is the oracle: ONNX Runtime 1.32's string Gather after this Transpose
    # returns "" for the second column
    want = np.where(feeds["c"], WORDS.T[feeds["i"]], "k")
    _, gm = _compile(m, {})
    gm.run(**feeds)
    assert gm.get_output(0).numpy().tolist() == want.tolist()


def _identity():
    return _model([helper.make_node("Identity", ["x"], ["y"])], [_s("x", [2])], [_s("y", [2])])


def test_executor_conversions_and_export(tmp_path):
    lib, gm = _compile(_identity(), {"x": 6})
    for value in (["é", ""], np.array(["ab", "c"]), np.array([b"ab", b"\xe4\xb8\xad"]),
                  np.array(["x", b"y"], dtype=object)):
        gm.set_input("x", value)
        gm.run()
        out = gm.get_output(0).numpy()
        want = [v.decode() if isinstance(v, bytes) else v for v in np.asarray(value).tolist()]
        assert out.dtype == object and out.tolist() == want
    path = tmp_path / "identity.so"
    lib.export_library(str(path))
    loaded = monolib.load_module(str(path))
    info = loaded.get_graph_json()["inputs"][0]
    assert info["dtype"] == "S6"
    gm2 = monolib.GraphModule(loaded["default"](monolib.cpu()))
    gm2.run(x=np.array(["中文", "z"], dtype=object))
    assert gm2.get_output(0).numpy().tolist() == ["中文", "z"]


def test_input_errors():
    _, gm = _compile(_identity(), {"x": 4})
    with pytest.raises(InputError, match=r"'x': element \[1\] is 6 bytes.*4 bytes"):
        gm.set_input("x", np.array(["ok", "中文"], dtype=object))
    with pytest.raises(InputError, match="'x' is a string tensor"):
        gm.set_input("x", np.array([1.0, 2.0]))
    with pytest.raises(InputError, match="'x' is a string tensor"):
        gm.set_input("x", np.array([1, "a"], dtype=object))


def test_compile_errors():
    with pytest.raises(CompileError, match="'x' is a string tensor.*width"):
        monolib.compile(_identity())
    with pytest.raises(CompileError, match="width"):
        monolib.compile(_identity(), shapes={"x": {"shape": (2,), "width": 0}})
    cast = _model([helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT, name="c")],
                  [_s("x", [2])], [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    with pytest.raises(UnsupportedOpError, match="'c'.*Cast of a string"):
        _compile(cast, {})


def test_string_constant_folds():
    """A string Constant and StringConcat of constants fold at compile time; the
    result is an output of the library."""
    nodes = [helper.make_node("Constant", [], ["a"], value_strings=["é", "b"]),
             helper.make_node("StringConcat", ["a", "x"], ["y"])]
    m = _model(nodes, [_s("x", [2])], [_s("y", [2])])
    _check(m, {"x": np.array(["1", ""], dtype=object)})


def test_concat_of_strings_of_different_widths():
    """Concat's inputs share one type: the narrower run-time input is widened in C
    (monolib.text::StringWiden), a narrower constant at compile time."""
    c = numpy_helper.from_array(np.array([["const"]], dtype=object), "c")
    m = _model([helper.make_node("Concat", ["x", "y", "c"], ["z"], axis=1)],
               [_s("x", [1, 2]), _s("y", [1, 1])], [_s("z", [1, 4])], inits=[c])
    _check(m, {"x": np.array([["a long string", ""]], dtype=object),
               "y": np.array([["é"]], dtype=object)}, widths={"x": 24, "y": 2})


def test_string_input_with_runtime_dim_and_opt_shapes():
    """A string input with a run-time dim (and a specialization of it): one library
    for any count of strings within the bounds."""
    nodes = [helper.make_node("StringConcat", ["x", "y"], ["z"]),
             helper.make_node("RegexFullMatch", ["z"], ["r"], pattern="a.*!")]
    m = _model(nodes, [_s("x", ["n"]), _s("y", [1])],
               [_s("z", ["n"]), helper.make_tensor_value_info("r", T.BOOL, ["n"])])
    y = np.array(["!"], dtype=object)
    for opt in (None, {"x": [(2,)]}):
        lib = monolib.compile(m, shapes={"x": {"shape": ((1, 8),), "width": 8},
                                         "y": {"width": 3}}, opt_shapes=opt)
        gm = monolib.GraphModule(lib["default"](monolib.cpu()))
        for xs in (["a", "bé"], ["x", "ay", "", "aaaa", "中"]):
            feeds = {"x": np.array(xs, dtype=object), "y": y}
            gm.run(**feeds)
            for got, want in zip((gm.get_output(0).numpy(), gm.get_output(1).numpy()),
                                 ort_run(m, feeds)):
                assert got.tolist() == want.tolist()


def test_cli_width_and_run(tmp_path):
    """``monolib compile --width`` gives a string input's width; ``monolib run`` reads
    a ``U`` array from .npy and prints string outputs without min/max."""
    from monolib.cli import main

    m = _model([helper.make_node("StringConcat", ["x", "x"], ["y"])], [_s("x", [2])],
               [_s("y", [2])])
    onnx.save(m, tmp_path / "m.onnx")
    lib, x = tmp_path / "m.so", tmp_path / "x.npy"
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(lib), "--width", "x=4"]) == 0
    np.save(x, np.array(["ab", "é"]))
    assert main(["run", str(lib), "--input", f"x={x}", "--output",
                 str(tmp_path / "y.npz")]) == 0
    out = np.load(tmp_path / "y.npz", allow_pickle=True)["y"]
    assert out.tolist() == ["abab", "éé"]
