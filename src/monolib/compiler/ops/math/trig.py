"""Trigonometric and hyperbolic functions: Tan, Asin, Acos, Atan (7) and Sinh, Cosh,
Asinh, Acosh, Atanh (9), each ``y = f(x)`` through the C99 ``<math.h>`` function of
the element type. Defined from one table (name, NumPy function, C name)."""

from __future__ import annotations

import logging

import numpy as np

from ..base import register
from .unary import _MathFn

__all__ = ["TRIG_OPS"]

logger = logging.getLogger(__name__)

#: (ONNX op, since version, NumPy ufunc, C function stem)
TRIG_OPS = [
    ("Tan", 7, np.tan, "tan"),
    ("Asin", 7, np.arcsin, "asin"),
    ("Acos", 7, np.arccos, "acos"),
    ("Atan", 7, np.arctan, "atan"),
    ("Sinh", 9, np.sinh, "sinh"),
    ("Cosh", 9, np.cosh, "cosh"),
    ("Asinh", 9, np.arcsinh, "asinh"),
    ("Acosh", 9, np.arccosh, "acosh"),
    ("Atanh", 9, np.arctanh, "atanh"),
]

for _op, _since, _fn, _c in TRIG_OPS:
    register(
        type(
            _op,
            (_MathFn,),
            {
                "op_type": _op,
                "since_version": _since,
                "also_versions": (22,),  # 22 adds bfloat16 only
                "cname": _c,
                "ufunc": staticmethod(_fn),
                "__doc__": f"ONNX ``{_op}`` ({_since}): elementwise ``{_c}``.",
                "__module__": __name__,
            },
        )
    )
