"""The container format: layout, round trip, and every way a reader rejects bad bytes."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from monolib.abi.container import (
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    PAYLOAD_ALIGN,
    SMALL_SECTION_BYTES,
    Container,
    pack_container,
)
from monolib.errors import ContainerError, MonolibError


def sample(big: int = 0, **kwargs) -> bytes:
    mods = [
        ("graph_executor_factory", {"graph": b'{"a": 1}', "params": bytes(range(200)) * 3}),
        ("library", {}),
        ("echo", {"data": b"hello" + bytes(big)}),
    ]
    kwargs.setdefault("import_tree", ([0, 1, 2, 2], [1, 2]))
    return pack_container(mods, **kwargs)


def rewrite_manifest(blob: bytes, edit) -> bytes:
    """Change the manifest JSON and fix its digest (to test the structure checks)."""
    head = bytearray(blob[:HEADER_SIZE])
    moff, msize = struct.unpack_from("<QQ", head, 24)
    manifest = json.loads(blob[moff : moff + msize])
    edit(manifest)
    new = json.dumps(manifest).encode()
    struct.pack_into("<QQQ", head, 16, moff + len(new), moff, len(new))
    head[64:96] = hashlib.sha256(new).digest()
    return bytes(head) + blob[HEADER_SIZE:moff] + new


def test_header_layout_and_alignment():
    blob = sample()
    magic, version, flags, total, moff, msize = struct.unpack_from("<8sIIQQQ", blob)
    assert (magic, version, flags, total) == (MAGIC, FORMAT_VERSION, 0, len(blob))
    assert hashlib.sha256(blob[moff : moff + msize]).digest() == blob[64:96]
    c = Container(blob)
    for mod in c.modules:
        for sec in mod.sections:
            assert sec.offset % PAYLOAD_ALIGN == 0
            assert (
                hashlib.sha256(blob[sec.offset : sec.offset + sec.size]).hexdigest() == sec.sha256
            )


def test_round_trip_sections_and_tree():
    c = Container(sample())
    assert [m.type_key for m in c.modules] == ["graph_executor_factory", "library", "echo"]
    assert c.root == 0 and c.children(0) == [1] and c.children(1) == [2] and c.children(2) == []
    assert bytes(c.sections_of(0)["params"]) == bytes(range(200)) * 3
    assert bytes(c.sections_of(2)["data"]) == b"hello"
    assert c.manifest["producer"].startswith("monolib")


@pytest.mark.parametrize("codec", ["zlib", "zstd"])
def test_compressed_codec_round_trip(codec):
    c = Container(sample(big=10000, compress=codec))
    sec = c.modules[2].sections[0]
    assert sec.codec == codec and sec.stored_size < sec.size == 10005
    assert bytes(c.sections_of(2)["data"]) == b"hello" + bytes(10000)


@pytest.mark.parametrize("codec", ["zlib", "zstd"])
def test_compressed_section_cannot_inflate_past_its_declared_size(codec):
    # a section whose manifest claims 16 bytes but whose stream inflates to 10005
    blob = bytearray(sample(big=10000, compress=codec))
    c = Container(bytes(blob))
    sec = c.modules[2].sections[0]
    lying = sec._replace(size=16)
    with pytest.raises(ContainerError, match="cannot decode"):
        c.section_data(2, lying)


def test_raw_sections_are_views_not_copies():
    blob = np.frombuffer(sample(), np.uint8)
    view = Container(blob).sections_of(0)["params"]
    arr = np.frombuffer(view, np.uint8)
    assert blob.ctypes.data <= arr.ctypes.data < blob.ctypes.data + blob.nbytes


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b"\x7fNOTMONO" + b[8:], "bad magic"),
        (lambda b: b[:8] + struct.pack("<I", 99) + b[12:], "format version 99"),
        (lambda b: b[:100], "truncated"),
        (lambda b: b[:-10], "truncated"),
        (lambda b: b[:-5] + bytes([b[-5] ^ 1]) + b[-4:], "manifest"),
    ],
    ids=["magic", "version", "short-header", "short-body", "manifest-flip"],
)
def test_rejects_bad_header_and_manifest(mutate, message):
    with pytest.raises(ContainerError, match=message) as err:
        Container(mutate(sample()), source="x.so")
    assert "x.so" in str(err.value)
    assert isinstance(err.value, MonolibError)


def test_small_section_corruption_found_on_every_open():
    blob = bytearray(sample())
    sec = Container(bytes(blob)).modules[0].sections[1]
    blob[sec.offset + 7] ^= 0xFF
    with pytest.raises(ContainerError, match="'params' of module 0.*SHA-256"):
        Container(bytes(blob))


def test_large_section_checked_only_on_verify():
    big = SMALL_SECTION_BYTES + 4096
    blob = bytearray(sample(big=big))
    sec = Container(bytes(blob)).modules[2].sections[0]
    assert sec.stored_size > SMALL_SECTION_BYTES
    blob[sec.offset + 1000] ^= 0x01
    Container(bytes(blob))  # O(1) open: the big section is not hashed
    with pytest.raises(ContainerError, match="'data' of module 2"):
        Container(bytes(blob), verify=True)


def edit_tree(**tree):
    return lambda m: m.__setitem__("import_tree", tree)


@pytest.mark.parametrize(
    "edit, message",
    [
        (edit_tree(row_ptr=[0, 1], child_indices=[1]), "row_ptr"),
        (edit_tree(row_ptr=[0, 1, 2, 2], child_indices=[1, 7]), "outside"),
        (edit_tree(row_ptr=[0, 1, 2, 3], child_indices=[1, 2, 0]), "cycle"),
        (lambda m: m["modules"][0]["sections"][0].update(offset=10**9), "outside the container"),
        (lambda m: m["modules"][0]["sections"][0].update(offset=4097), "aligned"),
        (lambda m: m["modules"][0]["sections"][0].update(codec="lz9"), "unknown codec"),
        (lambda m: m["modules"][1].pop("type_key"), "type_key"),
        (lambda m: m.pop("modules"), "modules"),
    ],
    ids=["row_ptr", "index", "cycle", "range", "align", "codec", "type_key", "modules"],
)
def test_rejects_malformed_manifest(edit, message):
    with pytest.raises(ContainerError, match=message):
        Container(rewrite_manifest(sample(), edit))


def test_legacy_manifest_has_no_tree():
    c = Container(sample(import_tree=None))
    assert c.import_tree is None and "import_tree" not in c.manifest
    assert c.children(0) == []


def test_unknown_codec_on_write():
    with pytest.raises(ContainerError, match="unknown container codec"):
        sample(compress="brotli")
