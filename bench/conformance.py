"""The full ONNX node conformance sweep through monolib's ONNX backend.

    python bench/conformance.py [--ops Conv,Relu] [--timeout 60] [--write-unsupported]

Every node case (``onnx.backend.test.case.node``, all 1,884 of onnx 1.23, operators
monolib does not implement included) is compiled and run; the pass count per operator
is printed and written to ``bench/CONFORMANCE.md``, with the failures and their first
error line. Cases run in a worker process that is restarted after a crash or a
timeout, so one bad case cannot end the sweep (the crash is recorded against that case).

``--write-unsupported`` also rewrites the list of cases CI expects to fail
(``tests/conformance_unsupported.txt``, see :mod:`monolib.onnx_conformance`): every
case that did not pass, with its reason. A reason already in the file is kept (it was
curated by hand); a new one is the static reason (operator not implemented, value
kind, element type) or the case's first error line.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(names: list[str]) -> None:
    """Run the named cases, one JSON line per event on stdout."""
    from monolib.onnx_conformance import check_case, load_cases

    by_name = {c.name: c for c in load_cases()}
    print(json.dumps({"ready": True}), flush=True)
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        t0 = time.perf_counter()
        try:
            check_case(by_name[name])
            status, detail = "pass", ""
        except AssertionError as exc:
            status, detail = "mismatch", str(exc).strip().splitlines()[0:3]
        except Exception as exc:  # noqa: BLE001 -- recorded, not hidden
            status = "error"
            detail = [f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"]
            if not getattr(exc, "__module__", "").startswith("monolib"):
                detail.append(traceback.format_exc().strip().splitlines()[-3].strip())
        print(json.dumps({"done": name, "status": status, "detail": detail,
                          "seconds": round(time.perf_counter() - t0, 3)}), flush=True)


def sweep(names: list[str], timeout: float) -> dict[str, dict]:
    """Run ``names`` in restartable worker processes; returns name -> result."""
    results: dict[str, dict] = {}
    todo = list(names)
    while todo:
        proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        proc.stdin.write(json.dumps(todo))
        proc.stdin.close()
        current = None
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = None
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not sel.select(wait):  # the current case ran past its time
                proc.kill()
                results[current] = {"status": "timeout", "detail": [f"> {timeout} s"]}
                break
            line = proc.stdout.readline()
            if not line:  # the worker died (a crash in generated code?)
                proc.wait()
                if current is not None:
                    results[current] = {"status": "crash",
                                        "detail": [f"worker exit {proc.returncode}"]}
                break
            msg = json.loads(line)
            if "start" in msg:
                current, deadline = msg["start"], time.monotonic() + timeout
            elif "done" in msg:
                results[msg["done"]] = msg
                current, deadline = None, None
                print(f"{msg['status']:8s} {msg['seconds']:6.2f}s {msg['done']}", flush=True)
        todo = [n for n in todo if n not in results]
        proc.wait()
    return results


def sweep_parallel(names: list[str], timeout: float, jobs: int) -> dict[str, dict]:
    """:func:`sweep` over ``jobs`` interleaved shares of ``names`` at once."""
    if jobs <= 1:
        return sweep(names, timeout)
    from concurrent.futures import ThreadPoolExecutor

    results: dict[str, dict] = {}
    with ThreadPoolExecutor(jobs) as pool:
        for part in pool.map(lambda k: sweep(names[k::jobs], timeout), range(jobs)):
            results.update(part)
    return results


def write_report(rows, results, path: Path, missing: list[str] = ()) -> None:
    """Markdown: totals, per-operator pass counts (``rows``: op -> [pass, cases]), the
    failures."""
    passed = sum(r["status"] == "pass" for r in results.values())
    declared = sum(r["status"] == "error" and "UnsupportedOpError" in (r.get("detail") or [""])[0]
                   for r in results.values())
    others = collections.Counter(r["status"] for r in results.values() if r["status"] != "pass")
    others["error"] -= declared
    lines = ["# ONNX node conformance of monolib", "",
             ("Generated by `python bench/conformance.py` (ONNX's node test cases, "
              "`onnx.backend.test.case.node`, run through `monolib.onnx_backend.MonolibBackend`)."),
             "", (f"**{passed} / {len(results)}** cases pass "
                  f"({100 * passed / max(len(results), 1):.1f}%), over {len(rows)} operators."), "",
             f"Of the {len(results) - passed} failures, {declared} are refused by the compiler "
             "(`UnsupportedOpError`: an operator, element type or feature monolib does not "
             "implement); the rest: "
             + (", ".join(f"{n} {k}" for k, n in sorted(others.items()) if n) or "none") + ".",
             "", "| operator | pass | cases |", "|---|---|---|"]
    for op, (p, n) in sorted(rows.items()):
        lines.append(f"| {op} | {p} | {n} |")
    if missing:
        title = f"## Operators with ONNX node tests that monolib does not implement ({len(missing)})"
        lines += ["", title, "", ", ".join(missing)]
    lines += ["", "## Failures", ""]
    for name, r in sorted(results.items()):
        if r["status"] != "pass":
            detail = " / ".join(r.get("detail") or []).replace("|", "\\|")[:300]
            lines.append(f"- `{name}`: {r['status']}: {detail}")
    path.write_text("\n".join(lines) + "\n")


def write_unsupported(cases, results, path: Path) -> int:
    """Rewrite the expected-failure list: every case of ``results`` that did not pass,
    with its reason (a curated one already in ``path`` is kept). Returns the count."""
    from monolib.onnx_conformance import read_unsupported, supported_ops, unsupported_reason

    old = read_unsupported(path) if path.exists() else {}
    registered = supported_ops()
    by_name = {c.name: c for c in cases}
    lines = []
    for name, r in sorted(results.items()):
        if r["status"] == "pass":
            continue
        reason = old.get(name) or unsupported_reason(by_name[name], registered)
        if not reason:
            reason = f"{r['status']}: " + " / ".join(r.get("detail") or [])
        lines.append(f"{name}: {' '.join(reason.split())[:300]}")
    header = ("# ONNX node cases monolib does not pass, one per line: `case: reason`.\n"
              "# CI (tests/test_onnx_backend.py) runs every case; these as strict xfail, so a\n"
              "# case that starts passing must leave this list (it only shrinks).\n"
              "# Regenerate: python bench/conformance.py --write-unsupported (then curate).\n")
    path.write_text(header + "\n".join(lines) + "\n")
    return len(lines)


def shrink_listed(cases, timeout: float, jobs: int) -> None:
    """Run the listed cases; rewrite the list without those that pass now."""
    from monolib.onnx_conformance import UNSUPPORTED_FILE, read_unsupported

    listed = read_unsupported(UNSUPPORTED_FILE)
    results = sweep_parallel([c.name for c in cases if c.name in listed], timeout, jobs)
    passing = {n for n, r in results.items() if r["status"] == "pass"}
    lines = UNSUPPORTED_FILE.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if ln.partition(": ")[0].strip() not in passing]
    UNSUPPORTED_FILE.write_text("".join(kept), encoding="utf-8")
    print(f"{len(passing)} listed cases pass now and left the list: {sorted(passing)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops", default="", help="comma-separated operators (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--out", default=str(HERE / "CONFORMANCE.md"))
    ap.add_argument("--listed", action="store_true",
                    help="run only the cases of the expected-failure list and drop those "
                         "that now pass from it (no report)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes run at once")
    ap.add_argument("--write-unsupported", action="store_true",
                    help="rewrite the CI list of expected failures from this sweep")
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(sys.stdin.read()))
        return

    from monolib.onnx_conformance import UNSUPPORTED_FILE, load_cases, supported_ops

    registered = supported_ops()
    every = load_cases()
    if args.listed:
        shrink_listed(every, args.timeout, args.jobs)
        return
    wanted = set(args.ops.split(",")) if args.ops else {c.op for c in every}
    cases = [c for c in every if c.op in wanted]
    print(f"{len(cases)} cases over {len(wanted)} operators", flush=True)
    t0 = time.perf_counter()
    results = sweep_parallel([c.name for c in cases], args.timeout, args.jobs)
    rows = {op: [0, 0] for op in wanted}
    for c in cases:
        rows[c.op][1] += 1
        rows[c.op][0] += results[c.name]["status"] == "pass"
    missing = sorted({c.op for c in every} - registered)
    write_report(rows, results, Path(args.out), missing if not args.ops else ())
    passed = sum(r["status"] == "pass" for r in results.values())
    print(f"\n{passed} / {len(results)} cases pass ({100 * passed / max(len(results), 1):.1f}%, "
          f"{time.perf_counter() - t0:.0f} s); report: {args.out}")
    if args.write_unsupported:
        if args.ops:
            raise SystemExit("--write-unsupported needs the full sweep (no --ops)")
        n = write_unsupported(cases, results, UNSUPPORTED_FILE)
        print(f"{n} expected failures written to {UNSUPPORTED_FILE}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
