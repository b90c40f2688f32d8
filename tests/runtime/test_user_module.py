"""A user-defined module type survives export and a load in a FRESH process."""

from __future__ import annotations

import subprocess
import textwrap

import numpy as np
from tinylib import PYTHON, tiny_factory
from usermod_helper import EchoModule, PairModule

import monolib


def test_user_module_in_fresh_process(tmp_path, subprocess_env):
    factory = tiny_factory()
    lib = factory.imported_modules[0]
    lib.import_module(EchoModule("hello from the container", 2.5))  # under the DSO
    factory.import_module(PairModule(b"left", b"right"))  # under the factory
    path = factory.export_library(str(tmp_path / "user.so"))
    script = textwrap.dedent(f"""
        import numpy as np, monolib
        import usermod_helper  # registers the loaders
        root = monolib.load_module({path!r})
        lib, pair = root.imported_modules
        (echo,) = lib.imported_modules
        print(root.type_key, lib.type_key, echo.type_key, pair.type_key)
        print(echo["greet"]())
        print(echo["scale"](4))
        print(pair["join"]().decode())
        gm = monolib.GraphModule(root["default"](monolib.cpu()))
        gm.run(x=np.ones((2, 3), np.float32))
        print(gm.get_output(0).numpy().sum())
    """)
    res = subprocess.run(
        [PYTHON, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "graph_executor_factory library test_echo test_pair"
    assert lines[1:4] == ["hello from the container", "10.0", "left|right"]
    w = factory.get_params()["w"]
    assert abs(float(lines[4]) - float((w + 0.25).sum())) < 1e-5


def test_without_the_loader_the_key_is_named(tmp_path, subprocess_env):
    """Refused before dlopen: a constructor that aborts the process never runs."""
    factory = tiny_factory()
    lib = factory.imported_modules[0]
    lib.source += (
        "\n#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n"
    )
    factory.import_module(EchoModule("x", 1.0))
    path = factory.export_library(str(tmp_path / "u.so"))
    script = f"import monolib\nmonolib.load_module({path!r})"
    res = subprocess.run(
        [PYTHON, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert res.returncode == 1
    assert "UnknownTypeKeyError" in res.stderr and "'test_echo'" in res.stderr


def test_query_imports_finds_nested_functions():
    factory = tiny_factory()
    factory.imported_modules[0].import_module(EchoModule("deep", 1.0))
    assert factory.get_function("greet", query_imports=True)() == "deep"
    assert isinstance(factory["default"](monolib.cpu()), monolib.GraphExecutor)
    np.testing.assert_array_equal(factory.get_params()["b"], [0.25])
