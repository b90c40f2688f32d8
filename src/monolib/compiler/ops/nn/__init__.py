"""nn operators: Conv, ConvTranspose, Gemm, MatMul, pooling, LSTM (each file registers its
ops at import; the C kernels live in ``codegen/kernels/gemm.h``, ``conv.h``, ...)."""

from . import conv, conv_transpose, gemm, lstm, matmul, pool  # noqa: F401  (registration side effects)

__all__: list[str] = []
