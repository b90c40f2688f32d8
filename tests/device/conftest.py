"""Fixtures of the device tests: is an OpenCL device / NVRTC / a GPU here, and a
fresh-process runner for exported device libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

FRESH = Path(__file__).with_name("fresh_device_run.py")


def _opencl_reason() -> str | None:
    try:
        from monolib.runtime.opencl_module import devices

        devices()
    except Exception as exc:  # noqa: BLE001  (any failure means: no device here)
        return f"no OpenCL device here ({exc})"
    return None


@pytest.fixture(scope="session")
def need_opencl():
    """Skip unless an OpenCL device (PoCL in CI) is usable."""
    reason = _opencl_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def need_nvrtc():
    """Skip unless NVRTC (cuda-python + nvidia-cuda-nvrtc-cu12) loads; it needs no GPU."""
    from monolib.runtime.cuda_module import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed (pip install cuda-python nvidia-cuda-nvrtc-cu12)")


@pytest.fixture(scope="session")
def fresh_device_run(tmp_path_factory):
    """``fresh_device_run(lib, inputs, kind, env=None) -> (outputs, info)``: load and run
    ``lib`` on ``kind`` in a new Python process."""
    work = tmp_path_factory.mktemp("fresh-device")
    counter = iter(range(1_000_000))

    def run(lib: Path, inputs: dict, kind: str = "opencl", env=None):
        n = next(counter)
        inp, out = work / f"in{n}.npz", work / f"out{n}.npz"
        np.savez(inp, **inputs)
        proc = subprocess.run([sys.executable, str(FRESH), str(lib), str(inp), str(out), kind],
                              capture_output=True, text=True, timeout=600, env=env,
                              check=False)
        if proc.returncode != 0:
            pytest.fail(f"fresh process failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}",
                        pytrace=False)
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        with np.load(out) as z:
            return [z[f"out{i}"] for i in range(len(z.files))], info

    return run
