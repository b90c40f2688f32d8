"""monolib: compile an ONNX model into ONE native shared library and load it with one call.

The runtime API (``load_module``, ``GraphModule``, ``cpu``...) is imported eagerly and
needs NumPy only; so is ``monolib.export``, whose submodules load on first use and
which registers the exporter behind ``Module.export_library``; ``compile`` imports
the compiler (and ``onnx``) on first use.
"""

from .runtime import *  # noqa: F401,F403
from .runtime import __all__ as _runtime_all
from .export import CSourceModule  # importing monolib.export registers the exporter

__version__ = "0.1.0"
__all__ = [*_runtime_all, "CSourceModule", "compile", "__version__"]


def __getattr__(name: str):
    if name == "compile":
        from .compiler.build import compile as _compile

        return _compile
    raise AttributeError(f"module 'monolib' has no attribute {name!r}")
