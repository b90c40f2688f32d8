"""The tuning cache: measured choices per CPU, invalidated by a kernel change.

One JSON file per CPU under ``~/.cache/monolib/tuning`` (``MONOLIB_TUNING_DIR``
overrides), named for the CPU key's hash::

    {"version": 1, "cpu": "<model name> | <ISA flags>", "kernels": "<hash>",
     "entries": {"<signature key>": {"choice": "winograd(m=4)", "default": "gemm",
                                     "times_ms": {"gemm": 1.9, ...}}},
     "conv_costs": {"gemm": {"mac": 0.0166, ...}, ...}}

``conv_costs`` (optional) is this CPU's calibration of the Conv cost model
(``bench/calibrate_conv.py --write``): the fixed rule prices candidates with it on
signatures that have no measured choice.

The CPU key is ``/proc/cpuinfo``'s model name plus the ISA flags that ``-march=native``
builds use; ``kernels`` hashes the kernel headers and emitters the candidates run
(:data:`KERNEL_SOURCES`). A file whose ``kernels`` differs is ignored when read and
replaced when written, so a kernel change invalidates every entry. The file is plain JSON:
copy it to a machine with the same CPU (``monolib tune export`` / ``import``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
from pathlib import Path
from typing import Any

from ...errors import CompileError

__all__ = [
    "KERNEL_SOURCES", "TuningCache", "cpu_key", "default_dir", "kernel_hash",
]

logger = logging.getLogger(__name__)

VERSION = 1

#: Files (relative to ``compiler/ops``) whose text decides what a candidate runs.
KERNEL_SOURCES: tuple[str, ...] = (
    "nn/conv.py", "nn/conv.h", "nn/conv_depthwise.h", "nn/winograd.py", "nn/winograd.h",
    "nn/conv_pixel_rows.py", "nn/conv_dw_along_w.py", "nn/conv_dw_blocked.py", "nn/_gemm.py",
    "nn/gemm.h",
    "nn/conv_ocv.py", "nn/conv_ocv.h",
)

#: ``/proc/cpuinfo`` flags that change the code ``-march=native`` builds.
ISA_FLAGS: tuple[str, ...] = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "amx_tile", "asimd", "sve", "sve2",
)


def default_dir() -> Path:
    """``MONOLIB_TUNING_DIR``, else ``$XDG_CACHE_HOME/monolib/tuning``, else
    ``~/.cache/monolib/tuning``."""
    env = os.environ.get("MONOLIB_TUNING_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "monolib" / "tuning"


def cpu_key(cpuinfo: str | None = None) -> str:
    """``"<model name> | <flags>"`` of this CPU (or of ``cpuinfo``'s text).

    Parameters
    ----------
    cpuinfo : str, optional
        ``/proc/cpuinfo`` text; read from the system when None (elsewhere than Linux:
        ``platform.processor()`` and no flags).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model = re.search(r"^(?:model name|Model|CPU part)\s*:\s*(.+)$", cpuinfo, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", cpuinfo, re.M)
    name = model.group(1).strip() if model else (platform.processor() or platform.machine())
    have = set(flags.group(1).split()) if flags else set()
    return f"{name} | {' '.join(f for f in ISA_FLAGS if f in have)}"


def kernel_hash(root: Path | None = None, files: tuple[str, ...] = KERNEL_SOURCES) -> str:
    """SHA-256 (16 hex digits) of the kernel sources ``files`` under ``root``
    (default ``compiler/ops``); a missing file counts as empty."""
    root = root or Path(__file__).resolve().parent.parent / "ops"
    h = hashlib.sha256()
    for name in files:
        p = root / name
        h.update(name.encode() + b"\0")
        h.update(p.read_bytes() if p.exists() else b"")
    return h.hexdigest()[:16]


class TuningCache:
    """The measured choices of one CPU and one kernel version.

    Parameters
    ----------
    directory : path, optional
        Default :func:`default_dir`.
    cpu : str, optional
        Default :func:`cpu_key`.
    kernels : str, optional
        Default :func:`kernel_hash`.
    """

    def __init__(
        self, directory: Any = None, cpu: str | None = None, kernels: str | None = None
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_dir()
        self.cpu = cpu if cpu is not None else cpu_key()
        self.kernels = kernels if kernels is not None else kernel_hash()
        self.entries: dict[str, dict[str, Any]] = {}
        #: this CPU's Conv cost constants (``bench/calibrate_conv.py --write``), or {}
        self.conv_costs: dict[str, dict[str, float]] = {}
        data = self._read(self.path)
        if data is not None and data.get("kernels") == self.kernels:
            self.entries = dict(data.get("entries", {}))
            self.conv_costs = _valid_costs(data.get("conv_costs"), self.path)
        elif data is not None:
            logger.info("tuning cache %s: kernels changed (%s -> %s), entries dropped",
                        self.path, data.get("kernels"), self.kernels)

    @property
    def path(self) -> Path:
        """This CPU's file: ``<directory>/<hash of cpu>.json``."""
        return self.directory / (hashlib.sha256(self.cpu.encode()).hexdigest()[:16] + ".json")

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            logger.warning("tuning cache %s unreadable (%s): ignored", path, e)
            return None
        return data if isinstance(data, dict) and data.get("version") == VERSION else None

    def choices(self) -> dict[str, str]:
        """Signature key -> chosen candidate label."""
        return {k: e["choice"] for k, e in self.entries.items() if "choice" in e}

    def put(self, key: str, choice: str, default: str, times_ms: dict[str, float]) -> None:
        """Record a measured choice (kept in memory until :meth:`save`)."""
        self.entries[key] = {
            "choice": choice, "default": default,
            "times_ms": {k: round(v, 4) for k, v in times_ms.items()},
        }

    def document(self) -> dict[str, Any]:
        """The JSON document of this cache."""
        doc = {"version": VERSION, "cpu": self.cpu, "kernels": self.kernels,
               "entries": self.entries}
        if self.conv_costs:
            doc["conv_costs"] = self.conv_costs
        return doc

    def save(self) -> Path:
        """Write the file atomically (a rename); returns its path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.document(), indent=1, sort_keys=True))
        os.replace(tmp, self.path)
        return self.path

    def merge_file(self, path: Any) -> int:
        """Add the entries of an exported file (same CPU and kernels); returns how many.

        Raises
        ------
        CompileError
            When the file is not a tuning cache, or was measured on another CPU or
            with other kernels (its choices would not apply).
        """
        data = self._read(Path(path))
        if data is None:
            raise CompileError(f"{path}: not a monolib tuning cache (version {VERSION})")
        for field, mine in (("cpu", self.cpu), ("kernels", self.kernels)):
            if data.get(field) != mine:
                raise CompileError(
                    f"{path}: measured with {field} {data.get(field)!r}, this machine has "
                    f"{mine!r}: its choices do not apply here"
                )
        self.entries.update(data.get("entries", {}))
        self.conv_costs = _valid_costs(data.get("conv_costs"), Path(path)) or self.conv_costs
        return len(data.get("entries", {}))


def _valid_costs(costs: Any, path: Path) -> dict[str, dict[str, float]]:
    """``costs`` if it has exactly the algorithms and constants of ``conv_cost.COSTS``
    (a table fitted for another version of the cost model does not apply), else {}."""
    from ..ops.nn.conv_cost import COSTS

    if not costs:
        return {}
    ok = isinstance(costs, dict) and set(costs) == set(COSTS) and all(
        isinstance(costs[a], dict) and set(costs[a]) == set(COSTS[a])
        and all(isinstance(v, (int, float)) and v >= 0 for v in costs[a].values())
        for a in COSTS)
    if not ok:
        logger.info("tuning cache %s: conv_costs fitted for another cost model: ignored", path)
        return {}
    return {a: {k: float(v) for k, v in costs[a].items()} for a in COSTS}
