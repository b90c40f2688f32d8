"""The ``monolib`` command: compile, run, inspect, view, keygen, sign, verify.

::

    monolib compile model.onnx -o model.so --shape x=1,3,48,320 [--const sr=16000]
                                           [--width text=32]
                                           [--target "c"]
    monolib compile det.onnx -o det.so --shape x=1,3,32..1280:32,32..1280:32 \
                                       [--dim batch=1..8] [--opt x=1,3,640,640]
    monolib run model.so --input x=image.npy [--output out.npz] [--repeat N]
                         [--trusted-key key.pub]
    monolib inspect model.so [--verify] [--json]
    monolib view model.so [-o model.so.html] [--profile]
    monolib keygen --out key [--password-env VAR]   # writes key (private) and key.pub
    monolib sign model.so --key key [--password-env VAR]   # writes model.so.sig
    monolib verify model.so --key key.pub [--sig model.so.sig]
    monolib header > monolib.h   # the C API of exported libraries (docs/c_api.md)
    monolib js > monolib.mjs     # the ES module that runs a .wasm in browsers and Node

``run`` and ``inspect`` need the runtime only (NumPy); ``compile`` imports the
compiler; ``keygen``/``sign``/``verify`` (and ``run --trusted-key``) need
``cryptography``. Errors are printed as one line ``error: ...`` and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .errors import CompileError, InputError, MonolibError

__all__ = ["build_parser", "main", "parse_const", "parse_dim", "parse_opt", "parse_shape"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- parsing
def _axis(word: str) -> int | tuple[int, ...]:
    """``"3"`` -> 3, ``"1..8"`` -> (1, 8), ``"32..1280:32"`` -> (32, 1280, 32)."""
    word = word.strip()
    if ".." not in word:
        n = int(word)
        if n < 0:
            raise ValueError(word)
        return n
    lo, _, rest = word.partition("..")
    hi, colon, step = rest.partition(":")
    return (int(lo), int(hi), int(step)) if colon else (int(lo), int(hi))


def parse_shape(text: str) -> tuple[str, tuple[int | tuple[int, ...], ...]]:
    """``"x=1,3,48,320"`` -> ``("x", (1, 3, 48, 320))`` (``"x="`` is a scalar); an axis
    ``lo..hi`` or ``lo..hi:step`` is a run-time dim: ``"x=1..8,3"`` -> ``("x", ((1, 8), 3))``.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NAME=d0,d1,...`` with non-negative integers or bounds.
    """
    name, eq, dims = text.partition("=")
    try:
        if not name or not eq:
            raise ValueError
        words = dims.split(",") if ".." in dims else dims.replace("x", ",").split(",")
        shape = tuple(_axis(d) for d in words if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad --shape {text!r}: expected NAME=d0,d1,... with each d a size or "
            "lo..hi[:step] (e.g. x=1,3,48,320 or x=1..8,3,32..1280:32,32..1280:32)"
        ) from None
    return name, shape


def parse_dim(text: str) -> tuple[str, tuple[int, ...]]:
    """``"batch=1..8"`` -> ``("batch", (1, 8))``; ``"w=32..1280:32"`` -> ``("w", (32, 1280, 32))``.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NAME=lo..hi[:step]``.
    """
    name, eq, bounds = text.partition("=")
    try:
        if not name or not eq or ".." not in bounds:
            raise ValueError
        value = _axis(bounds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad --dim {text!r}: expected NAME=lo..hi[:step] (e.g. batch=1..8)"
        ) from None
    return name, value  # type: ignore[return-value]


def parse_opt(text: str) -> tuple[str, tuple[int, ...]]:
    """``"x=1,3,640,640"`` -> ``("x", (1, 3, 640, 640))``: one hot shape to specialize.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NAME=d0,d1,...`` with non-negative integers.
    """
    name, shape = parse_shape(text)
    if any(not isinstance(d, int) for d in shape):
        raise argparse.ArgumentTypeError(
            f"bad --opt {text!r}: expected a concrete shape NAME=d0,d1,... (e.g. x=1,3,640,640)"
        )
    return name, shape  # type: ignore[return-value]


def _size_budget(text: str) -> tuple[float | None]:
    """``--size-budget``: ``"none"`` -> ``(None,)`` (no limit), ``"0.3"`` -> ``(0.3,)``
    (a tuple: an unset option stays falsy)."""
    if text.strip().lower() == "none":
        return (None,)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(
            f"bad --size-budget {text!r}: expected a fraction >= 0 (e.g. 0.15) or none")
    return (value,)


def _number(word: str) -> Any:
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def parse_const(text: str) -> tuple[str, Any]:
    """``"sr=16000"`` -> ``("sr", 16000)``; ``"k=1,2"`` -> ``("k", [1, 2])``; other
    values stay strings.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NAME=VALUE``.
    """
    name, eq, value = text.partition("=")
    if not name or not eq or not value:
        raise argparse.ArgumentTypeError(f"bad --const {text!r}: expected NAME=VALUE")
    if "," in value:
        return name, [_number(v) for v in value.split(",")]
    return name, _number(value)


def parse_max_trips(text: str) -> tuple[str, int]:
    """``"decode=64"`` -> ``("decode", 64)``: a Loop node's trip-count bound.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NODE=N`` with ``N`` a non-negative integer.
    """
    return _node_bound(text, "--max-trips")


def parse_max_size(text: str) -> tuple[str, int]:
    """``"positions=4096"`` -> ``("positions", 4096)``: the bound on a node's
    data-dependent output sizes (``compile(max_sizes=...)``).

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NODE=N`` with ``N`` a non-negative integer.
    """
    return _node_bound(text, "--max-size")


def _node_bound(text: str, flag: str, label: str = "NODE", least: int = 0) -> tuple[str, int]:
    """``NAME=N`` split at the last ``=`` (node and input names may hold one), ``N`` an
    integer of at least ``least``."""
    name, eq, value = text.rpartition("=")
    if not name or not eq or not value.isdigit() or int(value) < least:
        at_least = f", N >= {least}" if least else ""
        raise argparse.ArgumentTypeError(f"bad {flag} {text!r}: expected {label}=N{at_least}")
    return name, int(value)


def parse_width(text: str) -> tuple[str, int]:
    """``"text=32"`` -> ``("text", 32)``: a string input's bytes of UTF-8 per element.

    Raises
    ------
    argparse.ArgumentTypeError
        Not ``NAME=N`` with ``N`` a positive integer.
    """
    return _node_bound(text, "--width", "NAME", least=1)


def _with_widths(shapes: dict, widths: Sequence[tuple[str, int]]) -> dict:
    """``--shape`` entries with ``--width`` (string inputs) folded in: ``{"shape": ...,
    "width": n}`` (``compiler/frontend/strings.py``)."""
    out = dict(shapes)
    for name, width in widths:
        out[name] = {"width": width, **({"shape": out[name]} if name in out else {})}
    return out


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``monolib`` command."""
    parser = argparse.ArgumentParser(
        prog="monolib",
        description="Compile an ONNX model into ONE shared library; run it; inspect it.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    comp = sub.add_parser("compile", help="compile an ONNX model into a shared library")
    comp.add_argument("model", help="the .onnx file")
    comp.add_argument(
        "-o",
        "--output",
        required=True,
        help="output library (no suffix: the target OS's, e.g. .so)",
    )
    comp.add_argument(
        "--shape",
        action="append",
        type=parse_shape,
        default=[],
        metavar="NAME=D0,D1,...",
        help="shape of an input, each dim a size or lo..hi[:step] bounds (repeatable)",
    )
    comp.add_argument(
        "--dim",
        action="append",
        type=parse_dim,
        default=[],
        metavar="NAME=LO..HI[:STEP]",
        help="bounds of every input dim the model names NAME (repeatable)",
    )
    comp.add_argument(
        "--width",
        action="append",
        type=parse_width,
        default=[],
        metavar="NAME=N",
        help="a string input's width: bytes of UTF-8 per element (repeatable)",
    )
    comp.add_argument(
        "--max-trips",
        action="append",
        type=parse_max_trips,
        default=[],
        metavar="NODE=N",
        help="bound on a Loop node's trip count, when monolib cannot derive one (repeatable)",
    )
    comp.add_argument(
        "--max-size",
        action="append",
        type=parse_max_size,
        default=[],
        metavar="NODE=N",
        help="bound on a node's data-dependent output sizes (a run-time Range, Expand, "
        "Tile...): their product is at most N (repeatable)",
    )
    comp.add_argument(
        "--opt",
        action="append",
        type=parse_opt,
        default=[],
        metavar="NAME=D0,D1,...",
        help="a hot input shape compiled fully static too (repeatable)",
    )
    comp.add_argument(
        "--const",
        action="append",
        type=parse_const,
        default=[],
        metavar="NAME=VALUE",
        help="bake an input in as a constant (repeatable)",
    )
    comp.add_argument("--target", default="c", help='target string (default "c": the host)')
    comp.add_argument(
        "--tune",
        action="store_true",
        help="time each conv signature's candidate algorithms on this CPU first and cache "
        "the fastest (~/.cache/monolib/tuning, MONOLIB_TUNING_DIR)",
    )
    comp.add_argument(
        "--tune-budget", type=float, default=120.0, metavar="S",
        help="seconds of measuring at most with --tune (default 120)",
    )
    comp.add_argument(
        "--size-budget", type=_size_budget, default=None, metavar="F|none",
        help="extra bytes re-laid-out conv weights (Winograd) may add, as a fraction of "
        "the model's weights, plus 1 MB (default 0.15); none: no limit",
    )
    tun = sub.add_parser("tune", help="show, export or import this CPU's tuning cache")
    tun.add_argument("action", choices=("show", "export", "import"))
    tun.add_argument("file", nargs="?", help="the JSON file to write (export) or read (import)")

    run = sub.add_parser("run", help="load a library and run it on .npy/.npz inputs")
    run.add_argument("library")
    run.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input (repeatable); a bare FILE.npz gives inputs by name",
    )
    run.add_argument("--output", "-o", help="write the outputs to this .npz")
    run.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "opencl", "cuda"],
        help="where the executor runs (opencl/cuda: libraries compiled for that target)",
    )
    run.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs (default 1); the first is reported on its own",
    )
    run.add_argument(
        "--random", action="store_true", help="fill inputs not given with random data (for timing)"
    )
    run.add_argument("--verify", action="store_true", help="check every SHA-256 at load")
    run.add_argument(
        "--trusted-key",
        action="append",
        default=None,
        metavar="KEY.pub",
        help="refuse the library unless signed by this public key (repeatable); see `monolib sign`",
    )
    run.add_argument("--sig", help="its signature (default LIBRARY.sig), with --trusted-key")
    run.add_argument(
        "--profile",
        action="store_true",
        help="also time each fused op (monolib_run_op) and list the slowest",
    )
    run.add_argument(
        "--profile-in-run",
        action="store_true",
        help="--profile with each op timed inside whole runs (monolib_run_timed): the "
        "caches as the ops before it leave them, as in production",
    )

    insp = sub.add_parser("inspect", help="describe a library without loading it")
    insp.add_argument("library")
    insp.add_argument("--verify", action="store_true", help="check every section's SHA-256")
    insp.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_signing_parsers(sub)
    from .tools.visualize import add_view_parser  # plain stdlib + runtime: cheap

    add_view_parser(sub)
    sub.add_parser("header", help="print monolib.h, the C API of exported libraries")
    sub.add_parser("js", help="print monolib.mjs, the ES module that runs a .wasm (browser, Node)")
    _add_serve_parser(sub)
    return parser


def _add_serve_parser(sub: Any) -> None:
    srv = sub.add_parser("serve", help="serve libraries on Ray (Open Inference Protocol v2)")
    srv.add_argument("libraries", nargs="+", metavar="LIB",
                     help="model.so, or NAME=model.so (the model's name; default: file stem)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--replicas", type=int, default=1, help="replicas per model")
    srv.add_argument("--threads", type=int, default=1, help="threads per replica")
    srv.add_argument("--max-batch", type=int, default=None,
                     help="rows per run at most (default: the batch dim's bound)")
    srv.add_argument("--batch-wait-ms", type=float, default=5.0)
    srv.add_argument("--trusted-key", action="append", default=None, metavar="KEY.pub",
                     help="verify each library's signature with this key (repeatable)")
    srv.add_argument("--address", default=None,
                     help="join this Ray cluster (auto, ray://HOST:10001); default: start one")
    srv.add_argument("--backend", default="monolib", choices=("monolib", "onnxruntime"),
                     help="onnxruntime: serve .onnx files the same way (a baseline)")


_PASSWORD_HELP = "environment variable holding the private key's password"


def _password(args: argparse.Namespace) -> bytes | None:
    """The password named by ``--password-env`` (never taken on the command line,
    where other users could read it in the process list)."""
    if not args.password_env:
        return None
    value = os.environ.get(args.password_env)
    if not value:
        from .errors import SignatureError

        raise SignatureError(f"--password-env {args.password_env}: that variable is not set")
    return value.encode("utf-8")


def _add_signing_parsers(sub: Any) -> None:
    keygen = sub.add_parser("keygen", help="create an Ed25519 key pair for signing libraries")
    keygen.add_argument("--out", "-o", required=True, help="private key file (KEY.pub beside it)")
    keygen.add_argument("--force", action="store_true", help="overwrite existing key files")
    keygen.add_argument("--password-env", metavar="VAR", help=_PASSWORD_HELP + " (encrypts it)")

    sign = sub.add_parser("sign", help="write a detached signature LIBRARY.sig")
    sign.add_argument("library")
    sign.add_argument("--key", "-k", required=True, help="the private key (from keygen)")
    sign.add_argument("--sig", help="where to write the signature (default LIBRARY.sig)")
    sign.add_argument("--password-env", metavar="VAR", help=_PASSWORD_HELP)

    ver = sub.add_parser("verify", help="check a library's signature (without loading it)")
    ver.add_argument("library")
    ver.add_argument(
        "--key",
        "-k",
        required=True,
        action="append",
        metavar="KEY.pub",
        help="a trusted public key (repeatable: any one of them may have signed)",
    )
    ver.add_argument("--sig", help="the signature file (default LIBRARY.sig)")


# --------------------------------------------------------------------------- compile
class StepDisplay:
    """Progress callback that shows each named step with a spinner and its time.

    Called with a step name at the start of each step; the previous step is then
    printed as done with its duration (seconds).
    """

    def __init__(self, console: Any) -> None:
        self.console = console
        self.current: str | None = None
        self.started = 0.0
        self.steps: list[tuple[str, float]] = []
        self._status = console.status("starting") if hasattr(console, "status") else None

    def __enter__(self) -> StepDisplay:  # noqa: PYI034
        if self._status is not None:
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()
        if exc[0] is None:
            self.finish()
        elif self.current is not None:
            dt = time.perf_counter() - self.started
            mark = "[red]✗[/red]" if self._status is not None else "failed"
            self.console.print(f"  {mark} {self.current:<32} {dt:8.2f} s")

    def __call__(self, name: str) -> None:
        self.finish()
        self.current, self.started = str(name), time.perf_counter()
        if self._status is not None:
            self._status.update(f"{self.current} ...")

    def finish(self) -> None:
        """Mark the current step done (prints it with its time)."""
        if self.current is None:
            return
        dt = time.perf_counter() - self.started
        self.steps.append((self.current, dt))
        self.console.print(
            f"  [green]✓[/green] {self.current:<32} {dt:8.2f} s"
            if self._status is not None
            else f"  done {self.current:<32} {dt:8.2f} s"
        )
        self.current = None


def _opt_shapes(pairs: Sequence[tuple[str, tuple[int, ...]]]) -> dict[str, list] | None:
    """Repeated ``--opt NAME=...`` -> ``{name: [shape, ...]}`` in the order given."""
    out: dict[str, list] = {}
    for name, shape in pairs:
        out.setdefault(name, []).append(shape)
    return out or None


def cmd_compile(args: argparse.Namespace, console: Any) -> int:
    try:
        from .compiler.build import compile as build_compile  # the compiler: lazily
    except ImportError as exc:  # a runtime-only install (NumPy alone)
        raise CompileError(
            f"the compiler is not installed ({exc}): pip install 'monolib[compiler]'"
        ) from None

    t0 = time.perf_counter()
    with StepDisplay(console) as steps:
        lib = build_compile(
            args.model,
            target=args.target,
            shapes=_with_widths(dict(args.shape), args.width) or None,
            constants=dict(args.const) or None,
            dims=dict(args.dim) or None,
            opt_shapes=_opt_shapes(args.opt),
            # only when given: stand-in compilers (tests) need not take it
            **({"max_trip_count": dict(args.max_trips)} if args.max_trips else {}),
            **({"max_sizes": dict(args.max_size)} if args.max_size else {}),
            **({"tune": True, "tune_budget_s": args.tune_budget} if args.tune else {}),
            **({"size_budget": args.size_budget[0]} if args.size_budget else {}),
            progress=steps,
        )
        path = lib.export_library(args.output, progress=steps)
    console.print(
        f"wrote {path} ({os.path.getsize(path)} bytes) in {time.perf_counter() - t0:.2f} s"
    )
    return 0


# --------------------------------------------------------------------------- run
def _load_inputs(specs: Sequence[str]) -> dict[str, Any]:
    import numpy as np

    inputs: dict[str, Any] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        try:
            if not eq:  # a bare .npz: every array in it, by name
                with np.load(spec) as npz:
                    inputs.update({k: npz[k] for k in npz.files})
            else:
                inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {spec!r}: cannot read {path or spec}: {exc}") from None
    return inputs


def _fill_missing(gm: Any, inputs: dict[str, Any], random: bool) -> None:
    import numpy as np

    shapes, dtypes = gm.get_input_info()
    missing = [n for n in shapes if n not in inputs]
    if missing and not random:
        expected = ", ".join(f"{n}={dtypes[n]}{list(shapes[n])}" for n in shapes)
        raise InputError(
            f"missing inputs {missing}; the model expects {expected} "
            "(give --input NAME=FILE.npy, or --random)"
        )
    rng = np.random.default_rng(0)
    for name in missing:
        inputs[name] = rng.standard_normal(shapes[name]).astype(dtypes[name])


def cmd_run(args: argparse.Namespace, console: Any) -> int:
    import numpy as np

    from . import runtime
    from .runtime import GraphModule, load_module
    from .tools.inspect import print_table

    t0 = time.perf_counter()
    mod = load_module(
        args.library, verify=args.verify, trusted_keys=args.trusted_key, signature=args.sig
    )
    gm = GraphModule(mod["default"](getattr(runtime, args.device)()))
    t_load = time.perf_counter() - t0
    inputs = _load_inputs(args.input)
    _fill_missing(gm, inputs, args.random)
    gm.set_input(**inputs)
    t = time.perf_counter()
    gm.run()
    t_first = time.perf_counter() - t
    bench = gm.benchmark(repeat=args.repeat - 1, warmup=0) if args.repeat > 1 else None
    outputs = {name: gm.get_output(i).numpy() for i, name in enumerate(gm.output_names)}
    rows = [
        [
            n,
            str(list(a.shape)),
            str(a.dtype),
            f"{a.min():.6g}" if a.size and a.dtype.kind in "biuf" else "",
            f"{a.max():.6g}" if a.size and a.dtype.kind in "biuf" else "",
        ]
        for n, a in outputs.items()
    ]
    print_table(console, "outputs", ["name", "shape", "dtype", "min", "max"], rows)
    console.print(
        f"load {t_load * 1e3:.2f} ms; first run {t_first * 1e3:.3f} ms"
        + (f"; {args.repeat - 1} more runs: {bench}" if bench else "")
    )
    if args.profile or args.profile_in_run:
        _print_profile(console, gm.executor.profile(repeat=max(1, min(args.repeat, 20)),
                                                    in_run=args.profile_in_run))
    if args.output:
        np.savez(args.output, **outputs)
        console.print(f"wrote {args.output}")
    return 0


def _print_profile(console: Any, ops: list[dict], top: int = 25) -> None:
    from .tools.inspect import print_table

    total = sum(o["time_ms"] for o in ops) or 1.0
    rows = [
        [
            str(o["index"]),
            o["name"],
            "+".join([o["op"], *o["fused"]]),
            str(o["shape"]),
            f"{o['time_ms']:.3f}",
            f"{100 * o['time_ms'] / total:.1f}%",
        ]
        for o in sorted(ops, key=lambda o: -o["time_ms"])[:top]
    ]
    print_table(
        console,
        f"slowest ops (of {len(ops)}; sum {total:.3f} ms)",
        ["#", "name", "ops", "shape", "ms", "share"],
        rows,
    )


# --------------------------------------------------------------------------- inspect
def cmd_inspect(args: argparse.Namespace, console: Any) -> int:
    from .tools.inspect import inspect_library, render_report

    report = inspect_library(args.library, verify=args.verify)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render_report(report, console)
    return 0


# --------------------------------------------------------------------------- signing
def cmd_keygen(args: argparse.Namespace, console: Any) -> int:
    from .runtime.trust import key_id, load_public_key
    from .tools.sign import generate_keypair

    priv, pub = generate_keypair(args.out, overwrite=args.force, password=_password(args))
    console.print(f"wrote {priv} (private: keep it secret) and {pub} (public)")
    console.print(f"key id {key_id(load_public_key(pub))}")
    return 0


def cmd_sign(args: argparse.Namespace, console: Any) -> int:
    from .tools.sign import sign_file

    out = sign_file(args.library, args.key, signature=args.sig, password=_password(args))
    with open(out, encoding="utf-8") as f:
        doc = json.load(f)
    console.print(f"wrote {out}: {args.library} signed by key {doc['key_id']}")
    return 0


def cmd_verify(args: argparse.Namespace, console: Any) -> int:
    from .runtime.trust import verify_file

    info = verify_file(args.library, args.key, signature=args.sig)
    console.print(
        f"OK: {args.library} ({info.size} bytes, sha256 {info.sha256}) "
        f"is signed by trusted key {info.key_id}"
    )
    return 0


def cmd_view(args: argparse.Namespace, console: Any) -> int:
    from .tools.visualize import cmd_view as run_view

    return run_view(args, console)


def cmd_header(args: argparse.Namespace, console: Any) -> int:
    """Print ``monolib.h`` (the C API every exported library implements) byte for byte."""
    from .export.capi import header_text

    sys.stdout.write(header_text())
    return 0


def cmd_js(args: argparse.Namespace, console: Any) -> int:
    """Print ``monolib.mjs`` (loads a model's ``.wasm`` in a browser or Node) byte for byte."""
    from importlib import resources

    sys.stdout.write(resources.files("monolib").joinpath("js/monolib.mjs").read_text("utf-8"))
    return 0


def cmd_tune(args: argparse.Namespace, console: Any) -> int:
    """``monolib tune show|export FILE|import FILE``: this CPU's tuning cache
    (``compiler/tuning/cache.py``); import takes a file measured on the same CPU model
    with the same kernels."""
    from .compiler.tuning.cache import TuningCache

    cache = TuningCache()
    if args.action == "show":
        console.print(f"{cache.path}: cpu {cache.cpu!r}, kernels {cache.kernels}, "
                      f"{len(cache.entries)} entries, conv cost constants "
                      f"{'calibrated here' if cache.conv_costs else 'shipped'}")
        for key, e in sorted(cache.entries.items()):
            console.print(f"  {e['choice']:<20} (rule {e['default']}) {key}")
        for algo, consts in sorted(cache.conv_costs.items()):
            body = ", ".join(f"{k} {v:.4g}" for k, v in consts.items())
            console.print(f"  conv cost {algo}: {body} (ns)")
        return 0
    if not args.file:
        raise CompileError(f"monolib tune {args.action}: a FILE is needed")
    if args.action == "export":
        with open(args.file, "w") as f:
            json.dump(cache.document(), f, indent=1, sort_keys=True)
        console.print(f"wrote {len(cache.entries)} entries to {args.file}")
        return 0
    added = cache.merge_file(args.file)
    console.print(f"imported {added} entries into {cache.save()}")
    return 0


def cmd_serve(args: argparse.Namespace, console: Any) -> int:
    """``monolib serve``: Ray Serve deployments of the libraries until stopped."""
    from .serve.runner import main as serve_main  # imports Ray: only here

    return serve_main(args.libraries, host=args.host, port=args.port,
                      replicas=args.replicas, threads=args.threads, max_batch=args.max_batch,
                      batch_wait_ms=args.batch_wait_ms, trusted_keys=args.trusted_key,
                      address=args.address, backend=args.backend)


COMMANDS = {
    "tune": cmd_tune,
    "header": cmd_header,
    "js": cmd_js,
    "compile": cmd_compile,
    "view": cmd_view,
    "run": cmd_run,
    "inspect": cmd_inspect,
    "keygen": cmd_keygen,
    "sign": cmd_sign,
    "verify": cmd_verify,
    "serve": cmd_serve,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``monolib`` console script; returns the exit status.

    0 on success, 1 on a :class:`MonolibError` (printed as ``error: ...`` on
    stderr), 2 on bad arguments (argparse).
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    from .tools.inspect import make_console

    console = make_console()
    try:
        return COMMANDS[args.command](args, console)
    except MonolibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `monolib inspect x.so --json | head`: not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives until exit)
        return 0


if __name__ == "__main__":
    sys.exit(main())
