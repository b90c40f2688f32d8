"""math operators (each file registers its ops): elementwise arithmetic, activations,
comparisons, casts, reductions, Softmax and the normalizations."""

from . import (  # noqa: F401  (registration side effects)
    activation,
    argmax,
    arith,
    batchnorm,
    bitwise,
    cast,
    clip,
    cumsum,
    hardmax,
    logic,
    norm,
    quantize,
    reduce,
    softmax,
    special,
    trig,
    unary,
    where,
)
