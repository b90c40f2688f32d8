"""A plain load is O(1) in the weights: the big params section is never hashed or
copied, the factory's params are a view of the library's own mapping, and no
OpenSSL (``hashlib``) is imported. Mechanisms are asserted, not timings."""

from __future__ import annotations

import hashlib
import json
import subprocess

import numpy as np
import pytest
from tinylib import PYTHON, W, tiny_graph

import monolib.abi.container as container_mod
from monolib.runtime import (
    ContainerError,
    GraphExecutorFactoryModule,
    GraphModule,
    cpu,
    load_module,
)
from monolib.abi.container import SMALL_SECTION_BYTES, sha256
from monolib.runtime.library import read_container


def _mapping_of(address: int) -> str:
    """The /proc/self/maps path of the mapping holding ``address`` ('' if anonymous)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5] if len(fields) > 5 else ""
    raise AssertionError(f"address {address:#x} is not mapped")


@pytest.fixture
def hashed(monkeypatch) -> list[int]:
    """Sizes of every buffer a load hashes (the container's hash and hashlib's)."""
    sizes: list[int] = []

    def counting(data):
        sizes.append(memoryview(data).nbytes)
        return hashlib.new("sha256", data)

    monkeypatch.setattr(container_mod, "sha256", counting)
    return sizes


def test_plain_load_hashes_only_small_sections(big_lib, hashed):
    container, _ = read_container(big_lib)
    params = next(s for m in container.modules for s in m.sections if s.name == "params")
    assert params.stored_size > SMALL_SECTION_BYTES
    hashed.clear()
    gm = GraphModule(load_module(big_lib)["default"](cpu()))
    assert hashed, "the manifest and small sections are still checked"
    assert max(hashed) <= SMALL_SECTION_BYTES
    assert sum(hashed) < params.stored_size
    x = np.ones((2, 3), np.float32)
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), x * W + 0.25, rtol=1e-6)


def test_verify_hashes_the_big_section(big_lib, hashed):
    container, _ = read_container(big_lib)
    params = next(s for m in container.modules for s in m.sections if s.name == "params")
    load_module(big_lib, verify=True)
    assert params.stored_size in hashed


def test_params_view_points_into_the_mapped_library(big_lib):
    factory = load_module(big_lib)
    params = factory.params
    assert not params.flags.writeable and not params.flags.owndata
    # The first and last byte of the weights lie in the dynamic loader's file
    # mapping of the library itself: nothing was read into anonymous memory.
    assert _mapping_of(params.ctypes.data) == big_lib
    assert _mapping_of(params.ctypes.data + params.nbytes - 1) == big_lib
    executor = factory["default"](cpu())
    assert executor.params.ctypes.data == params.ctypes.data  # shared, not copied


def test_params_table_parsed_once_and_shared(big_lib):
    factory = load_module(big_lib)
    first, second = factory["default"](cpu()), factory["default"](cpu())
    assert first.param_infos is second.param_infos is factory.param_infos()
    big = first.param_infos["big"]
    assert (big.offset, big.nbytes, big.shape, big.dtype) == (128, 3 << 20, (3 << 20,), np.uint8)


def test_param_beyond_params_bytes_still_refused_at_executor_creation():
    graph, params = tiny_graph()
    graph["params_bytes"] = 64  # "b" at 64 now lies past it, though inside the blob
    factory = GraphExecutorFactoryModule(graph, params)
    with pytest.raises(ContainerError, match=r"param 'b' \[64, 68\) lies outside the params blob"):
        factory.param_infos()


def test_builtin_and_openssl_sha256_agree():
    for n in (0, 1, SMALL_SECTION_BYTES, SMALL_SECTION_BYTES + 1):
        data = bytes(range(256)) * (n // 256) + b"x" * (n % 256)
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        assert sha256(memoryview(data)[1:]).digest() == hashlib.sha256(data[1:]).digest()


SCRIPT = """
import json, sys
import numpy
from monolib.runtime import load_module, cpu
factory = load_module(sys.argv[1])
factory["default"](cpu())
print(json.dumps(sorted(m for m in ("hashlib", "_hashlib", "rich")
                        if m in sys.modules)))
"""


def test_plain_load_imports_no_openssl(big_lib, subprocess_env):
    res = subprocess.run(
        [PYTHON, "-c", SCRIPT, big_lib],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=subprocess_env,
    )
    assert json.loads(res.stdout) == []
