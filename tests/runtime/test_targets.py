"""Target strings (TVM's form), their flags and OS suffixes; the compiler lookup."""

from __future__ import annotations

import importlib.util
import os
import stat

import pytest

from monolib.export.targets import Target
from monolib.export.toolchain import find_compiler
from monolib.errors import TargetError, ToolchainError


@pytest.mark.parametrize(
    "spec, os_name, suffix, arch",
    [
        ("c -mtriple=aarch64-linux-gnu", "linux", ".so", "aarch64"),
        ("c -mtriple=x86_64-windows-gnu", "windows", ".dll", "x86_64"),
        ("c -mtriple=x86_64-w64-mingw32", "windows", ".dll", "x86_64"),
        ("c -mtriple=aarch64-apple-darwin", "macos", ".dylib", "aarch64"),
        ("c -mtriple=aarch64-macos", "macos", ".dylib", "aarch64"),
        ("c -mtriple=riscv64-linux-musl", "linux", ".so", "riscv64"),
    ],
)
def test_triples(spec, os_name, suffix, arch):
    t = Target(spec)
    assert (t.os, t.lib_suffix, t.arch) == (os_name, suffix, arch)
    assert Target(str(t)) == t


def test_host_flags():
    host = Target("c")
    assert host.is_host and host.lib_suffix == ".so"
    assert host.cflags() == ["-O3", "-march=native"]
    assert Target("c -mcpu=skylake").cflags() == ["-O3", "-march=skylake"]
    assert Target("c -mtriple=aarch64-linux-gnu -mcpu=cortex-a72").cflags() == [
        "-O3",
        "-mcpu=cortex-a72",
    ]
    assert Target("c -mtriple=aarch64-linux-gnu").cflags() == ["-O3"]
    assert Target("c -mattr=+avx2,-fma").cflags()[-2:] == ["-mavx2", "-mno-fma"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "non-empty"),
        ("llvm", "unknown kind 'llvm'"),
        ("c -mfoo=1", "bad option"),
        ("c mcpu", "bad option"),
        ("c -mtriple=aarch64-plan9", "cannot tell the OS"),
    ],
)
def test_bad_targets(spec, message):
    with pytest.raises(TargetError, match=message):
        _ = Target(spec).os


def test_compiler_lookup(tmp_path, monkeypatch):
    fake = tmp_path / "mycc"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CC", "mycc -flag")
    assert find_compiler("c") == ["mycc", "-flag"]
    monkeypatch.delenv("CC")
    with pytest.raises(ToolchainError, match="apt-get install gcc"):
        find_compiler("c")
    cross = tmp_path / "aarch64-linux-gnu-gcc"
    cross.write_text("#!/bin/sh\n")
    cross.chmod(0o755)
    assert find_compiler("c -mtriple=aarch64-linux-gnu") == ["aarch64-linux-gnu-gcc"]


def test_cross_target_without_a_cross_compiler(tmp_path, monkeypatch):
    from tinylib import tiny_factory

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    f = tiny_factory()
    f.imported_modules[0].target = Target("c -mtriple=aarch64-linux-gnu")
    with pytest.raises(ToolchainError, match="pip install ziglang"):
        f.export_library(str(tmp_path / "m"))
    assert os.listdir(tmp_path) == []
