"""Numbers Python and a kernel header share are checked by the C compiler: the
generated C asserts each header macro equals the Python value (ops/_constants.py)."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.ops.nn import _gemm, conv, conv_dw_along_w
from monolib.compiler.ops.quant import _qcommon
from monolib.compiler.testing import build_shared, make_node_model
from monolib.errors import ToolchainError


def _depthwise_source() -> str:
    w = np.random.default_rng(0).standard_normal((8, 1, 3, 3)).astype(np.float32)
    x = np.zeros((1, 8, 16, 16), np.float32)
    m = make_node_model("Conv", {"x": x, "w": w}, {"group": 8, "pads": [1, 1, 1, 1]},
                        constant_inputs=["w"])
    return monolib.compile(m).imported_modules[0].get_source()


def test_generated_c_asserts_the_python_values():
    src = _depthwise_source()
    for name, value in [("ML_MR", _gemm.MR), ("ML_NR", _gemm.NR), ("ML_KC", _gemm.KC),
                        ("ML_NC", _gemm.NC), ("ML_DW_PAD", conv_dw_along_w._DW_PAD),
                        ("ML_DW_R", conv_dw_along_w._DW_R), ("ML_DW_BLOCK", conv_dw_along_w._DW_BLOCK)]:
        assert f"_Static_assert({name} == {value}," in src
    build_shared(src)  # the headers agree with Python today


@pytest.mark.parametrize("macro", ["ML_MR", "ML_DW_BLOCK"])
def test_a_header_edited_alone_fails_the_build(macro):
    src = _depthwise_source()
    head, sep, rest = src.partition(f"#define {macro} ")
    assert sep, macro
    value, _, tail = rest.partition("\n")
    edited = f"{head}{sep}{int(value.split()[0]) * 2}{value[len(value.split()[0]):]}\n{tail}"
    with pytest.raises(ToolchainError, match=macro):
        build_shared(edited)


def test_qgemm_constants_are_checked():
    class Ctx:
        def __init__(self):
            self.headers, self.helpers = [], []

        def include(self, h):
            self.headers.append(h)

        def helper(self, code):
            self.helpers.append(code)

    ctx = Ctx()
    _qcommon.include_qgemm(ctx)
    assert ctx.headers == ["qgemm.h"]
    assert any(f"ML_QMR == {_qcommon.QMR}" in h for h in ctx.helpers)
    assert any(f"ML_QNR == {_qcommon.QNR}" in h for h in ctx.helpers)


def test_scratch_sizes_agree_with_the_headers():
    """The Python that reserves scratch computes what the kernels will use:
    ``bbuf_floats`` = ``ml_gemm_bbuf_floats``, ``qgemm_bbuf_bytes`` =
    ``ml_qgemm_bbuf_bytes`` (the depthwise scratch: tests/ops/test_depthwise_conv.py)."""
    import ctypes

    from monolib.compiler.backends.c.headers import kernel_header

    ks = [1, 3, 64, 255, 256, 257, 1000, 5000, 100000]
    ns = [1, 15, 16, 17, 31, 33, 1000, 1024, 1025, 4096, 100000]
    src = (
        "#include <stdint.h>\n#include <string.h>\n"
        + kernel_header("gemm.h") + kernel_header("qgemm.h")
        + "void sizes(const int64_t* k, const int64_t* n, int m, int64_t* f, int64_t* q) {\n"
        "  for (int i = 0; i < m; ++i) { f[i] = ml_gemm_bbuf_floats(k[i], n[i]);\n"
        "    q[i] = ml_qgemm_bbuf_bytes(k[i], n[i]); } }\n"
    )
    lib = build_shared(src)
    pairs = [(k, n) for k in ks for n in ns]
    k = np.array([p[0] for p in pairs], np.int64)
    n = np.array([p[1] for p in pairs], np.int64)
    f, q = np.zeros(len(pairs), np.int64), np.zeros(len(pairs), np.int64)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    lib.sizes(ptr(k), ptr(n), ctypes.c_int(len(pairs)), ptr(f), ptr(q))
    assert f.tolist() == [_gemm.bbuf_floats(a, b) for a, b in pairs]
    assert q.tolist() == [_qcommon.qgemm_bbuf_bytes(a, b) for a, b in pairs]
