"""What a serving replica runs a model with: a small Backend interface (the inputs' and
outputs' specs, ``run(feeds)``), implemented by monolib libraries and, for comparison,
by ONNX Runtime on the ``.onnx`` (``bench/serve.py`` runs the same app on both).

No Ray here: a backend is plain Python, unit-testable in-process. A backend holds one
executor (or session) per concurrent slot; :meth:`Backend.run` takes a free one, so
``slots`` threads may run at once without sharing an arena.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["Backend", "Dim", "MonolibBackend", "OrtBackend", "TensorSpec", "open_backend"]

logger = logging.getLogger(__name__)

#: bound of a dim ONNX Runtime knows nothing about (a ``None`` or ``"?"`` in its shapes)
UNBOUNDED = 2**31 - 1


@dataclass(frozen=True)
class Dim:
    """A run-time dim of an input: values ``lo <= v <= hi`` with ``v % step == 0``."""

    name: str
    lo: int
    hi: int
    step: int = 1

    def contains(self, value: int) -> bool:
        """Whether ``value`` is in bounds and on step."""
        return self.lo <= value <= self.hi and value % self.step == 0

    def bounds(self) -> str:
        """``"[lo, hi]"`` (and ``" step s"``), for messages."""
        return f"[{self.lo}, {self.hi}]" + (f" step {self.step}" if self.step != 1 else "")


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output as the protocol sees it.

    Parameters
    ----------
    name : str
        Tensor name.
    dtype : np.dtype
        NumPy dtype; kind ``"S"`` or ``"O"`` for a string tensor.
    dims : tuple
        Per axis: an int (static), a :class:`Dim` (an input's run-time dim) or a str
        (an output's dim expression over the input dims' names, e.g. ``"x_0"``).
    """

    name: str
    dtype: np.dtype
    dims: tuple

    def metadata_shape(self) -> list[int]:
        """The shape with every run-time dim as -1 (the protocol's metadata)."""
        return [d if type(d) is int else -1 for d in self.dims]

    def describe(self) -> str:
        """``"x: float32[-1, 3, 48, 192]"``, with bounds, for messages."""
        dims = ", ".join(str(d) if type(d) is int else
                         (f"{d.name}{d.bounds()}" if isinstance(d, Dim) else str(d))
                         for d in self.dims)  # fmt: skip
        return f"{self.name}: {self.dtype}[{dims}]"


class Backend:
    """The interface a serving replica runs a model through.

    Attributes
    ----------
    inputs, outputs : list of TensorSpec
        The model's inputs and outputs, in order.
    """

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model on ``feeds`` (every input, checked by the protocol) and return
        ``{output name: array}`` (arrays the caller owns). Thread-safe up to the
        backend's slots."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the model (executors, sessions); the backend is unusable after."""


class _Pool:
    """``slots`` runners handed out one per call (a run never shares an arena)."""

    def __init__(self, runners: Sequence[Any]) -> None:
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for r in runners:
            self._free.put(r)

    def take(self) -> Any:
        """A free runner (blocks until one is); give it back with :meth:`give`."""
        return self._free.get()

    def give(self, runner: Any) -> None:
        """Return ``runner`` to the pool."""
        self._free.put(runner)


class MonolibBackend(Backend):
    """A monolib library: loaded once (verified against ``trusted_keys`` when given),
    one executor per slot, the library's pool on ``threads`` threads.

    Parameters
    ----------
    path : str
        The library (``model.so``).
    threads : int
        Threads of the library's own pool (``monolib.set_num_threads``; a Ray worker
        has ``OMP_NUM_THREADS=1``, which the library does not read).
    trusted_keys : sequence, optional
        Public keys (paths or bytes) the library's signature must verify against
        before any of its code runs (``load_module(trusted_keys=...)``).
    slots : int
        Executors, i.e. runs that may be in flight at once.
    spin_us : int
        How long the pool's workers spin after a job (0 under serving: a replica waits
        for requests most of the time, and a spinning worker burns a core:
        ``monolib.set_spin``).
    """

    def __init__(self, path: str, *, threads: int = 1, trusted_keys: Any = None,
                 slots: int = 1, spin_us: int = 0) -> None:
        from .. import runtime
        from ..runtime.device import cpu
        from ..runtime.graph_module import GraphModule
        from ..runtime.library import load_module

        self.path = str(path)
        self.factory = load_module(self.path, trusted_keys=list(trusted_keys) if trusted_keys
                                   else None)
        self._gms = [GraphModule(self.factory.default(cpu())) for _ in range(max(1, slots))]
        runtime.set_num_threads(threads)
        runtime.set_spin(spin_us)
        ex = self._gms[0].executor
        symbols = ex.shapes.symbols if getattr(ex, "shapes", None) is not None else {}

        def dim(d: Any) -> Any:
            if type(d) is int:
                return d
            s = symbols.get(d)
            return Dim(s.name, s.lo, s.hi, s.step) if s is not None else str(d)

        self.inputs = [TensorSpec(t.name, t.dtype, tuple(dim(d) for d in t.shape))
                       for t in ex.inputs]
        self.outputs = [TensorSpec(t.name, t.dtype, tuple(d if type(d) is int else str(d)
                                                          for d in t.shape))
                        for t in ex.outputs]
        self._pool = _Pool(self._gms)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on a free executor; outputs are copies (see :meth:`Backend.run`)."""
        gm = self._pool.take()
        try:
            gm.set_input(**feeds)
            gm.run()
            return {t.name: gm.get_output(i).numpy()
                    for i, t in enumerate(self.outputs)}
        finally:
            self._pool.give(gm)

    def close(self) -> None:
        """Drop the executors and unload the library (``Module.close``)."""
        self._gms.clear()
        self.factory.close()


_ORT_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64",
              "tensor(float16)": "float16", "tensor(int8)": "int8", "tensor(int16)": "int16",
              "tensor(int32)": "int32", "tensor(int64)": "int64", "tensor(uint8)": "uint8",
              "tensor(uint16)": "uint16", "tensor(uint32)": "uint32",
              "tensor(uint64)": "uint64", "tensor(bool)": "bool", "tensor(string)": "object"}


class OrtBackend(Backend):
    """ONNX Runtime on the ``.onnx`` (the baseline ``bench/serve.py`` compares with).

    ONNX Runtime knows no bounds: a dim without a fixed size takes any value >= 1. Axis 0
    of every input and output, when none is fixed, is taken as one shared batch dim
    named ``"batch"`` (ONNX leaves it unnamed in many exported models).

    Parameters
    ----------
    path : str
        The ``.onnx`` model.
    threads : int
        ``intra_op_num_threads``; spinning is off as it is for monolib (fair idle cost).
    slots : int
        Concurrent runs (one session runs concurrent calls itself; kept for the pool's
        bound).
    """

    def __init__(self, path: str, *, threads: int = 1, slots: int = 1, **_: Any) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = str(path)
        self.session = ort.InferenceSession(self.path, so, providers=["CPUExecutionProvider"])
        ins, outs = self.session.get_inputs(), self.session.get_outputs()
        batch = all(a.shape and type(a.shape[0]) is not int for a in list(ins) + list(outs))

        def dims(arg: Any, output: bool) -> tuple:
            out = []
            for axis, d in enumerate(arg.shape):
                if type(d) is int:
                    out.append(d)
                    continue
                name = "batch" if batch and axis == 0 else (
                    d if isinstance(d, str) and d != "?" else f"{arg.name}:{axis}")
                out.append(name if output else Dim(name, 1, UNBOUNDED))
            return tuple(out)

        self.inputs = [TensorSpec(a.name, np.dtype(_ORT_TYPES.get(a.type, "float32")),
                                  dims(a, False)) for a in ins]
        self.outputs = [TensorSpec(a.name, np.dtype(_ORT_TYPES.get(a.type, "float32")),
                                   dims(a, True)) for a in outs]
        self._names = [a.name for a in outs]
        self._pool = _Pool([self.session] * max(1, slots))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``session.run`` on ``feeds`` (see :meth:`Backend.run`)."""
        sess = self._pool.take()
        try:
            return dict(zip(self._names, sess.run(self._names, dict(feeds))))
        finally:
            self._pool.give(sess)

    def close(self) -> None:
        """Drop the session."""
        self.session = None


_KINDS = {"monolib": MonolibBackend, "onnxruntime": OrtBackend}


def open_backend(kind: str, path: str, **options: Any) -> Backend:
    """Open ``path`` with the backend ``kind`` (``"monolib"`` or ``"onnxruntime"``).

    Parameters
    ----------
    kind : str
        Backend name.
    path : str
        The library (monolib) or ``.onnx`` (onnxruntime).
    **options
        The backend's keyword options (``threads``, ``slots``, ``trusted_keys``...).

    Raises
    ------
    InputError
        Unknown ``kind``.
    """
    cls = _KINDS.get(kind)
    if cls is None:
        raise InputError(f"unknown serving backend {kind!r}: use one of {', '.join(_KINDS)}")
    if cls is OrtBackend:
        options.pop("trusted_keys", None)
        options.pop("spin_us", None)
    return cls(path, **options)

