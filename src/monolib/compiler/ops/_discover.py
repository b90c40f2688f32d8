"""Import every module of an op subpackage, so a new op file registers itself by
existing (no list to keep in step; parallel work never edits the same ``__init__``).

Files whose name starts with ``_`` are shared helpers, imported by the op files that
need them. An import error in any op file fails at ``import monolib.compiler.ops``.
"""

from __future__ import annotations

import importlib
import pkgutil


def import_all(package_name: str, package_path: list[str]) -> list[str]:
    """Import each non-underscore module of the package, in name order; returns the
    module names (for the package's ``__all__``-style bookkeeping and tests)."""
    names = sorted(m.name for m in pkgutil.iter_modules(package_path) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{package_name}.{name}")
    return names
