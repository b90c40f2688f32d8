"""Every tuning test writes its cache under a temporary MONOLIB_TUNING_DIR (never the
user's ~/.cache/monolib/tuning)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def tuning_dir(tmp_path, monkeypatch):
    """A fresh, empty tuning cache folder for the test."""
    d = tmp_path / "tuning"
    monkeypatch.setenv("MONOLIB_TUNING_DIR", str(d))
    return d
