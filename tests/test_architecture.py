"""The architecture's rules, checked on the source: imports point one way, files stay small.

Layers, from the bottom: ``errors`` <- ``abi`` (the contracts) <- ``runtime`` <- ``export``
<- ``compiler``; ``tools`` read ``abi`` and ``runtime``. Every ``import`` counts, those
inside functions too (a lazy import is still a dependency). A deployed model needs
``monolib.runtime`` and NumPy only, so the runtime must never reach the compiler, the
export steps or the tools.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "monolib"

#: layer -> the layers it may import (besides itself and the package root ``monolib``)
ALLOWED = {
    "errors": set(),
    "abi": {"errors"},
    "runtime": {"errors", "abi"},
    "export": {"errors", "abi", "runtime"},
    "compiler": {"errors", "abi", "runtime", "export"},
    "tools": {"errors", "abi", "runtime"},
    "serve": {"errors", "abi", "runtime"},
}


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def _resolve(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    """``{module: {imported monolib modules}}`` over ``src/monolib``; a ``from pkg
    import name`` where ``pkg.name`` is a module counts as importing ``pkg.name``."""
    files = {(_module_name(p)[0]): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:  # `import monolib.x.y` names a module or its package
                    t = t.rpartition(".")[0]
                if t.startswith("monolib") and t != mod:
                    deps.add(t)
        graph[mod] = deps
    return graph


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # package __init__ files re-export their children; an edge child -> own package
    # is how Python imports a submodule, not a dependency, so it is left out
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in import_graph().items()}
    assert _cycles(graph) == []


def test_layers_point_one_way():
    bad = []
    for mod, deps in import_graph().items():
        layer = _layer(mod)
        if layer is None:
            continue
        for d in deps:
            dl = _layer(d)
            if dl is not None and dl != layer and dl not in ALLOWED[layer]:
                bad.append(f"{mod} -> {d}")
            if dl is None and d != "monolib" and layer in ("errors", "abi", "runtime"):
                bad.append(f"{mod} -> {d}")  # the runtime stays within its layers
    assert sorted(bad) == []


def test_runtime_needs_numpy_only():
    """What a deployed model imports: no onnx, no compiler, no tools."""
    third_party = set()
    for path in list((PKG / "runtime").rglob("*.py")) + list((PKG / "abi").rglob("*.py")) + [PKG / "errors.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                third_party |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                third_party.add(node.module.split(".")[0])
    assert not (third_party & {"onnx", "onnxruntime", "rich"})


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_python_files_stay_small(path):
    assert len(path.read_text().splitlines()) <= 800


def test_cycle_finder_finds_cycles():
    """The checker itself: a two-module cycle and a three-module cycle are found."""
    g = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert _cycles(g) == [["a", "b"], ["c", "d", "e"]]
