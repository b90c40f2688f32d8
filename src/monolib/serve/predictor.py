"""Offline batch inference on Ray Data: :class:`Predictor`.

``ray.data.Dataset.map_batches(Predictor, fn_constructor_args=(path,), ...)`` makes one
``Predictor`` per actor: the library is loaded once there (verified first when
``trusted_keys`` are given), and every batch Ray hands the actor runs through the same
executor. A model whose inputs and outputs all lead with the same run-time dim (the
batch dim, e.g. ``("batch", 1, 8)``) runs the batch in chunks of at most its upper
bound (a short tail padded up to the lower bound); any other model runs row by row.
Nothing here imports Ray: the class only has
to be a callable that takes and returns a dict of NumPy arrays.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from ..errors import InputError
from .backend import Dim, MonolibBackend
from .batching import find_batch_dim

__all__ = ["Predictor"]

logger = logging.getLogger(__name__)


class Predictor:
    """A callable class for ``ray.data.Dataset.map_batches`` over a model library.

    Parameters
    ----------
    path : str or os.PathLike
        The library (``model.so``); every node of the cluster must reach it (a
        shared path, or a file shipped with Ray's ``runtime_env={"working_dir": ...}``:
        looked up there by file name when the path does not exist).
    threads : int
        Threads of the library's own pool in this actor (Ray sets
        ``OMP_NUM_THREADS=1``; the pool follows this instead). Default 1.
    trusted_keys : sequence, optional
        Ed25519 public keys: the library must be signed by one of them, checked
        before any of its code runs (:func:`monolib.load_module`).
    max_batch : int, optional
        Rows per run at most (default: the upper bound of the batch dim).

    Notes
    -----
    ``__call__(batch)`` takes the batch as a dict of column -> array (Ray Data's
    ``"numpy"`` batch format) with one column per model input, each of shape
    ``(rows, *input shape without the batch dim)``; a model without a batch dim
    (:func:`monolib.serve.batching.find_batch_dim`) takes each row as its whole input
    (or with a leading 1 added). It returns the model's outputs by name, one row per
    input row, plus every column that is not a model input, unchanged (ids, file
    names). An input of another dtype of the same kind (float64 for float32) is cast;
    any other mismatch is an ``InputError`` naming the input.

    Examples
    --------
    >>> ds = ray.data.from_numpy(images).rename_columns({"data": "x"})
    >>> out = ds.map_batches(Predictor, fn_constructor_args=("cls.so",),
    ...                      batch_size=64, concurrency=2)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        threads: int = 1,
        trusted_keys: Any = None,
        max_batch: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        if not os.path.exists(self.path) and os.path.exists(os.path.basename(self.path)):
            self.path = os.path.basename(self.path)  # shipped in Ray's runtime_env working_dir
        self.backend = MonolibBackend(self.path, threads=threads, trusted_keys=trusted_keys)
        self.inputs = {t.name: np.dtype(t.dtype) for t in self.backend.inputs}
        self.ranks = {t.name: len(t.dims) for t in self.backend.inputs}
        self.outputs = [t.name for t in self.backend.outputs]
        batch = find_batch_dim(self.backend.inputs, self.backend.outputs, max_batch)
        if batch is None and max_batch is not None:
            first = self.backend.inputs[0].dims[0] if self.backend.inputs[0].dims else None
            if isinstance(first, Dim) and max_batch < first.lo:
                raise InputError(
                    f"Predictor({self.path}): max_batch={max_batch} is below the "
                    f"batch dim {first.name}'s lower bound {first.lo}"
                )
        #: (rows per run at most, the batch dim) or None: row by row
        self.batch = None
        if batch is not None:
            self.batch = (batch.limit, self.backend.inputs[0].dims[0])
        logger.info("Predictor %s: batch %s, %d thread(s)", self.path, batch, threads)

    def _columns(self, batch: dict[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        missing = [name for name in self.inputs if name not in batch]
        if missing:
            raise InputError(
                f"Predictor({self.path}): the batch has no column for input(s) "
                f"{', '.join(missing)} (columns: {', '.join(batch)})"
            )
        cols, rows = {}, None
        for name, dtype in self.inputs.items():
            col = np.asarray(batch[name])
            if col.dtype != dtype:
                if col.dtype.kind != dtype.kind:  # float64 -> float32 yes, int -> float no
                    raise InputError(
                        f"Predictor({self.path}): input {name!r} is {col.dtype}, "
                        f"the model takes {dtype}"
                    )
                col = col.astype(dtype)
            if rows is not None and len(col) != rows:
                raise InputError(
                    f"Predictor({self.path}): input {name!r} has {len(col)} rows, "
                    f"the others {rows}"
                )
            cols[name], rows = col, len(col)
        return cols, rows or 0

    def _run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        outs = self.backend.run(feed)
        return [np.array(outs[name]) for name in self.outputs]

    def _batched(self, cols: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        limit, dim = self.batch
        parts: list[list[np.ndarray]] = [[] for _ in self.outputs]
        for start in range(0, rows, limit):
            n = min(limit, rows - start)
            feed = {k: v[start : start + n] for k, v in cols.items()}
            # a tail below the lower bound or off the step: padded with copies of its
            # last row (rows are independent along a batch dim), their outputs dropped
            size = max(n, dim.lo)
            size += -size % dim.step
            if size != n:
                feed = {k: np.concatenate([v, np.repeat(v[-1:], size - n, 0)]) for k, v in feed.items()}
            for part, out in zip(parts, self._run(feed)):
                part.append(out[:n])
        return [np.concatenate(p) for p in parts]

    def _row_by_row(self, cols: dict[str, np.ndarray], rows: int) -> list[np.ndarray]:
        parts: list[list[np.ndarray]] = [[] for _ in self.outputs]
        for r in range(rows):
            feed = {}
            for name, col in cols.items():
                row = col[r]
                # a row one rank short of the input: the model's leading dim is the row's 1
                feed[name] = row[None] if row.ndim == self.ranks[name] - 1 else row
            for part, out in zip(parts, self._run(feed)):
                part.append(out)
        if rows == 0:
            return [np.zeros((0,)) for _ in self.outputs]
        return [np.stack(p) for p in parts]

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        """Run one batch of rows.

        Parameters
        ----------
        batch : dict of str to numpy.ndarray
            One column per model input (rows along axis 0), plus any other columns.

        Returns
        -------
        dict of str to numpy.ndarray
            The outputs by name (one row per input row) and the other columns as given.

        Raises
        ------
        InputError
            A missing input column, a dtype of another kind, columns of unequal
            length, or a row shape the model does not take (naming the input).
        """
        cols, rows = self._columns(batch)
        if self.batch is not None and rows:
            outs = self._batched(cols, rows)
        else:
            outs = self._row_by_row(cols, rows)
        result = {k: v for k, v in batch.items() if k not in self.inputs}
        result.update(zip(self.outputs, outs))
        return result
