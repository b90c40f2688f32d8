"""monolib's ``.wasm`` vs onnxruntime-web in one headless Chromium (issue 17).

    python bench/wasm.py [--models cls,rec,det] [--rounds 3] [--reps 20]
                         [--ort-version 1.23.2] [--work ~/.cache/monolib/wasm-bench] [--reuse]
                         [--out bench/WASM.md]

PP-OCR's classifier (1x3x48x192), recognizer (1x3x48x320) and detector (1x3x320x320),
each compiled with ``monolib compile --target "c -mtriple=wasm32-wasi"`` into ``--work``
(``--reuse``: the files already there), against the same ``.onnx`` in onnxruntime-web
(npm, installed with ``npm install`` into ``~/.cache/monolib/npm``, never committed; its
wasm execution provider:
SIMD, ``numThreads = 1``, graph optimization "all"). One Chromium (the flags of the tests)
opens a page per job from a localhost ``http.server``; each job is a fresh document (no
HTTP cache: ``no-store``), so its first result is cold: import of the JavaScript (monolib.mjs
or ort.wasm.min.mjs) + fetch + compile + instantiate the wasm (and, for ORT, the .onnx and
its session) + the first run. Then warm-up runs (at least 5 and 1 s: V8 tiers the code
up from its baseline compiler) and ``--reps`` timed runs (median).
Jobs alternate monolib / ORT per model, ``--rounds`` times, so load from elsewhere hits
both alike; the medians over rounds are reported with monolib / ORT ratios. Both run the
same input (the rendered text line for cls and rec, a seeded random image for det), and
their outputs are compared. Sizes: the ``.wasm`` against ort-wasm-simd-threaded.wasm +
ort.wasm.min.mjs + ort-wasm-simd-threaded.mjs + the .onnx (bytes and gzip -6).
Targets: latency <= 1.0x onnxruntime-web, first result <= 0.5x.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "wasm"))
from conftest import CHROMIUM_FLAGS, MJS, TEXT, serve_dir

__all__ = ["MODELS", "build", "main", "ort_dist", "run_jobs", "summarize", "write_md"]

logger = logging.getLogger(__name__)

#: name -> (model key, input shape)
MODELS = {"cls": ("ppocr_cls", (1, 3, 48, 192)), "rec": ("ppocr_rec", (1, 3, 48, 320)),
          "det": ("ppocr_det", (1, 3, 320, 320))}
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")

PAGE = """<!doctype html><meta charset="utf-8"><title>monolib wasm bench</title>
<script type="module">
const job = JSON.parse(new URLSearchParams(location.search).get("job"));
const post = async (doc) => {
  const r = await fetch("/result", { method: "POST", body: JSON.stringify(doc) });
  const next = await r.text();
  if (next) location.replace(next);
};
const b64 = (u8) => { let s = ""; for (let i = 0; i < u8.length; i += 32768)
  s += String.fromCharCode(...u8.subarray(i, i + 32768)); return btoa(s); };
try {
  const raw = new Uint8Array(await (await fetch(job.input)).arrayBuffer());
  const x = new Float32Array(raw.buffer);
  let runOnce;
  const t0 = performance.now();
  if (job.runtime === "monolib") {
    const { loadModel } = await import("./monolib.mjs");
    const m = await loadModel(job.model);
    runOnce = async () => Object.values(m.run({ [job.name]: { data: x, dims: job.dims } }))[0].data;
  } else {
    const ort = await import("./ort/ort.wasm.min.mjs");
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.simd = true;
    ort.env.wasm.proxy = false;
    ort.env.wasm.wasmPaths = location.origin + "/ort/";
    const s = await ort.InferenceSession.create(job.model,
      { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
    const feeds = { [job.name]: new ort.Tensor("float32", x, job.dims) };
    runOnce = async () => (await s.run(feeds))[s.outputNames[0]].data;
  }
  const first = await runOnce();
  const firstMs = performance.now() - t0;
  // warm up: at least 5 runs and 1 s, so V8's optimizing tier replaces the baseline code
  const tw = performance.now();
  for (let i = 0; i < 5 || performance.now() - tw < 1000; i++) await runOnce();
  const times = [];
  for (let i = 0; i < job.reps; i++) {
    const t = performance.now();
    await runOnce();
    times.push(performance.now() - t);
  }
  await post({ job, firstMs, times, out: b64(new Uint8Array(first.buffer, first.byteOffset, first.byteLength)) });
} catch (e) {
  await post({ job, error: `${e.name}: ${e.message}` });
}
</script>
"""


def ort_dist(version: str) -> Path:
    """onnxruntime-web's dist folder, ``npm install``-ed into ~/.cache/monolib/npm."""
    prefix = Path.home() / ".cache" / "monolib" / "npm"
    pkg = prefix / "node_modules" / "onnxruntime-web"
    have = pkg / "package.json"
    if not have.exists() or json.loads(have.read_text())["version"] != version:
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                        f"onnxruntime-web@{version}"], check=True)
    return pkg / "dist"


def build(name: str, work: Path, reuse: bool = False) -> Path:
    """The ``.wasm`` of MODELS[name], built into ``work`` by the CLI (unchanged units come
    from monolib's object cache); ``reuse``: keep a file already there."""
    from monolib.models import fetch_model

    key, shape = MODELS[name]
    out = work / f"{name}.wasm"
    if not (reuse and out.exists()):
        cmd = [sys.executable, "-m", "monolib.cli", "compile", str(fetch_model(key)), "-o",
               str(out.with_suffix("")), "--shape", "x=" + ",".join(map(str, shape)),
               "--target", "c -mtriple=wasm32-wasi"]
        print("building", name, "...", flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def make_input(name: str) -> np.ndarray:
    """The text line (cls, rec) or a seeded random image (det), preprocessed."""
    from monolib.models import ocr

    shape = MODELS[name][1]
    if name == "det":
        return np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return ocr.line_preprocess(ocr.render_line(TEXT), shape[2], shape[3])


def gz(path: Path) -> int:
    """Bytes of ``path`` after gzip -6 (what a server sending it compressed would send)."""
    return len(gzip.compress(path.read_bytes(), 6))


def run_jobs(root: Path, jobs: list[dict], timeout: float) -> list[dict]:
    """Open each job's page in turn in ONE headless Chromium; their POSTed results."""
    results, done, lock = [], threading.Event(), threading.Lock()
    urls: list[str] = []

    def on_post(path, body):
        with lock:
            results.append(json.loads(body))
            print(f"  {len(results)}/{len(jobs)} {results[-1]['job']['runtime']} "
                  f"{results[-1]['job']['name_']}", flush=True)
            if len(results) == len(jobs):
                done.set()
                return b""
            return urls[len(results)].encode()

    server = serve_dir(root, on_post)
    base = f"http://127.0.0.1:{server.server_port}/bench.html?job="
    urls.extend(base + urllib.parse.quote(json.dumps(j)) for j in jobs)
    import signal

    profile = Path(tempfile.mkdtemp(prefix="monolib-chromium-"))
    proc = subprocess.Popen([os.environ.get("CHROMIUM", "/usr/bin/chromium"), *CHROMIUM_FLAGS,
                             f"--user-data-dir={profile}", urls[0]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        if not done.wait(timeout):
            raise TimeoutError(f"{len(results)} of {len(jobs)} jobs done in {timeout} s")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    return results


def main(argv=None) -> int:
    """Build, serve, run every job in one Chromium, write ``--out``; exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cls,rec,det")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ort-version", default="1.23.2")
    ap.add_argument("--work", default=str(Path.home() / ".cache" / "monolib" / "wasm-bench"))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--reuse", action="store_true", help="keep the .wasm files in --work")
    ap.add_argument("--out", default=str(ROOT / "bench" / "WASM.md"))
    args = ap.parse_args(argv)
    from monolib.models import fetch_model

    names = args.models.split(",")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    dist = ort_dist(args.ort_version)
    www = Path(tempfile.mkdtemp(prefix="monolib-wasm-bench-"))
    (www / "ort").mkdir()
    for f in ORT_FILES:
        (www / "ort" / f).symlink_to(dist / f)
    (www / "monolib.mjs").symlink_to(MJS)
    (www / "bench.html").write_text(PAGE)
    inputs = {}
    for n in names:
        (www / f"{n}.wasm").symlink_to(build(n, work, args.reuse))
        (www / f"{n}.onnx").symlink_to(fetch_model(MODELS[n][0]))
        inputs[n] = make_input(n)
        (www / f"{n}.bin").write_bytes(inputs[n].tobytes())
    jobs = []
    for r in range(args.rounds):
        for n in names:
            order = ("monolib", "ort") if r % 2 == 0 else ("ort", "monolib")
            for rt in order:
                jobs.append({"runtime": rt, "name_": n, "round": r, "name": "x",
                             "dims": list(MODELS[n][1]), "input": f"{n}.bin",
                             "model": f"{n}.wasm" if rt == "monolib" else f"{n}.onnx",
                             "reps": args.reps if n != "det" else max(5, args.reps // 2)})
    t0 = time.time()
    results = run_jobs(www, jobs, args.timeout)
    shutil.rmtree(www, ignore_errors=True)
    errors = [r for r in results if "error" in r]
    if errors:
        for e in errors:
            print("error:", e["job"]["runtime"], e["job"]["name_"], e["error"], file=sys.stderr)
        return 1
    (work / "results.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "out"} for r in results]))  # raw times, not committed
    rows = summarize(names, results, work, dist)
    write_md(args.out, rows, args, time.time() - t0)
    print(Path(args.out).read_text())
    return 0


def summarize(names, results, work, dist) -> list[dict]:
    """Per model: medians over rounds of the median latency and of the first result, both
    runtimes, the outputs' largest difference, and the sizes."""
    from monolib.models import fetch_model

    ort_js = sum((dist / f).stat().st_size for f in ORT_FILES)
    ort_js_gz = sum(gz(dist / f) for f in ORT_FILES)
    rows = []
    for n in names:
        per = {}
        outs = {}
        for rt in ("monolib", "ort"):
            rs = [r for r in results if r["job"]["name_"] == n and r["job"]["runtime"] == rt]
            per[rt] = {"lat": float(np.median([np.median(r["times"]) for r in rs])),
                       "lat_min": float(min(min(r["times"]) for r in rs)),
                       "first": float(np.median([r["firstMs"] for r in rs]))}
            outs[rt] = np.frombuffer(base64.b64decode(rs[0]["out"]), np.float32)
        # each round's two jobs ran next to each other: the ratio of their medians is the
        # estimate least moved by load that comes and goes between rounds
        med = {(r["job"]["runtime"], r["job"]["round"]): np.median(r["times"])
               for r in results if r["job"]["name_"] == n}
        rounds = sorted({k[1] for k in med})
        paired = float(np.median([med["monolib", i] / med["ort", i] for i in rounds]))
        onnx = Path(fetch_model(MODELS[n][0]))
        wasm = work / f"{n}.wasm"
        rows.append({"name": n, "shape": "x".join(map(str, MODELS[n][1])), **{
            f"{rt}_{k}": v for rt, d in per.items() for k, v in d.items()},
            "paired": paired, "maxdiff": float(np.abs(outs["monolib"] - outs["ort"]).max()),
            "wasm": wasm.stat().st_size, "wasm_gz": gz(wasm),
            "ort_total": ort_js + onnx.stat().st_size, "ort_total_gz": ort_js_gz + gz(onnx),
            "onnx": onnx.stat().st_size})
    return rows


def write_md(out, rows, args, seconds) -> None:
    """Write the latency / first-result and size tables of ``rows`` to ``out``."""
    ver = subprocess.run([os.environ.get("CHROMIUM", "/usr/bin/chromium"), "--version"],
                         capture_output=True, text=True, check=False).stdout.strip()
    load = os.getloadavg()
    lines = [
        "# WebAssembly: monolib's `.wasm` vs onnxruntime-web (issue 17)", "",
        (f"`python bench/wasm.py --rounds {args.rounds} --reps {args.reps}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): {ver}, headless, one "
        f"process; onnxruntime-web {args.ort_version} (wasm EP, SIMD, numThreads 1); "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
        f"{load[0]:.0f}-{load[2]:.0f} while it ran ({seconds:.0f} s). Latency: median of "
        "the rounds' median run; paired ratio: median over rounds of monolib's median / "
        "ORT-web's median in that round (the two jobs ran back to back); min: the fastest "
        "run of all rounds; first result: fresh page, JS import + fetch + compile + "
        "instantiate (+ ORT session) + first run, median of the rounds. Targets: latency "
        "<= 1.0x, first result <= 0.5x."), "",
        ("| model | input | monolib ms | ORT-web ms | ratio | paired ratio | min: monolib | "
         "ORT-web | ratio | first result monolib ms | ORT-web ms | ratio | max abs diff |"),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['shape']} | {r['monolib_lat']:.2f} | {r['ort_lat']:.2f} | "
            f"{r['monolib_lat'] / r['ort_lat']:.2f}x | {r['paired']:.2f}x | "
            f"{r['monolib_lat_min']:.2f} | "
            f"{r['ort_lat_min']:.2f} | {r['monolib_lat_min'] / r['ort_lat_min']:.2f}x | "
            f"{r['monolib_first']:.0f} | "
            f"{r['ort_first']:.0f} | {r['monolib_first'] / r['ort_first']:.2f}x | "
            f"{r['maxdiff']:.1e} |")
    lines += ["", ("Sizes (bytes; gzip -6 in parentheses). ORT-web: ort-wasm-simd-threaded.wasm "
                   "+ ort.wasm.min.mjs + ort-wasm-simd-threaded.mjs + the .onnx."), "",
              "| model | .onnx | monolib .wasm | ORT-web total | ratio |",
              "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['onnx']:,} | {r['wasm']:,} ({r['wasm_gz']:,}) | "
                     f"{r['ort_total']:,} ({r['ort_total_gz']:,}) | "
                     f"{r['wasm'] / r['ort_total']:.2f}x |")
    Path(out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
