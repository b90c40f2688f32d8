"""Import trees of depth 3 and more, several user modules under one DSO: the tree
survives export and load (in process and in a fresh one), functions are found through
it, ``monolib inspect`` prints it; a missing loader names the Python module to import."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from tinylib import PYTHON, reference, tiny_factory
from treemod_helper import LeafModule, NodeModule

from monolib.abi.names import LOADER_HINT_SECTION
from monolib.cli import main
from monolib.runtime import GraphModule, UnknownTypeKeyError, cpu, load_module
from monolib.runtime.library import read_loader_hints
from monolib.runtime.module import get_loader


def build_tree():
    """factory -> lib -> {A, B -> C -> D}, and factory -> E: depth 4 below the root."""
    factory = tiny_factory()
    lib = factory.imported_modules[0]
    a, b = LeafModule("a", 1.5), NodeModule("b", b"bee")
    c, d = LeafModule("c", 3.0), NodeModule("d", b"\x00deep\xff")
    lib.import_module(a)
    lib.import_module(b)
    b.import_module(c)
    c.import_module(d)
    factory.import_module(LeafModule("e", -2.0))
    return factory


def shape(mod) -> tuple:
    """(type_key, [children's shapes]) of the tree under ``mod`` (the C source module
    that becomes the DSO module named as the DSO module, "library")."""
    key = "library" if mod.exports_to_library else mod.type_key
    return (key, [shape(m) for m in mod.imported_modules])


EXPECTED = (
    "graph_executor_factory",
    [
        (
            "library",
            [
                ("test_tree_leaf", []),
                ("test_tree_node", [("test_tree_leaf", [("test_tree_node", [])])]),
            ],
        ),
        ("test_tree_leaf", []),
    ],
)


@pytest.fixture(scope="module")
def tree_lib(tmp_path_factory) -> str:
    return build_tree().export_library(str(tmp_path_factory.mktemp("tree") / "tree.so"))


def check_loaded(root) -> None:
    assert shape(root) == EXPECTED
    for name, want in [("a", 1.5), ("c", 3.0), ("e", -2.0)]:
        assert root.get_function(name, query_imports=True)() == want
    assert root.get_function("b", query_imports=True)() == b"bee"
    assert root.get_function("d", query_imports=True)() == b"\x00deep\xff"
    lib = root.imported_modules[0]
    b = lib.imported_modules[1]
    assert b.get_function("c", query_imports=True)() == 3.0
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gm = GraphModule(root["default"](cpu()))
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)


def test_tree_before_export_has_the_expected_shape():
    assert shape(build_tree()) == EXPECTED


def test_deep_tree_round_trips(tree_lib):
    check_loaded(load_module(tree_lib, verify=True))


@pytest.mark.parametrize("compress", ["zlib"])
def test_deep_tree_round_trips_compressed(tmp_path, compress):
    path = build_tree().export_library(str(tmp_path / "z.so"), compress=compress)
    check_loaded(load_module(path))


def test_deep_tree_in_a_fresh_process(tree_lib, subprocess_env):
    script = (
        "import json, treemod_helper, monolib\n"
        f"root = monolib.load_module({tree_lib!r})\n"
        "def shape(m): return [m.type_key, [shape(c) for c in m.imported_modules]]\n"
        "print(json.dumps([shape(root), root.get_function('d', query_imports=True)().hex()]))\n"
    )
    res = subprocess.run(
        [PYTHON, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    got_shape, d_hex = json.loads(res.stdout)
    assert json.loads(json.dumps(EXPECTED)) == got_shape
    assert bytes.fromhex(d_hex) == b"\x00deep\xff"


def test_inspect_prints_the_tree(tree_lib, capsys):
    assert main(["inspect", tree_lib]) == 0
    out = capsys.readouterr().out
    tree = out[out.index("module tree:") :].splitlines()[1:8]
    assert [line.rstrip() for line in tree] == [
        "[0] graph_executor_factory",
        "  └─ [1] library",
        "    └─ [2] test_tree_leaf",
        "    └─ [3] test_tree_node",
        "      └─ [4] test_tree_leaf",
        "        └─ [5] test_tree_node",
        "  └─ [6] test_tree_leaf",
    ]
    assert main(["inspect", tree_lib, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [m["imports"] for m in report["modules"]] == [[1, 6], [2, 3], [], [4], [5], [], []]


def test_user_modules_carry_a_loader_hint(tree_lib):
    hints = read_loader_hints(tree_lib)
    assert sorted(hints) == [2, 3, 4, 5, 6]  # the factory and the DSO have none
    assert hints[3] == {"module": "treemod_helper", "class": "NodeModule"}
    assert hints[2] == {"module": "treemod_helper", "class": "LeafModule"}
    sections = NodeModule("n", b"").save_sections()  # an override gets it as well
    assert set(sections) == {"name", "payload", LOADER_HINT_SECTION}


def test_unknown_type_key_names_the_module_to_import(tree_lib, monkeypatch):
    from monolib.runtime import module

    monkeypatch.delitem(module._LOADERS, NodeModule.type_key)
    with pytest.raises(UnknownTypeKeyError, match="'test_tree_node'") as info:
        load_module(tree_lib)
    msg = str(info.value)
    assert f"{tree_lib} (module 3)" in msg and "import treemod_helper" in msg
    assert "NodeModule" in msg
    assert info.value.type_key == "test_tree_node"
    assert info.value.loader_hint == {"module": "treemod_helper", "class": "NodeModule"}
    with pytest.raises(UnknownTypeKeyError, match="import the package that defines it"):
        get_loader("never_registered")  # no library named: the generic advice


def test_unknown_type_key_in_a_fresh_process(tree_lib):
    script = f"import monolib\nmonolib.load_module({tree_lib!r})"
    res = subprocess.run(
        [PYTHON, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 1
    assert "UnknownTypeKeyError" in res.stderr and "'test_tree_leaf'" in res.stderr
    assert "import treemod_helper" in res.stderr
