"""Sign a library (Ed25519, detached) and make signing keys: the tool side of trust.

The signature format, and the verification ``load_module(trusted_keys=...)`` runs
before any code of a library, live in the runtime (:mod:`monolib.runtime.trust`);
this module writes what that one checks: :func:`generate_keypair` (``monolib keygen``)
and :func:`sign_file` (``monolib sign``). ``cryptography`` is imported only inside
these functions; without it they raise :class:`SignatureError`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from typing import Any

from ..errors import SignatureError
from ..runtime.files import write_atomic
from ..runtime.trust import (
    ALGORITHM,
    FORMAT,
    VERSION,
    crypto,
    key_id,
    raw_public_key,
    read_library,
    read_small,
    signature_path,
    signed_message,
)

__all__ = ["generate_keypair", "load_private_key", "sign_bytes", "sign_file"]

logger = logging.getLogger(__name__)


def load_private_key(key: Any, password: bytes | None = None) -> Any:
    """An Ed25519 private key from a key object, PEM bytes, or a PEM file path.

    Parameters
    ----------
    key : Ed25519PrivateKey, bytes, str or os.PathLike
        The key, its PKCS#8 PEM bytes, or the PEM file written by :func:`generate_keypair`.
    password : bytes, optional
        Password of an encrypted PEM.

    Returns
    -------
    Ed25519PrivateKey

    Raises
    ------
    SignatureError
        Unreadable file, not a private key (or a wrong password), not Ed25519.
    """
    ed25519, ser = crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    where = "private key (bytes)"
    if isinstance(key, (str, os.PathLike)):
        where = os.fspath(key)
        key = read_small(key, "private key")
    if not isinstance(key, (bytes, bytearray)):
        raise SignatureError(
            f"a signing key must be a path, bytes or key, got {type(key).__name__}"
        )
    try:
        loaded = ser.load_pem_private_key(bytes(key), password=password)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"{where}: not a usable PEM private key: {exc}") from None
    if not isinstance(loaded, ed25519.Ed25519PrivateKey):
        raise SignatureError(f"{where}: a {type(loaded).__name__}, monolib signs with Ed25519")
    return loaded


def _write_atomic(path: str, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` whole (temp file + rename, fsync'd) with ``mode``."""
    try:
        write_atomic(path, [data], chmod=mode, sync=True)
    except OSError as exc:
        raise SignatureError(f"{path}: cannot write: {exc.strerror}") from None


def generate_keypair(
    out: Any, overwrite: bool = False, password: bytes | None = None
) -> tuple[str, str]:
    """Create an Ed25519 key pair: ``out`` (private, PKCS#8 PEM, mode 0600) and
    ``out.pub`` (public, SubjectPublicKeyInfo PEM).

    Parameters
    ----------
    out : str or os.PathLike
        Path of the private key file.
    overwrite : bool
        Replace existing files (default: refuse, so a key is never lost by accident).
    password : bytes, optional
        Encrypt the private key with it (PKCS#8, the best encryption ``cryptography``
        offers); default: unencrypted, protected by its 0600 mode only.

    Returns
    -------
    (private_path, public_path)

    Raises
    ------
    SignatureError
        A file exists (and not ``overwrite``), cannot be written, or ``cryptography``
        is missing.
    """
    ed25519, ser = crypto()
    priv_path = os.fspath(out)
    pub_path = priv_path + ".pub"
    for p in (priv_path, pub_path):
        if os.path.exists(p) and not overwrite:
            raise SignatureError(f"{p}: exists; refusing to overwrite a key (use --force)")
    key = ed25519.Ed25519PrivateKey.generate()
    crypt = ser.BestAvailableEncryption(password) if password else ser.NoEncryption()
    pem = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, crypt)
    pub = key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
    _write_atomic(priv_path, pem, 0o600)
    _write_atomic(pub_path, pub, 0o644)
    logger.info("wrote key pair %s, %s (key id %s)", priv_path, pub_path, key_id(key.public_key()))
    return priv_path, pub_path


# --------------------------------------------------------------------------- sign
def sign_bytes(data: Any, private_key: Any, password: bytes | None = None) -> dict:
    """The signature document (a dict, see the module docstring) of ``data``.

    Parameters
    ----------
    data : bytes-like
        The whole library file.
    private_key : Ed25519PrivateKey, bytes or path
        See :func:`load_private_key`.
    password : bytes, optional
        Password of an encrypted private key.

    Raises
    ------
    SignatureError
        Bad key, or ``cryptography`` missing.
    """
    key = load_private_key(private_key, password)
    with memoryview(data) as mv, mv.cast("B") as view:
        digest = hashlib.sha256(view).digest()
        nbytes = view.nbytes
    raw_pub = raw_public_key(key.public_key())
    sig = key.sign(signed_message(digest, nbytes))
    return {
        "format": FORMAT,
        "version": VERSION,
        "algorithm": ALGORITHM,
        "sha256": digest.hex(),
        "size": nbytes,
        "public_key": raw_pub.hex(),
        "key_id": key_id(raw_pub),
        "signature": base64.b64encode(sig).decode("ascii"),
    }


def sign_file(
    path: Any, private_key: Any, signature: Any = None, password: bytes | None = None
) -> str:
    """Sign the library file ``path``; write the detached signature atomically.

    Parameters
    ----------
    path : str or os.PathLike
        The library (``model.so``); read once.
    private_key : Ed25519PrivateKey, bytes or path
        See :func:`load_private_key`.
    password : bytes, optional
        Password of an encrypted private key.
    signature : str or os.PathLike, optional
        Where to write (default ``path + ".sig"``).

    Returns
    -------
    str
        The signature file written.

    Raises
    ------
    SignatureError
        Unreadable library, bad key, unwritable signature file.
    """
    path = os.fspath(path)
    doc = sign_bytes(read_library(path, "the library to sign"), private_key, password)
    out = os.fspath(signature) if signature is not None else signature_path(path)
    _write_atomic(out, (json.dumps(doc, indent=1) + "\n").encode("utf-8"), 0o644)
    logger.info("signed %s with key %s -> %s", path, doc["key_id"], out)
    return out
