"""Quantized operators with integer kernels: QLinearConv, ConvInteger, QLinearMatMul,
MatMulInteger, DynamicQuantizeLinear (each file registers its ops at import; the C
kernels live in ``ops/quant/qgemm.h``). QuantizeLinear/DequantizeLinear are in
``ops/math/quantize.py``."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
