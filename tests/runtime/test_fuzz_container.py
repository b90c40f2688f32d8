"""Random damage to the container region of a library never crashes the loader.

Every mutated file is loaded in ONE child process (a segfault there fails the test,
where it would kill pytest itself): each load either raises a MonolibError subclass
or, for a byte in padding, succeeds with correct results.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import numpy as np
from tinylib import PYTHON

from monolib.runtime.binfmt import find_container
from monolib.runtime.container import Container

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import monolib
    results = []
    x = np.ones((2, 3), np.float32)
    for path in sys.argv[1:]:
        try:
            root = monolib.load_module(path, verify=True)
            gm = monolib.GraphModule(root["default"](monolib.cpu()))
            gm.run(x=x)
            results.append(["ok", float(gm.get_output(0).numpy().sum())])
        except monolib.MonolibError as exc:
            results.append(["error", type(exc).__name__])
    print(json.dumps(results))
""")


def test_random_container_damage_is_caught(tiny_lib, tmp_path, subprocess_env):
    data = Path(tiny_lib).read_bytes()
    off, _, _ = find_container(data)
    total = Container(data[off:]).total_size
    rng = np.random.default_rng(1234)
    paths = []
    for i in range(120):
        bad = bytearray(data)
        if i % 3 == 0:  # one byte anywhere in the container
            bad[off + int(rng.integers(total))] ^= int(rng.integers(1, 256))
        elif i % 3 == 1:  # a burst in the header or the manifest
            pos = off + int(rng.choice([rng.integers(128), rng.integers(total - 400, total)]))
            bad[pos : pos + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        else:  # one byte in the ELF headers' first page (never the code)
            bad[int(rng.integers(0, 64))] ^= int(rng.integers(1, 256))
        path = tmp_path / f"m{i}.so"
        path.write_bytes(bad)
        paths.append(str(path))
    res = subprocess.run(
        [PYTHON, "-c", CHILD, *paths],
        check=False,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=300,
    )
    assert res.returncode == 0, f"loader crashed (rc {res.returncode}): {res.stderr[-2000:]}"
    results = json.loads(res.stdout)
    assert len(results) == len(paths)
    expected = float(
        (np.ones((2, 3), np.float32) * 0 + np.arange(1, 7).reshape(2, 3) / 2 + 0.25).sum()
    )
    errors = [r for r in results if r[0] == "error"]
    assert len(errors) > len(results) // 2
    assert {r[1] for r in errors} <= {"ContainerError", "LibraryLoadError"}
    for r in results:
        if r[0] == "ok":
            assert abs(r[1] - expected) < 1e-5
