"""``com.microsoft`` contrib operators that ONNX Runtime's quantizer and transformer
optimizer emit (Gelu family, SkipLayerNormalization, EmbedLayerNormalization,
FusedMatMul, RotaryEmbedding, Attention, MatMulNBits, quantized ops). Each file
registers its ops with ``domain = "com.microsoft"``; semantics follow ONNX Runtime's
``docs/ContribOperators.md`` and are checked against its kernels in the tests."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
