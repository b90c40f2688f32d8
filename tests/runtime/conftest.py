"""Fixtures of the runtime tests (the helpers live in ``tinylib.py``)."""

from __future__ import annotations

import os

import pytest
from tinylib import HERE, tiny_factory


@pytest.fixture(scope="session")
def tiny_lib(tmp_path_factory) -> str:
    """Path of the exported tiny library (exported once per session; do not modify)."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.so"
    return tiny_factory().export_library(str(path))


@pytest.fixture(scope="session")
def big_lib(tmp_path_factory) -> str:
    """Path of a tiny library whose params section is above the 1 MiB check limit."""
    path = tmp_path_factory.mktemp("big") / "big.so"
    return tiny_factory(big_bytes=3 << 20).export_library(str(path))


@pytest.fixture
def subprocess_env() -> dict:
    """Environment for a fresh python process that can import the test helpers."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")])
    return env
