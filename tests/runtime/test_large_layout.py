"""Layout for weights past the 2 GB relocation range (export/embed.py): the container
section sits after .bss, in a read-only segment of its own at the end of the image, so
the code's PC-relative references to its data and GOT never span the weights. The
>2 GB link itself is run by bench/large.py (it writes several GB)."""

import shutil
import subprocess

import numpy as np
import pytest

import monolib
from monolib.abi.names import SECTION_NAME

from tinylib import reference, tiny_factory

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")


def _sections(path) -> dict[str, tuple[int, int, str]]:
    """name -> (address, size, flags) from readelf -SW."""
    out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        if "]" not in line:
            continue
        fields = line.split("]", 1)[1].split()
        if len(fields) >= 7 and fields[1] in ("PROGBITS", "NOBITS"):
            found[fields[0]] = (int(fields[2], 16), int(fields[4], 16), fields[6])
    return found


def test_container_section_is_placed_after_code_and_data(tmp_path):
    path = tmp_path / "tiny.so"
    tiny_factory(big_bytes=1 << 20).export_library(str(path))
    sec = _sections(path)
    start, size, flags = sec[SECTION_NAME]
    assert "W" not in flags and "X" not in flags  # read-only, not executable
    assert start % 4096 == 0
    for name in (".text", ".data", ".bss", ".got"):
        if name in sec:
            assert sec[name][0] < start, f"{name} placed after the container"
    # and the library still loads and runs with that layout
    gm = monolib.GraphModule(monolib.load_module(str(path))["default"](monolib.cpu()))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gm.run(x=x)
    np.testing.assert_array_equal(gm.get_output(0).numpy(), reference(x))
