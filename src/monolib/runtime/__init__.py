"""What a deployed model needs: modules, the container, library loading, the graph
executor, devices. NumPy and ctypes only; never imports ``monolib.compiler``."""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__all__ = list(_errors_all)
