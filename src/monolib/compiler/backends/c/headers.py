"""Where the C kernel headers live, and reading one by name.

The shared runtime of the generated C (types, thread pool, vector math) is in
``backends/c/kernels/``; every other header sits beside the op family that lowers to it
(``ops/nn/conv.h`` beside ``ops/nn/conv.py``), so an op's lowering and its kernels are
read together. Header names are unique across these folders.
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable

from ....errors import CompileError

__all__ = ["HEADER_DIRS", "header_path", "kernel_header"]

#: (package, subfolder) searched in order for a header name.
HEADER_DIRS = (
    ("monolib.compiler.backends.c", "kernels"),
    ("monolib.compiler.ops.nn", ""),
    ("monolib.compiler.ops.math", ""),
    ("monolib.compiler.ops.tensor", ""),
    ("monolib.compiler.ops.quant", ""),
    ("monolib.compiler.ops.contrib", ""),
    ("monolib.compiler.ops.text", ""),
    ("monolib.compiler.ops.sequence", ""),
)


def header_path(header: str) -> Traversable:
    """The file of kernel header ``header`` (e.g. ``"gemm.h"``).

    Raises
    ------
    CompileError
        When no kernel folder holds ``header``.
    """
    for package, sub in HEADER_DIRS:
        folder = resources.files(package)
        path = folder.joinpath(sub, header) if sub else folder.joinpath(header)
        if path.is_file():
            return path
    raise CompileError(f"kernel header {header!r} not found in monolib's kernel folders")


def kernel_header(header: str) -> str:
    """The text of kernel header ``header``; see :func:`header_path`."""
    return header_path(header).read_text()
