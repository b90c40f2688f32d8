"""Trust: verify a library's detached Ed25519 signature before any of its code runs.

A shared library is executable code: ``dlopen`` runs its constructors before the
caller can look at it, so trust must be settled on the file's *bytes* first.
``load_module(path, trusted_keys=[...])`` (:mod:`.library`) reads the file once, calls
:func:`verify_bytes` on those bytes and then loads exactly those bytes from memory.
Signing and key generation are tools (``monolib.tools.sign``, ``monolib sign``); the
verifier lives here because the runtime needs it.

The signature file (``model.so.sig``, UTF-8 JSON, one object)::

    {"format": "monolib.signature", "version": 1, "algorithm": "ed25519",
     "sha256": "<64 hex: SHA-256 of the whole library file>",
     "size": <bytes in the library file>,
     "public_key": "<64 hex: the raw 32-byte Ed25519 public key of the signer>",
     "key_id": "<16 hex: first 8 bytes of SHA-256(raw public key)>",
     "signature": "<base64 of the 64-byte Ed25519 signature of MESSAGE>"}

    MESSAGE = b"monolib.signature.v1\\x00ed25519\\x00"   (domain separation)
              + SHA-256 of the file (32 raw bytes)
              + file size (8 bytes, little-endian unsigned)

Only MESSAGE is signed; ``public_key`` and ``key_id`` are hints that pick the
trusted key to check with (the check always uses the caller's trusted key, never
the key written in the file). The domain prefix keeps a monolib signature from
being valid as any other Ed25519-signed message and vice versa. Ed25519 follows
RFC 8032; keys are stored as PEM (PKCS#8 private, SubjectPublicKeyInfo public).

``cryptography`` is imported only inside these functions, so importing
``monolib.runtime`` stays NumPy-only; without it they raise :class:`SignatureError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from ..errors import SignatureError

__all__ = [
    "ALGORITHM",
    "DOMAIN",
    "FORMAT",
    "SIG_SUFFIX",
    "VERSION",
    "SignatureInfo",
    "crypto",
    "key_id",
    "load_public_key",
    "raw_public_key",
    "read_library",
    "read_small",
    "signature_path",
    "signed_message",
    "verify_bytes",
    "verify_file",
]

logger = logging.getLogger(__name__)

FORMAT = "monolib.signature"
VERSION = 1
ALGORITHM = "ed25519"
DOMAIN = b"monolib.signature.v1\x00ed25519\x00"
SIG_SUFFIX = ".sig"
_MAX_SIG_BYTES = 64 * 1024  # a signature file is ~400 bytes; refuse to parse a huge one


@dataclass(frozen=True)
class SignatureInfo:
    """What a successful verification established.

    Attributes
    ----------
    key_id : str
        16 hex characters naming the trusted key that verified (see :func:`key_id`).
    sha256 : str
        SHA-256 (hex) of the verified bytes.
    size : int
        Number of verified bytes.
    """

    key_id: str
    sha256: str
    size: int


# --------------------------------------------------------------------------- keys
def crypto() -> Any:
    """The Ed25519 and serialization modules of ``cryptography`` (imported lazily).

    Raises
    ------
    SignatureError
        ``cryptography`` is not installed.
    """
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise SignatureError(
            f"signing and verifying libraries needs the 'cryptography' package ({exc}): "
            "pip install cryptography"
        ) from None
    return ed25519, serialization


def raw_public_key(key: Any) -> bytes:
    """The 32 raw bytes of an Ed25519 public key object."""
    _, ser = crypto()
    return key.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)


def key_id(public_key: Any) -> str:
    """Short fingerprint of a public key: hex of the first 8 bytes of SHA-256(raw key).

    Parameters
    ----------
    public_key : Ed25519PublicKey or bytes
        The key, or its 32 raw bytes.

    Returns
    -------
    str
        16 lowercase hex characters.
    """
    raw = public_key if isinstance(public_key, bytes) else raw_public_key(public_key)
    return hashlib.sha256(raw).hexdigest()[:16]


def read_small(path: Any, what: str) -> bytes:
    """The first 64 KiB (+1 byte) of a small file (a key, a signature).

    Raises
    ------
    SignatureError
        The file cannot be read; the message names it and ``what`` it is.
    """
    try:
        with open(path, "rb") as f:
            return f.read(_MAX_SIG_BYTES + 1)
    except OSError as exc:
        raise SignatureError(f"{os.fspath(path)}: cannot read {what}: {exc.strerror}") from None


def load_public_key(key: Any) -> Any:
    """An Ed25519 public key from a key object, PEM/DER/raw bytes, or a PEM file path.

    Parameters
    ----------
    key : Ed25519PublicKey, bytes, str or os.PathLike
        The key; ``bytes`` of length 32 are the raw key, other bytes PEM or DER;
        a str/path names a PEM file (``key.pub`` from :func:`generate_keypair`).

    Returns
    -------
    Ed25519PublicKey

    Raises
    ------
    SignatureError
        Unreadable file, not a public key, not Ed25519, or ``cryptography`` missing.
    """
    ed25519, ser = crypto()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raise SignatureError("a trusted key must be a PUBLIC key; got an Ed25519 private key")
    where = "public key (bytes)"
    if isinstance(key, (str, os.PathLike)):
        where = os.fspath(key)
        key = read_small(key, "public key")
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise SignatureError(
            f"a trusted key must be a path, bytes or key, got {type(key).__name__}"
        )
    data = bytes(key)
    try:
        if len(data) == 32:
            return ed25519.Ed25519PublicKey.from_public_bytes(data)
        if data.lstrip().startswith(b"-----BEGIN"):
            if b"PRIVATE KEY" in data.split(b"\n", 1)[0]:
                raise SignatureError(f"{where}: a private key; give the public key (.pub)")
            loaded = ser.load_pem_public_key(data)
        else:
            loaded = ser.load_der_public_key(data)
    except ValueError as exc:
        raise SignatureError(f"{where}: not a public key in PEM, DER or raw form: {exc}") from None
    if not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise SignatureError(f"{where}: a {type(loaded).__name__}, monolib signs with Ed25519")
    return loaded


def signature_path(path: Any) -> str:
    """The default detached signature path of a library: ``path + ".sig"``."""
    return os.fspath(path) + SIG_SUFFIX


def signed_message(digest: bytes, size: int) -> bytes:
    """The bytes an Ed25519 signature covers (see the module docstring).

    Parameters
    ----------
    digest : bytes
        The 32-byte SHA-256 of the library file.
    size : int
        The file's size in bytes.
    """
    return DOMAIN + digest + int(size).to_bytes(8, "little")


# --------------------------------------------------------------------------- verify
def _parse_signature(signature: Any, where: str) -> dict:
    """The checked signature document from a path, JSON bytes, or dict."""
    if isinstance(signature, (str, os.PathLike)):
        where = os.fspath(signature)
        if not os.path.exists(where):
            raise SignatureError(
                f"{where}: no signature file; the library is unsigned (sign it with "
                "`monolib sign LIB --key KEY`) or give its signature explicitly"
            )
        signature = read_small(where, "signature")
    if isinstance(signature, (bytes, bytearray)):
        if len(signature) > _MAX_SIG_BYTES:
            raise SignatureError(f"{where}: signature is over {_MAX_SIG_BYTES} bytes: not ours")
        try:
            signature = json.loads(signature)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SignatureError(f"{where}: signature is not valid JSON: {exc}") from None
    if not isinstance(signature, dict):
        raise SignatureError(f"{where}: signature must be a JSON object")
    _check_fields(signature, where)
    return signature


def _check_fields(doc: dict, where: str) -> None:
    if doc.get("format") != FORMAT:
        raise SignatureError(f"{where}: format is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise SignatureError(f"{where}: signature version {doc.get('version')!r} unsupported")
    if doc.get("algorithm") != ALGORITHM:
        raise SignatureError(f"{where}: algorithm {doc.get('algorithm')!r}, expected 'ed25519'")
    for name, n in (("sha256", 64), ("public_key", 64)):
        value = doc.get(name)
        if not isinstance(value, str) or len(value) != n:
            raise SignatureError(f"{where}: field {name!r} must be {n} hex characters")
        try:
            bytes.fromhex(value)
        except ValueError:
            raise SignatureError(f"{where}: field {name!r} is not hex") from None
    size = doc.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise SignatureError(f"{where}: field 'size' must be a non-negative integer")
    if not isinstance(doc.get("signature"), str):
        raise SignatureError(f"{where}: field 'signature' must be a base64 string")


def _pick_key(doc: dict, trusted: list[Any], where: str) -> Any:
    raw = bytes.fromhex(doc["public_key"])
    for key in trusted:
        if hmac.compare_digest(raw_public_key(key), raw):
            return key
    known = ", ".join(key_id(k) for k in trusted)
    raise SignatureError(
        f"{where}: signed by key {key_id(raw)}, which is not a trusted key (trusted: {known})"
    )


def verify_bytes(
    data: Any, signature: Any, trusted_keys: Any, where: str = "<bytes>"
) -> SignatureInfo:
    """Check that ``data`` carries a valid signature by one of ``trusted_keys``.

    Parameters
    ----------
    data : bytes-like
        The exact bytes that will be used (the whole library file).
    signature : str, os.PathLike, bytes or dict
        The signature file's path (str or path), its JSON content (bytes), or the
        parsed document (dict).
    trusted_keys : sequence
        Public keys (see :func:`load_public_key`); a single key is accepted too.
    where : str
        Name of the library in messages.

    Returns
    -------
    SignatureInfo

    Raises
    ------
    SignatureError
        No trusted keys; missing, malformed or unsupported signature; the bytes
        differ from the signed ones (size or SHA-256); a key that is not trusted;
        an invalid Ed25519 signature; ``cryptography`` missing.
    """
    keys = _trusted(trusted_keys)
    doc = _parse_signature(signature, f"{where}{SIG_SUFFIX}")
    with memoryview(data) as mv, mv.cast("B") as view:  # released even on error (mmap)
        digest = hashlib.sha256(view).digest()
        nbytes = view.nbytes
    if nbytes != doc["size"] or not hmac.compare_digest(digest.hex(), doc["sha256"].lower()):
        raise SignatureError(
            f"{where}: the library does not match its signature: it was modified after "
            f"signing ({nbytes} bytes, sha256 {digest.hex()[:16]}...; signed: "
            f"{doc['size']} bytes, sha256 {doc['sha256'][:16]}...)"
        )
    key = _pick_key(doc, keys, where)
    try:
        sig = base64.b64decode(doc["signature"], validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{where}: signature field is not valid base64") from None
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(sig, signed_message(digest, nbytes))
    except InvalidSignature:
        raise SignatureError(
            f"{where}: INVALID signature for key {key_id(key)}: the signature file was "
            "forged or altered"
        ) from None
    logger.debug("%s: signature by key %s verified", where, key_id(key))
    return SignatureInfo(key_id(key), digest.hex(), nbytes)


def _trusted(trusted_keys: Any) -> list[Any]:
    if trusted_keys is None:
        raise SignatureError("no trusted keys given: nothing can be verified")
    if isinstance(trusted_keys, (str, bytes, bytearray, os.PathLike)) or not hasattr(
        trusted_keys, "__iter__"
    ):
        trusted_keys = [trusted_keys]
    keys = [load_public_key(k) for k in trusted_keys]
    if not keys:
        raise SignatureError("trusted_keys is empty: no library can be trusted")
    return keys


def verify_file(path: Any, trusted_keys: Any, signature: Any = None) -> SignatureInfo:
    """Verify the library file ``path`` against its detached signature (no loading).

    Parameters
    ----------
    path : str or os.PathLike
        The library; read once.
    trusted_keys : sequence
        See :func:`verify_bytes`.
    signature : str, os.PathLike, bytes or dict, optional
        Default: the file ``path + ".sig"``.

    Returns
    -------
    SignatureInfo

    Raises
    ------
    SignatureError
        As :func:`verify_bytes`, or the library cannot be read.
    """
    path = os.fspath(path)
    data = read_library(path, "the library")
    sig = signature if signature is not None else signature_path(path)
    return verify_bytes(data, sig, trusted_keys, where=path)


def read_library(path: str, what: str) -> bytes:
    """The whole library file ``path`` (to sign or verify it).

    Raises
    ------
    SignatureError
        The file cannot be read; the message says ``what`` was being read.
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SignatureError(f"{path}: cannot read {what}: {exc.strerror}") from None
