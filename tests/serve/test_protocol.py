"""The Open Inference Protocol v2 without Ray: routes, request parsing and checks (every
bad request is a RequestError with its HTTP status and a message naming what is wrong),
responses (JSON and binary tensor data), metadata; batching's plan and split."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from monolib.errors import InputError, RequestError
from monolib.serve import protocol as P
from monolib.serve.backend import Dim, TensorSpec
from monolib.serve.batching import BatchDim, find_batch_dim, plan, run_batched

B = Dim("batch", 1, 8)
W = Dim("w", 32, 320, 32)
MODEL = P.ModelSpec(
    "m",
    [TensorSpec("x", np.dtype("float32"), (B, 3, W)), TensorSpec("ids", np.dtype("int64"), (B,))],
    [TensorSpec("y", np.dtype("float32"), ("batch", 2)), TensorSpec("n", np.dtype("int32"), (1,))],
)


def _entry(name, arr, datatype=None, binary=False):
    e = {"name": name, "shape": list(arr.shape), "datatype": datatype or P.datatype_of(arr.dtype)}
    if binary:
        e["parameters"] = {"binary_data_size": arr.nbytes}
    else:
        e["data"] = arr.ravel().tolist()
    return e


def _body(entries, blobs=(), **extra):
    head = json.dumps({"inputs": entries, **extra}).encode()
    return head + b"".join(blobs), (len(head) if blobs else None)


X = np.arange(2 * 3 * 64, dtype=np.float32).reshape(2, 3, 64) / 7
IDS = np.array([5, -1], dtype=np.int64)


def _bad(body, hlen=None, status=400, match="", **kw):
    with pytest.raises(RequestError, match=match) as info:
        P.parse_infer_request(MODEL, body, hlen, **kw)
    assert info.value.status == status
    assert isinstance(info.value, InputError)
    return str(info.value)


def test_json_and_binary_requests_decode_the_same():
    body, _ = _body([_entry("x", X), _entry("ids", IDS)], id="r1")
    req = P.parse_infer_request(MODEL, body)
    assert req.id == "r1" and req.outputs == [("y", False), ("n", False)]
    np.testing.assert_array_equal(req.inputs["x"], X)
    np.testing.assert_array_equal(req.inputs["ids"], IDS)
    body, hlen = _body([_entry("x", X, binary=True), _entry("ids", IDS, binary=True)],
                       [X.tobytes(), IDS.tobytes()], parameters={"binary_data_output": True})
    req = P.parse_infer_request(MODEL, body, str(hlen))
    assert req.inputs["x"].dtype == np.float32 and req.inputs["x"].shape == (2, 3, 64)
    np.testing.assert_array_equal(req.inputs["x"], X)
    np.testing.assert_array_equal(req.inputs["ids"], IDS)
    assert req.outputs == [("y", True), ("n", True)]


def test_unknown_missing_and_repeated_inputs():
    msg = _bad(_body([_entry("z", X), _entry("ids", IDS)])[0], match="unknown input 'z'")
    assert "x: float32[batch[1, 8], 3, w[32, 320] step 32]" in msg  # says what it expects
    _bad(_body([_entry("x", X)])[0], match="missing input.*'ids'")
    _bad(_body([_entry("x", X), _entry("x", X), _entry("ids", IDS)])[0], match="'x' is given twice")


def test_wrong_datatype():
    _bad(_body([_entry("x", X, "FP64"), _entry("ids", IDS)])[0],
         match="input 'x' has datatype 'FP64', the model expects FP32")
    _bad(_body([_entry("x", X), _entry("ids", IDS, "INT32")])[0],
         match="'ids' has datatype 'INT32', the model expects INT64")


@pytest.mark.parametrize("shape,match", [
    ((9, 3, 64), r"axis 0 \(dim 'batch'\) is 9, outside its bounds \[1, 8\]"),
    ((2, 3, 40), r"axis 2 \(dim 'w'\) is 40, outside its bounds \[32, 320\] step 32"),
    ((2, 4, 64), "axis 1 is 4, the model expects 3"),
    ((2, 3), "has 2 dims"),
])
def test_shape_out_of_bounds(shape, match):
    x = np.zeros(shape, np.float32)
    _bad(_body([_entry("x", x), _entry("ids", IDS)])[0], match=match)


def test_shared_dim_must_agree_and_data_must_fit_the_shape():
    _bad(_body([_entry("x", X), _entry("ids", IDS[:1])])[0],
         match="'x' and 'ids' share dim 'batch' but give it 2 and 1")
    e = _entry("x", X)
    e["data"] = e["data"][:-1]
    _bad(_body([e, _entry("ids", IDS)])[0], match="383 data elements, shape .* needs 384")
    e["data"] = ["a"] * 384
    _bad(_body([e, _entry("ids", IDS)])[0], match="data is not float32")
    e = _entry("x", X)
    e["shape"] = [2, 3, -64]
    _bad(_body([e, _entry("ids", IDS)])[0], match="shape must be a list of non-negative")


@pytest.mark.parametrize("body,match", [
    (b"{bad", "malformed JSON"),
    (b"\xff\xfe", "malformed JSON"),
    (b"[1, 2]", "expected a JSON object with an \"inputs\" list"),
    (b'{"inputs": 3}', "expected a JSON object"),
])
def test_malformed_json(body, match):
    _bad(body, match=match)


def test_malformed_binary_header():
    body, hlen = _body([_entry("x", X, binary=True), _entry("ids", IDS, binary=True)],
                       [X.tobytes(), IDS.tobytes()])
    for h in ("abc", "-1", str(len(body) + 1)):
        _bad(body, h, match=f"Inference-Header-Content-Length is '{h}'")
    _bad(body, str(hlen - 1), match="malformed JSON")  # the header cut short
    _bad(body[:-3], str(hlen), match="'ids' declares binary_data_size 16, 13 bytes are left")
    _bad(body + b"xx", str(hlen), match="the inputs declare 1552 bytes, the body carries 1554")
    e = _entry("x", X, binary=True)
    e["parameters"]["binary_data_size"] = 8
    b2, h2 = _body([e, _entry("ids", IDS)], [X.tobytes()[:8]])
    _bad(b2, str(h2), match="binary_data_size is 8, shape \\[2, 3, 64\\] of float32 needs 1536")
    e = _entry("x", X)
    e["parameters"] = {"binary_data_size": 4}
    b3, h3 = _body([e, _entry("ids", IDS)], [b"0000"])
    _bad(b3, str(h3), match="both data and binary")


def test_body_too_large_is_413():
    body, _ = _body([_entry("x", X), _entry("ids", IDS)])
    _bad(body, status=413, max_body_bytes=100, match=f"body of {len(body)} bytes is over the "
                                                     "limit of 100")
    P.parse_infer_request(MODEL, body, max_body_bytes=len(body))


def test_requested_outputs():
    body, _ = _body([_entry("x", X), _entry("ids", IDS)],
                    outputs=[{"name": "n", "parameters": {"binary_data": True}}])
    assert P.parse_infer_request(MODEL, body).outputs == [("n", True)]
    body, _ = _body([_entry("x", X), _entry("ids", IDS)], outputs=[{"name": "q"}])
    _bad(body, match="unknown output 'q': the model has n, y")
    body, _ = _body([_entry("x", X), _entry("ids", IDS)],
                    outputs=[{"name": "y", "parameters": {"classification": 2}}])
    _bad(body, match="classification")


def test_routes():
    assert P.route("GET", "/v2/health/live") == P.Route("live")
    assert P.route("GET", "/v2/health/ready") == P.Route("ready")
    assert P.route("GET", "/v2/models/m") == P.Route("model", "m")
    assert P.route("GET", "/v2/models/m/versions/1/ready") == P.Route("model_ready", "m", "1")
    assert P.route("POST", "/v2/models/m/infer") == P.Route("infer", "m")
    with pytest.raises(RequestError, match="use POST") as info:
        P.route("GET", "/v2/models/m/infer")
    assert info.value.status == 405
    with pytest.raises(RequestError, match="no such endpoint") as info:
        P.route("GET", "/v1/models/m")
    assert info.value.status == 404


def test_metadata_shows_run_time_dims_as_minus_one():
    meta = P.model_metadata(MODEL)
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, -1]},
                              {"name": "ids", "datatype": "INT64", "shape": [-1]}]
    assert meta["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [-1, 2]}
    assert json.loads(P.error_body("boom")) == {"error": "boom"}


def test_response_json_and_binary():
    y = np.array([[1.5, -2.0], [3.25, 4.0]], np.float32)
    n = np.array([7], np.int32)
    req = P.InferRequest("r", {}, [("y", True), ("n", False)])
    body, headers = P.encode_infer_response(MODEL, req, {"y": y, "n": n})
    hlen = int(headers[P.HEADER_LENGTH])
    doc = json.loads(body[:hlen])
    assert doc["id"] == "r" and doc["model_name"] == "m"
    assert doc["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [2, 2],
                                 "parameters": {"binary_data_size": 16}}
    assert doc["outputs"][1]["data"] == [7]
    np.testing.assert_array_equal(np.frombuffer(body[hlen:], np.float32).reshape(2, 2), y)
    body, headers = P.encode_infer_response(MODEL, P.InferRequest(None, {}, [("y", False)]),
                                            {"y": y})
    assert headers["content-type"] == "application/json" and P.HEADER_LENGTH not in headers
    assert json.loads(body)["outputs"][0]["data"] == [1.5, -2.0, 3.25, 4.0]


def test_bytes_tensors():
    spec = P.ModelSpec("s", [TensorSpec("t", np.dtype("S8"), (2,))],
                       [TensorSpec("u", np.dtype("O"), (2,))])
    blob = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", "é".encode()))
    e = {"name": "t", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(blob)}}
    head = json.dumps({"inputs": [e]}).encode()
    req = P.parse_infer_request(spec, head + blob, len(head))
    assert req.inputs["t"].tolist() == ["ab", "é"]
    cut = blob[:-1]  # the last element's length says 2, one byte follows
    e["parameters"]["binary_data_size"] = len(cut)
    head = json.dumps({"inputs": [e]}).encode()
    with pytest.raises(RequestError, match="BYTES element 1 claims 2 bytes, 1 are left"):
        P.parse_infer_request(spec, head + cut, len(head))
    out, headers = P.encode_infer_response(spec, P.InferRequest(None, {}, [("u", True)]),
                                           {"u": np.array(["ab", "é"], object)})
    assert out[int(headers[P.HEADER_LENGTH]):] == blob


# -- batching --------------------------------------------------------------------------
def test_find_batch_dim():
    assert find_batch_dim(MODEL.inputs, MODEL.outputs) is None  # output n has no batch axis
    outs = [TensorSpec("y", np.dtype("float32"), ("batch", 2))]
    assert find_batch_dim(MODEL.inputs, outs) == BatchDim("batch", 8)
    assert find_batch_dim(MODEL.inputs, outs, max_batch=5) == BatchDim("batch", 5)
    assert find_batch_dim(MODEL.inputs, outs, max_batch=1) is None
    mixed = [TensorSpec("y", np.dtype("float32"), ("batch", "(batch * 2)"))]
    assert find_batch_dim(MODEL.inputs, mixed) is None  # rows are not independent
    static = [TensorSpec("x", np.dtype("float32"), (1, 3))]
    assert find_batch_dim(static, [TensorSpec("y", np.dtype("float32"), (1, 2))]) is None


def _feeds(b, w=64):
    return {"x": np.full((b, 3, w), b, np.float32), "ids": np.arange(b, dtype=np.int64)}


def test_plan_packs_up_to_the_bound_and_groups_by_other_dims():
    reqs = [_feeds(3), _feeds(4), _feeds(2), _feeds(1, w=96), _feeds(9), _feeds(1)]
    assert plan(reqs, BatchDim("batch", 8)) == [[0, 1, 5], [2], [3], [4]]
    assert plan(reqs, None) == [[i] for i in range(6)]


def test_run_batched_equals_one_by_one():
    calls = []

    def run(feeds):
        calls.append(len(feeds["ids"]))
        x = feeds["x"]
        if (x == 7).any():
            raise ValueError("bad row")
        return {"y": x.sum(axis=(1, 2))[:, None] * np.array([1, -1], np.float32),
                "ids": feeds["ids"] * 2}

    reqs = [_feeds(3), _feeds(2), _feeds(1, w=96), _feeds(2)]
    got = run_batched(run, reqs, BatchDim("batch", 8))
    assert calls == [7, 1]  # three requests in one run, the other width alone
    for r, g in zip(reqs, got):
        want = run(r)
        assert set(g) == set(want)
        for k in want:
            np.testing.assert_array_equal(g[k], want[k])
    bad = run_batched(run, [_feeds(7), _feeds(1, w=96)], BatchDim("batch", 8))
    assert isinstance(bad[0], ValueError) and isinstance(bad[1], dict)


# -- the command line, refusals before Ray starts ----------------------------------------
def test_serve_command_refuses_bad_arguments_before_starting_ray(tmp_path, capsys):
    """Checked by runner.main before it calls run() (which starts or joins Ray)."""
    from monolib.cli import main

    assert main(["serve", str(tmp_path / "none.so")]) == 1
    assert "model 'none': no such file" in capsys.readouterr().err
    lib = tmp_path / "m.so"
    lib.write_bytes(b"")
    assert main(["serve", f"a={lib}", f"a={lib}"]) == 1
    assert "model name 'a' given twice" in capsys.readouterr().err
    assert main(["serve", str(lib), "--threads", "0"]) == 1
    assert "--threads must be >= 1" in capsys.readouterr().err
