"""nn operators: Conv, ConvTranspose, Gemm, MatMul, pooling, LSTM (each file registers its
ops at import; the C kernels live in ``ops/nn/gemm.h``, ``conv.h``, ...)."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
