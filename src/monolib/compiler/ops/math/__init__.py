"""math operators (each file registers its ops): elementwise arithmetic, activations,
comparisons, casts, reductions, Softmax and the normalizations."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
