"""Inspect an exported library WITHOUT loading it (no dlopen, none of its code runs).

Reads the ELF section table (:mod:`monolib.abi.binfmt`), the container header and
manifest (:mod:`monolib.abi.container`) and the graph JSON of each graph
executor factory, and reports: format version, the module tree with type keys, each
section's size, codec and SHA-256, graph inputs/outputs, op counts (fused ops and
the ONNX ops inside them), params count and bytes, and the library's size. A graph
with run-time dims also reports its symbols (shown as ``batch∈[1,8]``), the shapes
it is specialized for, and that its arena is sized at the upper bounds. A library
exported by Apache TVM (no ``.monolib`` section, a ``__tvm_ffi__library_bin`` or
``__tvm_dev_mblob`` symbol) gets its module tree, type keys and sizes
(:mod:`.tvm_container`).
"""

from __future__ import annotations

import logging
import mmap
import sys
from collections import Counter
from typing import Any

from ..abi.binfmt import exported_symbols, parse_binary
from ..abi.container import SMALL_SECTION_BYTES, Container
from ..abi.graph_spec import factory_graphs, graph_layout
from ..abi.symbols import ComputedSymbol, Symbol, shape_label
from ..abi.names import ABI_SYMBOLS, CUDA, DATA_SECTION, LIBRARY, OPENCL
from ..errors import ContainerError, CPUFeatureError, LibraryLoadError
from ..runtime import isa
from ..runtime.library import read_container
from .tvm_container import find_tvm

__all__ = ["inspect_library", "make_console", "print_table", "read_library", "render_report"]

logger = logging.getLogger(__name__)

#: Device modules whose payload header (runtime/device_executor.py) inspect reads.
DEVICE_TYPE_KEYS = (OPENCL, CUDA)


def _devices(container: Container) -> dict[int, dict]:
    """Kernels and binary keys of every device module (``opencl``, ``cuda``), from the
    header of its payload (docs/devices.md)."""
    from ..runtime.device_executor import read_header

    out = {}
    for i, mod in enumerate(container.modules):
        sec = next((s for s in mod.sections if s.name == DATA_SECTION), None)
        if mod.type_key not in DEVICE_TYPE_KEYS or sec is None:
            continue
        head, _ = read_header(container.section_data(i, sec), mod.type_key)
        blobs = head.get("blobs", {})
        out[i] = {
            "kernels": len(head.get("functions", [])),
            "binaries": sorted(k[len("binary:") :] for k in blobs if k.startswith("binary:")),
            **head.get("meta", {}),
        }
    return out


def _symbols(graph: dict) -> dict[str, Any]:
    """The run-time-dim fields of a version-2 graph for the report (``symbols``,
    ``specializations``, ``arena_at_bounds``); empty for a static graph, or for
    fields too damaged to read (running the library reports those)."""
    try:
        layout = graph_layout(graph)
    except ContainerError as exc:
        logger.info("graph %r: run-time dims unreadable: %s", graph.get("name", ""), exc)
        return {}
    if layout is None:
        return {}
    return {
        "symbols": [{**s._asdict(), **({"computed": True} if s.computed else {})}
                    for s in layout.symbols],
        "specializations": [dict(s) for s in layout.specializations],
        "arena_at_bounds": True,
    }


def _graph_summary(graph: dict) -> dict[str, Any]:
    nodes = graph.get("nodes", [])
    onnx_ops: Counter = Counter()
    for node in nodes:
        onnx_ops[node.get("op", "?")] += 1
        onnx_ops.update(node.get("fused", []))
    params = graph.get("params", [])

    def tensors(key: str) -> list[dict]:
        return [
            {"name": t.get("name"), "shape": t.get("shape"), "dtype": t.get("dtype")}
            for t in graph.get(key, [])
        ]

    return {
        "name": graph.get("name", ""),
        "inputs": tensors("inputs"),
        "outputs": tensors("outputs"),
        "fused_ops": len(nodes),
        "onnx_ops": dict(onnx_ops.most_common()),
        "onnx_op_total": sum(onnx_ops.values()),
        "params_count": len(params),
        "params_bytes": int(graph.get("params_bytes", sum(p.get("nbytes", 0) for p in params))),
        "arena_bytes": int(graph.get("arena_bytes", 0)),
        "constants": graph.get("constants", {}),
        "metadata_keys": sorted(graph.get("metadata", {})),
        **_symbols(graph),
    }


def _isa(container: Container) -> dict[str, Any] | None:
    """The library's ISA record (:mod:`monolib.runtime.isa`) and what this CPU lacks
    of it (``missing_here``: None when unknown); None for a library without one."""
    try:
        record = isa.record_of(container)
    except CPUFeatureError as exc:
        return {"error": str(exc)}
    if record is None:
        return None
    return {**record, "missing_here": isa.missing_features(record)}


def inspect_library(path: str, verify: bool = False) -> dict[str, Any]:
    """Describe the library file ``path`` without loading it: the report of
    :func:`read_library`."""
    return read_library(path, verify)[0]


def read_library(path: str, verify: bool = False) -> tuple[dict[str, Any], dict[int, dict] | None]:
    """Describe the library file ``path`` without loading it, and read the whole
    graph JSON of each factory (in the same pass over the file).

    Parameters
    ----------
    path : str
        An exported library (or a bare container file).
    verify : bool
        Check every section's SHA-256 (weights included); else the small ones only.

    Returns
    -------
    (report, graphs)
        ``report``, JSON-serializable: ``path``, ``file_size``, ``binary`` (ELF
        class and machine), ``container`` (offset, size, format_version, producer),
        ``modules`` (index, type_key, imports, sections), ``root``,
        ``legacy_layout``, ``verified``, ``code_digest`` (the check of
        :func:`monolib.runtime.integrity.check_code`: status, entries, bytes hashed and
        skipped, what differs), ``graphs`` (per factory: inputs, outputs,
        fused_ops, onnx_ops, params_count, params_bytes, arena_bytes...), ``isa``
        (the instruction set the code needs: arch, level, features, flags,
        missing_here; None when not recorded);
        ``graphs``: module index -> graph JSON
        (:func:`monolib.abi.graph_spec.factory_graphs`), None for a library
        exported by Apache TVM (its report has a ``tvm`` key).

    Raises
    ------
    LibraryLoadError
        Missing, foreign or truncated file, no container.
    ContainerError
        Corrupt container or graph JSON; with ``verify``, any digest mismatch.
    """
    try:
        container, info = read_container(
            path,
            verify=verify,
            extract=lambda c: (factory_graphs(c), _devices(c), _isa(c)),
            check_code=True,
        )
    except LibraryLoadError:
        tvm = _inspect_tvm(path)
        if tvm is None:
            raise
        return tvm, None
    elf = info["elf"]
    graphs, devices, isa_report = info["extracted"]
    modules = []
    for i, mod in enumerate(container.modules):
        modules.append(
            {
                "index": i,
                "type_key": mod.type_key,
                "imports": list(container.children(i)),
                "sections": [s.to_json() for s in mod.sections],
            }
        )
        if i in devices:  # kernels and binaries of a device module
            modules[-1]["device"] = devices[i]
    legacy = container.import_tree is None
    root = container.root
    if legacy:  # every module is an import of the DSO module, the root
        root = next((m["index"] for m in modules if m["type_key"] == LIBRARY), 0)
        modules[root]["imports"] = [m["index"] for m in modules if m["index"] != root]
    report = {
        "path": path,
        "file_size": info["file_size"],
        "binary": f"{elf.format}{elf.bits} {elf.machine}" if elf else "bare container",
        "container": {
            "offset": info["section_offset"],
            "size": container.total_size,
            "format_version": container.format_version,
            "producer": container.manifest.get("producer", ""),
        },
        "modules": modules,
        "root": root,
        "legacy_layout": legacy,
        "verified": bool(verify),
        "code_digest": info["code_digest"].to_json(),
        "graphs": {str(i): _graph_summary(g) for i, g in graphs.items()},
        "exports": _exports(path, info["elf"]),
        "isa": isa_report,
    }
    if elf is not None and elf.format == "wasm":
        report["wasm"] = _wasm_report(path, elf, graphs)
    return report, graphs


def _wasm_report(path: str, info: Any, graphs: dict) -> dict[str, Any]:
    """A ``.wasm``'s imports and linear memory: its initial size (stack and data, the
    container included) and what ``monolib_open`` adds (the arena, one growth)."""
    from ..abi.binfmt.wasm import memory_limits, wasm_imports

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        limits = memory_limits(mm, info, path)
        imports = [f"{m}.{n}" for m, n, _ in wasm_imports(mm, info, path)]
    initial = None if limits is None else limits[0] * 65536
    arena = sum(int(g.get("arena_bytes", 0)) for g in graphs.values())
    return {"imports": imports, "initial_memory": initial, "arena_bytes": arena,
            "memory_after_open": None if initial is None else initial + arena}


def _inspect_tvm(path: str) -> dict[str, Any] | None:
    """The report of a library exported by Apache TVM, or None when ``path`` is
    not a binary or holds no TVM container (see :func:`inspect_library`)."""
    try:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        info = parse_binary(mm, path)
        found = find_tvm(mm, info, path)
        size = len(mm)
    except LibraryLoadError:
        return None
    finally:
        try:
            mm.close()
        except BufferError:
            pass  # an error's traceback still holds a view; the GC unmaps it later
    if found is None:
        return None
    offset, tvm = found
    modules = [
        {
            "index": i,
            "type_key": m.type_key,
            "imports": tvm.children(i),
            "sections": []
            if m.size is None
            else [{"name": "data", "offset": m.offset, "size": m.size, "sha256": m.sha256}],
        }
        for i, m in enumerate(tvm.modules)
    ]
    return {
        "path": path,
        "file_size": size,
        "binary": f"{info.format}{info.bits} {info.machine}",
        "tvm": {"layout": tvm.layout, "symbol": tvm.symbol, "offset": offset, "size": tvm.nbytes},
        "modules": modules,
        "root": 0,
    }


def _exports(path: str, elf: Any) -> dict[str, Any] | None:
    """The library's exported ``monolib_*`` symbols (ELF ``.dynsym``, read from the
    file) and whether the whole ABI of ``docs/ARCHITECTURE.md`` is there."""
    if elf is None or elf.format not in ("ELF", "wasm"):
        return None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        names = exported_symbols(mm, elf) or []
    ours = [n for n in names if "monolib" in n]
    return {"symbols": ours, "abi_complete": all(s in ours for s in ABI_SYMBOLS)}


class _PlainConsole:
    """What the CLI needs of ``rich.console.Console`` when rich is not installed."""

    def print(self, *args: Any, **kwargs: Any) -> None:
        print(*args)  # rich's keyword options (markup=...) mean nothing here


def make_console(stderr: bool = False) -> Any:
    """A ``rich`` console (a plain printer if rich is not installed: the runtime
    needs NumPy only)."""
    try:
        from rich.console import Console
    except ImportError:
        return _PlainConsole()
    stream = sys.stderr if stderr else sys.stdout
    # Piped output gets rich's 80 columns by default: too narrow for the tables.
    width = None if stream.isatty() else 150
    return Console(stderr=stderr, highlight=False, width=width)


def print_table(console: Any, title: str, columns: list[str], rows: list[list[str]]) -> None:
    """Print a table with ``rich`` (aligned plain text without it)."""
    if isinstance(console, _PlainConsole):
        widths = [max(len(str(x)) for x in col) for col in zip(columns, *rows)]
        print(title)
        for row in [columns, *rows]:
            print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*[str(x) for x in row])
    console.print(table)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _tree_lines(report: dict) -> list[str]:
    mods = report["modules"]
    lines: list[str] = []

    def walk(i: int, depth: int, seen: frozenset) -> None:
        m = mods[i]
        dev = m.get("device")
        binaries = ", ".join(dev["binaries"]) if dev and dev["binaries"] else "none"
        extra = f" ({dev['kernels']} kernels, binaries: {binaries})" if dev else ""
        lines.append(f"{'  ' * depth}{'└─ ' if depth else ''}[{i}] {m['type_key']}{extra}")
        if i in seen:
            return
        for c in m["imports"]:
            walk(c, depth + 1, seen | {i})

    walk(report["root"], 0, frozenset())
    return lines


def render_report(report: dict, console: Any = None) -> None:
    """Print the report of :func:`inspect_library` as rich tables (plain text if
    ``rich`` is not installed)."""
    console = console or make_console()
    if "tvm" in report:
        _render_tvm(report, console)
        return
    c = report["container"]
    console.print(
        f"library {report['path']}: {report['binary']}, size {_size(report['file_size'])}",
        markup=False,
    )
    console.print(
        f"container format v{c['format_version']} at file offset {c['offset']} "
        f"({_size(c['size'])}), produced by {c['producer'] or '?'}"
        + ("; legacy layout (no import tree)" if report["legacy_layout"] else ""),
        markup=False,
    )
    _render_isa(report.get("isa"), console)
    console.print("module tree:\n" + "\n".join(_tree_lines(report)))
    rows = [
        [
            str(m["index"]),
            m["type_key"],
            s["name"],
            _size(s["size"]),
            _size(s["stored_size"]),
            s["codec"],
            s["sha256"],
        ]
        for m in report["modules"]
        for s in m["sections"]
    ]
    small = f"{SMALL_SECTION_BYTES // 1024} KiB"
    state = (
        "all digests verified" if report["verified"] else f"digests of sections <= {small} checked"
    )
    print_table(
        console,
        f"sections ({state})",
        ["module", "type_key", "section", "size", "stored", "codec", "sha256"],
        rows,
    )
    code = report.get("code_digest")
    wasm = report.get("wasm")
    if wasm is not None:  # no trailer: a host validates the code when it compiles it
        at = wasm["initial_memory"]
        console.print(
            f"WebAssembly: code validated by the host when it compiles the module (no code "
            f"digest); imports: {', '.join(wasm['imports']) or 'none'}; linear memory "
            + (f"{_size(at)} at instantiation, about {_size(wasm['memory_after_open'])} after "
               "monolib_open (the arena: one growth)" if at is not None else "imported"),
            markup=False)
    elif code is not None:
        console.print(_code_digest_line(code), markup=False)
    exports = report.get("exports")
    if exports is not None:
        missing = [s for s in ABI_SYMBOLS if s not in exports["symbols"]]
        console.print(
            "exports: "
            + ", ".join(exports["symbols"])
            + (f" (MISSING {', '.join(missing)})" if missing else ""),
            markup=False,
        )
    for idx, g in report["graphs"].items():
        _render_graph(console, idx, g)


def _render_isa(rec: dict | None, console: Any) -> None:
    if rec is None:
        return
    if "error" in rec:
        console.print(f"ISA: {rec['error']}", markup=False)
        return
    missing = rec.get("missing_here")
    here = ("this CPU: not checked" if missing is None else
            f"this CPU LACKS {', '.join(missing)}" if missing else "this CPU has them all")
    feats = " ".join(rec["features"]) if rec.get("features") is not None else "unknown"
    flags = " ".join(rec.get("flags") or [])
    levels = rec.get("levels")  # a portable library: its op code at each, one picked at load
    carries = f"; op code at {', '.join(levels)} (best picked at load)" if levels else ""
    console.print(f"ISA: {rec.get('level') or rec['arch']} ({flags or 'default flags'}), "
                  f"needs {feats}; {here}{carries}", markup=False)


def _code_digest_line(code: dict) -> str:
    """One line on the library's code digest (checked here, as ``load_module`` would)."""
    status = code["status"]
    if status in ("verified", "mismatch"):
        what = (
            f"{code['algorithm']} over {_size(code['covered'])} in {code['entries']} "
            f"ranges, {_size(code['skipped'])} of weights left out"
        )
        if status == "verified":
            return f"code digest: verified ({what})"
        return f"code digest: MISMATCH in {'; '.join(code['mismatches'])} ({what})"
    return {
        "absent": "code digest: none (exported before monolib recorded one; not checked)",
        "missing": "code digest: MISSING (exported with one: truncated or stripped)",
    }.get(status, f"code digest: DAMAGED ({code['error']})")


def _render_tvm(report: dict, console: Any) -> None:
    t = report["tvm"]
    layout = "current (tvm-ffi)" if t["layout"] == "ffi" else "legacy"
    console.print(
        f"library {report['path']}: {report['binary']}, size {_size(report['file_size'])}",
        markup=False,
    )
    console.print(
        f"Apache TVM container, {layout} layout: symbol {t['symbol']} at file offset "
        f"{t['offset']} ({_size(t['size'])}); _lib = the library's own code",
        markup=False,
    )
    if not report["modules"]:
        console.print("no modules")
        return
    console.print("module tree:\n" + "\n".join(_tree_lines(report)), markup=False)
    rows = [
        [str(m["index"]), m["type_key"], _size(s["size"]), str(s["size"]), s["sha256"]]
        for m in report["modules"]
        for s in m["sections"] or [{"size": 0, "sha256": "(the library itself)"}]
    ]
    print_table(console, "modules", ["module", "type_key", "size", "bytes", "sha256"], rows)


def _render_graph(console: Any, idx: str, g: dict) -> None:
    symbols = {s["name"]: (ComputedSymbol if s.get("computed") else Symbol)(
        s["name"], s["lo"], s["hi"], s["step"]) for s in g.get("symbols", [])}
    rows = [
        [kind, t["name"], shape_label(t["shape"] or [], symbols) if symbols else str(t["shape"]),
         t["dtype"]]
        for kind, key in (("input", "inputs"), ("output", "outputs"))
        for t in g[key]
    ]  # fmt: skip
    print_table(
        console, f"graph {g['name']!r} (module {idx})", ["kind", "name", "shape", "dtype"], rows
    )
    at_bounds = " (at the upper bounds)" if g.get("arena_at_bounds") else ""
    console.print(
        f"fused ops: {g['fused_ops']} (ONNX ops: {g['onnx_op_total']}); "
        f"params: {g['params_count']} tensors, {_size(g['params_bytes'])}; "
        f"arena: {_size(g['arena_bytes'])}{at_bounds}"
    )
    if symbols:
        dims = ", ".join(s.label() for s in symbols.values())
        console.print(f"run-time dims: {dims}", markup=False)
        specs = [", ".join(f"{k}={v}" for k, v in s.items()) for s in g["specializations"]]
        specs_text = "; ".join(specs) or "none (generic kernels only)"
        console.print(f"specialized for: {specs_text}", markup=False)
    ops = ", ".join(f"{op} {n}" for op, n in g["onnx_ops"].items())
    if ops:
        console.print(f"ONNX ops: {ops}")
