"""Export: toolchains, targets, embedding the container, export_library steps.

Names are resolved lazily (PEP 562) so that ``import monolib`` (which needs
``CSourceModule``) does not pay for subprocess/tarfile/tempfile machinery. Importing
this package registers :func:`export_library` as the runtime's exporter (what
``Module.export_library`` calls): the runtime never imports the export steps.
"""

import logging
from typing import Any

from ..runtime.module import Module, register_exporter

__all__ = ["CSourceModule", "Target", "export_library", "find_compiler"]

logger = logging.getLogger(__name__)

_WHERE = {
    "CSourceModule": ".csource",
    "Target": ".targets",
    "export_library": ".library",
    "find_compiler": ".toolchain",
}


def __getattr__(name: str):
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module 'monolib.export' has no attribute {name!r}")


def _export_library(mod: Module, path: Any, **options: Any) -> str:
    """``Module.export_library``'s hook: the steps of :mod:`.library`, imported on
    first use (they need subprocess and tempfile)."""
    from .library import export_library

    return export_library(mod, path, **options)


register_exporter(_export_library)
