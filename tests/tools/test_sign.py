"""Signing and verifying libraries (``monolib.tools.sign``, ``monolib.runtime.trust``,
``load_module(trusted_keys=)``,
``monolib keygen/sign/verify``).

THE property under test: with ``trusted_keys`` a library that is tampered, unsigned or
signed by another key is refused BEFORE dlopen, so none of its code runs. The proof
uses a library with an ``__attribute__((constructor))`` that writes the file named by
``$MONOLIB_EVIL``: the file must not appear for a refused library and must appear for
the untampered one (so the test can fail).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import monolib
from monolib.cli import main
from monolib.export.csource import CSourceModule
from monolib.runtime import GraphExecutorFactoryModule, GraphModule, cpu, load_module
from monolib.errors import IntegrityError, LibraryLoadError, MonolibError, SignatureError
from monolib.runtime import trust
from monolib.tools import sign

pytest.importorskip("cryptography")


# A hand-written library of the ABI in docs/ARCHITECTURE.md: y = x + one, float32[4],
# x at arena offset 0, y at 64; the param "one" (float32[1]) at params offset 0.
# EVIL is its constructor: dlopen runs it before any caller can check anything.
PLUS_ONE_C = r"""
#include <stdint.h>
static void op_0(const uint8_t* restrict params, uint8_t* restrict arena) {
  const float* x = (const float*)(arena + 0);
  float* y = (float*)(arena + 64);
  const float one = *(const float*)(params + 0);
  for (int i = 0; i < 4; ++i) y[i] = x[i] + one;
}
int32_t monolib_run(const uint8_t* params, uint8_t* arena) { op_0(params, arena); return 0; }
int32_t monolib_run_op(int32_t i, const uint8_t* params, uint8_t* arena) {
  if (i != 0) return -1;
  op_0(params, arena);
  return 0;
}
int32_t monolib_num_ops(void) { return 1; }
"""

EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void evil(void) {
  const char* p = getenv("MONOLIB_EVIL");
  if (p == NULL) return;
  FILE* f = fopen(p, "w");
  if (f == NULL) return;
  fputs("constructor ran\n", f);
  fclose(f);
}
"""


def plus_one_factory(evil: bool) -> GraphExecutorFactoryModule:
    """The y = x + 1 model as a factory over a CSourceModule (with the constructor if
    ``evil``)."""
    io = {"shape": [4], "dtype": "float32"}
    graph = {
        "format": "monolib.graph",
        "version": 1,
        "name": "plus_one",
        "arena_bytes": 128,
        "params_bytes": 64,
        "inputs": [{"name": "x", "offset": 0, **io}],
        "outputs": [{"name": "y", "offset": 64, **io}],
        "nodes": [
            {
                "name": "Add_0",
                "op": "Add",
                "fused": [],
                "inputs": ["x", "one"],
                "outputs": ["y"],
                "shape": [4],
                "dtype": "float32",
            }
        ],
        "params": [{"name": "one", "shape": [1], "dtype": "float32", "offset": 0, "nbytes": 4}],
        "constants": {},
        "metadata": {},
    }
    params = np.zeros(64, np.uint8)
    params[:4] = np.frombuffer(np.float32(1).tobytes(), np.uint8)
    source = PLUS_ONE_C + (EVIL_C if evil else "")
    return GraphExecutorFactoryModule(graph, params, CSourceModule(source, "c"))


def run_plus_one(mod) -> np.ndarray:
    gm = GraphModule(mod["default"](cpu()))
    gm.set_input(x=np.arange(4, dtype=np.float32))
    gm.run()
    return gm.get_output(0).numpy()


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    """Two key pairs: "good" (trusted) and "other" (not)."""
    folder = tmp_path_factory.mktemp("keys")
    good = sign.generate_keypair(folder / "good")
    other = sign.generate_keypair(folder / "other")
    return {"good": good[0], "good.pub": good[1], "other": other[0], "other.pub": other[1]}


@pytest.fixture(scope="module")
def evil_lib(tmp_path_factory, keys) -> tuple[str, bytes]:
    """(path, bytes) of the constructor library, signed by "good" (do not modify)."""
    path = str(tmp_path_factory.mktemp("evil") / "evil.so")
    plus_one_factory(evil=True).export_library(path)
    sign.sign_file(path, keys["good"])
    return path, Path(path).read_bytes()


@pytest.fixture(scope="module")
def plain_lib(tmp_path_factory, keys) -> str:
    """A signed y = x + 1 library without a constructor (do not modify)."""
    path = str(tmp_path_factory.mktemp("plain") / "plus_one.so")
    plus_one_factory(evil=False).export_library(path)
    sign.sign_file(path, keys["good"])
    return path


@pytest.fixture
def evil_marker(tmp_path, monkeypatch) -> Path:
    """The file the constructor writes (absent at the start of each test)."""
    marker = tmp_path / "constructor-ran"
    monkeypatch.setenv("MONOLIB_EVIL", str(marker))
    return marker


def tampered_copy(data: bytes, folder: Path) -> str:
    """A copy of the constructor library whose constructor's string is altered (one
    byte) - a change no container check sees - with the original's signature beside it."""
    at = data.index(b"constructor ran")
    bad = bytearray(data)
    bad[at] ^= 0x20  # "Constructor ran"
    path = folder / "tampered.so"
    path.write_bytes(bytes(bad))
    return str(path)


# --------------------------------------------------------------------------- the key tests
def test_signed_library_loads_and_its_constructor_runs(evil_lib, keys, evil_marker):
    path, _ = evil_lib
    mod = load_module(path, trusted_keys=[keys["good.pub"]])
    # the control: this library's code DOES run at load, so the refusals below mean it
    assert evil_marker.read_text() == "constructor ran\n"
    np.testing.assert_array_equal(run_plus_one(mod), np.arange(4, dtype=np.float32) + 1)


def test_tampered_byte_is_refused_before_any_code_runs(evil_lib, keys, evil_marker, tmp_path):
    path, data = evil_lib
    bad = tampered_copy(data, tmp_path)
    Path(bad + ".sig").write_bytes(Path(path + ".sig").read_bytes())
    with pytest.raises(SignatureError, match=r"tampered\.so: the library does not match its"):
        load_module(bad, trusted_keys=[keys["good.pub"]])
    assert not evil_marker.exists(), "the tampered library's constructor ran"
    # The signature is checked first (SignatureError above, not the code digest's
    # error); without it the code digest refuses the byte, still before any code runs.
    with pytest.raises(IntegrityError, match=r"tampered\.so: the library's bytes differ"):
        load_module(bad)
    assert not evil_marker.exists()


def test_updated_digest_without_the_key_is_an_invalid_signature(
    evil_lib, keys, evil_marker, tmp_path
):
    path, data = evil_lib
    bad = tampered_copy(data, tmp_path)
    doc = json.loads(Path(path + ".sig").read_text())
    doc["sha256"] = hashlib.sha256(Path(bad).read_bytes()).hexdigest()  # the forger's edit
    Path(bad + ".sig").write_text(json.dumps(doc))
    with pytest.raises(SignatureError, match="INVALID signature for key"):
        load_module(bad, trusted_keys=[keys["good.pub"]])
    assert not evil_marker.exists()


def test_wrong_key_is_refused(evil_lib, keys, evil_marker):
    path, _ = evil_lib
    other_id = trust.key_id(trust.load_public_key(keys["other.pub"]))
    good_id = trust.key_id(trust.load_public_key(keys["good.pub"]))
    with pytest.raises(SignatureError, match=f"signed by key {good_id}, which is not a trusted"):
        load_module(path, trusted_keys=[keys["other.pub"]])
    assert not evil_marker.exists()
    # a signature by "other" that claims the trusted key's identity fails too
    doc = sign.sign_bytes(Path(path).read_bytes(), keys["other"])
    doc["public_key"] = trust.load_public_key(keys["good.pub"]).public_bytes_raw().hex()
    with pytest.raises(SignatureError, match="INVALID signature"):
        load_module(path, trusted_keys=[keys["good.pub"]], signature=json.dumps(doc).encode())
    assert not evil_marker.exists()
    assert other_id != good_id


def test_missing_signature_is_refused(evil_lib, keys, evil_marker, tmp_path):
    unsigned = tmp_path / "unsigned.so"
    unsigned.write_bytes(evil_lib[1])
    with pytest.raises(SignatureError, match=r"unsigned\.so\.sig: no signature file"):
        load_module(unsigned, trusted_keys=[keys["good.pub"]])
    assert not evil_marker.exists()


def test_file_swapped_after_the_check_is_not_what_loads(
    evil_lib, keys, evil_marker, tmp_path, monkeypatch
):
    """No check-then-load race: replace the file on disk right after the signature
    check; the verified bytes (already in memory) are what runs."""
    path, data = evil_lib
    target = tmp_path / "swapped.so"
    target.write_bytes(data)
    Path(str(target) + ".sig").write_bytes(Path(path + ".sig").read_bytes())
    evil = Path(tampered_copy(data, tmp_path)).read_bytes()
    real_verify = trust.verify_bytes

    def verify_then_swap(*args, **kwargs):
        info = real_verify(*args, **kwargs)
        target.write_bytes(evil)  # the attacker's swap, after the check
        return info

    monkeypatch.setattr(trust, "verify_bytes", verify_then_swap)
    mod = load_module(target, trusted_keys=[keys["good.pub"]])
    assert evil_marker.read_text() == "constructor ran\n"  # not "Constructor ran"
    assert target.read_bytes() == evil
    np.testing.assert_array_equal(run_plus_one(mod), np.arange(4, dtype=np.float32) + 1)


def test_every_load_from_memory_is_a_fresh_load(evil_lib, plain_lib, evil_marker):
    """glibc's dlopen returns an already loaded library of the same NAME: a reused
    /proc/self/fd/N must not hand back an earlier library instead of these bytes."""
    for data in (Path(plain_lib).read_bytes(), evil_lib[1], evil_lib[1]):
        evil_marker.unlink(missing_ok=True)
        np.testing.assert_array_equal(
            run_plus_one(load_module(data)), np.arange(4, dtype=np.float32) + 1
        )
    assert evil_marker.read_text() == "constructor ran\n"  # the last load ran its own code


# --------------------------------------------------------------------------- API details
def test_keys_and_signatures_in_every_form(plain_lib, keys):
    pub = trust.load_public_key(keys["good.pub"])
    raw = pub.public_bytes_raw()
    data = Path(plain_lib).read_bytes()
    sig_bytes = Path(plain_lib + ".sig").read_bytes()
    expect = np.arange(4, dtype=np.float32) + 1
    for trusted in ([raw], [pub], [Path(keys["good.pub"]).read_bytes()], keys["good.pub"]):
        np.testing.assert_array_equal(
            run_plus_one(load_module(plain_lib, trusted_keys=trusted)), expect
        )
    # any one of several trusted keys; signature as path, bytes or dict; library as bytes
    both = [keys["other.pub"], keys["good.pub"]]
    for sig in (plain_lib + ".sig", sig_bytes, json.loads(sig_bytes)):
        mod = load_module(data, trusted_keys=both, signature=sig)
        np.testing.assert_array_equal(run_plus_one(mod), expect)
    info = trust.verify_file(plain_lib, both)
    assert info.key_id == trust.key_id(raw) and info.size == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()


def test_signature_document_format(plain_lib, keys):
    doc = json.loads(Path(plain_lib + ".sig").read_text())
    data = Path(plain_lib).read_bytes()
    pub = trust.load_public_key(keys["good.pub"])
    assert doc["format"] == "monolib.signature" and doc["version"] == 1
    assert doc["algorithm"] == "ed25519" and doc["size"] == len(data)
    assert doc["sha256"] == hashlib.sha256(data).hexdigest()
    assert doc["public_key"] == pub.public_bytes_raw().hex()
    # the documented message, checked with cryptography directly (no monolib code)
    message = (
        b"monolib.signature.v1\x00ed25519\x00"
        + bytes.fromhex(doc["sha256"])
        + len(data).to_bytes(8, "little")
    )
    pub.verify(base64.b64decode(doc["signature"]), message)
    assert os.stat(keys["good"]).st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format="x"), "format is 'x'"),
        (lambda d: d.update(version=2), "signature version 2 unsupported"),
        (lambda d: d.update(algorithm="rsa"), "algorithm 'rsa'"),
        (lambda d: d.update(sha256="zz" * 32), "field 'sha256' is not hex"),
        (lambda d: d.update(public_key="ab"), "field 'public_key' must be 64 hex"),
        (lambda d: d.update(size=-1), "field 'size' must be a non-negative"),
        (lambda d: d.update(signature="!!!"), "not valid base64"),
        (lambda d: d.pop("signature"), "field 'signature' must be a base64"),
    ],
)
def test_malformed_signature(plain_lib, keys, edit, message):
    doc = json.loads(Path(plain_lib + ".sig").read_text())
    edit(doc)
    with pytest.raises(SignatureError, match=message):
        load_module(plain_lib, trusted_keys=[keys["good.pub"]], signature=doc)


def test_bad_arguments(plain_lib, keys, tmp_path):
    data = Path(plain_lib).read_bytes()
    with pytest.raises(SignatureError, match="signature= given without trusted_keys="):
        load_module(plain_lib, signature=plain_lib + ".sig")
    with pytest.raises(SignatureError, match="trusted_keys is empty"):
        load_module(plain_lib, trusted_keys=[])
    with pytest.raises(SignatureError, match="pass signature="):
        load_module(data, trusted_keys=[keys["good.pub"]])
    with pytest.raises(SignatureError, match="must be a PUBLIC key"):
        load_module(plain_lib, trusted_keys=[sign.load_private_key(keys["good"])])
    with pytest.raises(SignatureError, match="a private key; give the public key"):
        load_module(plain_lib, trusted_keys=[keys["good"]])
    with pytest.raises(SignatureError, match="not valid JSON"):
        load_module(plain_lib, trusted_keys=[keys["good.pub"]], signature=b"{not json")
    with pytest.raises(SignatureError, match=r"nokey\.pub: cannot read public key"):
        load_module(plain_lib, trusted_keys=[tmp_path / "nokey.pub"])
    (tmp_path / "rsa.pub").write_bytes(
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    )
    with pytest.raises(SignatureError, match=r"rsa\.pub: not a public key"):
        load_module(plain_lib, trusted_keys=[tmp_path / "rsa.pub"])
    with pytest.raises(LibraryLoadError, match=r"missing\.so: cannot open library file"):
        load_module(tmp_path / "missing.so", trusted_keys=[keys["good.pub"]])
    with pytest.raises(SignatureError, match="refusing to overwrite"):
        sign.generate_keypair(keys["good"])
    assert issubclass(SignatureError, MonolibError) and monolib.SignatureError is SignatureError


def test_missing_cryptography_is_a_clear_error(plain_lib, keys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives", None)
    with pytest.raises(SignatureError, match="needs the 'cryptography' package"):
        load_module(plain_lib, trusted_keys=[keys["good.pub"]])


def test_runtime_import_does_not_import_cryptography():
    code = "import sys, monolib; print(any(m.startswith('cryptography') for m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_loaded_bytes_are_sealed(plain_lib, keys):
    """A verified library is dlopen'd from a sealed memfd holding exactly its bytes:
    nobody (not even through /proc/PID/fd/N) can change them after the check."""
    import fcntl

    from monolib.runtime import library

    load_module(plain_lib, trusted_keys=[keys["good.pub"]])
    fd = library._LOADED_MEMFDS[-1]
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    for seal in (fcntl.F_SEAL_WRITE, fcntl.F_SEAL_SHRINK, fcntl.F_SEAL_GROW, fcntl.F_SEAL_SEAL):
        assert seals & seal
    size = os.fstat(fd).st_size
    assert os.pread(fd, size, 0) == Path(plain_lib).read_bytes()
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"X", 0)
    # as another process could: reopen it for writing (allowed), then write (refused)
    with open(f"/proc/self/fd/{fd}", "r+b", buffering=0) as f, pytest.raises(PermissionError):
        f.write(b"X")


def test_without_memfd_the_private_copy_is_verified(
    evil_lib, keys, evil_marker, tmp_path, monkeypatch
):
    """Where there is no memfd (not Linux) the same checks hold (temp-file path)."""
    from monolib.runtime import library

    monkeypatch.setattr(library, "_has_memfd", lambda: False)
    path, data = evil_lib
    bad = tampered_copy(data, tmp_path)
    Path(bad + ".sig").write_bytes(Path(path + ".sig").read_bytes())
    with pytest.raises(SignatureError, match="does not match its signature"):
        load_module(bad, trusted_keys=[keys["good.pub"]])
    assert not evil_marker.exists()
    mod = load_module(path, trusted_keys=[keys["good.pub"]])
    assert evil_marker.read_text() == "constructor ran\n"
    np.testing.assert_array_equal(run_plus_one(mod), np.arange(4, dtype=np.float32) + 1)


# --------------------------------------------------------------------------- CLI
def test_cli_keygen_sign_verify(plain_lib, tmp_path, capsys):
    key = str(tmp_path / "cli_key")
    assert main(["keygen", "--out", key]) == 0
    assert "key id" in capsys.readouterr().out
    assert main(["keygen", "--out", key]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    lib = tmp_path / "lib.so"
    lib.write_bytes(Path(plain_lib).read_bytes())
    assert main(["sign", str(lib), "--key", key]) == 0
    assert f"wrote {lib}.sig" in capsys.readouterr().out
    assert main(["verify", str(lib), "--key", key + ".pub"]) == 0
    assert "OK:" in capsys.readouterr().out
    # a signature at another path
    assert main(["sign", str(lib), "--key", key, "--sig", str(tmp_path / "elsewhere.sig")]) == 0
    os.unlink(f"{lib}.sig")
    assert main(["verify", str(lib), "--key", key + ".pub"]) == 1
    assert "no signature file" in capsys.readouterr().err
    argv = ["verify", str(lib), "--key", key + ".pub", "--sig", str(tmp_path / "elsewhere.sig")]
    assert main(argv) == 0


def test_cli_encrypted_key(plain_lib, tmp_path, capsys, monkeypatch):
    key = str(tmp_path / "locked")
    monkeypatch.setenv("MONOLIB_TEST_PASSWORD", "correct horse")
    assert main(["keygen", "--out", key, "--password-env", "MONOLIB_TEST_PASSWORD"]) == 0
    assert b"ENCRYPTED PRIVATE KEY" in Path(key).read_bytes()
    lib = tmp_path / "lib.so"
    lib.write_bytes(Path(plain_lib).read_bytes())
    assert main(["sign", str(lib), "--key", key]) == 1
    assert "not a usable PEM private key" in capsys.readouterr().err
    assert main(["sign", str(lib), "--key", key, "--password-env", "NO_SUCH_VAR_X"]) == 1
    assert "NO_SUCH_VAR_X: that variable is not set" in capsys.readouterr().err
    assert main(["sign", str(lib), "--key", key, "--password-env", "MONOLIB_TEST_PASSWORD"]) == 0
    assert main(["verify", str(lib), "--key", key + ".pub"]) == 0


def test_cli_verify_failures(plain_lib, keys, tmp_path, capsys):
    assert main(["verify", plain_lib, "--key", keys["other.pub"]]) == 1
    assert "which is not a trusted key" in capsys.readouterr().err
    assert main(["verify", plain_lib, "--key", keys["other.pub"], "--key", keys["good.pub"]]) == 0
    bad = tmp_path / "bad.so"
    data = bytearray(Path(plain_lib).read_bytes())
    data[len(data) // 2] ^= 1
    bad.write_bytes(bytes(data))
    Path(f"{bad}.sig").write_bytes(Path(plain_lib + ".sig").read_bytes())
    assert main(["verify", str(bad), "--key", keys["good.pub"]]) == 1
    assert "does not match its signature" in capsys.readouterr().err


def test_cli_run_with_trusted_key(evil_lib, keys, evil_marker, tmp_path, capsys):
    path, data = evil_lib
    bad = tampered_copy(data, tmp_path)
    Path(bad + ".sig").write_bytes(Path(path + ".sig").read_bytes())
    assert main(["run", bad, "--random", "--trusted-key", keys["good.pub"]]) == 1
    assert "does not match its signature" in capsys.readouterr().err
    assert not evil_marker.exists()
    out = str(tmp_path / "out.npz")
    argv = ["run", path, "--trusted-key", keys["good.pub"], "-o", out, "--random"]
    assert main(argv) == 0
    assert evil_marker.exists()
    with np.load(out) as npz:
        assert npz["y"].shape == (4,)


def test_console_script(plain_lib, keys):
    """The installed ``monolib`` command, in a fresh process (exit codes)."""
    exe = [sys.executable, "-m", "monolib.cli"]
    ok = subprocess.run(
        [*exe, "verify", plain_lib, "--key", keys["good.pub"]],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*exe, "verify", plain_lib, "--key", keys["other.pub"]],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1 and b"error:" in bad.stderr


# --------------------------------------------------------------------------- real models
@pytest.fixture(scope="module")
def tiny_onnx_lib(tmp_path_factory, keys) -> tuple[str, np.ndarray]:
    """A small ONNX model (MatMul + Relu) compiled by monolib, exported, signed."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    folder = tmp_path_factory.mktemp("onnx")
    onnx.save(model, folder / "tiny.onnx")
    path = monolib.compile(str(folder / "tiny.onnx")).export_library(str(folder / "tiny.so"))
    sign.sign_file(path, keys["good"])
    return path, w


def test_compiled_model_round_trip(tiny_onnx_lib, keys, rng):
    path, w = tiny_onnx_lib
    assert trust.verify_file(path, [keys["good.pub"]]).size == os.path.getsize(path)
    gm = GraphModule(load_module(path, trusted_keys=[keys["good.pub"]])["default"](cpu()))
    x = rng.standard_normal((3, 8)).astype(np.float32)
    gm.set_input(x=x)
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_cls_model_signed_round_trip(tmp_path, keys, ort_run, rng):
    from monolib.models import fetch_model

    CLS = fetch_model("ppocr_cls")
    lib = monolib.compile(str(CLS), shapes={"x": (1, 3, 48, 192)})
    path = lib.export_library(str(tmp_path / "cls.so"))
    assert main(["sign", path, "--key", keys["good"]]) == 0
    assert main(["verify", path, "--key", keys["good.pub"]]) == 0
    gm = GraphModule(load_module(path, trusted_keys=[keys["good.pub"]])["default"](cpu()))
    x = rng.random((1, 3, 48, 192), dtype=np.float32)
    gm.set_input(x=x)
    gm.run()
    (want,) = ort_run(str(CLS), {"x": x})
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-4, atol=1e-5)
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 3] ^= 0x01
    Path(path).write_bytes(bytes(data))
    with pytest.raises(SignatureError, match="does not match its signature"):
        load_module(path, trusted_keys=[keys["good.pub"]])
