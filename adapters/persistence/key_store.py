"""The key store: one AES-256 data key per user, wrapped by a master key kept outside
the database. Destroying a user's row is crypto-shredding: every sealed copy of that
user's personal data (event log, snapshots, backups) becomes unreadable for good."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from healthledger.adapters.persistence.database import Database
from healthledger.adapters.persistence.schema import user_data_keys
from healthledger.domain.ledger import Clock
from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects import postgresql, sqlite

_SEALED_PREFIX = "v1."
_NONCE_BYTES = 12


class MasterKeyError(RuntimeError):
    pass


class UserCipher:
    """Seals and opens values under one user's data key (AES-256-GCM, the user id bound
    in as associated data), and digests them for change detection without opening."""

    def __init__(self, user_id: UUID, data_key: bytes) -> None:
        self._aad = user_id.bytes
        self._aead = AESGCM(data_key)
        # A separate key for digests: the data key itself is used for one purpose only.
        self._digest_key = hashlib.sha256(b"healthledger-digest-key:" + data_key).digest()

    def seal(self, value: Any) -> str:
        return self.seal_bytes(canonical_json(value))

    def seal_bytes(self, plaintext: bytes) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._aead.encrypt(nonce, plaintext, self._aad)
        return _SEALED_PREFIX + base64.b64encode(sealed).decode()

    def open(self, sealed: str) -> Any:
        raw = base64.b64decode(sealed.removeprefix(_SEALED_PREFIX))
        return json.loads(self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], self._aad))

    def digest(self, plaintext: bytes) -> str:
        """A keyed digest: equal for equal values, meaningless once the key is destroyed."""
        return hmac.new(self._digest_key, plaintext, hashlib.sha256).hexdigest()


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def load_master_key(path: Path, *, create: bool = True) -> bytes:
    """The 32-byte master key from `path` (base64), created with mode 0600 if missing."""
    if not path.exists():
        if not create:
            raise MasterKeyError(
                f"master key file {path} does not exist, but the database holds data keys "
                "wrapped by a master key: set HEALTHLEDGER_MASTER_KEY_FILE to its file"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        with os.fdopen(fd, "w") as handle:
            handle.write(base64.b64encode(AESGCM.generate_key(bit_length=256)).decode() + "\n")
    try:
        key = base64.b64decode(path.read_text().strip(), validate=True)
    except ValueError as exc:
        raise MasterKeyError(f"master key file {path} is not base64") from exc
    if len(key) != 32:
        raise MasterKeyError(f"master key file {path} must hold 32 bytes (base64)")
    return key


class KeyStore:
    """Implements the domain's PersonalDataVault port with AES-GCM."""

    def __init__(self, db: Database, master_key: bytes, clock: Clock) -> None:
        self.db = db
        self._master = AESGCM(master_key)
        self.clock = clock

    # -- PersonalDataVault ----------------------------------------------------------------

    def seal(self, user_id: UUID, value: Any) -> str:
        cipher = self.cipher(user_id) or UserCipher(user_id, self._create_data_key(user_id))
        return cipher.seal(value)

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        cipher = self.cipher(user_id)
        if cipher is None:
            return None  # erased: the key is gone, and with it the data
        return cipher.open(sealed)

    def cipher(self, user_id: UUID) -> UserCipher | None:
        """The user's key, unwrapped once for many values; None when the user has no key
        (never had sealed data, or was erased). Never creates a key: what stores data in
        bulk for an existing user must not mint a key for an erased one."""
        data_key = self._data_key(user_id)
        return None if data_key is None else UserCipher(user_id, data_key)

    def has_key(self, user_id: UUID) -> bool:
        with self.db.read() as conn:
            return self._wrapped(conn, user_id) is not None

    # -- erasure ------------------------------------------------------------------------

    def discard(self, user_id: UUID) -> None:
        """Drop a key made for a user that was never recorded (a failed create)."""
        with self.db.write() as conn:
            self.destroy(conn, user_id)

    @staticmethod
    def destroy(conn: Connection, user_id: UUID) -> None:
        """Delete the user's data key inside the caller's (erasure) transaction."""
        conn.execute(delete(user_data_keys).where(user_data_keys.c.user_id == user_id))

    # -- internals ------------------------------------------------------------------------

    def _aad(self, user_id: UUID) -> bytes:
        # The user id is bound in: a wrapped key copied to another user's row won't open.
        return b"healthledger-data-key:" + user_id.bytes

    def _wrapped(self, conn: Connection, user_id: UUID) -> bytes | None:
        return conn.execute(
            select(user_data_keys.c.wrapped_key).where(user_data_keys.c.user_id == user_id)
        ).scalar()

    def _data_key(self, user_id: UUID) -> bytes | None:
        with self.db.read() as conn:
            wrapped = self._wrapped(conn, user_id)
        if wrapped is None:
            return None
        wrapped = bytes(wrapped)
        try:
            return self._master.decrypt(
                wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], self._aad(user_id)
            )
        except InvalidTag as exc:
            raise RuntimeError("a data key does not open with this master key") from exc

    def _create_data_key(self, user_id: UUID) -> bytes:
        data_key = AESGCM.generate_key(bit_length=256)
        nonce = os.urandom(_NONCE_BYTES)
        wrapped = nonce + self._master.encrypt(nonce, data_key, self._aad(user_id))
        dialect_insert = sqlite.insert if self.db.is_sqlite else postgresql.insert
        statement = (
            dialect_insert(user_data_keys)
            .values(user_id=user_id, wrapped_key=wrapped, created_at=self.clock())
            .on_conflict_do_nothing(index_elements=["user_id"])
        )
        with self.db.write() as conn:
            conn.execute(statement)
        # A concurrent first seal may have won the insert: use whichever key is stored.
        stored = self._data_key(user_id)
        assert stored is not None
        return stored
