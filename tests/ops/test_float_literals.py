"""Float literals in generated C: ``c_literal`` writes every one valid (the root-cause
fix; no repair pass runs over the generated source any more)."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import monolib
from monolib.compiler.backends.cstyle import c_literal
from monolib.compiler.testing import build_shared, make_node_model

# digits + "f" with no fraction or exponent ("0f", "-2f"): C rejects the suffix there
_BAD_FLOAT = re.compile(r"(?<![\w.])(?<![eEpP][+\-])(\d+)f\b")

F32, F64 = np.float32, np.float64
VALUES = [0.0, -0.0, 1.0, -2.0, 3.0, 1e-45, 1.17549435e-38, 5e-324, 1e-7, 123456789.0,
          3.4028234663852886e38, 1e300, -1e-300, 0.1, -0.75, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", [F32, F64])
def test_c_literal_is_valid_c_for_every_kind_of_float(dtype):
    """Integral, negative, tiny (subnormal), huge, inf and nan values: each literal has a
    fraction or exponent before an ``f`` suffix, and a C compiler reads back the same
    value (the bits, for every finite value and the infinities)."""
    vals = [v for v in VALUES if dtype == F64 or abs(v) < 3.5e38 or not np.isfinite(v)]
    texts = [c_literal(v, dtype) for v in vals]
    for t in texts:
        assert not _BAD_FLOAT.search(t), t
    ct = "float" if dtype == F32 else "double"
    src = ("#include <math.h>\n#include <string.h>\n"
           f"static const {ct} V[] = {{{', '.join(texts)}}};\n"
           f"void get({ct}* out) {{ memcpy(out, V, sizeof V); }}\n")
    lib = build_shared(src)
    out = np.zeros(len(vals), dtype)
    lib.get(out.ctypes.data_as(ctypes.c_void_p))
    want = np.array(vals, dtype)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    fin = ~np.isnan(want)
    assert out[fin].tobytes() == want[fin].tobytes()


def test_c_literal_int64_min_is_not_an_overflowing_literal():
    assert c_literal(np.iinfo(np.int64).min, np.int64) == "(-INT64_C(9223372036854775807) - 1)"
    assert c_literal(-5, np.int64) == "INT64_C(-5)"


def _x(shape=(2, 3, 4, 4), dtype=F32):
    return np.zeros(shape, dtype)


# one-node graphs whose lowerings write float constants from attributes or defaults,
# chosen with integral, negative and zero values (the values "0f" / "-2f" came from)
CASES = [
    ("LeakyRelu", {"x": _x()}, {"alpha": 1.0}),
    ("Elu", {"x": _x()}, {"alpha": 2.0}),
    ("Selu", {"x": _x()}, {"alpha": 2.0, "gamma": 3.0}),
    ("Celu", {"x": _x()}, {"alpha": 1.0}),
    ("HardSigmoid", {"x": _x()}, {"alpha": 1.0, "beta": 0.0}),
    ("ThresholdedRelu", {"x": _x()}, {"alpha": 0.0}),
    ("Shrink", {"x": _x()}, {"lambd": 1.0, "bias": 2.0}),
    ("Reciprocal", {"x": _x()}, {}),
    ("Softplus", {"x": _x()}, {}),
    ("Mean", {"a": _x(), "b": _x()}, {}),
    ("Pow", {"a": _x(), "b": np.array([2.0], F32)}, {}),
    ("Softmax", {"x": _x()}, {"axis": 1}),
    ("LogSoftmax", {"x": _x((3, 5), F64)}, {"axis": -1}),
    ("Hardmax", {"x": _x()}, {"axis": 1}),
    ("ReduceMean", {"x": _x()}, {"keepdims": 1}),
    ("ReduceMax", {"x": _x()}, {}),
    ("ReduceMin", {"x": _x((4, 5), F64)}, {}),
    ("LRN", {"x": _x()}, {"size": 3, "alpha": 3.0, "beta": 1.0, "bias": 2.0}),
    ("Gemm", {"a": _x((3, 4)), "b": _x((4, 5)), "c": _x((5,))}, {"alpha": 2.0, "beta": -1.0}),
    ("LpPool", {"x": _x()}, {"kernel_shape": [2, 2], "p": 3}),
    ("GlobalAveragePool", {"x": _x()}, {}),
    ("AveragePool", {"x": _x()}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("InstanceNormalization", {"x": _x(), "s": np.ones(3, F32), "b": np.zeros(3, F32)},
     {"epsilon": 1.0}),
    ("LayerNormalization", {"x": _x(), "s": np.ones(4, F32), "b": np.zeros(4, F32)},
     {"epsilon": 1.0, "axis": -1}),
    ("Clip", {"x": _x(), "lo": np.array(-1.0, F32), "hi": np.array(6.0, F32)}, {}),
]


@pytest.mark.parametrize("op,inputs,attrs", CASES, ids=[c[0] for c in CASES])
def test_generated_c_needs_no_float_literal_repair(op, inputs, attrs):
    """The whole generated source (kernels pasted in included) has no ``<digits>f``
    token: nothing downstream rewrites the source any more."""
    consts = [k for k in inputs if k not in ("x", "a")]
    model = make_node_model(op, inputs, attrs, constant_inputs=consts)
    src = monolib.compile(model).imported_modules[0].get_source()
    bad = sorted({m.group(0) for m in _BAD_FLOAT.finditer(src)})
    assert not bad, f"{op}: invalid float literals {bad}"


DEVICE_CASES = [c for c in CASES if c[0] in ("Gemm", "Softmax", "LogSoftmax", "ReduceMean",
                                             "ReduceMax", "AveragePool", "GlobalAveragePool",
                                             "LeakyRelu", "Elu", "HardSigmoid")]


@pytest.mark.parametrize("target", ["opencl", "cuda"])
@pytest.mark.parametrize("op,inputs,attrs", DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_device_sources_need_no_float_literal_repair(op, inputs, attrs, target):
    """The OpenCL and CUDA kernels (generated only: no device needed) write the same
    valid literals: the device generator's repair pass is gone too."""
    consts = [k for k in inputs if k not in ("x", "a")]
    model = make_node_model(op, inputs, attrs, constant_inputs=consts)
    host = monolib.compile(model, target=target).imported_modules[0]
    src = host.imported_modules[0].get_source()
    bad = sorted({m.group(0) for m in _BAD_FLOAT.finditer(src)})
    assert not bad, f"{op} ({target}): invalid float literals {bad}"
