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


def gpu_reason() -> str | None:
    """None when a CUDA GPU answers through cuda-python's driver bindings, else why not."""
    try:
        from cuda.bindings import driver

        err, = driver.cuInit(0)
        err2, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or err2 != driver.CUresult.CUDA_SUCCESS or not count:
            return f"no CUDA GPU ({err}, {count} devices)"
    except Exception as exc:  # noqa: BLE001  (no bindings, no libcuda: no GPU here)
        return f"no CUDA GPU ({type(exc).__name__}: {exc})"
    return None


def check_outputs_vs_ort(gm, model, feed_sets) -> None:
    """Run ``gm`` (a GraphModule on a device) on each feed dict of ``feed_sets`` and
    compare every output with ONNX Runtime's on ``model``: same shape, within 1e-5 of
    the output's largest magnitude (at least 1). Several feed sets prove nothing stale
    is left in the device arena between runs."""
    from monolib.compiler.testing import ort_run

    for feeds in feed_sets:
        want = ort_run(model, feeds)
        gm.run(**feeds)
        for i, (out, w) in enumerate(zip(model.graph.output, want)):
            got = gm.get_output(i).numpy()
            assert got.shape == w.shape, out.name
            tol = 1e-5 * max(float(np.abs(w).max()), 1.0)
            np.testing.assert_allclose(got, w, rtol=0, atol=tol, err_msg=out.name)


@pytest.fixture(scope="session")
def need_gpu():
    """Skip unless a CUDA GPU is here (never in CI: run on a lent GPU machine)."""
    reason = gpu_reason()
    if reason:
        pytest.skip(f"needs a CUDA GPU: {reason}")


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
