"""The tamper-evident hash chain over the whole event log, and its signed heads.

Every stored event carries its place in one chain over the log (`chain_position`: 1, 2,
3... in notification order) and a link hash (`chain_hash`) over its content and the hash
of the record before it, written by the recorder in the transaction that stores the
event (ADR 0015). The link, exactly (`hl-chain-v1`)::

    SHA-256( b"hl-chain-v1" || prev_hash (32; 32 zero bytes before position 1)
             || position (8, big-endian unsigned) || originator_id (16)
             || originator_version (8, big-endian unsigned) || SHA-256(topic, UTF-8) (32)
             || timestamp (8, big-endian signed: microseconds since the Unix epoch, UTC)
             || SHA-256(state) (32: the stored bytes, ciphertext included) )

The state is hashed as stored, sealed values as ciphertext: erasing a user destroys the
key that opens them, never a byte the chain covers.

A head (a position and its hash) is signed from time to time with the service's Ed25519
key (`persistence/keys/signing_key.py`) and recorded in `chain_heads`: the signed message is
`b"hl-chain-head-v1" || position (8 BE) || chain_hash (32) || signed_at (8 BE signed,
microseconds)`. A verifier holding the public key can then prove that the log up to a
signed head was not rewritten, even by someone who recomputed every hash after a change.

`Chain` (the Service's `chain`) signs heads, finds the head that covers an event, gives
the links of some streams (for a deletion report), checks a span of the chain (what a
deletion report cites, before it is signed), and verifies the whole chain (`healthledger
verify`).

A redacted record (ADR 0028: its payload replaced by its sealed form) keeps its place and
its hash: it links with the original topic and state digest that `chain_redactions`
gives, once its stored topic and state are checked to be the ones its redaction put
there; each entry there must agree with the chained redaction record it names.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from pathlib import Path
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    chain_heads,
    chain_redactions,
    stored_events,
)
from healthledger.adapters.persistence.engine.statements import CompiledStatement, run
from healthledger.adapters.persistence.keys.head_anchors import (
    AnchoredHead,
    HeadAnchors,
    anchor_line,
)
from healthledger.adapters.persistence.keys.signing_key import load_signing_key
from healthledger.domain.audited import topic_of
from healthledger.domain.ledger import Clock
from healthledger.domain.redaction import RedactedRecord, Redaction
from sqlalchemy import (
    Connection,
    Integer,
    Table,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
)
from sqlalchemy import exc as sa_exc

LINK_DOMAIN = b"hl-chain-v1"
HEAD_DOMAIN = b"hl-chain-head-v1"
HASH_BYTES = 32
# The hash "before" position 1.
GENESIS = bytes(HASH_BYTES)
# The failures of a write's checks on PostgreSQL (`ChainWriter.head_is`, `.in_order`).
HEAD_MOVED = "the chain's head moved"
OUT_OF_ORDER = "the event rows were numbered out of their order"
# The two columns the chain adds to an event row, in the order the recorder binds them.
CHAIN_COLUMNS = ("chain_position", "chain_hash")
# Rows per page (one query each) while a verification walks the log.
VERIFY_PAGE = 5000
# Streams per IN (...) when links are read for a set of streams.
STREAMS_PER_QUERY = 500

_LINK = struct.Struct(f">{len(LINK_DOMAIN)}s32sQ16sQ32sq32s")
_HEAD_MESSAGE = struct.Struct(f">{len(HEAD_DOMAIN)}sQ32sq")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)

# What `verify` calls a bad record.
CHANGED = "changed"
REMOVED = "removed"
INSERTED = "inserted"
REORDERED = "reordered"
# A signed head whose signature does not verify with the service's key.
BAD_HEAD = "bad signed head"
# The log compared with the heads anchored outside the database (`verify --anchors`): it
# ends before a head it once signed, or its hash at a signed position is not the signed one.
SHORTER = "shorter than a signed head"
DIFFERS = "differs from a signed head"


# -- the link hash (hl-chain-v1) ------------------------------------------------------------


def state_digest(state: bytes) -> bytes:
    """SHA-256 of an event's stored state: what the link covers, so that a report can
    carry it instead of the state."""
    return hashlib.sha256(state).digest()


@functools.lru_cache(maxsize=4096)
def topic_digest(topic: str) -> bytes:
    """SHA-256 of a topic (UTF-8). Topics are few (one per event class and version):
    each is hashed once per process."""
    return hashlib.sha256(topic.encode()).digest()


def timestamp_micros(timestamp: datetime) -> int:
    """Microseconds since the Unix epoch of an aware instant (a naive one is read as
    UTC, as the SQLite column holds it)."""
    if timestamp.tzinfo is None:
        return (timestamp - _NAIVE_EPOCH) // _MICROSECOND
    return (timestamp - _EPOCH) // _MICROSECOND


def link_of(
    prev_hash: bytes,
    position: int,
    originator_id: bytes,
    originator_version: int,
    topic_hash: bytes,
    micros: int,
    state_hash: bytes,
) -> bytes:
    """The link hash from its parts already in bytes (the hot loops' form)."""
    return hashlib.sha256(
        _LINK.pack(
            LINK_DOMAIN,
            prev_hash,
            position,
            originator_id,
            originator_version,
            topic_hash,
            micros,
            state_hash,
        )
    ).digest()


def link_hash(
    prev_hash: bytes,
    position: int,
    originator_id: UUID,
    originator_version: int,
    topic: str,
    timestamp: datetime,
    state_digest: bytes,
) -> bytes:
    """The hl-chain-v1 link hash of a record (see the module's docstring)."""
    if len(prev_hash) != HASH_BYTES or len(state_digest) != HASH_BYTES:
        raise ValueError("prev_hash and state_digest are 32 bytes each")
    if position < 1:
        raise ValueError("chain positions start at 1")
    return link_of(
        prev_hash,
        position,
        originator_id.bytes,
        originator_version,
        topic_digest(topic),
        timestamp_micros(timestamp),
        state_digest,
    )


def head_message(position: int, chain_hash: bytes, signed_at: datetime) -> bytes:
    """What a signed head's signature covers (hl-chain-head-v1)."""
    return _HEAD_MESSAGE.pack(HEAD_DOMAIN, position, chain_hash, timestamp_micros(signed_at))


def key_id_of(public_key: bytes) -> str:
    """A public key's short name: the first 16 hex digits of SHA-256 of its raw bytes."""
    return hashlib.sha256(public_key).hexdigest()[:16]


# -- redactions (ADR 0028) ------------------------------------------------------------------

# The topic of a redaction record.
REDACTION_TOPIC = topic_of(Redaction.Created)


@dataclass(frozen=True)
class RedactionEntry:
    """A redacted record's entry in `chain_redactions`: what its link covers (its original
    topic and state digest), what it holds now, and where its redaction record is."""

    position: int
    original_topic: str
    original_digest: bytes
    redacted_topic: str
    redacted_digest: bytes
    redaction_position: int

    def as_recorded(self) -> RedactedRecord:
        """The entry as a redaction record names it."""
        return RedactedRecord(
            position=self.position,
            original_topic=self.original_topic,
            original_digest=self.original_digest.hex(),
            redacted_topic=self.redacted_topic,
            redacted_digest=self.redacted_digest.hex(),
        )


def redaction_entries(
    conn: Connection, positions: Sequence[int] | None = None
) -> dict[int, RedactionEntry]:
    """The entries of `chain_redactions` by redacted position: all of them, or those of
    the given positions."""
    c = chain_redactions.c
    query = select(chain_redactions)
    found: dict[int, RedactionEntry] = {}
    chunks: list[Sequence[int] | None] = [None]
    if positions is not None:
        unique = list(dict.fromkeys(positions))
        chunks = [
            unique[i : i + STREAMS_PER_QUERY] for i in range(0, len(unique), STREAMS_PER_QUERY)
        ]
    for chunk in chunks:
        chosen = query if chunk is None else query.where(c.position.in_(chunk))
        for row in conn.execute(chosen):
            found[int(row.position)] = RedactionEntry(
                position=int(row.position),
                original_topic=row.original_topic,
                original_digest=bytes(row.original_digest),
                redacted_topic=row.redacted_topic,
                redacted_digest=bytes(row.redacted_digest),
                redaction_position=int(row.redaction_position),
            )
    return found


def redacted_records(state: bytes) -> list[RedactedRecord] | None:
    """The records a redaction record's stored state names (None: it names none
    readably, which only a forged record does)."""
    try:
        fields = json.loads(state)
        return [RedactedRecord.of_fields(dict(record)) for record in fields["records"]]
    except (ValueError, TypeError, KeyError):
        return None


def claim_problem(
    redaction_position: int,
    state: bytes,
    entries: dict[int, RedactionEntry],
    named: dict[str, Any],
) -> tuple[ChainProblem | None, list[int]]:
    """Whether the redaction record at `redaction_position` (its link already checked)
    agrees with the index: the first problem (or None), and the positions it names."""
    records = redacted_records(state)
    if records is None:
        return (
            ChainProblem(
                CHANGED,
                redaction_position,
                "the redaction record names no records readably",
                **named,
            ),
            [],
        )
    for record in records:
        entry = entries.get(record.position)
        if (
            entry is None
            or entry.redaction_position != redaction_position
            or entry.as_recorded() != record
            or record.position >= redaction_position
        ):
            return (
                ChainProblem(
                    CHANGED,
                    record.position,
                    f"the redaction record at position {redaction_position} names this "
                    "record, and chain_redactions does not agree with it: the redaction "
                    "index was changed",
                ),
                [],
            )
    return None, [record.position for record in records]


def unexplained(entry: RedactionEntry) -> ChainProblem:
    """A redacted record whose redaction record does not name it."""
    return ChainProblem(
        CHANGED,
        entry.position,
        f"chain_redactions says the record at position {entry.redaction_position} "
        "redacted this one, and no redaction record there names it: the record or the "
        "redaction index was changed",
    )


def redacted_digest(entry: RedactionEntry, topic: str, state: bytes) -> bool:
    """Whether a redacted record holds what its redaction put there."""
    return topic == entry.redacted_topic and hashlib.sha256(state).digest() == entry.redacted_digest


# -- what the chain hands out ---------------------------------------------------------------


@dataclass(frozen=True)
class SignedHead:
    position: int
    chain_hash: bytes
    signed_at: datetime
    signature: bytes
    # key_id_of(public_key)
    key_id: str
    # The raw 32-byte Ed25519 public key that signed it.
    public_key: bytes


@dataclass(frozen=True)
class ChainLink:
    """One event's place in the chain: its fields as the link covers them."""

    notification_id: int
    position: int
    originator_id: UUID
    version: int
    topic: str
    timestamp: datetime
    state_digest: bytes
    # The stored hash of the record at position - 1 (GENESIS before position 1; empty if
    # no record holds that position).
    prev_hash: bytes
    hash: bytes


@dataclass(frozen=True)
class ChainProblem:
    """The first bad record a verification found."""

    # CHANGED, REMOVED, INSERTED, REORDERED or BAD_HEAD.
    kind: str
    # Where in the chain: the record's position (for REMOVED, the first missing one; for
    # a record without a position, the position it stands in).
    position: int
    detail: str
    # The record named (for REMOVED: the record after the gap; None if there is none).
    notification_id: int | None = None
    originator_id: UUID | None = None
    originator_version: int | None = None


@dataclass(frozen=True)
class VerifyResult:
    records_checked: int
    # The position the walk started at (1, or --since) and the last one it checked.
    first_position: int
    last_position: int | None
    signed_heads_checked: int
    problem: ChainProblem | None
    # The heads of the head file compared with the log (None: no head file was given).
    anchored_heads_checked: int | None = None
    # The redacted records walked, each checked against its redaction (ADR 0028).
    redacted_records_checked: int = 0

    @property
    def ok(self) -> bool:
        return self.problem is None


class EmptyChain(LookupError):
    """The log holds no chained event yet: there is no head to sign."""


def verify_signed_head(public_key: bytes, head: SignedHead) -> bool:
    """Whether `head`'s signature is `public_key`'s over its position, hash and time."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            head.signature, head_message(head.position, head.chain_hash, head.signed_at)
        )
    except (InvalidSignature, ValueError):
        return False
    return True


# -- writing: the recorder links new rows, in their transaction ---------------------------


class ChainWriter:
    """Links a transaction's new event rows onto the chain of `table`.

    It reads the head (the highest position and its hash) in the transaction that
    inserts, under the writers' serialisation (SQLite's one writer; on PostgreSQL the
    recorder's `LOCK TABLE ... IN EXCLUSIVE MODE`, taken first), so no two transactions
    link onto the same head, and notification order is chain order."""

    def __init__(self, table: Table = stored_events) -> None:
        c = table.c
        # The unique index on chain_position answers it (a row without a position, which
        # only tampering leaves, is not the head).
        self.head_query = CompiledStatement(
            select(c.chain_position, c.chain_hash)
            .where(c.chain_position.is_not(None))
            .order_by(c.chain_position.desc())
            .limit(1)
        )

        # PostgreSQL: the checks of a write that links rows onto a head it did not read
        # (the recorder's guess), run with its statements (`healthledger_check`, revision
        # 0014: a failure aborts the transaction, its COMMIT too), so that the write needs
        # no answer before its COMMIT (ADR 0025). That the head is `position`, `hash`
        # (position 0: no row yet)...
        guessed = bindparam("position", type_=c.chain_position.type)
        # The highest position, read from the unique index's end (an EXISTS of a
        # position above was planned as a scan of the whole table).
        highest = func.coalesce(select(func.max(c.chain_position)).scalar_subquery(), 0)
        at = exists().where(
            c.chain_position == guessed,
            c.chain_hash == bindparam("hash", type_=c.chain_hash.type),
        )
        self.head_is = CompiledStatement(
            select(
                func.healthledger_check(
                    and_(highest == guessed, or_(guessed == 0, at)), literal(HEAD_MOVED)
                )
            )
        )
        # ... and that the rows from `first` to `last` were numbered in chain order.
        a, b = table.alias("a"), table.alias("b")
        out_of_order = exists().where(
            b.c.chain_position == a.c.chain_position + 1,
            a.c.chain_position >= bindparam("first", type_=c.chain_position.type),
            a.c.chain_position < bindparam("last", type_=c.chain_position.type),
            b.c.notification_id < a.c.notification_id,
        )
        self.in_order = CompiledStatement(
            select(func.healthledger_check(~out_of_order, literal(OUT_OF_ORDER)))
        )

    def head(self, conn: Connection) -> tuple[int, bytes]:
        return self.head_of(self.head_query.rows(conn, {}))

    @staticmethod
    def head_of(rows: Sequence[tuple[Any, ...]]) -> tuple[int, bytes]:
        """The head in `head_query`'s rows (none: the genesis, before any row)."""
        if not rows:
            return 0, GENESIS
        position, chain_hash = rows[0]
        return int(position), bytes(chain_hash)

    def links(
        self,
        conn: Connection,
        rows: Sequence[tuple[UUID, int, str, bytes, datetime]],
        head: tuple[int, bytes] | None = None,
    ) -> list[tuple[int, bytes]]:
        """(position, hash) of each of `rows` (originator_id, version, topic, state,
        timestamp), in order, after the current head (read, unless the caller knows it
        is `head`)."""
        position, prev = self.head(conn) if head is None else head
        linked = []
        for originator_id, version, topic, state, timestamp in rows:
            position += 1
            prev = link_of(
                prev,
                position,
                originator_id.bytes,
                version,
                topic_digest(topic),
                timestamp_micros(timestamp),
                hashlib.sha256(state).digest(),
            )
            linked.append((position, prev))
        return linked


# -- the service's chain -----------------------------------------------------------------------


def open_chain(
    db: Database,
    key_file: Path,
    clock: Clock,
    *,
    allow_beside_database: bool = False,
    anchor_file: Path | None = None,
) -> Chain:
    """The service's chain, with its signing key from `key_file`: made there only while
    no head is signed yet (a new key would disown the signed ones). Each head it signs is
    appended to `anchor_file` too (`keys/head_anchors.py`)."""
    with db.read() as conn:
        signed = conn.execute(select(chain_heads.c.position).limit(1)).first() is not None
    database_directory = None if db.sqlite_file is None else db.sqlite_file.absolute().parent
    key = load_signing_key(
        key_file,
        create=not signed,
        database_directory=database_directory,
        allow_beside_database=allow_beside_database,
    )
    anchors = None
    if anchor_file is not None:
        anchors = HeadAnchors(
            anchor_file,
            database_directory=database_directory,
            allow_beside_database=allow_beside_database,
        )
    return Chain(db, key, clock, anchors)


class Chain:
    """The chain of the service's log: signed heads, links of streams, verification."""

    def __init__(
        self,
        db: Database,
        signing_key: Ed25519PrivateKey,
        clock: Clock,
        anchors: HeadAnchors | None = None,
    ) -> None:
        self.db = db
        self.signing_key = signing_key
        self.clock = clock
        # Where each signed head is anchored outside the database (None: nowhere).
        self.anchors = anchors
        self.raw_public_key = signing_key.public_key().public_bytes_raw()
        self.key_id = key_id_of(self.raw_public_key)
        self.writer = ChainWriter(stored_events)

    def public_key(self) -> bytes:
        """The service's raw 32-byte Ed25519 public key."""
        return self.raw_public_key

    def sign(self, message: bytes) -> bytes:
        """The service key's Ed25519 signature of `message` (a deletion report's)."""
        return self.signing_key.sign(message)

    # -- signed heads ------------------------------------------------------------------------

    def sign_head(self, at: int | None = None) -> SignedHead:
        """Sign the chain's current head now and record it; the recorded one if that head
        is signed already. EmptyChain if the log holds no chained event. With `at`, sign
        the record at that position instead (one a caller has just checked: a deletion
        report signs no record it did not walk)."""
        with self.db.read() as conn:
            if at is None:
                position, chain_hash = self.writer.head(conn)
            else:
                stored = conn.execute(
                    select(stored_events.c.chain_hash).where(stored_events.c.chain_position == at)
                ).scalar()
                if stored is None:
                    raise EmptyChain(f"no record holds position {at}: there is no head to sign")
                position, chain_hash = at, bytes(stored)
        if position == 0:
            raise EmptyChain("the log holds no event yet: there is no head to sign")
        existing = self.head_at(position)
        if existing is not None:
            return existing
        signed_at = self.clock().astimezone(UTC)
        head = SignedHead(
            position=position,
            chain_hash=chain_hash,
            signed_at=signed_at,
            signature=self.signing_key.sign(head_message(position, chain_hash, signed_at)),
            key_id=self.key_id,
            public_key=self.raw_public_key,
        )
        if self.anchors is not None:
            # Anchored before it is recorded: a head in the database is in the file too.
            # (A crash between leaves a head in the file only, as true as any other.)
            self.anchors.append(
                anchor_line(
                    head.position,
                    head.chain_hash,
                    head.signed_at,
                    head.signature,
                    head.key_id,
                    head.public_key,
                )
            )
        try:
            with self.db.write() as conn:
                conn.execute(
                    insert(chain_heads).values(
                        position=head.position,
                        chain_hash=head.chain_hash,
                        signed_at=head.signed_at,
                        signature=head.signature,
                        key_id=head.key_id,
                        public_key=head.public_key,
                    )
                )
        except sa_exc.IntegrityError:
            # Another process signed the same head meanwhile: theirs stands.
            recorded = self.head_at(position)
            if recorded is None:
                raise
            return recorded
        return head

    def sign_moved_head(self) -> int:
        """The scheduler's job: sign the head if it moved since the last signed one (1),
        else do nothing (0)."""
        with self.db.read() as conn:
            position, _ = self.writer.head(conn)
            last = conn.execute(
                select(chain_heads.c.position).order_by(chain_heads.c.position.desc()).limit(1)
            ).scalar()
        if position == 0 or (last is not None and last >= position):
            return 0
        self.sign_head()
        return 1

    def head_at(self, position: int) -> SignedHead | None:
        with self.db.read() as conn:
            row = conn.execute(
                select(chain_heads).where(chain_heads.c.position == position)
            ).first()
        return None if row is None else _signed_head(row)

    def covering_head(self, position: int) -> SignedHead | None:
        """The earliest signed head at or after `position`: the one that proves the
        record there."""
        with self.db.read() as conn:
            row = conn.execute(
                select(chain_heads)
                .where(chain_heads.c.position >= position)
                .order_by(chain_heads.c.position)
                .limit(1)
            ).first()
        return None if row is None else _signed_head(row)

    def signed_heads(self, first: int | None = None, last: int | None = None) -> list[SignedHead]:
        """The signed heads by position (only those from `first` to `last`, if given)."""
        query = select(chain_heads).order_by(chain_heads.c.position)
        if first is not None:
            query = query.where(chain_heads.c.position >= first)
        if last is not None:
            query = query.where(chain_heads.c.position <= last)
        with self.db.read() as conn:
            rows = conn.execute(query).all()
        return [_signed_head(row) for row in rows]

    # -- links ---------------------------------------------------------------------------------

    def links(self, originator_ids: Sequence[UUID]) -> list[ChainLink]:
        """Every chained event of the given streams, in notification order, with the
        stored hash of the record before each (read from the row at position - 1). A
        redacted record's link is given as its hash covers it: its original topic and
        state digest (ADR 0028)."""
        e = stored_events.alias("e")
        before = stored_events.alias("before")
        found: list[ChainLink] = []
        ids = list(dict.fromkeys(originator_ids))
        with self.db.read() as conn:
            for start in range(0, len(ids), STREAMS_PER_QUERY):
                query = (
                    select(
                        e.c.notification_id,
                        e.c.chain_position,
                        e.c.originator_id,
                        e.c.originator_version,
                        e.c.topic,
                        e.c.timestamp,
                        e.c.state,
                        e.c.chain_hash,
                        before.c.chain_hash,
                    )
                    .select_from(
                        e.outerjoin(before, before.c.chain_position == e.c.chain_position - 1)
                    )
                    .where(
                        e.c.originator_id.in_(ids[start : start + STREAMS_PER_QUERY]),
                        e.c.chain_position.is_not(None),
                    )
                )
                for row in conn.execute(query):
                    position = int(row[1])
                    prev = GENESIS if position == 1 else bytes(row[8] or b"")
                    found.append(
                        ChainLink(
                            notification_id=row[0],
                            position=position,
                            originator_id=row[2],
                            version=row[3],
                            topic=row[4],
                            timestamp=row[5],
                            state_digest=state_digest(bytes(row[6])),
                            prev_hash=prev,
                            hash=bytes(row[7]),
                        )
                    )
            entries = redaction_entries(conn, [link.position for link in found])
        if entries:
            found = [
                link
                if link.position not in entries
                else dataclasses.replace(
                    link,
                    topic=entries[link.position].original_topic,
                    state_digest=entries[link.position].original_digest,
                )
                for link in found
            ]
        found.sort(key=attrgetter("notification_id"))
        return found

    # -- verification --------------------------------------------------------------------------

    def verify(
        self, since: int | None = None, anchored: Sequence[AnchoredHead] | None = None
    ) -> VerifyResult:
        """Walk the chain in notification order, from the start or from position `since`
        (trusting the stored hash of the record before it), recomputing every link; then
        check every signed head (its signature by the service's key, and its hash against
        the chain's at its position), and the heads `anchored` outside the database if
        given (`anchor_problem`). The result names the first bad record, if any."""
        walk = _Walk(self.db, since)
        problem = walk.run()
        heads = self.signed_heads()
        found = [self.head_problem(heads)]
        if anchored is not None:
            found.append(self.anchor_problem(anchored))
        for other in found:
            if other is not None and (problem is None or other.position < problem.position):
                problem = other
        return VerifyResult(
            records_checked=walk.checked,
            first_position=walk.first_position,
            last_position=walk.last_position,
            signed_heads_checked=len(heads),
            problem=problem,
            anchored_heads_checked=None if anchored is None else len(anchored),
            redacted_records_checked=walk.redacted,
        )

    def anchor_problem(self, anchored: Sequence[AnchoredHead]) -> ChainProblem | None:
        """The first head (by position) of those anchored outside the database that the
        log does not hold: a head not signed by the service's key (the head file was
        changed), a head after the log's end (SHORTER: the log was cut back, its newer
        heads deleted), or a signed position whose hash is not the signed one (DIFFERS: the
        log was rewritten and its hashes recomputed, the heads after the change deleted).
        The heads recorded in the database are not trusted for it."""
        if not anchored:
            return None
        heads = sorted(anchored, key=attrgetter("position", "line"))
        with self.db.read() as conn:
            end, _ = self.writer.head(conn)
        stored = self._records_at([head.position for head in heads])
        for head in heads:
            where = f"the head signed at {head.signed_at.isoformat()} (line {head.line})"
            signed = SignedHead(
                position=head.position,
                chain_hash=head.chain_hash,
                signed_at=head.signed_at,
                signature=head.signature,
                key_id=head.key_id,
                public_key=head.public_key,
            )
            if head.public_key != self.raw_public_key or not verify_signed_head(
                self.raw_public_key, signed
            ):
                return ChainProblem(
                    BAD_HEAD,
                    head.position,
                    f"{where} is not the service's signature (key id {self.key_id}) of its "
                    "position, hash and time: the head file was changed, or is another "
                    "service's",
                )
            record = stored.get(head.position)
            if record is None and head.position > end:
                return ChainProblem(
                    SHORTER,
                    head.position,
                    f"the log ends at position {end}, but {where} covers position "
                    f"{head.position}: the log was cut back and its newer signed heads deleted",
                )
            if record is None:
                return ChainProblem(
                    REMOVED,
                    head.position,
                    f"no record holds position {head.position}, which {where} covers: "
                    "records were removed from the log",
                )
            if record[0] != head.chain_hash:
                return ChainProblem(
                    DIFFERS,
                    head.position,
                    f"the chain's hash at position {head.position} is {record[0].hex()}, "
                    f"{where} signed {head.chain_hash.hex()}: a record at or before it was "
                    "changed, removed or inserted and the hashes after it recomputed",
                    notification_id=record[1],
                    originator_id=record[2],
                    originator_version=record[3],
                )
        return None

    def _records_at(self, positions: Sequence[int]) -> dict[int, tuple[bytes, int, UUID, int]]:
        """(chain_hash, notification_id, originator_id, version) of the records at the
        given positions (a position no record holds is left out)."""
        stored: dict[int, tuple[bytes, int, UUID, int]] = {}
        unique = list(dict.fromkeys(positions))
        c = stored_events.c
        with self.db.read() as conn:
            for start in range(0, len(unique), STREAMS_PER_QUERY):
                rows = conn.execute(
                    select(
                        c.chain_position,
                        c.chain_hash,
                        c.notification_id,
                        c.originator_id,
                        c.originator_version,
                    ).where(c.chain_position.in_(unique[start : start + STREAMS_PER_QUERY]))
                )
                for position, chain_hash, notification_id, originator_id, version in rows:
                    stored[position] = (bytes(chain_hash), notification_id, originator_id, version)
        return stored

    def check_span(self, first: int, last: int) -> ChainProblem | None:
        """The first bad record from position `first` to `last`, or None: every record
        there recomputes and links (the stored hash of the record before `first` is
        trusted, as `verify --since` does), none is missing, and every signed head in the
        span is the service's signature of the chain's hash at its position. What a
        deletion report checks over the records it cites and the head that covers them
        before it signs anything: a walk of the span, not of the whole log."""
        if first < 1 or last < first:
            raise ValueError("a span runs from position 1 or later to a position after it")
        walk = _Walk(self.db, first, until=last)
        problem = walk.run()
        if problem is None:
            problem = self.redactions_after(walk)
        if problem is None and (walk.last_position or first - 1) < last:
            missing = (walk.last_position or first - 1) + 1
            problem = ChainProblem(
                REMOVED,
                missing,
                f"no record holds position {missing}, which the span up to {last} needs: "
                "records were removed from the log",
            )
        head_problem = self.head_problem(self.signed_heads(first, last))
        if head_problem is not None and (
            problem is None or head_problem.position < problem.position
        ):
            problem = head_problem
        return problem

    def redactions_after(self, walk: _Walk) -> ChainProblem | None:
        """The redaction records after a span that explain redacted records in it, each
        checked on its own: its link from the stored hash of the record before it, and
        its agreement with `chain_redactions`."""
        last = walk.last_position or 0
        due = sorted(
            {
                entry.redaction_position
                for entry in walk.redactions.values()
                if walk.first_position <= entry.position <= last and entry.redaction_position > last
            }
        )
        if not due:
            return None
        with self.db.read() as conn:
            for position in due:
                c = stored_events.c
                rows = conn.execute(
                    select(
                        c.notification_id,
                        c.chain_position,
                        c.chain_hash,
                        c.originator_id,
                        c.originator_version,
                        c.topic,
                        c.timestamp,
                        c.state,
                    )
                    .where(c.chain_position.in_([position - 1, position]))
                    .order_by(c.chain_position)
                ).all()
                first_named = min(
                    e.position for e in walk.redactions.values() if e.redaction_position == position
                )
                if not rows:
                    return ChainProblem(
                        CHANGED,
                        first_named,
                        f"its redaction record at position {position} is not in the log",
                    )
                row = rows[-1]
                if row.chain_position != position:
                    return ChainProblem(
                        CHANGED,
                        first_named,
                        f"its redaction record at position {position} is not in the log",
                    )
                if position == 1:
                    prev = GENESIS
                else:
                    prev = bytes(rows[0].chain_hash) if len(rows) == 2 else b""
                named = {
                    "notification_id": row.notification_id,
                    "originator_id": row.originator_id,
                    "originator_version": row.originator_version,
                }
                link = link_of(
                    prev,
                    position,
                    row.originator_id.bytes,
                    row.originator_version,
                    topic_digest(row.topic),
                    timestamp_micros(row.timestamp),
                    state_digest(bytes(row.state)),
                )
                if link != bytes(row.chain_hash) or row.topic != REDACTION_TOPIC:
                    return ChainProblem(
                        CHANGED,
                        position,
                        "the redaction record that explains a redacted record of the span "
                        "does not recompute, or is not a redaction record",
                        **named,
                    )
                problem, names = claim_problem(position, bytes(row.state), walk.redactions, named)
                if problem is not None:
                    return problem
                for entry in walk.redactions.values():
                    if entry.redaction_position == position and entry.position not in names:
                        return unexplained(entry)
        return None

    def head_problem(self, heads: Sequence[SignedHead]) -> ChainProblem | None:
        """The first signed head (by position) that is not the service's signature of the
        chain's hash at its position."""
        if not heads:
            return None
        stored = self._records_at([head.position for head in heads])
        for head in heads:
            record = stored.get(head.position)
            named: dict[str, Any] = {}
            if record is not None:
                named = {
                    "notification_id": record[1],
                    "originator_id": record[2],
                    "originator_version": record[3],
                }
            if head.public_key != self.raw_public_key or head.key_id != self.key_id:
                return ChainProblem(
                    BAD_HEAD,
                    head.position,
                    f"the signed head at position {head.position} names another key "
                    f"(key id {head.key_id}) than the service's ({self.key_id})",
                    **named,
                )
            if not verify_signed_head(self.raw_public_key, head):
                return ChainProblem(
                    BAD_HEAD,
                    head.position,
                    f"the signed head at position {head.position} does not verify with the "
                    "service's key: its position, hash, time or signature was changed",
                    **named,
                )
            if record is None:
                return ChainProblem(
                    REMOVED,
                    head.position,
                    f"the signed head at position {head.position} has no record at its "
                    "position: records were removed from the log",
                )
            if record[0] != head.chain_hash:
                return ChainProblem(
                    CHANGED,
                    head.position,
                    f"the chain's hash at position {head.position} is not the signed one: a "
                    "record at or before it was changed and the hashes after it recomputed",
                    **named,
                )
        return None


class SigningTally:
    """The events committed in this process since its commits last woke the signing job:
    `committed` says when they reach `every` (0: never), and starts counting again. The
    job then signs the whole log's head, so the unsigned tail stays under `every` events
    per process writing (and what commits while the job signs)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.count = 0
        self.lock = threading.Lock()

    def committed(self, events: Sequence[object]) -> bool:
        if self.every <= 0:
            return False
        with self.lock:
            self.count += len(events)
            if self.count < self.every:
                return False
            self.count = 0
            return True


def _signed_head(row: Any) -> SignedHead:
    return SignedHead(
        position=row.position,
        chain_hash=bytes(row.chain_hash),
        signed_at=row.signed_at,
        signature=bytes(row.signature),
        key_id=row.key_id,
        public_key=bytes(row.public_key),
    )


# -- the walk ----------------------------------------------------------------------------------


def _sqlite_micros(text: str) -> int:
    # SQLite's DATETIME text of a UTC instant ("2026-03-01 12:00:00.000000").
    return (datetime.fromisoformat(text) - _NAIVE_EPOCH) // _MICROSECOND


def _uuid_bytes_of_hex(text: str) -> bytes:
    # A Uuid on SQLite is stored as its 32 hex digits.
    return bytes.fromhex(text)


# One page of the log for the walk: every column the link covers, and the chain's.
_WALK_PAGE = CompiledStatement(
    select(
        stored_events.c.notification_id,
        stored_events.c.chain_position,
        stored_events.c.chain_hash,
        stored_events.c.originator_id,
        stored_events.c.originator_version,
        stored_events.c.topic,
        stored_events.c.timestamp,
        stored_events.c.state,
    )
    .where(stored_events.c.notification_id > bindparam("after"))
    .order_by(stored_events.c.notification_id)
    .limit(bindparam("page", type_=Integer))
)


def log_rows(conn: Connection, after: int = 0, page: int = VERIFY_PAGE) -> Iterator[Any]:
    """Every event row after notification id `after`, in notification order, a page (one
    query on the primary key) at a time: (notification_id, chain_position, chain_hash,
    originator_id, originator_version, topic, timestamp, state), each value as the driver
    gives it (SQLite: the id's hex and the time's text; PostgreSQL: uuid, timestamptz).

    Run on the DBAPI cursor (statements.py, ADR 0014): a verification reads every row
    of the log, and SQLAlchemy's result rows and per-value processing would cost more
    than the hashing (measured in bench/audit.py)."""
    compiled = _WALK_PAGE.compiled(conn.dialect)
    while True:
        cursor = run(conn, compiled.sql, compiled.parameters({"after": after, "page": page}))
        try:
            rows = cursor.fetchall()
        finally:
            cursor.close()
        if not rows:
            return
        yield from rows
        after = rows[-1][0]


class _Walk:
    """One pass over the log in notification order, stopping at the first bad record.

    The identifier and the time are converted here from the driver's values (see
    `log_rows`): this loop runs a million times for a million events."""

    def __init__(self, db: Database, since: int | None, until: int | None = None) -> None:
        self.db = db
        self.since = since
        # The last position walked (None: to the end of the log).
        self.until = until
        self.checked = 0
        self.first_position = since if since is not None and since > 1 else 1
        self.last_position: int | None = None
        # chain_redactions, read with the first page (ADR 0028), and the redacted
        # positions the redaction records walked named.
        self.redactions: dict[int, RedactionEntry] = {}
        self.confirmed: set[int] = set()
        self.redacted = 0
        if db.is_sqlite:
            self.uuid_bytes: Any = _uuid_bytes_of_hex
            self.micros: Any = _sqlite_micros
        else:
            self.uuid_bytes = attrgetter("bytes")
            self.micros = timestamp_micros

    def start(self, conn: Connection) -> tuple[int, bytes] | ChainProblem:
        """Where the walk starts: after the record before `since` (whose stored hash it
        trusts), or at the start."""
        if self.first_position == 1:
            return 0, GENESIS
        c = stored_events.c
        before = self.first_position - 1
        row = conn.execute(
            select(c.notification_id, c.chain_hash).where(c.chain_position == before)
        ).first()
        if row is None:
            return ChainProblem(
                REMOVED,
                before,
                f"no record holds position {before}, the one before --since {self.first_position}",
            )
        return row.notification_id, bytes(row.chain_hash)

    def run(self) -> ChainProblem | None:
        with self.db.read() as conn:
            started = self.start(conn)
            if isinstance(started, ChainProblem):
                return started
            self.redactions = redactions = redaction_entries(conn)
            problem = self.walk(conn, started, redactions)
        if problem is None:
            problem = self.unconfirmed()
        return problem

    def unconfirmed(self) -> ChainProblem | None:
        """The first redacted record whose redaction record, walked, did not name it."""
        last = self.last_position or 0
        for position in sorted(self.redactions):
            entry = self.redactions[position]
            if position in self.confirmed or entry.redaction_position < self.first_position:
                continue
            if entry.redaction_position <= last or self.until is None:
                return unexplained(entry)
        return None

    def walk(
        self, conn: Connection, started: tuple[int, bytes], redactions: dict[int, RedactionEntry]
    ) -> ChainProblem | None:
        after, prev = started
        expected = self.first_position
        before_prev: bytes | None = None
        previous: Any = None
        uuid_bytes, micros, sha256 = self.uuid_bytes, self.micros, hashlib.sha256
        digests = topic_digest
        until = self.until
        for row in log_rows(conn, after):
            if until is not None and expected > until:
                break
            _, position, stored, originator_id, version, topic, at, state = row
            if position != expected:
                return self.misplaced(conn, row, expected)
            entry = redactions.get(position) if redactions else None
            if entry is None:
                topic_hash, state_hash = digests(topic), sha256(state).digest()
            elif redacted_digest(entry, topic, state):
                topic_hash, state_hash = digests(entry.original_topic), entry.original_digest
                self.redacted += 1
            else:
                return ChainProblem(
                    CHANGED,
                    position,
                    "this redacted record does not hold what its redaction (the record "
                    f"at position {entry.redaction_position}) put there: it was changed",
                    **self.named(row),
                )
            link = sha256(
                _LINK.pack(
                    LINK_DOMAIN,
                    prev,
                    position,
                    uuid_bytes(originator_id),
                    version,
                    topic_hash,
                    micros(at),
                    state_hash,
                )
            ).digest()
            if link != stored:
                return self.mismatched(row, before_prev, previous)
            if topic == REDACTION_TOPIC:
                problem, names = claim_problem(position, bytes(state), redactions, self.named(row))
                if problem is not None:
                    return problem
                self.confirmed.update(names)
            before_prev, prev, previous = prev, link, row
            self.last_position = position
            self.checked += 1
            expected += 1
        return None

    # -- naming what is wrong ------------------------------------------------------------

    def named(self, row: Any) -> dict[str, Any]:
        # On SQLite the walk reads the id's hex text.
        originator_id = UUID(row[3]) if isinstance(row[3], str) else row[3]
        return {
            "notification_id": row[0],
            "originator_id": originator_id,
            "originator_version": row[4],
        }

    def misplaced(self, conn: Connection, row: Any, expected: int) -> ChainProblem:
        """A record whose position is not the next one."""
        position = row[1]
        if position is None:
            return ChainProblem(
                INSERTED,
                expected,
                f"a record without a chain position stands where position {expected} is "
                "due: it was not written by the service",
                **self.named(row),
            )
        if position < expected:
            return ChainProblem(
                INSERTED,
                expected,
                f"the record claims position {position}, which an earlier record holds: "
                "it was inserted",
                **self.named(row),
            )
        c = stored_events.c
        later = conn.execute(select(c.notification_id).where(c.chain_position == expected)).scalar()
        if later is not None:
            return ChainProblem(
                REORDERED,
                expected,
                f"position {expected} is held by a later record (notification id {later}) "
                f"and this record claims {position}: records were moved out of the chain's "
                "order",
                **self.named(row),
            )
        missing = (
            f"position {expected} is missing"
            if position == expected + 1
            else f"positions {expected} to {position - 1} are missing"
        )
        return ChainProblem(
            REMOVED,
            expected,
            f"{missing}: removed before this record (position {position})",
            **self.named(row),
        )

    def mismatched(self, row: Any, before_prev: bytes | None, previous: Any) -> ChainProblem:
        """A record at its due position whose hash does not recompute."""
        position = row[1]
        entry = self.redactions.get(position)
        topic, digest = (
            (topic_digest(row[5]), state_digest(row[7]))
            if entry is None
            else (topic_digest(entry.original_topic), entry.original_digest)
        )
        fields = (self.uuid_bytes(row[3]), row[4], topic, self.micros(row[6]), digest)
        # Would it link onto the record before the previous one, one position earlier?
        # Then the previous record was slipped in and the positions after it shifted.
        if (
            before_prev is not None
            and previous is not None
            and link_of(before_prev, position - 1, *fields) == row[2]
        ):
            return ChainProblem(
                INSERTED,
                position - 1,
                f"the record at position {position - 1} was inserted: the record after "
                f"it was chained to the one before it, at position {position - 1}",
                **self.named(previous),
            )
        return ChainProblem(
            CHANGED,
            position,
            "its hash does not recompute from its fields and the previous record's hash: "
            "this record was changed (or the previous one was, with its hash recomputed)",
            **self.named(row),
        )


def describe(problem: ChainProblem) -> str:
    """The problem in one line: what kind, where, which record, why."""
    record = ""
    if problem.notification_id is not None:
        record = (
            f" (notification id {problem.notification_id}, stream {problem.originator_id}, "
            f"version {problem.originator_version})"
        )
    return f"{problem.kind} at position {problem.position}{record}: {problem.detail}"
