"""Serving throughput and latency: monolib vs ONNX Runtime behind the same Ray Serve app
(issue 16).

    python bench/serve.py [--model ppocr_cls] [--clients 1,8,32] [--seconds 8]
                          [--rounds 2] [--replicas 2] [--threads 1] [--max-batch 8]
                          [--out bench/SERVE.md]

One local Ray (a private temp dir), Serve's HTTP proxy on a free port, and two
applications side by side: ``monolib.serve.deployment(lib.so)`` and the same
deployment with ``backend="onnxruntime"`` on the ``.onnx`` (same dynamic batching,
same protocol, ``--replicas`` replicas x ``--threads`` threads each, spinning off on
both sides). For each client count, each backend in turn (``--rounds`` rounds,
interleaved, so load from elsewhere hits both alike): that many client threads, each
with its own keep-alive HTTP connection, post one ``1 x 3 x 48 x 192`` image per request
with the binary tensor extension (binary output too) for ``--seconds`` after a short
warm-up. Reported: requests/s (all rounds' requests over their time), p50 and p99 of
the request latency (as the client sees it), errors, and monolib / ORT ratios.
Writes ``--out`` with the table. Target: monolib's throughput >= 1.3x ORT's at 32
clients, p99 no worse.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
OUT = Path(__file__).resolve().parent / "SERVE.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(x: np.ndarray) -> tuple[bytes, dict]:
    """(body, headers) of an inference request with ``x`` as binary data, asking for
    binary outputs."""
    head = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "parameters": {"binary_data_output": True}}).encode()
    return head + x.tobytes(), {"Inference-Header-Content-Length": str(len(head)),
                                "Content-Type": "application/octet-stream"}


def _decode(body: bytes, headers: dict) -> np.ndarray:
    """The first output of a response (binary or JSON)."""
    n = headers.get("inference-header-content-length")
    head = json.loads(body[: int(n)] if n else body)
    out = head["outputs"][0]
    if n:
        return np.frombuffer(body[int(n):], np.float32).reshape(out["shape"])
    return np.array(out["data"], np.float32).reshape(out["shape"])


def post(conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict
         ) -> tuple[int, bytes, dict]:
    """One POST on a keep-alive connection: (status, body, lower-cased headers)."""
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data, {k.lower(): v for k, v in r.getheaders()}


def load(port: int, path: str, x: np.ndarray, clients: int, seconds: float,
         warmup: float = 1.0) -> dict:
    """``clients`` threads posting ``x`` to ``path`` for ``seconds`` (after ``warmup``):
    the latencies of the requests sent in the window, errors, the window's length."""
    body, headers = _request(x)
    start = threading.Barrier(clients + 1)
    t_open, t_close = [0.0], [0.0]
    lat: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        start.wait()
        while True:
            t0 = time.perf_counter()
            if t0 >= t_close[0]:
                break
            try:
                status, _, _ = post(conn, path, body, headers)
            except (OSError, http.client.HTTPException):
                status = -1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            t1 = time.perf_counter()
            if t0 >= t_open[0]:
                if status == 200:
                    lat[k].append(t1 - t0)
                else:
                    errors[k] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    now = time.perf_counter()
    t_open[0], t_close[0] = now + warmup, now + warmup + seconds
    start.wait()
    for t in threads:
        t.join()
    return {"lat": [v for per in lat for v in per], "errors": sum(errors), "seconds": seconds}


def summary(runs: list[dict]) -> dict:
    """Requests/s, p50, p99 (ms) and errors over the rounds of one cell."""
    lat = np.array([v for r in runs for v in r["lat"]])
    secs = sum(r["seconds"] for r in runs)
    return {"rps": len(lat) / secs, "p50": float(np.percentile(lat, 50)) * 1e3 if len(lat) else
            float("nan"), "p99": float(np.percentile(lat, 99)) * 1e3 if len(lat) else
            float("nan"), "errors": sum(r["errors"] for r in runs), "n": len(lat)}


def model_times(lib: str, onnx_path: str, shape: tuple, threads: int, repeat: int = 30
                ) -> dict:
    """Median ms of one run of each backend as a replica runs it (``Backend.run``), at
    batch 1 and 8, interleaved in this process: the model's share of a request."""
    from monolib.serve.backend import open_backend

    backends = {k: open_backend(k, p, threads=threads) for k, p in
                (("monolib", lib), ("onnxruntime", onnx_path))}
    out = {}
    for b in (1, 8):
        feeds = {"x": np.random.default_rng(b).standard_normal((b, *shape[1:])).astype(np.float32)}
        times: dict = {k: [] for k in backends}
        for _ in range(repeat):
            for k, be in backends.items():
                t0 = time.perf_counter()
                be.run(feeds)
                times[k].append(time.perf_counter() - t0)
        out[b] = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    for be in backends.values():
        be.close()
    return out


def _table(rows: list[tuple[int, dict, dict]]) -> list[str]:
    out = ["| clients | monolib req/s | p50 ms | p99 ms | ORT req/s | p50 ms | p99 ms | "
           "throughput monolib/ORT | p99 monolib/ORT | errors (monolib, ORT) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c, m, o in rows:
        out.append(f"| {c} | {m['rps']:.0f} | {m['p50']:.2f} | {m['p99']:.2f} | {o['rps']:.0f} "
                   f"| {o['p50']:.2f} | {o['p99']:.2f} | {m['rps'] / o['rps']:.2f}x | "
                   f"{m['p99'] / o['p99']:.2f}x | {m['errors']}, {o['errors']} |")
    return out


def write(path: Path, args: argparse.Namespace, rows: list, info: dict) -> str:
    """Write the results file; return the target's verdict line."""
    last = [r for r in rows if r[0] == max(args.clients)]
    verdict = "no 32-client row"
    if last:
        c, m, o = last[0]
        tp, p99 = m["rps"] / o["rps"], m["p99"] / o["p99"]
        ok = tp >= 1.3 and p99 <= 1.0
        verdict = (f"Target at {c} clients (throughput >= 1.3x ORT's, p99 no worse): "
                   f"{'MET' if ok else 'MISSED'}: throughput {tp:.2f}x, p99 {p99:.2f}x.")
    text = "\n".join([
        "# Serving: monolib vs ONNX Runtime behind the same Ray Serve app (issue 16)",
        "",
        "Written by `python bench/serve.py " + " ".join(sys.argv[1:]) + "`. Model: "
        f"{info['model']} ({info['shape']} float32 per request), run-time batch dim 1..8; "
        f"{args.replicas} replicas x {args.threads} thread(s) per backend, dynamic batching "
        f"up to {args.max_batch} rows, {args.batch_wait_ms} ms batch wait, the Open "
        "Inference Protocol with binary tensors both ways. Clients: threads of this "
        "process, one keep-alive HTTP connection each, one request after the other; "
        f"{args.seconds} s per cell after 1 s of warm-up, {args.rounds} round(s) "
        "interleaved (monolib, ORT, monolib, ...); latency as the client sees it.",
        "",
        f"Machine: {info['machine']}; load average {info['load_before']} before, "
        f"{info['load_after']} after (the clients, Ray and both apps share these cores). "
        f"ray {info['ray']}, onnxruntime {info['ort']}, Python {platform.python_version()}.",
        "",
        "The model alone, as a replica runs it (`Backend.run`, median, in the bench "
        f"process before Ray starts, {args.threads} thread(s)): " + "; ".join(
            f"batch {b}: monolib {t['monolib']:.2f} ms, ORT {t['onnxruntime']:.2f} ms "
            f"({t['monolib'] / t['onnxruntime']:.2f}x)" for b, t in info["model_ms"].items())
        + ".",
        "",
        *_table(rows),
        "",
        verdict,
        "",
        "Per request the monolib replica's work is the library's run; ORT's is "
        "`session.run`; everything else (HTTP proxy, Serve's router and batching, "
        "protocol decode/encode) is the same code on both sides, so the ratio at one "
        "client is mostly fixed overhead and at 32 clients the model's batched speed.",
        "",
    ])
    path.write_text(text)
    return verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="ppocr_cls")
    ap.add_argument("--clients", default="1,8,32",
                    type=lambda s: [int(v) for v in s.split(",")])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--batch-wait-ms", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])  # Ray's workers
    sys.path.insert(0, str(SRC))
    import onnxruntime
    import ray
    from ray import serve

    import monolib
    import monolib.serve as ms
    from monolib.models import fetch_model

    onnx_path = str(fetch_model(args.model))
    tmp = Path(tempfile.mkdtemp(prefix="mlbench", dir="/tmp"))  # short: Ray's socket paths
    try:
        lib = tmp / "model.so"
        shape = (1, 3, 48, 192)
        monolib.compile(onnx_path, shapes={"x": ((1, 8), *shape[1:])}).export_library(str(lib))
        model_ms = model_times(str(lib), onnx_path, shape, args.threads)
        print("model alone (ms):", model_ms, flush=True)
        load_before = " ".join(f"{v:.1f}" for v in os.getloadavg())
        os.environ["RAY_TMPDIR"] = str(tmp)
        cpus = 2 * args.replicas * args.threads  # logical: both apps placed at once
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                 _temp_dir=str(tmp), configure_logging=False)
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        common = {"replicas": args.replicas, "threads": args.threads,
                  "max_batch": args.max_batch, "batch_wait_ms": args.batch_wait_ms,
                  "name": "cls"}
        apps = {"monolib": ("/ml", str(lib)), "onnxruntime": ("/ort", onnx_path)}
        for backend, (prefix, path) in apps.items():
            serve.run(ms.deployment(path, backend=backend, **common), name=backend[:3],
                      route_prefix=prefix)
        # both answer the same as the in-process GraphModule before anything is timed
        x = np.random.default_rng(16).standard_normal(shape).astype(np.float32)
        gm = monolib.GraphModule(monolib.load_module(str(lib)))
        gm.run(x=x)
        want = gm.get_output(0).numpy()
        for backend, (prefix, _) in apps.items():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, body, headers = post(conn, f"{prefix}/v2/models/cls/infer", *_request(x))
            assert status == 200, (backend, status, body[:300])
            np.testing.assert_allclose(_decode(body, headers), want, rtol=1e-4, atol=1e-5)
            conn.close()
        results: dict = {}
        for clients in args.clients:
            for _ in range(args.rounds):
                for backend, (prefix, _) in apps.items():
                    r = load(port, f"{prefix}/v2/models/cls/infer", x, clients, args.seconds)
                    results.setdefault((clients, backend), []).append(r)
                    print(f"{backend:12s} {clients:3d} clients: {len(r['lat']) / r['seconds']:7.1f}"
                          f" req/s, p99 {np.percentile(r['lat'], 99) * 1e3:7.2f} ms, "
                          f"{r['errors']} errors", flush=True)
        rows = [(c, summary(results[(c, "monolib")]), summary(results[(c, "onnxruntime")]))
                for c in args.clients]
        info = {"model": f"{args.model} ({Path(onnx_path).name})", "shape": "x".join(map(str, shape)),
                "machine": f"{os.cpu_count()} CPUs ({platform.machine()})",
                "load_before": load_before,
                "load_after": " ".join(f"{v:.1f}" for v in os.getloadavg()),
                "ray": ray.__version__, "ort": onnxruntime.__version__, "model_ms": model_ms}
        verdict = write(args.out, args, rows, info)
        print("\n".join(_table(rows)))
        print(verdict)
        return 0
    finally:
        try:
            serve.shutdown()
            ray.shutdown()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
