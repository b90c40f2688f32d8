"""monolib: compile an ONNX model into ONE native shared library and load it with one call.

The runtime API (``load_module``, ``GraphModule``, ``cpu``...) is imported eagerly and
needs NumPy only; ``compile`` imports the compiler (and ``onnx``) on first use.
"""

from .runtime import *  # noqa: F401,F403
from .runtime import __all__ as _runtime_all

__version__ = "0.1.0"
__all__ = [*_runtime_all, "compile", "__version__"]


def __getattr__(name: str):
    if name == "compile":
        from .compiler.build import compile as _compile

        return _compile
    raise AttributeError(f"module 'monolib' has no attribute {name!r}")
