"""Fixtures of the serving tests: PP-OCR cls compiled once with a run-time batch dim
(1..8), one Ray instance per test session (2 CPUs, no dashboard) with Serve's HTTP
proxy on a free port, and `monolib serve` run as a command joining that Ray.

Ray starts in ~10 s; everything that needs it shares this one. Tests that need no Ray
(protocol, batching, the replica's handler called in-process) do not request it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import monolib

CLS_SHAPES = {"x": ((1, 8), 3, 48, 192)}
#: where `import monolib` resolves here: Ray's workers and the CLI must import the same
SRC = str(Path(monolib.__file__).resolve().parents[1])


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the group into the node id
def pytest_collection_modifyitems(config, items):
    """Every serving test in one xdist group (``--dist loadgroup``): one worker, one Ray."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.xdist_group("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _compile_cls(path: Path, shapes: dict = CLS_SHAPES) -> Path:
    """PP-OCR cls exported to ``path`` with ``shapes`` (default: batch 1..8)."""
    from monolib.models import fetch_model

    monolib.compile(str(fetch_model("ppocr_cls")), target="c", shapes=shapes).export_library(
        str(path))
    return path


@pytest.fixture(scope="session")
def cls_lib(tmp_path_factory) -> Path:
    """PP-OCR cls with a run-time batch dim 1..8, exported once per session."""
    return _compile_cls(tmp_path_factory.mktemp("serve") / "cls.so")


@pytest.fixture(scope="session")
def compile_cls():
    """``compile_cls(path, shapes=...) -> path``: PP-OCR cls exported with those shapes."""
    return _compile_cls


@pytest.fixture(scope="session")
def cls_images():
    """Random cls inputs ``(b, 3, 48, 192)`` for b = 1..3 (the model's dtype)."""
    rng = np.random.default_rng(16)
    return [rng.standard_normal((b, 3, 48, 192)).astype(np.float32) for b in (1, 2, 3, 1, 2)]


@pytest.fixture(scope="session")
def reference(cls_lib):
    """``reference(x) -> y``: the in-process GraphModule's output on ``x``."""
    gm = monolib.GraphModule(monolib.load_module(str(cls_lib)))

    def run(x: np.ndarray) -> np.ndarray:
        gm.run(x=x)
        return gm.get_output(0).numpy()

    return run


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session (num_cpus=2, no dashboard); yields its GCS
    address (``ray.init(address=...)`` / ``monolib serve --address``)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.serve")
    os.environ["PYTHONPATH"] = _env()["PYTHONPATH"]  # the workers import this monolib
    # Serve's controller kills an HTTP proxy not ready within 5 s (and retries): on two
    # cores busy with the other test worker's compiles, serve.start then failed with
    # ActorDiedError. The processes Ray starts inherit these.
    for name in ("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S"):
        os.environ.setdefault(name, "60")
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ctx.address_info["gcs_address"]
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_serve(ray_session):
    """Serve's HTTP proxy on a free port of that Ray: yields ``(gcs address, port)``."""
    from ray import serve

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return ray_session, port


def wait_ready(url: str, timeout: float = 120.0, proc: subprocess.Popen | None = None,
               log: Path | None = None) -> None:
    """Poll ``url`` until it answers 200 (fail after ``timeout`` or if ``proc`` exits,
    showing its ``log``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"`monolib serve` exited with {proc.returncode}:\n"
                                 f"{log.read_text() if log else ''}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} not ready after {timeout} s")


@pytest.fixture(scope="session")
def served_cls(ray_serve, cls_lib, tmp_path_factory):
    """`monolib serve cls=LIB --max-batch 8 --address GCS` running; yields
    ``"127.0.0.1:PORT"``; stopped with SIGTERM (it deletes its application)."""
    address, port = ray_serve
    cmd = [sys.executable, "-m", "monolib.cli", "serve", f"cls={cls_lib}", "--port", str(port),
           "--max-batch", "8", "--threads", "1", "--address", address]
    log = tmp_path_factory.mktemp("serve-cli") / "serve.log"
    with open(log, "w") as out:  # a file, not a pipe: nobody reads a pipe while it serves
        proc = subprocess.Popen(cmd, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/models/cls/ready", proc=proc, log=log)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
