"""The benchmark scripts' recipes as modules for the model tests (a quantized model is
built by the same code, ``bench/<name>.py``, that the benchmark times), and the run of
such a model by monolib and ONNX Runtime side by side."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

import numpy as np

__all__ = ["BENCH_DIR", "load_bench", "run_both"]

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


def run_both(path: Path, shape: tuple[int, ...], xs: list[np.ndarray]) -> list[tuple[list, list]]:
    """The model at ``path`` (one input ``x``, fixed to ``shape``) compiled by monolib and
    run by it and by ONNX Runtime (one thread) on each of ``xs``.

    Returns
    -------
    list of (list of ndarray, list of ndarray)
        Per input: monolib's outputs, ONNX Runtime's outputs, in the graph's order.

    Raises
    ------
    monolib.errors.MonolibError
        When monolib cannot compile or run the model.
    """
    import monolib
    from monolib.compiler.testing import ort_session

    factory = monolib.compile(str(path), target="c", shapes={"x": shape})
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    sess = ort_session(path)
    pairs = []
    for x in xs:
        gm.run(x=x)
        got = [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
        pairs.append((got, sess.run(None, {"x": x})))
    return pairs
