"""Serving throughput and latency: monolib vs ONNX Runtime behind the same Ray Serve app
(issue 16).

    python bench/serve.py [--models ppocr_cls:1x3x48x192,ppocr_det:1x3x320x320]
                          [--clients 1,8,32] [--seconds 8]
                          [--rounds 2] [--replicas 2] [--threads 1] [--max-batch 8]
                          [--out bench/SERVE.md]

One local Ray (a private temp dir), Serve's HTTP proxy on a free port, and two
applications side by side: ``monolib.serve.deployment(lib.so)`` and the same
deployment with ``backend="onnxruntime"`` on the ``.onnx`` (same dynamic batching,
same protocol, ``--replicas`` replicas x ``--threads`` threads each, spinning off on
both sides). For each client count, each backend in turn (``--rounds`` rounds,
interleaved, so load from elsewhere hits both alike): that many client threads, each
with its own keep-alive HTTP connection, post one image per request (PP-OCR's line
classifier: ~1 ms of model per request, the serving stack's cost dominates; its text
detector at 320 x 320: the model's dominates) with the binary tensor extension (binary output too) for ``--seconds`` after a short
warm-up. Reported: requests/s (all rounds' requests over their time), p50 and p99 of
the request latency (as the client sees it), errors, and monolib / ORT ratios.
Also the CPU time per request of the replicas, the HTTP proxy, the clients and the
whole machine (``/proc``). Writes ``--out`` with the tables. Target: monolib's throughput >= 1.3x ORT's at 32
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


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except OSError:
        return 0.0


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (every process, other users' too)."""
    with open("/proc/stat") as f:
        v = [int(t) for t in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / _TICK  # less idle and iowait


def pids_titled(title: str, marker: str) -> list[int]:
    """Pids of the processes whose title starts with ``title`` and whose environment has
    ``marker`` (this bench's Ray: its private RAY_TMPDIR)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if not f.read().startswith(title.encode()):
                    continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            pass
    return out


def load(port: int, path: str, x: np.ndarray, clients: int, seconds: float,
         warmup: float = 1.0, watch: dict | None = None) -> dict:
    """``clients`` threads posting ``x`` to ``path`` for ``seconds`` (after ``warmup``):
    the latencies of the requests sent in the window, errors, the window's length, and
    the CPU seconds each group of ``watch`` (name -> pids) used in the window, with
    ``"clients"`` (this process) and ``"machine"`` (everything)."""
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
    watch = watch or {}

    def snapshot() -> dict:
        snap = {k: sum(cpu_of(p) for p in pids) for k, pids in watch.items()}
        snap.update(clients=time.process_time(), machine=machine_busy())
        return snap

    time.sleep(max(0.0, t_open[0] - time.perf_counter()))
    before = snapshot()
    time.sleep(max(0.0, t_close[0] - time.perf_counter()))
    after = snapshot()
    for t in threads:
        t.join()
    return {"lat": [v for per in lat for v in per], "errors": sum(errors), "seconds": seconds,
            "cpu": {k: after[k] - before[k] for k in after}}


def summary(runs: list[dict]) -> dict:
    """Requests/s, p50, p99 (ms) and errors over the rounds of one cell."""
    lat = np.array([v for r in runs for v in r["lat"]])
    secs = sum(r["seconds"] for r in runs)
    cpu = {k: sum(r["cpu"][k] for r in runs) for k in runs[0]["cpu"]}
    return {"rps": len(lat) / secs, "cpu_ms": {k: v / max(1, len(lat)) * 1e3
                                                for k, v in cpu.items()},
            "busy": cpu["machine"] / secs, "p50": float(np.percentile(lat, 50)) * 1e3 if len(lat) else
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


def _cpu_table(rows: list[tuple[int, dict, dict]]) -> list[str]:
    out = ["| clients | backend | req/s | replicas | HTTP proxy | clients | whole machine "
           "| machine busy (cores) |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c, m, o in rows:
        for name, r in (("monolib", m), ("ORT", o)):
            ms = r["cpu_ms"]
            out.append(f"| {c} | {name} | {r['rps']:.0f} | {ms['replicas']:.2f} | "
                       f"{ms['proxy']:.2f} | {ms['clients']:.2f} | {ms['machine']:.2f} | "
                       f"{r['busy']:.2f} |")
    return out


def _section(args: argparse.Namespace, rows: list, info: dict) -> tuple[list[str], str]:
    """One model's part of the results file, and its target verdict line."""
    top = [r for r in rows if r[0] == max(args.clients)]
    verdict = f"{info['model']}: no {max(args.clients)}-client row"
    if top:
        c, m, o = top[0]
        tp, p99 = m["rps"] / o["rps"], m["p99"] / o["p99"]
        ok = tp >= 1.3 and p99 <= 1.0
        verdict = (f"{info['key']}, target at {c} clients (throughput >= 1.3x ORT's, p99 no "
                   f"worse): **{'met' if ok else 'missed'}**: throughput {tp:.2f}x, p99 "
                   f"{p99:.2f}x.")
    lines = [
        f"## {info['model']}, {info['shape']} float32 per request",
        "",
        "The model alone, as a replica runs it (`Backend.run`, median, in the bench "
        f"process before Ray starts, {args.threads} thread(s)): " + "; ".join(
            f"batch {b}: monolib {t['monolib']:.2f} ms, ORT {t['onnxruntime']:.2f} ms "
            f"({t['monolib'] / t['onnxruntime']:.2f}x)" for b, t in info["model_ms"].items())
        + f". Load average {info['load_before']} before, {info['load_after']} after.",
        "",
        *_table(rows),
        "",
        verdict,
        "",
        "CPU per answered request (ms; `/proc` of the replica processes, Serve's HTTP "
        "proxy, this process's client threads, and the whole machine, other users "
        "included, over the same windows):",
        "",
        *_cpu_table(rows),
        "",
    ]
    return lines, verdict


def write(path: Path, args: argparse.Namespace, sections: list[list[str]], info: dict) -> None:
    """Write the results file: the set-up, then each model's section."""
    text = "\n".join([
        "# Serving: monolib vs ONNX Runtime behind the same Ray Serve app (issue 16)",
        "",
        "Written by `" + " ".join(["python bench/serve.py", *sys.argv[1:]]) + "`. Per model: "
        "compiled with a run-time batch dim 1..8; "
        f"{args.replicas} replicas x {args.threads} thread(s) per backend, dynamic batching "
        f"up to {args.max_batch} rows, {args.batch_wait_ms} ms batch wait, the Open "
        "Inference Protocol with binary tensors both ways. Clients: threads of this "
        "process, one keep-alive HTTP connection each, one request after the other; "
        f"{args.seconds} s per cell after 1 s of warm-up, {args.rounds} round(s) "
        "interleaved (monolib, ORT, monolib, ...); latency as the client sees it. Per "
        "request the monolib replica's work is the library's run and ORT's "
        "`session.run`; everything else (HTTP proxy, Serve's router and batching, "
        "protocol decode/encode) is the same code on both sides.",
        "",
        f"Machine: {info['machine']} (the clients, Ray and both apps share these cores, "
        f"with whatever else runs there). ray {info['ray']}, onnxruntime {info['ort']}, "
        f"Python {platform.python_version()}.",
        "",
        "How to read it: the replicas' CPU per request is the model's run plus the "
        "replica's share of the stack (Ray's transport, batching, protocol decode and "
        "encode), the same for both backends; the HTTP proxy's is the same code on both "
        "sides. The ratio of throughputs can only reach the model's own ratio where the "
        "model's time dominates that stack's (a small model like the line classifier "
        "spends most of a request outside the model). Where the whole machine's CPU per "
        "request far exceeds replicas + proxy + clients, other processes held the cores "
        "during the run and the figures are noisy.",
        "",
        *[line for sec in sections for line in sec],
    ])
    path.write_text(text)


def bench_model(key: str, shape: tuple, args: argparse.Namespace, port: int, tmp: Path,
                marker: str) -> tuple[list, dict]:
    """Deploy ``key`` on both backends, check their answers, load them; the table rows
    and the facts of the section."""
    from ray import serve

    import monolib
    import monolib.serve as ms
    from monolib.models import fetch_model

    onnx_path = str(fetch_model(key))
    lib = tmp / f"{key}.so"
    monolib.compile(onnx_path, shapes={"x": ((1, 8), *shape[1:])}).export_library(str(lib))
    model_ms = model_times(str(lib), onnx_path, shape, args.threads)
    print(key, "model alone (ms):", model_ms, flush=True)
    load_before = " ".join(f"{v:.1f}" for v in os.getloadavg())
    common = {"replicas": args.replicas, "threads": args.threads,
              "max_batch": args.max_batch, "batch_wait_ms": args.batch_wait_ms, "name": "m"}
    apps = {"monolib": ("/ml", str(lib)), "onnxruntime": ("/ort", onnx_path)}
    for backend, (prefix, path) in apps.items():
        serve.run(ms.deployment(path, backend=backend, **common), name=backend[:3],
                  route_prefix=prefix)
    try:
        # both answer as the in-process GraphModule does before anything is timed
        x = np.random.default_rng(16).standard_normal(shape).astype(np.float32)
        gm = monolib.GraphModule(monolib.load_module(str(lib)))
        gm.run(x=x)
        want = gm.get_output(0).numpy()
        for backend, (prefix, _) in apps.items():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, body, headers = post(conn, f"{prefix}/v2/models/m/infer", *_request(x))
            assert status == 200, (backend, status, body[:300])
            np.testing.assert_allclose(_decode(body, headers), want, rtol=1e-3, atol=1e-4)
            conn.close()
        watch = {}
        for backend in apps:
            handle, pids = serve.get_app_handle(backend[:3]), set()
            while len(pids) < args.replicas:
                pids.add(handle.info.remote().result(timeout_s=60)["pid"])
            watch[backend] = {"replicas": sorted(pids),
                              "proxy": pids_titled("ray::ProxyActor", marker)}
        results: dict = {}
        for clients in args.clients:
            for _ in range(args.rounds):
                for backend, (prefix, _) in apps.items():
                    r = load(port, f"{prefix}/v2/models/m/infer", x, clients, args.seconds,
                             watch=watch[backend])
                    results.setdefault((clients, backend), []).append(r)
                    print(f"{key} {backend:12s} {clients:3d} clients: "
                          f"{len(r['lat']) / r['seconds']:7.1f} req/s, p99 "
                          f"{np.percentile(r['lat'], 99) * 1e3:7.2f} ms, {r['errors']} errors",
                          flush=True)
    finally:
        for backend in apps:
            serve.delete(backend[:3])
    rows = [(c, summary(results[(c, "monolib")]), summary(results[(c, "onnxruntime")]))
            for c in args.clients]
    info = {"key": key, "model": f"{key} (`{Path(onnx_path).name}`)",
            "shape": "x".join(map(str, shape)), "model_ms": model_ms,
            "load_before": load_before,
            "load_after": " ".join(f"{v:.1f}" for v in os.getloadavg())}
    return rows, info


def _models(text: str) -> list[tuple[str, tuple]]:
    out = []
    for item in text.split(","):
        key, _, shape = item.partition(":")
        out.append((key, tuple(int(v) for v in shape.split("x"))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="ppocr_cls:1x3x48x192,ppocr_det:1x3x320x320",
                    type=_models, help="KEY:SHAPE,... (models with one float input x)")
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

    tmp = Path(tempfile.mkdtemp(prefix="mlbench", dir="/tmp"))  # short: Ray's socket paths
    try:
        os.environ["RAY_TMPDIR"] = str(tmp)
        cpus = 2 * args.replicas * args.threads  # logical: both apps placed at once
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                 _temp_dir=str(tmp), configure_logging=False)
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        sections, verdicts = [], []
        for key, shape in args.models:
            rows, minfo = bench_model(key, shape, args, port, tmp, f"RAY_TMPDIR={tmp}")
            lines, verdict = _section(args, rows, minfo)
            sections.append(lines)
            verdicts.append(verdict)
            print("\n".join(lines), flush=True)
        info = {"machine": f"{os.cpu_count()} CPUs ({platform.machine()})",
                "ray": ray.__version__, "ort": onnxruntime.__version__}
        write(args.out, args, sections, info)
        print("\n".join(verdicts))
        return 0
    finally:
        try:
            serve.shutdown()
            ray.shutdown()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
