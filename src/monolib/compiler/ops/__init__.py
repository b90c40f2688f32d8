"""Every operator monolib implements, registered at import.

Three families, each a subpackage whose ``__init__`` imports all of its files, so a
missing registration fails here, at import:

* ``nn``      -- Conv, ConvTranspose, Gemm, MatMul, pooling, LSTM (the heavy kernels)
* ``math``    -- elementwise ops, reductions, Softmax, normalizations
* ``tensor``  -- shape and data movement: Reshape, Transpose, Slice, Concat, Resize...
"""

from . import math, nn, tensor  # noqa: F401  (registration side effects)
from ._discover import import_all as _import_all

# Further families (e.g. ``quant``, ``sequence``) are subpackages found the same way.
_import_all(__name__, __path__)
from .base import EmitContext, OpDef, lookup, op_of, register, registered_ops

__all__ = ["EmitContext", "OpDef", "lookup", "op_of", "register", "registered_ops"]
