"""Export: toolchains, targets, embedding the container, export_library steps.

Names are resolved lazily (PEP 562) so that ``import monolib`` (which needs
``CSourceModule``) does not pay for subprocess/tarfile/tempfile machinery.
"""

__all__ = ["CSourceModule", "Target", "export_library", "find_compiler"]

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
