"""One target parser, backends as a table: ``Target`` parses every kind's string,
``BACKENDS`` has a backend for every kind, ``compile`` dispatches on ``Target.kind``."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.backends.registry import BACKENDS
from monolib.compiler.testing import make_node_model
from monolib.errors import TargetError
from monolib.export.targets import KINDS, Target


def test_every_kind_has_a_backend():
    assert set(BACKENDS) == set(KINDS)
    assert all(b.kind == k for k, b in BACKENDS.items())


@pytest.mark.parametrize(
    "spec, kind, options",
    [
        ("c", "c", {}),
        ("c -mcpu=native", "c", {"mcpu": "native"}),
        ("c -mtriple=aarch64-linux-gnu", "c", {"mtriple": "aarch64-linux-gnu"}),
        ("opencl", "opencl", {}),
        ("cuda -arch=sm_90", "cuda", {"arch": "sm_90"}),
    ],
)
def test_one_parser_for_every_kind(spec, kind, options):
    t = Target(spec)
    assert (t.kind, t.options) == (kind, options)
    assert Target(str(t)) == t


@pytest.mark.parametrize(
    "spec, message",
    [
        ("opencl -mcpu=x", "opencl takes none"),
        ("cuda -mcpu=x", "known: -arch=..."),
        ("c -arch=sm_90", "bad option"),
        ("vulkan", "unknown kind 'vulkan'"),
    ],
)
def test_bad_target_strings(spec, message):
    with pytest.raises(TargetError, match=message):
        Target(spec)


def test_compile_dispatches_on_the_kind(monkeypatch):
    """``compile`` asks the table: a backend swapped in for ``opencl`` gets the call."""
    seen = []

    class Spy(type(BACKENDS["opencl"])):
        def package(self, generated, target):
            seen.append((self.kind, str(target), len(generated.functions)))
            return "packaged"

    monkeypatch.setitem(BACKENDS, "opencl", Spy(BACKENDS["opencl"].language))
    model = make_node_model("Relu", {"x": np.zeros((2, 3), np.float32)})
    steps = []
    assert monolib.compile(model, target="opencl", progress=steps.append) == "packaged"
    assert seen == [("opencl", "opencl", 1)]
    assert steps == ["import", "optimize", "fuse", "plan memory", "generate opencl", "package"]


def test_a_kind_without_backend_is_a_compile_error(monkeypatch):
    monkeypatch.delitem(BACKENDS, "cuda")
    model = make_node_model("Relu", {"x": np.zeros((2, 3), np.float32)})
    with pytest.raises(monolib.CompileError, match="no backend for kind 'cuda' .*known: c, opencl"):
        monolib.compile(model, target="cuda")
