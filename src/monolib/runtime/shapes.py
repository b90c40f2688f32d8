"""Run-time shapes in an executor: input shapes checked against the symbols, the
symbol values written to the arena, the outputs' actual shapes read back.

A graph JSON version 2 (:mod:`monolib.abi.symbols`) names run-time dims: each input
may have any shape within its symbols' bounds. Per run: every input's shape is checked
when it is set (static dims equal, each symbol in bounds and on step, one value per
name within the input); at :meth:`RunShapes.bind` the symbols shared by several inputs
must agree, and their values are written (int64, in ``symbols`` order) at
``arena + sym_offset``; ``monolib_run`` writes the actual shape of every output at
``arena + shape_offset``, read back by :meth:`RunShapes.output_shapes`. A computed
symbol (issue 13, a data-dependent dim) is never bound from an input: the library writes
it during the run, and the output shapes read back carry its value.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from ..abi.graph_spec import TensorInfo
from ..abi.symbols import DynamicLayout, Symbol
from ..errors import ExecutionError, InputError

__all__ = ["RunShapes", "start_shape"]

logger = logging.getLogger(__name__)


def start_shape(info: TensorInfo, symbols: dict[str, Symbol]) -> tuple[int, ...]:
    """The shape an input has before it is set: each symbol at its first in-bounds
    value (the arena is zero-filled, so the input reads as zeros of that shape)."""
    return tuple(d if type(d) is int else symbols[d].first for d in info.shape)


class RunShapes:
    """The run-time-dim state of one executor (one per arena).

    Parameters
    ----------
    layout : DynamicLayout
        The graph's symbols and slots (``abi.graph_spec.graph_layout``).
    inputs, outputs : sequence of TensorInfo
        The graph's inputs and outputs.
    arena : np.ndarray of uint8
        The executor's arena: the symbol and output-shape slots are views of it.
    """

    def __init__(self, layout: DynamicLayout, inputs: Sequence[TensorInfo],
                 outputs: Sequence[TensorInfo], arena: np.ndarray) -> None:
        self.layout = layout
        self.symbols = layout.by_name
        n = len(layout.symbols)
        self._slot = {s.name: k for k, s in enumerate(layout.symbols)}
        self._sym = arena[layout.sym_offset : layout.sym_offset + 8 * n].view(np.int64)
        ranks = [len(t.shape) for t in outputs]
        total = sum(ranks)
        self._out = arena[layout.shape_offset : layout.shape_offset + 8 * total].view(np.int64)
        self._out_at = [sum(ranks[:i]) for i in range(len(ranks))]
        self.outputs = list(outputs)
        # per input: the shape set last, and its (symbol, axis, value) bindings
        self.input_shapes = [start_shape(t, self.symbols) for t in inputs]
        self._bound = [self._bindings(t, s) for t, s in zip(inputs, self.input_shapes)]
        self._inputs = list(inputs)

    @staticmethod
    def _bindings(info: TensorInfo, shape: tuple[int, ...]) -> list[tuple[str, int, int]]:
        return [(d, axis, v) for axis, (d, v) in enumerate(zip(info.shape, shape))
                if type(d) is not int]  # fmt: skip

    def check_input(self, info: TensorInfo, shape: tuple[int, ...]) -> None:
        """Check ``shape`` for input ``info`` on its own (before anything is copied).

        Raises
        ------
        InputError
            A wrong rank, a static dim that differs, a symbol out of bounds or off
            step, or one symbol given two values within this input; the message
            names the input, the axis, the dim name, its bounds and the value.
        """
        if len(shape) != len(info.shape):
            raise InputError(
                f"input {info.name!r} has {len(shape)} dims {list(shape)}, the model expects "
                f"{len(info.shape)}: {info.describe()}"
            )
        seen: dict[str, tuple[int, int]] = {}
        for axis, (d, v) in enumerate(zip(info.shape, shape)):
            if type(d) is int:
                if v != d:
                    raise InputError(
                        f"input {info.name!r} axis {axis} is {v}, the model expects {d} "
                        f"({info.describe()})"
                    )
                continue
            sym = self.symbols[d]
            if not sym.contains(v):
                raise InputError(
                    f"input {info.name!r} axis {axis} (dim {d!r}) is {v}, outside its bounds "
                    f"{sym.bounds()}"
                )
            if d in seen and seen[d][1] != v:
                raise InputError(
                    f"input {info.name!r} axes {seen[d][0]} and {axis} share dim {d!r} "
                    f"{sym.bounds()} but are {seen[d][1]} and {v}"
                )
            seen[d] = (axis, v)

    def set_input(self, i: int, shape: tuple[int, ...]) -> None:
        """Record input ``i``'s new shape (checked by :meth:`check_input`)."""
        self.input_shapes[i] = shape
        self._bound[i] = self._bindings(self._inputs[i], shape)

    def bind(self) -> None:
        """Check the symbols shared by several inputs and write every symbol's value
        at ``arena + sym_offset`` (before each run).

        Raises
        ------
        InputError
            Two inputs give one symbol two values; the message names both inputs,
            their axes, the dim and its bounds.
        """
        values: dict[str, tuple[int, int, int]] = {}
        for i, bound in enumerate(self._bound):
            for name, axis, v in bound:
                first = values.setdefault(name, (i, axis, v))
                if first[2] != v:
                    j, ax = first[0], first[1]
                    raise InputError(
                        f"inputs {self._inputs[j].name!r} (axis {ax}) and "
                        f"{self._inputs[i].name!r} (axis {axis}) share dim {name!r} "
                        f"{self.symbols[name].bounds()} but are {first[2]} and {v}"
                    )
        for name, (_, _, v) in values.items():
            self._sym[self._slot[name]] = v

    def symbol_values(self) -> dict[str, int]:
        """``{name: value}`` of the symbols as last written by :meth:`bind` (the
        computed ones as the last run wrote them)."""
        return {s.name: int(self._sym[k]) for k, s in enumerate(self.layout.symbols)}

    def specialized(self) -> int | None:
        """Index of the ``specializations`` entry the symbols last bound match
        exactly (the library runs its static path), else None."""
        values = {n: v for n, v in self.symbol_values().items()
                  if not self.symbols[n].computed}  # the library writes the computed ones
        return next((k for k, s in enumerate(self.layout.specializations) if s == values), None)

    def output_shape(self, i: int) -> tuple[int, ...]:
        """Output ``i``'s actual shape, as ``monolib_run`` wrote it.

        Raises
        ------
        ExecutionError
            The library wrote a negative size, a static dim that differs, or a shape
            larger than the output's arena slot (``max_nbytes``).
        """
        info = self.outputs[i]
        at = self._out_at[i]
        shape = tuple(int(v) for v in self._out[at : at + len(info.shape)])
        bad = any(v < 0 or (type(d) is int and v != d) for d, v in zip(info.shape, shape))
        if bad or math.prod(shape) * info.dtype.itemsize > info.nbytes:
            raise ExecutionError(
                f"output {info.name!r}: the library wrote shape {list(shape)}, which does not "
                f"fit {info.describe()} in {info.nbytes} bytes"
            )
        return shape
