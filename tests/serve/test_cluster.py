"""Serving past one machine: a two-node Ray cluster on this machine (``ray start
--head`` and ``ray start --address``, one CPU each, each in its own process group,
with a private temp dir), PP-OCR cls deployed with 2 replicas of one CPU: Ray places
them on the two nodes, and both answer `tritonclient.http` requests with the
in-process GraphModule's outputs.

The cluster is stopped by signalling its two process groups and then every process
that carries this cluster's private marker in its environment (Ray's workers run in
their own process groups). Never ``ray stop``: it stops every Ray on the machine,
the session's shared one and other users' included.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")
tritonclient_http = pytest.importorskip("tritonclient.http")

import monolib  # noqa: E402

SRC = str(Path(monolib.__file__).resolve().parents[1])
OUT = "save_infer_model/scale_0.tmp_1"
MARKER = "MONOLIB_TEST_CLUSTER"
TIMEOUT = 60.0  # seconds a client waits for one answer: nothing may hang

# The driver: joins the cluster, deploys 2 replicas, says which nodes there are, waits
# while the test sends requests, then reports each replica's node and request count.
DRIVER = r"""
import json, sys, time
import ray
from ray import serve
import monolib.serve

address, port, lib = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ray.init(address=address, log_to_driver=False)

def nodes():
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])

end = time.monotonic() + 120
while len(nodes()) < 2 and time.monotonic() < end:
    time.sleep(0.2)
# one HTTP proxy, on the head: both nodes are this machine and would share its port
serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
handle = monolib.serve.run(lib, "127.0.0.1", port, replicas=2, threads=1, max_batch=8)
print(json.dumps({"nodes": nodes()}), flush=True)
sys.stdin.readline()
replicas = {}
end = time.monotonic() + 60
while len(replicas) < 2 and time.monotonic() < end:
    info = handle.info.remote().result(timeout_s=30)
    replicas[info["pid"]] = {"node": info["node"], "requests": info["requests"]}
print(json.dumps({"replicas": list(replicas.values())}), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.skip("the `ray` command is not installed")
    return found


def _wait_port(host: str, port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"ray start exited with {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the head's GCS ({host}:{port}) not up after {timeout} s")


def _marked(tag: str) -> list[int]:
    """Pids of the processes whose environment carries ``MARKER=tag`` (this cluster's)."""
    needle = f"{MARKER}={tag}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _stop(procs: list[subprocess.Popen], tag: str) -> None:
    """SIGTERM the ``ray start`` process groups, then SIGKILL what is left of them and
    every process marked with ``tag`` (workers, agents: in their own groups)."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 3  # a grace period; `ray start --block` takes longer
    while time.monotonic() < end and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    for pid in _marked(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def two_nodes():
    """A head and a worker node, one CPU each; yields ``(gcs address, env)``."""
    ray_cli = _ray_cli()
    # short: Ray's socket paths under it must stay within 107 bytes
    tmp = Path(tempfile.mkdtemp(prefix="mlray", dir="/tmp"))
    token = tmp / "auth_token"
    token.write_text(os.urandom(32).hex())
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([SRC, *filter(None, [env.get("PYTHONPATH")])]),
        "RAY_TMPDIR": str(tmp),  # this cluster's address file: nobody else joins it
        MARKER: str(tmp),
        "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),  # a private token
        # the head's proxy spreads requests over both nodes instead of its own first
        "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0",
    })
    ip = ray.util.get_node_ip_address()
    port = _free_port()
    common = ["--num-cpus", "1", "--disable-usage-stats", "--object-store-memory",
              str(100 << 20), "--block"]
    procs: list[subprocess.Popen] = []
    try:
        head_log = tmp / "head.log"
        with open(head_log, "w") as log:
            procs.append(subprocess.Popen(
                [ray_cli, "start", "--head", "--port", str(port), "--temp-dir", str(tmp),
                 "--include-dashboard", "false", "--ray-client-server-port", str(_free_port()),
                 "--dashboard-agent-listen-port", str(_free_port()), *common],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_port(ip, port, procs[0], head_log, 120)
        with open(tmp / "worker.log", "w") as log:
            procs.append(subprocess.Popen(
                [ray_cli, "start", "--address", f"{ip}:{port}",
                 "--dashboard-agent-listen-port", str(_free_port()), *common],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        yield f"{ip}:{port}", env
    finally:
        _stop(procs, str(tmp))
        shutil.rmtree(tmp, ignore_errors=True)


def _line(proc: subprocess.Popen, timeout: float) -> dict:
    """The driver's next JSON line (fails after ``timeout`` or if it exits)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if line.startswith("{"):
                return json.loads(line)
            if not line and proc.poll() is not None:
                break
    raise AssertionError(f"the driver said nothing in {timeout} s (exit {proc.poll()})")


def test_two_replicas_on_two_nodes_both_answer(two_nodes, cls_lib, cls_images, reference,
                                               tmp_path):
    address, env = two_nodes
    port = _free_port()
    log = open(tmp_path / "driver.log", "w")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, address, str(port), str(cls_lib)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=log, text=True, start_new_session=True)
    try:
        try:
            nodes = _line(driver, 240)["nodes"]
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{(tmp_path / 'driver.log').read_text()[-3000:]}")
        assert len(nodes) == 2
        wants = [reference(x) for x in cls_images]  # one GraphModule: not from 8 threads

        def client(k: int) -> int:
            c = tritonclient_http.InferenceServerClient(f"127.0.0.1:{port}",
                                                        network_timeout=TIMEOUT)
            for i in range(6):
                j = (k + i) % len(cls_images)
                x = cls_images[j]
                inp = tritonclient_http.InferInput("x", list(x.shape), "FP32")
                inp.set_data_from_numpy(x, binary_data=True)
                got = c.infer("cls", [inp]).as_numpy(OUT)
                # batched with other requests: batch-invariant, the same bits
                np.testing.assert_array_equal(got, wants[j])
            return 6

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(client, range(8))) == 48
        driver.stdin.write("go\n")
        driver.stdin.flush()
        replicas = _line(driver, 120)["replicas"]
    finally:
        driver.kill()
        driver.wait()
        log.close()
    # one replica per node (one CPU each), and each answered some of the 48 requests
    assert sorted(r["node"] for r in replicas) == nodes
    assert all(r["requests"] > 0 for r in replicas), replicas
