"""Params files in safetensors format: zero-copy read, interchange with the reference
implementation (the ``safetensors`` package), packing into a factory's params blob,
and checks on malformed files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tinylib import tiny_factory

from monolib.errors import ContainerError, MonolibError, ParamsError, ParamsFileError
from monolib.runtime import load_params, save_params
from monolib.runtime.params import params_blob

RNG = np.random.default_rng(3)
TENSORS = {
    "w": RNG.standard_normal((4, 5)).astype(np.float32),
    "idx": np.arange(7, dtype=np.int64),
    "mask": np.array([True, False, True]),
    "half": RNG.standard_normal(3).astype(np.float16),
    "bytes": np.arange(5, dtype=np.uint8),
    "d": RNG.standard_normal((2, 1, 3)),
    "i8": np.array([-128, 0, 127], np.int8),
    "i16": np.array([-3, 4], np.int16),
    "i32": np.array([[1, -2]], np.int32),
    "scalar": np.float32(2.5),
    "empty": np.zeros((0, 3), np.float32),
}


def assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, arr in want.items():
        arr = np.asarray(arr)
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape, name
        assert got[name].tobytes() == arr.tobytes(), name  # bit for bit


def data_inside(arr: np.ndarray, base: int, size: int) -> bool:
    return (
        arr.nbytes == 0 or base <= arr.ctypes.data and arr.ctypes.data + arr.nbytes <= base + size
    )


def test_file_round_trip_is_zero_copy_and_aligned(tmp_path):
    path = tmp_path / "p.safetensors"
    assert save_params(TENSORS, path, {"producer": "test"}) is None
    out = load_params(path)
    assert_same(out, TENSORS)
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert (8 + n) % 64 == 0
    base = out["w"]
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    start = base.ctypes.data  # the whole mapped file
    assert base.nbytes == path.stat().st_size
    for name, arr in out.items():
        assert not arr.flags.writeable and data_inside(arr, start, base.nbytes), name
        assert arr.ctypes.data % arr.dtype.itemsize == 0, name  # widest first: aligned
    first = min(a.ctypes.data for a in out.values() if a.nbytes)  # the data start
    assert (first - start) % 64 == 0 and first % 64 == 0


def test_bytes_round_trip_is_zero_copy():
    data = save_params(TENSORS, None, {"k": "v"})
    assert isinstance(data, bytes)
    out = load_params(data)
    assert_same(out, TENSORS)
    base = np.frombuffer(data, np.uint8).ctypes.data
    assert all(data_inside(a, base, len(data)) for a in out.values())
    assert json.loads(data[8 : 8 + struct.unpack("<Q", data[:8])[0]])["__metadata__"] == {"k": "v"}
    view = load_params(memoryview(bytearray(data)))
    assert_same(view, TENSORS) and not view["w"].flags.writeable


def test_interchange_with_the_safetensors_package(tmp_path):
    stn = pytest.importorskip("safetensors.numpy")
    ours = tmp_path / "ours.safetensors"
    save_params(TENSORS, ours, {"a": "b"})
    assert_same(stn.load_file(str(ours)), TENSORS)
    assert_same(stn.load(save_params(TENSORS)), TENSORS)
    theirs = tmp_path / "theirs.safetensors"
    arrays = {k: np.asarray(v) for k, v in TENSORS.items()}  # they take no np scalars
    stn.save_file(arrays, str(theirs), metadata={"x": "y"})
    assert_same(load_params(theirs), TENSORS)
    assert_same(load_params(stn.save(arrays)), TENSORS)


def test_bfloat16_with_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2.0, 3.0], ml.bfloat16)
    data = save_params({"b": x})
    assert b'"BF16"' in data
    assert_same(load_params(data), {"b": x})


def test_wrong_argument_order_names_the_right_one(tmp_path):
    path = str(tmp_path / "swapped.safetensors")
    with pytest.raises(ParamsError, match=r"save_params\(tensors, path\).*got str"):
        save_params(path, {"w": TENSORS["w"]})
    assert not list(tmp_path.iterdir())


def test_big_endian_stored_little_endian():
    x = np.arange(4, dtype=">i4")
    out = load_params(save_params({"x": x}))["x"]
    assert out.dtype == np.dtype("<i4") and out.tolist() == [0, 1, 2, 3]


def test_factory_params_to_file_and_back_into_a_blob(tmp_path):
    f = tiny_factory()
    params = f.get_params()
    path = tmp_path / "tiny.safetensors"
    save_params(params, path)
    back = load_params(path)
    assert_same(back, params)
    blob = params_blob(f.graph_json, back)
    assert blob.ctypes.data % 64 == 0
    np.testing.assert_array_equal(blob, f.params)
    new = {name: np.full_like(a, 7) for name, a in back.items()}
    blob = params_blob(f.graph_json, new, base=f.params)
    g = type(f)(f.graph_json, blob)
    assert_same(g.get_params(), new)
    with pytest.raises(ParamsError, match="not in the graph"):
        params_blob(f.graph_json, {"nope": np.zeros(1)})
    name = next(iter(params))
    with pytest.raises(ParamsError, match=f"param '{name}': got"):
        params_blob(f.graph_json, {name: np.zeros((9, 9), np.int8)})


def raw(header: dict | bytes, data: bytes = b"", n: int | None = None) -> bytes:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(blob) if n is None else n) + blob + data


def entry(dtype="F32", shape=(4,), offs=(0, 16)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offs)}


BAD = [
    (b"abc", "truncated"),
    (raw(b"{}", n=1 << 40), "header size"),
    (raw(b'{"a": '), "not UTF-8 JSON"),
    (raw(b"\xff\xfe"), "not UTF-8 JSON"),
    (raw(b"[1, 2]"), "not a JSON object"),
    (raw(b'{"a": 1, "a": 2}'), "duplicate key 'a'"),
    (raw({"__metadata__": {"k": 1}}), "__metadata__"),
    (raw({"a": entry()}, bytes(8)), "tensor 'a' range"),
    (raw({"a": entry(offs=(8, 4))}, bytes(16)), "tensor 'a' range"),
    (raw({"a": entry(offs=(-4, 12))}, bytes(16)), "tensor 'a' range"),
    (raw({"a": entry(shape=(3,))}, bytes(16)), "tensor 'a' range"),
    (raw({"a": entry(dtype="Q7")}, bytes(16)), "tensor 'a'.*unknown safetensors dtype 'Q7'"),
    (raw({"a": entry(shape=(-1,))}, bytes(16)), "tensor 'a' has a malformed shape"),
    (raw({"a": entry(shape=(2.0,))}, bytes(16)), "tensor 'a' has a malformed shape"),
    (raw({"a": entry(offs=(0,))}, bytes(16)), "tensor 'a' has malformed data_offsets"),
    (raw({"a": {"dtype": "F32"}}, bytes(16)), "tensor 'a' has a malformed entry"),
    (raw({"a": [1]}, bytes(16)), "tensor 'a' has a malformed entry"),
    (raw({"a": entry(), "b": entry(offs=(8, 24))}, bytes(24)), "'a' and 'b' overlap"),
    (raw({"m": entry("BOOL", (2,), (0, 2))}, b"\x01\x07"), "'m' is BOOL"),
    (raw({"a": entry(shape=(1 << 62, 1 << 62))}, bytes(16)), "tensor 'a' range"),
]


@pytest.mark.parametrize(("data", "match"), BAD, ids=[m for _, m in BAD])
def test_malformed_buffers(tmp_path, data, match):
    with pytest.raises(ParamsError, match=match) as info:
        load_params(data)
    assert "<bytes of" in str(info.value)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(ParamsError, match=match) as info:
        load_params(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, (MonolibError, ContainerError))


def test_every_truncation_of_a_good_file_is_an_error(tmp_path):
    data = save_params({"w": TENSORS["w"], "i": TENSORS["idx"]})
    for cut in range(len(data)):
        with pytest.raises(ParamsError):
            load_params(data[:cut])
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[:-1])
    with pytest.raises(ParamsError, match=f"{path}: tensor '.+' range"):
        load_params(path)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ParamsFileError, match="cannot map") as info:
        load_params(tmp_path / "missing.safetensors")
    assert isinstance(info.value, ParamsError)  # its one parent: every params failure
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ParamsError, match="truncated"):
        load_params(tmp_path / "empty")


def test_save_rejects_what_safetensors_cannot_hold(tmp_path):
    with pytest.raises(ParamsError, match="'c': dtype complex128 has no safetensors code"):
        save_params({"c": np.zeros(2, np.complex128)}, tmp_path / "c.safetensors")
    with pytest.raises(ParamsError, match="not allowed"):
        save_params({"__metadata__": np.zeros(2)})
    with pytest.raises(ParamsError, match="metadata must map str to str"):
        save_params({"a": np.zeros(2)}, None, {"k": 1})
    assert not list(tmp_path.iterdir())


DTYPES = st.sampled_from(["<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "i1", "u1", "<u2", "?"])
ARRAYS = DTYPES.flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=0, max_size=8), ARRAYS, max_size=5))
def test_random_round_trip(tensors):
    tensors.pop("__metadata__", None)
    data = save_params(tensors, None, {"n": str(len(tensors))})
    assert_same(load_params(data), tensors)
    stn = pytest.importorskip("safetensors.numpy")
    assert_same(stn.load(data), tensors)
    assert_same(load_params(stn.save(tensors)), tensors)


def test_metadata_and_other_sources(tmp_path):
    from monolib.runtime.params import params_metadata

    data = save_params(TENSORS, None, {"model": "cls", "version": "1"})
    assert params_metadata(data) == {"model": "cls", "version": "1"}
    assert params_metadata(save_params({"a": np.zeros(1)})) == {}
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    assert params_metadata(str(path)) == {"model": "cls", "version": "1"}
    words = np.frombuffer(data + bytes(-len(data) % 4), np.uint32)  # a typed buffer
    assert_same(load_params(memoryview(words)), TENSORS)
    with pytest.raises(ParamsError, match="path or bytes, not int"):
        load_params(3)


def test_saved_file_is_whole_with_the_mode_open_gives(tmp_path):
    probe = tmp_path / "probe"
    probe.write_bytes(b"")
    path = tmp_path / "p.safetensors"
    save_params(TENSORS, path)
    save_params({"w": TENSORS["w"]}, path)  # replaced whole
    assert_same(load_params(path), {"w": TENSORS["w"]})
    assert path.stat().st_mode & 0o7777 == probe.stat().st_mode & 0o7777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.safetensors", "probe"]


def test_unwritable_path(tmp_path):
    with pytest.raises(ParamsFileError, match="nodir/p.safetensors: cannot write params file"):
        save_params(TENSORS, tmp_path / "nodir" / "p.safetensors")
