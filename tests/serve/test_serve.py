"""`monolib serve` on Ray, end to end: the real `tritonclient.http` client against PP-OCR
cls (run-time batch 1..8), outputs equal the in-process GraphModule bit for bit, 8
client threads x 100 requests, dynamic batching (fewer runs than requests, same
answers), bad requests answered 4xx over HTTP, several models behind one Router with
413 and 503 (bounded queue), and a replaced library rolled out with no failed request.
One Ray for the session (conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

tritonclient_http = pytest.importorskip("tritonclient.http")

OUT = "save_infer_model/scale_0.tmp_1"
TIMEOUT = 60.0  # seconds a client waits for one answer: nothing may hang


def _infer(client, x, binary=True):
    inp = tritonclient_http.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = tritonclient_http.InferRequestedOutput(OUT, binary_data=binary)
    return client.infer("cls", [inp], outputs=[out]).as_numpy(OUT)


def _post(url, body, headers=None, timeout=TIMEOUT):
    """(status, body) of a POST (an HTTP error status is an answer, not an exception)."""
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _json_request(x):
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


def _binary_request(x):
    """(body, headers) of a request with ``x`` as binary tensor data."""
    head = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    return head + x.tobytes(), {"Inference-Header-Content-Length": str(len(head))}


def test_tritonclient_gets_the_graph_modules_outputs(served_cls, cls_images, reference):
    client = tritonclient_http.InferenceServerClient(served_cls, network_timeout=TIMEOUT)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("cls")
    meta = client.get_model_metadata("cls")
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, 48, 192]}]
    assert meta["outputs"] == [{"name": OUT, "datatype": "FP32", "shape": [-1, 2]}]
    for x in cls_images[:3]:
        want = reference(x)
        np.testing.assert_array_equal(_infer(client, x), want)
        np.testing.assert_array_equal(_infer(client, x, binary=False), want)


def test_eight_clients_hundred_requests_batched_identically(served_cls, cls_images,
                                                             reference):
    from ray import serve

    wants = [reference(x) for x in cls_images]
    before = serve.get_app_handle("monolib").info.remote().result()

    def client_thread(k):
        client = tritonclient_http.InferenceServerClient(served_cls, network_timeout=TIMEOUT)
        bad = 0
        for i in range(100):
            j = (k + i) % len(cls_images)
            # batched with other requests: the library is batch-invariant, same bits
            # (tests/runtime/test_batch_invariance.py)
            bad += not np.array_equal(_infer(client, cls_images[j]), wants[j])
        return bad

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        mismatches = list(pool.map(client_thread, range(8)))
    took = time.perf_counter() - t0
    assert mismatches == [0] * 8  # 800 answers, each its unbatched run's (to a few ulp)
    after = serve.get_app_handle("monolib").info.remote().result()
    requests = after["requests"] - before["requests"]
    runs = after["runs"] - before["runs"]
    assert requests == 800
    assert runs < requests  # concurrent requests were concatenated
    print(f"800 requests in {took:.1f} s, {runs} runs")


def test_bad_requests_get_4xx_over_http(served_cls):
    base = f"http://{served_cls}/v2/models"
    x = np.zeros((1, 3, 48, 192), np.float32)
    status, body = _post(f"{base}/nope/infer", _json_request(x))
    assert status == 404 and "unknown model 'nope'" in json.loads(body)["error"]
    status, body = _post(f"{base}/cls/infer", _json_request(np.zeros((9, 3, 48, 192),
                                                                     np.float32)))
    assert status == 400 and "outside its bounds [1, 8]" in json.loads(body)["error"]
    status, body = _post(f"{base}/cls/infer", b'{"inputs": [', {"Content-Type": "application/json"})
    assert status == 400 and "malformed JSON" in json.loads(body)["error"]
    status, body = _post(f"{base}/cls/infer", b"{}", {"Inference-Header-Content-Length": "99"})
    assert status == 400 and "malformed binary header" in json.loads(body)["error"]
    client = tritonclient_http.InferenceServerClient(served_cls, network_timeout=TIMEOUT)
    with pytest.raises(tritonclient_http.InferenceServerException, match="datatype 'FP64'"):
        inp = tritonclient_http.InferInput("x", list(x.shape), "FP64")
        inp.set_data_from_numpy(x.astype(np.float64))
        client.infer("cls", [inp])
    assert _infer(client, x).shape == (1, 2)  # the replica lives on


def test_router_body_limit_413_and_overload_503(ray_serve, cls_lib, cls_images, reference):
    """Two models behind one Router (route prefix /small), each replica holding 1 request
    with 1 queued: tritonclient through the prefix, unknown model 404, 413, and 503 with
    the protocol's error body when a model's queue is full."""
    from ray import serve

    import monolib.serve as ms

    _, port = ray_serve
    app = ms.deployment([f"cls={cls_lib}", f"b={cls_lib}"], max_body_bytes=200_000,
                        batch_wait_ms=200, max_ongoing_requests=1, max_queued_requests=1,
                        num_cpus=0.25)
    ms.run(app, port=port, name="small", route_prefix="/small")
    url = f"http://127.0.0.1:{port}/small/v2/models/cls/infer"
    try:
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{port}/small",
                                                         network_timeout=TIMEOUT)
        assert client.is_server_ready() and client.is_model_ready("b")
        x, want = cls_images[0], reference(cls_images[0])  # 108 KiB: within the limit
        for name in ("cls", "b"):
            inp = tritonclient_http.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer(name, [inp]).as_numpy(OUT), want)
        status, body = _post(url.replace("/cls/", "/nope/"), *_binary_request(x))
        assert status == 404 and "this server has 'cls', 'b'" in json.loads(body)["error"]
        status, body = _post(url, *_binary_request(np.zeros((8, 3, 48, 192), np.float32)))
        assert status == 413 and "over the limit of 200000" in json.loads(body)["error"]
        one = _binary_request(cls_images[0])  # 108 KiB
        with ThreadPoolExecutor(12) as pool:  # 1 held + 1 queued; the others get 503
            answers = list(pool.map(lambda _: _post(url, *one), range(12)))
        statuses = [s for s, _ in answers]
        assert set(statuses) <= {200, 503}, statuses
        assert statuses.count(503) >= 1 and statuses.count(200) >= 1, statuses
        for busy in (b for s, b in answers if s == 503):  # the router's, with an OIP body
            assert "overloaded" in json.loads(busy)["error"]
        assert _post(url, *one)[0] == 200  # and serves again after
    finally:
        serve.delete("small")


def test_replaced_library_rolls_out_without_failed_requests(ray_serve, cls_lib, cls_images,
                                                            reference, compile_cls, tmp_path):
    from ray import serve

    from monolib.serve.paths import file_digest
    from monolib.serve.runner import run, serve_forever

    _, port = ray_serve
    lib = tmp_path / "m.so"
    shutil.copy(cls_lib, lib)
    options = {"max_batch": 4, "num_cpus": 0.25}
    run({"cls": str(lib)}, port=port, name="redeploy", route_prefix="/re", **options)
    old = serve.get_app_handle("redeploy").info.remote().result()
    assert old["digest"] == file_digest(str(lib))
    stop = threading.Event()
    watcher = threading.Thread(target=serve_forever, args=("redeploy", {"cls": str(lib)}, options,
                                                           False, 0.2, stop, "/re"))
    watcher.start()
    url = f"http://127.0.0.1:{port}/re/v2/models/cls/infer"
    x, want = cls_images[1], reference(cls_images[1])
    statuses, done = [], threading.Event()

    def traffic():
        while not done.is_set():
            status, body = _post(url, _json_request(x))
            statuses.append(status)
            if status == 200:
                got = np.array(json.loads(body)["outputs"][0]["data"], np.float32)
                assert np.array_equal(got.reshape(want.shape), want)

    client = threading.Thread(target=traffic)
    client.start()
    try:
        new = compile_cls(tmp_path / "new.so", {"x": ((1, 4), 3, 48, 192)})
        os.replace(new, lib)  # atomically, as export_library writes
        digest, end = file_digest(str(lib)), time.monotonic() + 120
        while time.monotonic() < end:
            info = serve.get_app_handle("redeploy").info.remote().result()
            if info["digest"] == digest:
                break
            time.sleep(0.5)
        assert info["digest"] == digest, serve.status().applications["redeploy"]
        assert info["pid"] != old["pid"]
        time.sleep(1.0)  # some traffic on the new version
    finally:
        done.set()
        client.join(TIMEOUT)
        stop.set()
        watcher.join(TIMEOUT)
    assert len(statuses) > 5 and set(statuses) == {200}, statuses
    assert "redeploy" not in serve.status().applications  # the watcher deleted it on stop

