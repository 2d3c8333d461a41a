"""The service's Ed25519 signing key: what signs the hash chain's heads and the deletion
reports (ADR 0015).

Kept like the master key (`keys/key_files.py`): a file, never in the database, by
default `healthledger.signing.key` beside the master key file (so in
`default_key_directory()` unless the master key file was put elsewhere), created 0600 in
a 0700 directory; `HEALTHLEDGER_SIGNING_KEY_FILE` names another. Whoever holds it can
sign a rewritten log's head, so it must not travel with the database's backups: like the
master key, a file in the SQLite database's own directory is refused unless
`HEALTHLEDGER_ALLOW_KEY_BESIDE_DATABASE` is set.

The file holds the raw 32-byte private key, base64 on one line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from healthledger.adapters.persistence.keys.key_files import exposure, write_private_file

SIGNING_KEY_FILE_VARIABLE = "HEALTHLEDGER_SIGNING_KEY_FILE"
SIGNING_KEY_NAME = "healthledger.signing.key"
_KEY_BYTES = 32


class SigningKeyError(RuntimeError):
    pass


def signing_key_path(configured: Path | None, master_key_file: Path) -> Path:
    """The signing key's file: the configured one, else beside the master key file."""
    return configured if configured is not None else master_key_file.parent / SIGNING_KEY_NAME


def load_signing_key(
    path: Path,
    *,
    create: bool,
    database_directory: Path | None = None,
    allow_beside_database: bool = False,
) -> Ed25519PrivateKey:
    """The key in `path`. A missing file is made (0600) only with `create`: for a database
    with no signed head yet. Once heads are signed, a new key would disown them, so a
    missing file is an error that names the setting."""
    if (
        database_directory is not None
        and not allow_beside_database
        and path.absolute().parent.resolve() == database_directory.resolve()
    ):
        raise SigningKeyError(
            f"the signing key file {path} is in the database's own directory: a copy of "
            "that directory would carry the key that signs the log's heads. Move it and "
            f"set {SIGNING_KEY_FILE_VARIABLE}, or set HEALTHLEDGER_ALLOW_KEY_BESIDE_DATABASE=true"
        )
    if not path.exists():
        if not create:
            raise SigningKeyError(
                f"the signing key file {path} does not exist, but the database holds heads "
                f"signed by a signing key: set {SIGNING_KEY_FILE_VARIABLE} to its file"
            )
        raw = Ed25519PrivateKey.generate().private_bytes_raw()
        # Of two processes creating it at once, one file wins; both read it below.
        write_private_file(path, base64.b64encode(raw) + b"\n", replace=False)
    problem = exposure(path)
    if problem is not None:
        raise SigningKeyError(f"the signing key file {path} is not private: {problem}")
    try:
        raw = base64.b64decode(path.read_bytes().strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SigningKeyError(f"the signing key file {path} is not base64") from exc
    if len(raw) != _KEY_BYTES:
        raise SigningKeyError(f"the signing key file {path} must hold {_KEY_BYTES} bytes (base64)")
    return Ed25519PrivateKey.from_private_bytes(raw)


def cursor_secret(signing_key: bytes) -> bytes:
    """A key for cursors only, derived from the service's signing key (raw private
    bytes), never the key itself. Not from the master key: that one is rotated (weekly by
    default), and a cursor handed out before a rotation must still page after it, in this
    process and in any other."""
    return hmac.new(signing_key, b"healthledger paging cursors v1", hashlib.sha256).digest()
