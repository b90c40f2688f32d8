"""A serving replica's handler in-process (no Ray cluster): the ModelServer class called
directly in an event loop, with its ``@serve.batch``: routes, statuses and error bodies,
concurrent requests batched into fewer runs with the unbatched answers, a signed library
verified before loading, the ONNX Runtime backend behind the same protocol."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray.serve")

from monolib.errors import SignatureError
from monolib.serve import protocol as P
from monolib.serve.app import ModelServer

Server = ModelServer.func_or_class  # the plain class under @serve.deployment
OUT = "save_infer_model/scale_0.tmp_1"


def _request(x, binary=True):
    e = {"name": "x", "shape": list(x.shape), "datatype": "FP32"}
    if not binary:
        e["data"] = x.ravel().tolist()
        return json.dumps({"inputs": [e]}).encode(), {}
    e["parameters"] = {"binary_data_size": x.nbytes}
    head = json.dumps({"inputs": [e], "parameters": {"binary_data_output": True}}).encode()
    return head + x.tobytes(), {P.HEADER_LENGTH: str(len(head))}


def _output(status, headers, body):
    assert status == 200, body
    n = int(headers[P.HEADER_LENGTH])
    doc = json.loads(body[:n])
    (t,) = doc["outputs"]
    return np.frombuffer(body[n:], np.float32).reshape(t["shape"])


_LOOP = asyncio.new_event_loop()  # one loop: a @serve.batch queue stays on its first


def _call(server, *requests):
    """Answer ``requests`` (``(method, path, headers, body)``) concurrently."""
    async def go():
        return await asyncio.gather(*(server.handle(*r) for r in requests))

    return _LOOP.run_until_complete(go())


@pytest.fixture(autouse=True)
def _outside_a_replica(monkeypatch):
    """@serve.batch's queue reads the replica's config for a warning only; there is no
    replica here."""
    from ray.serve import batching

    monkeypatch.setattr(batching._BatchQueue,
                        "_warn_if_max_batch_size_exceeds_max_ongoing_requests", lambda self: None)


@pytest.fixture(scope="module")
def server(cls_lib):
    return Server("cls", str(cls_lib), max_batch=8, batch_wait_ms=50)


def test_routes_and_errors(server):
    infer = "/v2/models/cls/infer"
    x = np.zeros((1, 3, 48, 192), np.float32)
    body, headers = _request(x)
    answers = _call(server, ("GET", "/v2/health/live", {}, b""),
                    ("GET", "/v2/models/cls", {}, b""),
                    ("GET", "/v2/models/cls/versions/1/ready", {}, b""),
                    ("POST", "/v2/models/other/infer", headers, body),
                    ("GET", infer, {}, b""),
                    ("POST", infer, {}, b'{"inputs": [{"name": "y"}]}'),
                    ("POST", infer, {P.HEADER_LENGTH: "x"}, body),
                    ("GET", "/v2/models/cls/versions/2", {}, b""))
    statuses = [a[0] for a in answers]
    assert statuses == [200, 200, 200, 404, 405, 400, 400, 404]
    meta = json.loads(answers[1][2])
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, 48, 192]}]
    errors = [json.loads(a[2])["error"] for a in answers[3:]]
    assert "unknown model 'other'" in errors[0]
    assert "use POST" in errors[1]
    assert "unknown input 'y': the model expects x: float32[x_0[1, 8], 3, 48, 192]" in errors[2]
    assert "Inference-Header-Content-Length is 'x'" in errors[3]
    assert "version '2'" in errors[4]


def test_concurrent_requests_run_batched(server, cls_images, reference):
    before = dict(server.stats)
    reqs = [("POST", "/v2/models/cls/infer", *reversed(_request(x))) for x in cls_images]
    answers = _call(server, *reqs)
    runs = server.stats["runs"] - before["runs"]
    assert server.stats["requests"] - before["requests"] == len(cls_images)
    assert runs < len(cls_images)  # 9 rows: at most 8 per run, so two runs
    for x, a in zip(cls_images, answers):
        np.testing.assert_array_equal(_output(*a), reference(x))  # batched: same bits
    status, _, body = _call(server, ("POST", "/v2/models/cls/infer", {},
                                     _request(cls_images[0], binary=False)[0]))[0]
    doc = json.loads(body)
    assert status == 200 and doc["outputs"][0]["shape"] == [1, 2]
    np.testing.assert_array_equal(np.array(doc["outputs"][0]["data"], np.float32),
                                  reference(cls_images[0]).ravel())


def test_signed_library_is_verified_before_loading(cls_lib, tmp_path):
    pytest.importorskip("cryptography")
    from monolib.tools.sign import generate_keypair, sign_file

    key, pub = generate_keypair(str(tmp_path / "k"))
    _, other_pub = generate_keypair(str(tmp_path / "o"))
    lib = tmp_path / "cls.so"
    lib.write_bytes(cls_lib.read_bytes())
    sign_file(str(lib), key)
    s = Server("cls", str(lib), trusted_keys=[Path(pub).read_bytes()])
    assert s.info()["metadata"]["name"] == "cls"
    with pytest.raises(SignatureError):
        Server("cls", str(lib), trusted_keys=[Path(other_pub).read_bytes()])


def test_onnxruntime_backend_speaks_the_same_protocol(cls_images, reference):
    pytest.importorskip("onnxruntime")
    from monolib.models import fetch_model

    s = Server("cls", str(fetch_model("ppocr_cls")), backend="onnxruntime", max_batch=8)
    meta = s.info()["metadata"]
    assert meta["platform"] == "onnxruntime" and s.info()["batch"] == 8
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, -1, -1]}]
    reqs = [("POST", "/v2/models/cls/infer", *reversed(_request(x))) for x in cls_images[:3]]
    for x, a in zip(cls_images, _call(s, *reqs)):
        np.testing.assert_allclose(_output(*a), reference(x), rtol=1e-4, atol=1e-5)
