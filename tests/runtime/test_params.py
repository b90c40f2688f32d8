"""Params files in safetensors format: zero-copy read, interchange with the reference
implementation (the ``safetensors`` package), and checks on malformed files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from tinylib import tiny_factory

from monolib.runtime import ContainerError, LibraryLoadError, load_params, save_params

RNG = np.random.default_rng(3)
TENSORS = {
    "w": RNG.standard_normal((4, 5)).astype(np.float32),
    "idx": np.arange(7, dtype=np.int64),
    "mask": np.array([True, False, True]),
    "half": RNG.standard_normal(3).astype(np.float16),
    "empty": np.zeros((0, 3), np.float32),
}


def test_round_trip_is_zero_copy(tmp_path):
    path = save_params(str(tmp_path / "p.safetensors"), TENSORS, {"producer": "test"})
    out = load_params(path)
    assert set(out) == set(TENSORS)
    for name, arr in TENSORS.items():
        np.testing.assert_array_equal(out[name], arr)
        assert out[name].dtype == arr.dtype and not out[name].flags.writeable
    assert out["w"].ctypes.data % 64 == 0
    assert isinstance(out["w"].base, np.memmap) or isinstance(out["w"].base.base, np.memmap)


def test_interchange_with_the_safetensors_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    ours = save_params(str(tmp_path / "ours.safetensors"), TENSORS)
    theirs = st.load_file(ours)
    for name, arr in TENSORS.items():
        np.testing.assert_array_equal(theirs[name], arr)
    st.save_file(TENSORS, str(tmp_path / "theirs.safetensors"))
    back = load_params(str(tmp_path / "theirs.safetensors"))
    for name, arr in TENSORS.items():
        np.testing.assert_array_equal(back[name], arr)


def test_factory_params_to_file(tmp_path):
    f = tiny_factory()
    back = load_params(save_params(str(tmp_path / "tiny.safetensors"), f.get_params()))
    np.testing.assert_array_equal(back["w"], f.get_params()["w"])


def write_raw(path, header: dict, data: bytes) -> str:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return str(path)


def test_malformed_files(tmp_path):
    with pytest.raises(LibraryLoadError, match="cannot map"):
        load_params(str(tmp_path / "missing.safetensors"))
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(ContainerError, match="truncated"):
        load_params(str(tmp_path / "short"))
    (tmp_path / "big").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ContainerError, match="header size"):
        load_params(str(tmp_path / "big"))
    bad = write_raw(
        tmp_path / "range", {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)
    )
    with pytest.raises(ContainerError, match="'a' range"):
        load_params(bad)
    bad = write_raw(
        tmp_path / "dtype", {"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, bytes(8)
    )
    with pytest.raises(ContainerError, match="malformed"):
        load_params(bad)
    with pytest.raises(ContainerError, match="no safetensors code"):
        save_params(str(tmp_path / "c.safetensors"), {"c": np.zeros(2, np.complex64)})
    assert not list(tmp_path.glob("c.safetensors*"))
