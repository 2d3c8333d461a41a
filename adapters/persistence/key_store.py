"""The key store: one AES-256 data key per user, wrapped by a master key kept outside
the database. Destroying a user's row is crypto-shredding: every sealed copy of that
user's personal data (event log, snapshots, backups) becomes unreadable for good."""

from __future__ import annotations

import base64
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
        data_key = self._data_key(user_id) or self._create_data_key(user_id)
        nonce = os.urandom(_NONCE_BYTES)
        plaintext = json.dumps(value, separators=(",", ":")).encode()
        sealed = nonce + AESGCM(data_key).encrypt(nonce, plaintext, user_id.bytes)
        return _SEALED_PREFIX + base64.b64encode(sealed).decode()

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        data_key = self._data_key(user_id)
        if data_key is None:
            return None  # erased: the key is gone, and with it the data
        raw = base64.b64decode(sealed.removeprefix(_SEALED_PREFIX))
        plaintext = AESGCM(data_key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], user_id.bytes)
        return json.loads(plaintext)

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
