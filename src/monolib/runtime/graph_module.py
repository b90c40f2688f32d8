"""The user API of a graph executor: ``GraphModule`` and ``BenchmarkResult``.

``GraphModule`` (TVM's ``graph_executor.GraphModule``) wraps an executor with
``set_input`` / ``run`` / ``get_output``, checking every array against the graph's
inputs before any is copied into the arena. An input with run-time dims takes any
shape within its bounds, and ``get_output`` has the shape of the last run
(:mod:`.shapes`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ..abi.graph_spec import TensorInfo
from ..abi.sequences import SeqSpec, pack, spec_of, unpack
from ..errors import InputError
from .device import cpu
from .factory import GraphExecutorFactoryModule, is_executor
from .ndarray import NDArray
from .strings import encode_input, from_utf8

__all__ = ["BenchmarkResult", "GraphModule"]

logger = logging.getLogger(__name__)


def _seq_specs(entries: Any, infos: Any) -> dict[int, SeqSpec]:
    """Index -> SeqSpec of the sequence/optional entries among ``entries``."""
    out = {}
    for i, (raw, info) in enumerate(zip(entries, infos)):
        spec = spec_of(raw, info.nbytes) if isinstance(raw, dict) else None
        if spec is not None:
            out[i] = spec
    return out


def _as_array(value: Any, info: TensorInfo) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, NDArray):
        return np.asarray(value)
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError) as exc:
            raise InputError(
                f"input {info.name!r}: cannot read the DLPack object "
                f"{type(value).__name__} on the host ({exc})"
            ) from None
    try:  # a list or scalar has no dtype of its own
        arr = np.asarray(value, dtype=info.dtype)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged, text, out of range
        raise InputError(
            f"input {info.name!r}: cannot convert {type(value).__name__} to a "
            f"{info.dtype} array ({exc})"
        ) from None
    return arr


class GraphModule:
    """The user API of a graph executor (TVM's ``graph_executor.GraphModule``).

    Parameters
    ----------
    module : GraphExecutor or GraphExecutorFactoryModule
        ``factory["default"](dev)``; a factory is run on ``cpu()``.

    Examples
    --------
    >>> gm = GraphModule(lib["default"](cpu()))
    >>> gm.run(x=image); y = gm.get_output(0).numpy()
    """

    def __init__(self, module: Any) -> None:
        if isinstance(module, GraphExecutorFactoryModule):
            module = module.default(cpu())
        if not is_executor(module):
            raise TypeError(f"GraphModule wraps a GraphExecutor, got {type(module).__name__}")
        self.executor = module
        self._by_name = {t.name: i for i, t in enumerate(module.inputs)}
        # sequence/optional inputs and outputs: slot layouts (abi/sequences.py)
        head = getattr(getattr(module, "factory", None), "head", None) or {}
        self._seq_in = _seq_specs(head.get("inputs", ()), module.inputs)
        self._seq_out = _seq_specs(head.get("outputs", ()), module.outputs)
        # inputs with run-time dims: set_input may change their shape
        self._resizable = any(t.dynamic for t in module.inputs)
        # The per-run fast paths (issue 14: set_input + get_output cost ~7 us of Python on
        # a one-input model): name -> (arena view, dtype, shape) of each plain tensor
        # input, and index -> view of each plain output, of a graph with static shapes
        # (views that never change). Anything else takes the checked path.
        static = not self._resizable and getattr(module, "shapes", None) is None
        self._plain_in = {
            t.name: (module.input_view(i), t.dtype, t.shape)
            for i, t in enumerate(module.inputs)
            if static and i not in self._seq_in and t.dtype.kind != "S"
        }
        self._plain_out = {
            i: module.output_view(i)
            for i, t in enumerate(module.outputs)
            if static and i not in self._seq_out and t.dtype.kind != "S"
        }

    def _expected(self) -> str:
        return ", ".join(t.describe() for t in self.executor.inputs)

    def _index(self, key: Any) -> int:
        inputs = self.executor.inputs
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if 0 <= key < len(inputs):
                return int(key)
            raise InputError(
                f"input index {key} out of range: the model has "
                f"{len(inputs)} inputs ({self._expected()})"
            )
        i = self._by_name.get(key) if isinstance(key, str) else None
        if i is None:
            params = list(self.executor.param_infos)
            extra = f"; params: {', '.join(params[:8])}{', ...' if len(params) > 8 else ''}"
            raise InputError(
                f"unknown input {key!r}: the model expects {self._expected()}"
                + (extra if params else "")
            )
        return i

    def set_input(self, key: Any = None, value: Any = None, **inputs: Any) -> None:
        """Copy input array(s) into the executor.

        Parameters
        ----------
        key : str or int, optional
            Input name or index.
        value : array-like
            A NumPy array, any DLPack object (``np.from_dlpack``), or a NDArray; its
            dtype must match the model's, its shape too, where a run-time dim takes
            any value within its bounds (and on its step). A sequence input takes a
            list of arrays (at most its capacity, each within its element bounds),
            an optional one an array or list, or None (``abi.sequences.pack``).
        **inputs
            More ``name=array`` pairs. A name of the graph JSON ``params`` table (and
            not an input) sets that param for this executor, as TVM's ``set_input``
            does (see :meth:`GraphExecutor.load_params`).

        Raises
        ------
        InputError
            Unknown name/index, wrong shape or wrong dtype; the message lists what
            the model expects (for a run-time dim: the axis, the dim name, its bounds
            and the value given). Every array is checked before any is copied, so on
            an error no input has changed (the executor stays usable as it was).
            Dims shared by several inputs are compared at :meth:`run`.
        """
        if key is None and self._set_plain(inputs):
            return
        pairs = ([(key, value)] if key is not None else []) + list(inputs.items())
        params = {n: v for n, v in pairs if self._is_param(n)}
        checked = [self._checked(k, v) for k, v in pairs if not self._is_param(k)]
        if params:
            self.executor.load_params(params)
        if self._resizable:
            for i, arr in checked:  # shapes checked: give the inputs theirs
                if self.executor.input_view(i).shape != arr.shape:
                    self.executor.set_input_shape(i, arr.shape)
        for i, arr in checked:
            # copyto reads any strides (non-contiguous, negative, broadcast) correctly
            np.copyto(self.executor.input_view(i), arr)

    def _set_plain(self, inputs: dict[str, Any]) -> bool:
        """Copy ``inputs`` when every one is a NumPy array of a plain input's exact dtype
        and shape (the common case, checked in full before any copy); False (nothing
        copied) sends the call down the checked path."""
        plain, todo = self._plain_in, []
        for name, value in inputs.items():
            slot = plain.get(name)
            if (slot is None or type(value) is not np.ndarray or value.dtype != slot[1]
                    or value.shape != slot[2]):
                return False
            todo.append((slot[0], value))
        for view, value in todo:
            np.copyto(view, value)
        return bool(todo)

    def _is_param(self, key: Any) -> bool:
        return (
            isinstance(key, str) and key not in self._by_name and key in self.executor.param_infos
        )

    def _checked(self, key: Any, value: Any) -> tuple[int, np.ndarray]:
        """(input index, array) for ``set_input``, dtype and shape checked."""
        i = self._index(key)
        info = self.executor.inputs[i]
        spec = self._seq_in.get(i)
        if spec is not None:  # a list (or None): packed into the slot's bytes
            arr = np.zeros(info.nbytes, np.uint8)
            pack(spec, value, info.name, arr)
        elif info.dtype.kind == "S":  # a string tensor: text -> its UTF-8 slots
            arr = encode_input(value, info.name, info.dtype.itemsize)
        else:
            arr = value if type(value) is np.ndarray else _as_array(value, info)
        if arr.dtype != info.dtype:
            raise InputError(
                f"input {info.name!r} has dtype {arr.dtype}, the model expects "
                f"{info.dtype} ({self._expected()})"
            )
        if arr.shape != info.shape:
            if info.dynamic:
                self.executor.shapes.check_input(info, arr.shape)
                return i, arr
            raise InputError(
                f"input {info.name!r} has shape {list(arr.shape)}, the model "
                f"expects {list(info.shape)} ({self._expected()})"
            )
        return i, arr

    def run(self, **inputs: Any) -> None:
        """Set ``inputs`` (``name=array``) if given, then run the whole graph."""
        if inputs:
            self.set_input(**inputs)
        self.executor.run()

    def get_input(self, key: Any) -> NDArray:
        """Input ``key`` (name or index) as an NDArray view."""
        return NDArray(self.executor.input_view(self._index(key)), self.executor.device)

    def get_output(self, index: int, out: np.ndarray | None = None) -> NDArray:
        """Output ``index`` as an NDArray (a view: ``.numpy()`` copies it). A sequence
        output is a list of arrays, an optional one an array (a list for an optional
        sequence) or None, as ONNX Runtime returns them (copies; ``out`` is ignored).

        Raises
        ------
        InputError
            ``index`` out of range.
        """
        view = self._plain_out.get(index) if type(index) is int and out is None else None
        if view is not None:
            return NDArray(view, self.executor.device)
        outputs = self.executor.outputs
        if not (isinstance(index, (int, np.integer)) and 0 <= index < len(outputs)):
            names = ", ".join(t.describe() for t in outputs)
            raise InputError(
                f"output index {index!r} out of range: the model has "
                f"{len(outputs)} outputs ({names})"
            )
        view = self.executor.output_view(int(index))
        spec = self._seq_out.get(int(index))
        if spec is not None:  # a sequence/optional: a list of arrays, an array, or None
            return unpack(spec, view, outputs[int(index)].name)
        if view.dtype.kind == "S":  # a string tensor: str objects, as ONNX Runtime's
            view = from_utf8(view)
        if out is not None:
            np.copyto(out, view)
        return NDArray(view, self.executor.device)

    def get_num_inputs(self) -> int:
        """Number of graph inputs."""
        return len(self.executor.inputs)

    def get_num_outputs(self) -> int:
        """Number of graph outputs."""
        return len(self.executor.outputs)

    def _dims(self, info: TensorInfo) -> tuple:
        if not info.dynamic:
            return info.shape
        symbols = self.executor.shapes.symbols
        return tuple(symbols[d].info() if d in symbols else d for d in info.shape)

    def get_input_info(self) -> tuple[dict[str, tuple], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the inputs, by name (TVM's order).

        A run-time dim appears as ``(name, lo, hi)``, or ``(name, lo, hi, step)``
        when its step is above 1: e.g. ``{"x": (("batch", 1, 8), 3, 224, 224)}``. A
        sequence or optional appears as ``(kind, capacity, elem_max)`` with dtype
        ``"sequence(float32)"``, ``"optional_tensor(float32)"``...
        """
        return self._info(self.executor.inputs, self._seq_in)

    def get_output_info(self) -> tuple[dict[str, tuple], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the outputs, by name; a run-time dim
        appears as its dim expression string (``"batch"``, ``"(x_2 / 4)"``), or as
        ``(name, lo, hi[, step])`` where it is a symbol itself; a sequence or optional
        as in :meth:`get_input_info`."""
        return self._info(self.executor.outputs, self._seq_out)

    def _info(self, infos: Any, seqs: dict) -> tuple[dict[str, tuple], dict[str, str]]:
        shapes, dtypes = {}, {}
        for i, t in enumerate(infos):
            spec = seqs.get(i)
            if spec is None:
                shapes[t.name], dtypes[t.name] = self._dims(t), str(t.dtype)
            else:
                lay = spec.layout
                shapes[t.name] = (spec.kind, lay.capacity, lay.elem_max)
                dtypes[t.name] = f"{spec.kind}({spec.dtype})"
        return shapes, dtypes

    def load_params(self, params: Any) -> None:
        """Use other weights: ``{name: array}`` or a safetensors file path / bytes
        (see :meth:`GraphExecutor.load_params`)."""
        self.executor.load_params(params)

    def share_params(self, other: Any) -> None:
        """Run with the params of ``other`` (GraphModule or GraphExecutor), no copy
        (see :meth:`GraphExecutor.share_params`)."""
        self.executor.share_params(other)

    def benchmark(self, repeat: int = 10, number: int = 1, warmup: int = 1) -> BenchmarkResult:
        """Time :meth:`run` on the current inputs (TVM's ``GraphModule.benchmark``).

        Parameters
        ----------
        repeat : int
            Number of measurements.
        number : int
            Runs per measurement (the measurement is their mean).
        warmup : int
            Untimed runs first.

        Returns
        -------
        BenchmarkResult
            Seconds per run of each measurement, with mean/median/min/max/std.
        """
        for _ in range(warmup):
            self.executor.run()
        results = []
        for _ in range(max(1, repeat)):
            t = time.perf_counter()
            for _ in range(max(1, number)):
                self.executor.run()
            results.append((time.perf_counter() - t) / max(1, number))
        return BenchmarkResult(results)

    @property
    def input_names(self) -> list[str]:
        """Input names in index order."""
        return [t.name for t in self.executor.inputs]

    @property
    def output_names(self) -> list[str]:
        """Output names in index order."""
        return [t.name for t in self.executor.outputs]


def _statistic(reduce: Any, what: str) -> property:
    """A read-only property: ``reduce`` of the measurements, in seconds per run."""
    return property(lambda self: float(reduce(self.results)), doc=f"{what} (seconds per run).")


class BenchmarkResult:
    """Seconds per run of each measurement of :meth:`GraphModule.benchmark`.

    Attributes
    ----------
    results : list of float
        Seconds per run, one per measurement.
    mean, median, min, max, std : float
        Their statistics (seconds per run).
    """

    mean = _statistic(np.mean, "Mean")
    median = _statistic(np.median, "Median")
    min = _statistic(np.min, "Minimum")
    max = _statistic(np.max, "Maximum")
    std = _statistic(np.std, "Standard deviation")

    def __init__(self, results: list[float]) -> None:
        self.results = list(results)

    def __str__(self) -> str:
        return (
            f"mean {self.mean * 1e3:.3f} ms, median {self.median * 1e3:.3f} ms, "
            f"min {self.min * 1e3:.3f} ms, std {self.std * 1e3:.3f} ms "
            f"({len(self.results)} measurements)"
        )
