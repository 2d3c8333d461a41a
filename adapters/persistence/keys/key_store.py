"""The key store: one AES-256 data key per user, wrapped by a master key kept outside
the database. Destroying a user's row is crypto-shredding: every sealed copy of that
user's personal data (event log, snapshots, backups) becomes unreadable for good."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import IntegrityError
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    UTCDateTime,
    keyed_ids_cut_over,
    master_key_rotations,
    user_data_keys,
)
from healthledger.adapters.persistence.engine.statements import CompiledStatement
from healthledger.adapters.persistence.keys.master_key import (
    EnvironmentKeySource,
    MasterKeyError,
    MasterKeySource,
    master_key_id,
    new_master_key,
)
from healthledger.domain.connections.summary_ids import SummaryIds
from healthledger.domain.ledger import Clock
from sqlalchemy import (
    Connection,
    LargeBinary,
    String,
    Table,
    Uuid,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement

log = logging.getLogger("healthledger.key_store")

_SEALED_PREFIX = "v1."
# A data key's material as wrapped: the 32-byte AES key alone (format 1, the keys made
# before ADR 0057), or this format byte and the key (format 2, every key made since):
# its user's summary and device ids are keyed (`domain/connections/summary_ids.py`). The
# format travels inside the wrap, so the master key's rotation keeps it and nothing
# outside the key says which ids a user has.
_KEYED_IDS_FORMAT = b"\x02"
_AES_KEY_BYTES = 32


def new_data_key(keyed_ids: bool) -> bytes:
    """The material of a new data key: format 2 (keyed summary and device ids) for a user
    being created, format 1 for a key made later for one who had none (it may have been
    answered unkeyed ids, its devices', which must not change) or for no user."""
    key = AESGCM.generate_key(bit_length=8 * _AES_KEY_BYTES)
    return _KEYED_IDS_FORMAT + key if keyed_ids else key


_NONCE_BYTES = 12
# Data keys rewrapped per round trip in a rotation (all of them in one transaction).
REWRAP_BATCH = 500


class UserCipher:
    """Seals and opens values under one user's data key (AES-256-GCM, the user id bound
    in as associated data), and digests them for change detection without opening."""

    def __init__(self, user_id: UUID, data_key: bytes, keyed_from: date | None = None) -> None:
        """`keyed_from`: for a key of format 1, the first day whose summary ids are keyed
        (revision 0050's cut-over; None: none is)."""
        keyed_ids = len(data_key) == _AES_KEY_BYTES + 1 and data_key[:1] == _KEYED_IDS_FORMAT
        if keyed_ids:
            data_key = data_key[1:]
        elif len(data_key) != _AES_KEY_BYTES:
            raise ValueError("a data key of an unknown format")
        self._aad = user_id.bytes
        self._aead = AESGCM(data_key)
        # A separate key for digests: the data key itself is used for one purpose only.
        self._digest_key = hashlib.sha256(b"healthledger-digest-key:" + data_key).digest()
        # The user's summary and device ids: keyed under the digest key for a key of
        # format 2; for an older one, the unkeyed ids it has been answered, and keyed ones
        # for the days from the cut-over on.
        if keyed_ids:
            self.summary_ids = SummaryIds(user_id, self.digest)
        else:
            digest = None if keyed_from is None else self.digest
            self.summary_ids = SummaryIds(user_id, digest, keyed_from)

    def seal(self, value: Any) -> str:
        return self.seal_bytes(canonical_json(value))

    def seal_bytes(self, plaintext: bytes) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._aead.encrypt(nonce, plaintext, self._aad)
        return _SEALED_PREFIX + base64.b64encode(sealed).decode()

    def open(self, sealed: str) -> Any:
        return json.loads(self.open_bytes(sealed))

    def open_bytes(self, sealed: str) -> bytes:
        """The plaintext as sealed (canonical JSON for `seal`): a reader that passes it on
        unchanged need not parse it."""
        raw = base64.b64decode(sealed.removeprefix(_SEALED_PREFIX))
        return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], self._aad)

    def seal_raw(self, plaintext: bytes, context: bytes) -> bytes:
        """`plaintext` sealed as bytes (nonce and ciphertext; for a BLOB / bytea column, no
        base64), bound to `context` as well as the user: a block sealed for one place does
        not open in another."""
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, self._aad + context)

    def open_raw(self, sealed: bytes, context: bytes) -> bytes:
        return self._aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], self._aad + context)

    def digest(self, plaintext: bytes) -> str:
        """A keyed digest: equal for equal values, meaningless once the key is destroyed."""
        return hmac.new(self._digest_key, plaintext, hashlib.sha256).hexdigest()


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class KeyTables:
    """The tables one key store keeps its wrapped data keys and its master key rotations
    in: the service's by default. The webhook receiver's mirror brings its own, with the
    same columns (`persistence/engine/mirror_schema.py`), in the customer's database, under its own
    master key."""

    keys: Table = user_data_keys
    rotations: Table = master_key_rotations
    # The day from which older users' summary ids are keyed (revision 0050); None: no such
    # day (the mirror derives no ids).
    cut_over: Table | None = keyed_ids_cut_over


SERVICE_KEY_TABLES = KeyTables()


@dataclass(frozen=True)
class Rotation:
    """One rotation of the master key: when, how many data keys it rewrapped, and the id
    of the new master key (`master_key_id`). The first rotation after a user's erasure is
    that erasure's horizon: from then on no copy of the user's wrapped key (a WAL, a
    replica, a backup) opens with any key that still exists."""

    rotated_at: datetime
    keys_rewrapped: int
    master_key_id: str


@dataclass(frozen=True)
class MasterKey:
    """A master key ready to wrap and unwrap data keys, with its id."""

    aead: AESGCM
    key_id: str

    @classmethod
    def of(cls, key: bytes) -> MasterKey:
        return cls(AESGCM(key), master_key_id(key))

    def wrap(self, user_id: UUID, data_key: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self.aead.encrypt(nonce, data_key, data_key_aad(user_id))

    def unwrap(self, user_id: UUID, wrapped: bytes) -> bytes:
        """The data key; InvalidTag if another master key wrapped it."""
        return self.aead.decrypt(
            wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], data_key_aad(user_id)
        )


def data_key_aad(user_id: UUID) -> bytes:
    # The user id is bound in: a wrapped key copied to another user's row won't open.
    return b"healthledger-data-key:" + user_id.bytes


def latest_master_key_id(conn: Connection, rotations: Table = master_key_rotations) -> str | None:
    """The id of the master key the latest rotation put in place (None: never rotated)."""
    r = rotations.c
    found: str | None = conn.execute(
        select(r.master_key_id).order_by(r.id.desc()).limit(1)
    ).scalar()
    return found


def open_master_key(
    db: Database, source: MasterKeySource, tables: KeyTables = SERVICE_KEY_TABLES
) -> bytes:
    """The master key from `source`, checked against the database: a rotation a crash cut
    short is settled first, and a key that is not the one the data keys are wrapped by
    stops the service here, with a message, rather than at the first personal value.

    A new key is made only for a database that holds no data key yet: pointing an
    existing database at a missing key file must fail, not mint a second master key."""
    keys = tables.keys
    with db.read() as conn:
        current_id = latest_master_key_id(conn, tables.rotations)
        wrapped = conn.execute(select(keys.c.user_id, keys.c.wrapped_key).limit(1)).first()
    source.settle(current_id)
    key = source.load(create=wrapped is None)
    master = MasterKey.of(key)
    if current_id is not None and master.key_id != current_id:
        raise MasterKeyError(
            f"{source.name} gives master key {master.key_id}, but the database's data keys "
            f"are wrapped by master key {current_id} (its latest rotation)"
        )
    if current_id is None and wrapped is not None:
        try:
            master.unwrap(wrapped.user_id, bytes(wrapped.wrapped_key))
        except InvalidTag:
            raise MasterKeyError(
                f"the master key from {source.name} does not open the database's data keys"
            ) from None
    return key


# The cut-over before it is read (`KeyStore.keyed_ids_from`).
_NOT_READ = object()

# Why a new user's key was not stored with its events (another process rotated the master
# key meanwhile): the create tries again, with the rotated master key.
KEY_REFUSED = "the master key was rotated: store the new key again"


class KeyStore:
    """Implements the domain's PersonalDataVault port with AES-GCM."""

    def __init__(
        self,
        db: Database,
        master_key: bytes,
        clock: Clock,
        source: MasterKeySource | None = None,
        tables: KeyTables = SERVICE_KEY_TABLES,
    ) -> None:
        self.db = db
        self.clock = clock
        self.tables = tables
        # Where the master key came from: read again when another process rotated it, and
        # written by a rotation made here. None: the key cannot be reloaded or rotated.
        self.source = source
        # Replaced whole (one assignment), never changed: a thread reads it without a lock.
        self.master = MasterKey.of(master_key)
        # The new key while this process rotates: what a thread meets once the rewrapped
        # keys are committed, before `master` is replaced.
        self.rotating_to: MasterKey | None = None
        self.reload_lock = threading.Lock()
        self._keyed_ids_from: object = _NOT_READ
        # Every create runs it (a new user's key): compiled once (ADR 0014).
        self.insert_key = CompiledStatement(self.insert_key_statement(tables, db.is_sqlite))
        # PostgreSQL: that the key was stored, checked on the server with the create's
        # statements (revision 0014), so the create needs no answer before its COMMIT
        # (ADR 0025); a refusal fails the COMMIT, and the recorder raises `refused()`.
        keys = tables.keys
        self.key_stored = CompiledStatement(
            select(
                func.healthledger_check(
                    exists().where(
                        keys.c.user_id == bindparam("uid", type_=keys.c.user_id.type),
                        keys.c.wrapped_key == bindparam("wrapped", type_=keys.c.wrapped_key.type),
                    ),
                    literal(KEY_REFUSED),
                )
            )
        )
        # The data keys of users being created (`new_key`), by user id: held here until
        # the transaction that records the user's first events stores them
        # (`store_new_keys`), and dropped once it commits (`forget_stored_keys`).
        self.new_keys: dict[UUID, bytes] = {}

    def _cipher(self, user_id: UUID, data_key: bytes) -> UserCipher:
        return UserCipher(user_id, data_key, self.keyed_ids_from)

    @property
    def keyed_ids_from(self) -> date | None:
        """The first day whose summary ids are keyed for a user whose key predates keyed
        ids (revision 0050's cut-over, ADR 0057); None without one. Read once: it never
        changes."""
        if self._keyed_ids_from is _NOT_READ:
            found = None
            if self.tables.cut_over is not None:
                with self.db.read() as conn:
                    found = conn.execute(select(self.tables.cut_over.c.keyed_from)).scalar()
            self._keyed_ids_from = found
        return cast("date | None", self._keyed_ids_from)

    # -- PersonalDataVault ----------------------------------------------------------------

    def seal(self, user_id: UUID, value: Any) -> str:
        new_key = self.new_keys.get(user_id)
        if new_key is not None:
            return self._cipher(user_id, new_key).seal(value)
        cipher = self.cipher(user_id) or self._cipher(user_id, self._create_data_key(user_id))
        return cipher.seal(value)

    # -- a new user's key, stored with its first events (the domain's KeepsNewKeys) ----

    def new_key(self, user_id: UUID) -> None:
        """Make the data key of a user being created, kept in memory: `seal` uses it, and
        the transaction that records the user's first events stores it, so a create
        commits once (a key stored on its own is a second durable commit). Only for an
        id nobody else knows yet: no other process can seal for it meanwhile."""
        self.new_keys[user_id] = new_data_key(keyed_ids=True)

    def store_new_keys(self, conn: Connection, events: Sequence[Any]) -> None:
        """Inside the recording transaction (`on_record`): store the new key of each user
        whose events it records. A key the master key's rotation refused (another process
        rotated meanwhile) fails the transaction as a conflict: the command tries again,
        with the rotated master key."""
        if not self.new_keys:
            return
        for event in events:
            user_id = event.originator_id
            data_key = self.new_keys.get(user_id)
            if data_key is None:
                continue
            master = self.master
            values = self._insert_key(user_id, master.wrap(user_id, data_key), master)
            if not self.db.is_sqlite:
                self.insert_key.execute(conn, values)
                self.key_stored.execute(conn, {"uid": user_id, "wrapped": values["wrapped"]})
            elif not self.insert_key.rows(conn, values):
                raise self.refused()

    def refused(self) -> IntegrityError:
        """What a new user's key refused by the master key's rotation raises (after the
        rotated master key is taken): the command tries again."""
        self.reload_if_rotated()
        return IntegrityError(KEY_REFUSED)

    def forget_stored_keys(self, events: Sequence[Any]) -> None:
        """After a commit (a commit listener): the new keys it stored are the table's now."""
        if self.new_keys:
            for event in events:
                self.new_keys.pop(event.originator_id, None)

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        cipher = self.cipher(user_id)
        if cipher is None:
            return None  # erased: the key is gone, and with it the data
        return cipher.open(sealed)

    def open_on(self, conn: Connection, user_id: UUID, sealed: str) -> Any | None:
        """`open`, reading the key on the caller's connection: a projection opens what it
        projects inside the transaction that records (or rebuilds) it."""
        new_key = self.new_keys.get(user_id)
        if new_key is not None:
            return self._cipher(user_id, new_key).open(sealed)
        wrapped = self._wrapped(conn, user_id)
        if wrapped is None:
            return None
        return self._cipher(user_id, self._unwrap(user_id, wrapped)).open(sealed)

    def opener_on(
        self, conn: Connection, user_ids: Collection[UUID]
    ) -> Callable[[Connection, UUID, str], Any | None]:
        """`open_on` for values of these users, their keys read on the caller's connection
        in one query (a rebuild's page): each key unwrapped at its first use. A user not
        among them is read as `open_on` reads it."""
        keys = self.tables.keys
        wrapped: dict[UUID, bytes] = {}
        if user_ids:
            query = select(keys.c.user_id, keys.c.wrapped_key).where(
                keys.c.user_id.in_(set(user_ids))
            )
            wrapped = {row.user_id: bytes(row.wrapped_key) for row in conn.execute(query)}
        ciphers: dict[UUID, UserCipher] = {}

        def open_preloaded(conn_: Connection, user_id: UUID, sealed: str) -> Any | None:
            cipher = ciphers.get(user_id)
            if cipher is None:
                if user_id not in user_ids:
                    return self.open_on(conn_, user_id, sealed)
                key = wrapped.get(user_id)
                if key is None:
                    return None  # erased: the key is gone, and with it the data
                cipher = ciphers[user_id] = self._cipher(user_id, self._unwrap(user_id, key))
            return cipher.open(sealed)

        return open_preloaded

    def cipher(self, user_id: UUID) -> UserCipher | None:
        """The user's key, unwrapped once for many values; None when the user has no key
        (never had sealed data, or was erased). Never creates a key: what stores data in
        bulk for an existing user must not mint a key for an erased one."""
        data_key = self._data_key(user_id)
        return None if data_key is None else self._cipher(user_id, data_key)

    def service_cipher(self, key_id: UUID) -> UserCipher:
        """The cipher of a key the service keeps for itself under a fixed id that is no
        user's (the makers' account digests: adapters/persistence/keys/maker_accounts.py),
        made at its first use (several processes at once: the first stored wins). Call it
        outside a write transaction: making the key writes."""
        data_key = self._data_key(key_id) or self._create_data_key(key_id)
        return self._cipher(key_id, data_key)

    def cipher_on(self, conn: Connection, user_id: UUID) -> UserCipher | None:
        """`cipher`, reading the key on the caller's connection: a read that checks the
        user and reads its data in one transaction opens them with the key of that
        moment."""
        return self.cipher_of(user_id, self._wrapped(conn, user_id))

    def cipher_of(self, user_id: UUID, wrapped: bytes | None) -> UserCipher | None:
        """The cipher of a wrapped data key the caller read from `tables.keys` (with
        other columns, in one query); None for none."""
        return None if wrapped is None else self._cipher(user_id, self._unwrap(user_id, wrapped))

    def users_digest(self, user_id: UUID) -> Callable[[bytes], str] | None:
        """The keyed digest under the user's data key (a new user's key too, before its
        create commits), or None when the user has no key: what a connection's and a
        feed's stream ids are derived with (domain/connections/stream_ids.py)."""
        new_key = self.new_keys.get(user_id)
        if new_key is not None:
            return self._cipher(user_id, new_key).digest
        cipher = self.cipher(user_id)
        return None if cipher is None else cipher.digest

    def has_key(self, user_id: UUID) -> bool:
        with self.db.read() as conn:
            return self._wrapped(conn, user_id) is not None

    # -- erasure ------------------------------------------------------------------------

    def discard(self, user_id: UUID) -> None:
        """Drop a key made for a user that was never recorded (a failed create)."""
        if self.new_keys.pop(user_id, None) is not None:
            return  # never stored: nothing was recorded for the user
        with self.db.write() as conn:
            self.destroy(conn, user_id, self.tables.keys)

    @staticmethod
    def destroy(conn: Connection, user_id: UUID, keys: Table = user_data_keys) -> None:
        """Delete the user's data key inside the caller's (erasure) transaction."""
        conn.execute(delete(keys).where(keys.c.user_id == user_id))

    # -- internals ------------------------------------------------------------------------

    def _wrapped(self, conn: Connection, user_id: UUID) -> bytes | None:
        keys = self.tables.keys
        return conn.execute(select(keys.c.wrapped_key).where(keys.c.user_id == user_id)).scalar()

    def _data_key(self, user_id: UUID) -> bytes | None:
        with self.db.read() as conn:
            wrapped = self._wrapped(conn, user_id)
        return None if wrapped is None else self._unwrap(user_id, wrapped)

    def _unwrap(self, user_id: UUID, wrapped: bytes) -> bytes:
        wrapped = bytes(wrapped)
        for attempt in range(2):
            for master in (self.master, self.rotating_to):
                if master is None:
                    continue
                try:
                    return master.unwrap(user_id, wrapped)
                except InvalidTag:
                    pass
            # Another process may have rotated the master key: take the new one, once.
            if attempt == 0 and not self.reload_if_rotated():
                break
        raise RuntimeError("a data key does not open with this master key")

    def _insert_key(self, user_id: UUID, wrapped: bytes, master: MasterKey) -> dict[str, Any]:
        """Insert a user's wrapped key unless one is stored; only while `master` is the
        key of the latest rotation: a process that has not seen another's rotation yet
        must not store a key wrapped by a master key that is destroyed. The rotation holds
        the key table locked (SQLite: the write lock), so this statement, which locks it
        too, sees it committed or not begun. The values of `self.insert_key`, which answers
        the stored row's id (none if refused)."""
        return {"uid": user_id, "wrapped": wrapped, "at": self.clock(), "kid": master.key_id}

    @staticmethod
    def insert_key_statement(tables: KeyTables, is_sqlite: bool) -> ClauseElement:
        rotations, keys = tables.rotations, tables.keys
        current = (
            select(rotations.c.master_key_id).order_by(rotations.c.id.desc()).limit(1)
        ).scalar_subquery()
        master_key_id = bindparam("kid", type_=String())
        row = select(
            bindparam("uid", type_=Uuid()),
            bindparam("wrapped", type_=LargeBinary()),
            bindparam("at", type_=UTCDateTime()),
        ).where(func.coalesce(current, master_key_id) == master_key_id)
        dialect_insert = sqlite.insert if is_sqlite else postgresql.insert
        return (
            dialect_insert(keys)
            .from_select(["user_id", "wrapped_key", "created_at"], row)
            .on_conflict_do_nothing(index_elements=["user_id"])
            # What was stored (nothing if refused): a driver's rowcount of an
            # INSERT ... SELECT is not to be relied on (psycopg answers -1).
            .returning(keys.c.user_id)
        )

    def _create_data_key(self, user_id: UUID) -> bytes:
        data_key = new_data_key(keyed_ids=False)
        for _attempt in range(3):
            master = self.master
            values = self._insert_key(user_id, master.wrap(user_id, data_key), master)
            with self.db.write() as conn:
                self.insert_key.rows(conn, values)
            # A concurrent first seal may have won the insert: use whichever key is stored.
            stored = self._data_key(user_id)
            if stored is not None:
                return stored
            self.reload_if_rotated()  # refused: the master key was rotated meanwhile
        raise MasterKeyError("the master key changed during three attempts to store a data key")

    # -- the master key: rotation, and another process's rotation ------------------------

    def rotations(self) -> list[Rotation]:
        """Every rotation of the master key, oldest first."""
        r = self.tables.rotations.c
        with self.db.read() as conn:
            rows = conn.execute(
                select(r.rotated_at, r.keys_rewrapped, r.master_key_id).order_by(r.id)
            )
            return [Rotation(row.rotated_at, row.keys_rewrapped, row.master_key_id) for row in rows]

    def reload_if_rotated(self) -> bool:
        """Take the master key of the latest rotation, if another process made it since
        this one loaded its key: read again from the source (the file it replaced, or the
        secrets manager's command). True if the key changed."""
        with self.db.read() as conn:
            current_id = latest_master_key_id(conn, self.tables.rotations)
        if current_id is None or current_id == self.master.key_id:
            return False
        with self.reload_lock:
            if self.master.key_id == current_id:
                return True  # another thread reloaded it meanwhile
            rotating = self.rotating_to
            if rotating is not None and rotating.key_id == current_id:
                self.master = rotating  # this process's own rotation just committed
                return True
            key = None if self.source is None else self.source.load_current(current_id)
            if key is None:
                where = "its key source" if self.source is None else self.source.name
                restart = isinstance(self.source, EnvironmentKeySource)
                raise MasterKeyError(
                    f"the master key was rotated: the data keys are wrapped by master key "
                    f"{current_id}, which {where} does not give"
                    + (" (restart this process with the new value)" if restart else "")
                )
            self.master = MasterKey.of(key)
            log.info("the master key was rotated by another process: now using %s", current_id)
        return True

    def rotate_master_key(self, *, due_after: timedelta | None = None) -> Rotation | None:
        """Rewrap every live data key under a new master key, in one transaction that holds
        the key table (SQLite: the write lock; PostgreSQL: an EXCLUSIVE table lock, so no
        key is added, rewrapped or destroyed meanwhile), record the rotation, then put the
        new key in the source and destroy the old one (file source), or hand it to the
        operator (`source.new_key_file`).

        With `due_after` (the scheduler's), only if the latest rotation (or, before the
        first, the oldest data key) is at least that old, judged under the lock: of two
        processes, one rotates and the other finds it done (None)."""
        source = self.source
        if source is None:
            raise MasterKeyError("this key store was given no key source: it cannot rotate")
        self.reload_if_rotated()
        new_key = new_master_key()
        new = MasterKey.of(new_key)
        with source.rotating():
            staged = False
            try:
                with self.db.write() as conn:
                    if not self.db.is_sqlite:
                        conn.exec_driver_sql(
                            f"LOCK TABLE {self.tables.keys.name} IN EXCLUSIVE MODE"
                        )
                    r = self.tables.rotations.c
                    latest = conn.execute(
                        select(r.rotated_at, r.master_key_id).order_by(r.id.desc()).limit(1)
                    ).first()
                    source.settle(None if latest is None else latest.master_key_id)
                    if due_after is not None and not self._due(conn, latest, due_after):
                        return None
                    if latest is not None and latest.master_key_id != self.master.key_id:
                        raise MasterKeyError(
                            f"another process rotated the master key to {latest.master_key_id} "
                            "just now: this one has not loaded it yet; try again"
                        )
                    source.stage(new_key)
                    staged = True
                    self.rotating_to = new
                    count = self._rewrap(conn, self.master, new)
                    now = self.clock()
                    conn.execute(
                        insert(self.tables.rotations).values(
                            rotated_at=now, keys_rewrapped=count, master_key_id=new.key_id
                        )
                    )
            except BaseException:
                if staged:
                    self._after_failed_rotation(source, new)
                self.rotating_to = None
                raise
            source.commit_staged()
            self.master = new
            self.rotating_to = None
        log.info("rotated the master key: %d data key(s) rewrapped under %s", count, new.key_id)
        # The rewrapped rows' old versions: out of the WAL (SQLite), vacuumed (PostgreSQL).
        self.db.vacuum_key_store(self.tables.keys.name)
        return Rotation(now, count, new.key_id)

    def rotation_due(self, due_after: timedelta) -> bool:
        """Whether the latest rotation (before the first: the oldest data key) is at least
        `due_after` old (`rotate_master_key` judges it again under its lock)."""
        r = master_key_rotations.c
        with self.db.read() as conn:
            latest = conn.execute(select(r.rotated_at).order_by(r.id.desc()).limit(1)).first()
            return self._due(conn, latest, due_after)

    def _due(self, conn: Connection, latest: Any, due_after: timedelta) -> bool:
        since = (
            latest.rotated_at
            if latest is not None
            else conn.execute(select(func.min(self.tables.keys.c.created_at))).scalar()
        )
        if since is None:
            return False  # no data key yet: nothing to rotate
        if since.tzinfo is None:  # SQLite's MIN() answers the stored text, as it is: UTC
            since = since.replace(tzinfo=UTC)
        return bool(self.clock() - since >= due_after)

    def _rewrap(self, conn: Connection, old: MasterKey, new: MasterKey) -> int:
        keys = self.tables.keys
        c = keys.c
        rewrap = (
            update(keys)
            .where(c.user_id == bindparam("uid"))
            .values(wrapped_key=bindparam("wrapped"))
        )
        count = 0
        after: UUID | None = None
        while True:
            page = select(c.user_id, c.wrapped_key).order_by(c.user_id).limit(REWRAP_BATCH)
            if after is not None:
                page = page.where(c.user_id > after)
            rows = conn.execute(page).all()
            if not rows:
                return count
            try:
                values = [
                    {
                        "uid": row.user_id,
                        "wrapped": new.wrap(
                            row.user_id, old.unwrap(row.user_id, bytes(row.wrapped_key))
                        ),
                    }
                    for row in rows
                ]
            except InvalidTag:
                raise MasterKeyError(
                    "a data key does not open with the current master key: nothing was rotated"
                ) from None
            conn.execute(rewrap, values)
            count += len(rows)
            after = rows[-1].user_id

    def _after_failed_rotation(self, source: MasterKeySource, new: MasterKey) -> None:
        """The rotation raised after its new key was staged: if its transaction committed
        all the same (the COMMIT's answer was lost), the new key is the key; else the old
        one still is. If the database cannot tell now, the staged key stays, for the next
        start to settle."""
        try:
            with self.db.read() as conn:
                current_id = latest_master_key_id(conn, self.tables.rotations)
        except Exception:
            log.warning("a failed master key rotation left its new key staged for the next start")
            return
        if current_id == new.key_id:
            source.commit_staged()
            self.master = new
        else:
            source.discard_staged()
