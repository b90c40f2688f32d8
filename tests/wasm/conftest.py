"""Fixtures of the WebAssembly tests (issue 17): the PP-OCR classifier and recognizer
compiled to ``.wasm`` once per test session (shared by the pytest-xdist workers through
a file lock, and by the Python and JavaScript hosts' tests), and their inputs.

The first ``.wasm`` build on a machine also builds zig's wasi-libc (a few minutes,
then cached by zig); the tests are skipped without ``ziglang``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

#: name -> (model key, input shape) of the .wasm builds
WASM_BUILDS = {"cls": ("ppocr_cls", (1, 3, 48, 192)), "rec": ("ppocr_rec", (1, 3, 48, 320))}
#: the target (one of the spellings it takes; the tests of targets.py check the others)
WASM_TARGET = "c -mtriple=wasm32-wasi"
TEXT = "Hello World 2024"


@pytest.fixture(scope="session")
def wasm_dir(tmp_path_factory) -> Path:
    """A directory every xdist worker of this session shares."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    d = base / "monolib-wasm"
    d.mkdir(exist_ok=True)
    return d


def _build(name: str, out: Path) -> None:
    """``monolib compile`` (the CLI, in a child process) to ``out`` (no suffix given:
    the target's ``.wasm`` is appended)."""
    from monolib.models import fetch_model

    key, shape = WASM_BUILDS[name]
    stem = out.with_suffix("")
    cmd = [sys.executable, "-m", "monolib.cli", "compile", str(fetch_model(key)), "-o", str(stem),
           "--shape", "x=" + ",".join(map(str, shape)), "--target", WASM_TARGET]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if res.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n"
                           f"{(res.stderr or res.stdout)[-3000:]}")


@pytest.fixture(scope="session")
def wasm_lib(wasm_dir):
    """``wasm_lib(name) -> Path`` of the ``.wasm`` of ``WASM_BUILDS[name]``, built once
    per session; a failure is recorded so other workers fail fast with it."""
    pytest.importorskip("ziglang")

    def get(name: str) -> Path:
        lib, err = wasm_dir / f"{name}.wasm", wasm_dir / f"{name}.err"
        with open(wasm_dir / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if err.exists():
                pytest.fail(err.read_text())
            if not lib.exists():
                try:
                    _build(name, lib)
                except Exception as exc:  # noqa: BLE001  (recorded for the other workers)
                    err.write_text(str(exc))
                    raise
        return lib

    return get


@pytest.fixture(scope="session")
def text_line() -> np.ndarray:
    """``TEXT`` rendered black on white (uint8 RGB)."""
    pytest.importorskip("PIL")
    from monolib.models import ocr

    return ocr.render_line(TEXT)


# ------------------------------------------------------------ JavaScript hosts (test_wasm_js)
HERE = Path(__file__).resolve().parent
#: monolib.mjs as the package ships it (``monolib js`` prints it)
MJS = HERE.parents[1] / "src" / "monolib" / "js" / "monolib.mjs"
#: the flags Chromium runs headless with, here and in bench/wasm.py
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` executable (Node >= 18), else the test is skipped."""
    import shutil

    exe = shutil.which("node")
    if exe is None:
        pytest.skip("no node")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    if int(ver.strip().lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"node {ver.strip()} < 18")
    return exe


def serve_dir(root: Path, on_post):
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (a free port) serving ``root``, cross-origin
    isolated (COOP/COEP, as a page using wasm threads would be), no caching; a POST's body
    goes to ``on_post(path, body)``, whose bytes (if any) are the answer. Started in a daemon thread; call ``.shutdown()``."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Handler(SimpleHTTPRequestHandler):
        def end_headers(self):
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cache-Control", "no-store")
            super().end_headers()

        def do_POST(self):  # http.server's spelling
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            answer = on_post(self.path, body) or b""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_chromium(url: str, done, timeout: float, profile: Path) -> None:
    """Open ``url`` in a headless Chromium (own process group) until ``done`` (a
    ``threading.Event``) is set or ``timeout`` s pass, then end that group."""
    import signal

    exe = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        if not done.wait(timeout):
            proc.poll()
            raise TimeoutError(f"chromium gave no report within {timeout} s (exit {proc.returncode})")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this call started
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of headless Chromium, else the test is skipped."""
    exe = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not os.access(exe, os.X_OK):
        pytest.skip(f"no chromium at {exe}")
    return exe
