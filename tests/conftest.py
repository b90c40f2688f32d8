"""Fixtures shared by every test directory (directory-specific ones live beside
their tests, e.g. ``tests/models/conftest.py``)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A NumPy generator with a fixed seed, so failures reproduce."""
    return np.random.default_rng(20261121)


@pytest.fixture(scope="session")
def ort_run():
    """:func:`monolib.compiler.testing.ort_run` (ONNX Runtime, one thread: the reference
    every op is checked against); the test is skipped without ONNX Runtime."""
    pytest.importorskip("onnxruntime")
    from monolib.compiler.testing import ort_run

    return ort_run


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The ONNX node conformance pass count (``tests/test_onnx_backend.py``) over every
    case run, as the last lines of the report (also under ``pytest -n``: the
    controller sees every worker's reports)."""
    outcomes: dict[str, str] = {}
    for key in ("passed", "failed", "xfailed", "xpassed", "skipped", "error"):
        for rep in terminalreporter.stats.get(key, []):
            nodeid = getattr(rep, "nodeid", "")
            if "test_onnx_node_case[" not in nodeid:
                continue
            # a case's outcome is its call phase's; a failed setup or teardown counts
            counts = key in ("failed", "error") or getattr(rep, "when", "call") == "call"
            if counts and outcomes.get(nodeid) != "failed":
                outcomes[nodeid] = "failed" if key == "error" else key
    if not outcomes:
        return
    passed = sum(v == "passed" for v in outcomes.values())
    total = len(outcomes)
    expected = sum(v == "xfailed" for v in outcomes.values())
    terminalreporter.write_sep("=", "ONNX node conformance")
    terminalreporter.write_line(
        f"ONNX node conformance: {passed} / {total} cases pass ({100 * passed / total:.1f}%); "
        f"{expected} listed as unsupported in src/monolib/conformance_unsupported.txt, "
        f"{total - passed - expected} failed or unexpectedly passed"
    )
