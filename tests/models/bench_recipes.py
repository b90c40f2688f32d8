"""The benchmark scripts' recipes as modules for the model tests: a quantized model is
built by the same code (``bench/<name>.py``) that the benchmark times."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

__all__ = ["BENCH_DIR", "load_bench"]

logger = logging.getLogger(__name__)

BENCH_DIR = Path(__file__).parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` executed as the module ``bench_<name>``.

    Parameters
    ----------
    name : str
        The script's name without ``.py``, e.g. ``"quantized"``.

    Returns
    -------
    ModuleType
        A fresh module (the script is executed on every call; its ``main`` does not run).

    Raises
    ------
    FileNotFoundError
        When there is no such script.
    """
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
