"""Faults while serving (issue 16), on the session's Ray (conftest.py):

* a replica process killed (SIGKILL) mid-traffic is restarted by Ray; the endpoint
  keeps answering; requests in flight on it may fail with a 5xx, none hangs (every
  client waits at most ``TIMEOUT``);
* a library replaced by a new version is redeployed under load with no failed
  request: requests in flight when the rollout starts finish on the old version (its
  answers are told apart from the new one's by their values), later ones reach the new.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("ray.serve")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import monolib  # noqa: E402

TIMEOUT = 60.0  # seconds a client waits for one answer: nothing may hang


def _post(url: str, x: np.ndarray) -> tuple[object, bytes]:
    """POST ``x`` as binary tensor data; ``(status, body)``: an HTTP status (errors
    too), ``"timeout"`` when no answer came in ``TIMEOUT``, ``"error"`` otherwise."""
    head = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "parameters": {"binary_data_output": False}}).encode()
    req = urllib.request.Request(url, data=head + x.tobytes(), method="POST",
                                 headers={"Inference-Header-Content-Length": str(len(head))})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except TimeoutError:
        return "timeout", b""
    except (urllib.error.URLError, OSError) as e:
        if "timed out" in str(e):
            return "timeout", b""
        return "error", str(e).encode()


def _output(body: bytes) -> np.ndarray:
    out = json.loads(body)["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


class Traffic:
    """``clients`` threads posting ``x`` to ``url`` until :meth:`stop`; each request is
    logged as ``(start, end, status, output or None)``."""

    def __init__(self, url: str, x: np.ndarray, clients: int) -> None:
        self.url, self.x, self.log = url, x, []
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._client) for _ in range(clients)]
        for t in self._threads:
            t.start()

    def _client(self) -> None:
        while not self._done.is_set():
            t0 = time.monotonic()
            status, body = _post(self.url, self.x)
            out = _output(body) if status == 200 else None
            self.log.append((t0, time.monotonic(), status, out))

    def wait_for(self, n: int, timeout: float = 120.0) -> None:
        """Until ``n`` requests have been answered 200."""
        end = time.monotonic() + timeout
        while sum(s == 200 for _, _, s, _ in self.log) < n:
            assert time.monotonic() < end, f"fewer than {n} answers: {self.statuses()}"
            time.sleep(0.05)

    def statuses(self) -> dict:
        counts: dict = {}
        for _, _, s, _ in self.log:
            counts[s] = counts.get(s, 0) + 1
        return counts

    def stop(self) -> None:
        self._done.set()
        for t in self._threads:
            t.join(TIMEOUT + 5)
        assert not any(t.is_alive() for t in self._threads), "a client hangs"


def _replica_pids(handle, n: int, timeout: float = 120.0) -> set[int]:
    """Pids of ``n`` live replicas (asked through the handle until n are seen)."""
    pids, end = set(), time.monotonic() + timeout
    while len(pids) < n:
        assert time.monotonic() < end, f"only replicas {pids} answered"
        pids.add(handle.info.remote().result(timeout_s=TIMEOUT)["pid"])
    return pids


def test_replica_killed_mid_traffic_is_restarted(ray_serve, cls_lib, cls_images, reference):
    from ray import serve

    from monolib.serve.runner import run

    _, port = ray_serve
    run({"cls": str(cls_lib)}, port=port, name="faults", route_prefix="/faults",
        replicas=2, max_batch=8, num_cpus=0.25)
    try:
        handle = serve.get_app_handle("faults")
        before = _replica_pids(handle, 2)
        x = cls_images[1]
        want = reference(x)
        traffic = Traffic(f"http://127.0.0.1:{port}/faults/v2/models/cls/infer", x, 4)
        try:
            traffic.wait_for(8)
            victim = min(before)
            os.kill(victim, signal.SIGKILL)  # a replica of this test's deployment
            killed = time.monotonic()
            # Ray restarts it: a new replica process joins the survivor
            end = time.monotonic() + 120
            while True:
                now = _replica_pids(handle, 1)
                if now - before:
                    break
                assert time.monotonic() < end, "the killed replica was not replaced"
                time.sleep(0.2)
            restarted = time.monotonic()
            traffic.wait_for(sum(s == 200 for _, _, s, _ in traffic.log) + 8)
        finally:
            traffic.stop()
        app = serve.status().applications["faults"]
        assert app.status == "RUNNING", app
    finally:
        serve.delete("faults")
    statuses = traffic.statuses()
    assert "timeout" not in statuses, statuses  # none hangs
    # only the requests in flight on the killed replica may fail, and with a 5xx
    failed = [s for _, _, s, _ in traffic.log if s != 200]
    assert all(isinstance(s, int) and s >= 500 for s in failed), statuses
    assert len(failed) <= 8, statuses
    # the endpoint kept answering while the replica was down and after its restart
    assert any(s == 200 and t0 > killed and t1 < restarted for t0, t1, s, _ in traffic.log) \
        or restarted - killed < 0.5, statuses
    assert sum(s == 200 and t0 > restarted for t0, _, s, _ in traffic.log) >= 4
    for *_, s, out in traffic.log:
        if s == 200:
            np.testing.assert_array_equal(out, want)  # batched or not: the same bits


def _linear(scale: float) -> "onnx.ModelProto":
    """y = x @ (scale * W), x [N, 3]: two versions told apart by their answers."""
    w = (np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.5) * scale
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("W", TensorProto.FLOAT, [3, 4], w.ravel())],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_redeploy_under_load_old_requests_finish(ray_serve, tmp_path):
    from ray import serve

    from monolib.serve.runner import run

    _, port = ray_serve
    lib, new = tmp_path / "linear.so", tmp_path / "new.so"
    monolib.compile(_linear(1.0), shapes={"x": ((1, 8), 3)}).export_library(str(lib))
    monolib.compile(_linear(2.0), shapes={"x": ((1, 8), 3)}).export_library(str(new))
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    v1 = x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.5)
    # requests wait up to 50 ms for a batch: many are in flight when the rollout starts
    options = {"max_batch": 8, "batch_wait_ms": 50, "num_cpus": 0.25}
    run({"linear": str(lib)}, port=port, name="roll", route_prefix="/roll", **options)
    try:
        traffic = Traffic(f"http://127.0.0.1:{port}/roll/v2/models/linear/infer", x, 8)
        try:
            traffic.wait_for(16)
            os.replace(new, lib)  # atomically, as export_library writes
            rollout = time.monotonic()
            run({"linear": str(lib)}, port=port, name="roll", route_prefix="/roll",
                **options)  # returns once the new version is running
            deployed = time.monotonic()
            traffic.wait_for(sum(s == 200 for _, _, s, _ in traffic.log) + 16)
        finally:
            traffic.stop()
    finally:
        serve.delete("roll")
    assert traffic.statuses() == {200: len(traffic.log)}, traffic.statuses()
    version = [(t0, t1, 1 if np.allclose(out, v1) else 2) for t0, t1, _, out in traffic.log]
    assert all(np.allclose(out, v1 * (2 if v == 2 else 1), atol=1e-5)
               for (_, _, v), (*_, out) in zip(version, traffic.log))
    # in flight when the rollout began: answered, by the old version
    spanning = [v for t0, t1, v in version if t0 < rollout < t1]
    assert spanning and set(spanning) == {1}, spanning
    # sent once the new version was running and later: answered by the new one
    late = sorted((t0, v) for t0, _, v in version if t0 > deployed)
    assert late and late[-1][1] == 2, late
