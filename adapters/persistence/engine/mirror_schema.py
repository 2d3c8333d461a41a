"""The webhook receiver's tables, apart from the service's: a customer creates them in its
own database (SQLite or PostgreSQL, one SQLAlchemy URL), possibly beside other tables, so
every name starts with `mirror_` or says what it is (`received_webhooks`).

The mirror's event log has the service log's columns (`LedgerRecorder` writes both), under
its own names, so the two never mix even in one database (the tests put both in one). So
does its key store (`KeyStore` reads and writes both): the key of each mirrored user that
seals its identifiers, and the rotations of the receiver's own master key.
"""

from __future__ import annotations

from healthledger.adapters.persistence.engine.schema import UTCDateTime
from healthledger.adapters.persistence.eventstore.recorder import EventTables
from healthledger.adapters.persistence.keys.key_store import KeyTables
from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)

mirror_metadata = MetaData()

mirror_stored_events = Table(
    "mirror_stored_events",
    mirror_metadata,
    Column(
        "notification_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("originator_id", Uuid, nullable=False),
    Column("originator_version", Integer, nullable=False),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("timestamp", UTCDateTime, nullable=False),
    UniqueConstraint("originator_id", "originator_version", name="uq_mirror_stored_events_version"),
    Index("ix_mirror_stored_events_originator_time", "originator_id", "timestamp"),
    sqlite_autoincrement=True,
)

mirror_snapshots = Table(
    "mirror_snapshots",
    mirror_metadata,
    Column("originator_id", Uuid, primary_key=True),
    Column("originator_version", Integer, primary_key=True),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
)

mirror_tracking = Table(
    "mirror_tracking",
    mirror_metadata,
    Column("application_name", String(64), primary_key=True),
    Column("notification_id", BigInteger, primary_key=True),
)

# One row per webhook message the receiver has taken, written in the transaction of its
# effect. The primary key is the duplicate check: a second copy of a message fails to
# insert its row, and its whole transaction (events included) rolls back.
received_webhooks = Table(
    "received_webhooks",
    mirror_metadata,
    Column("message_id", String(255), primary_key=True),
    Column("event_type", String(255), nullable=False),
    Column("user_id", Uuid, nullable=False),
    # `applied` (the mirror recorded its events) or `received` (an event type the
    # receiver does not know: verified and kept out of the mirror).
    Column("outcome", String(16), nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    Index("ix_received_webhooks_user", "user_id", "received_at"),
)

# The key store of the mirror: one AES-256 key per mirrored user, wrapped by the receiver's
# master key (never the service's), which seals the user's client_user_id and provider ids in
# the mirror's events. `user.erased` deletes the row (crypto-shredding).
mirror_user_keys = Table(
    "mirror_user_keys",
    mirror_metadata,
    Column("user_id", Uuid, primary_key=True),
    Column("wrapped_key", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

# One row per rotation of the receiver's master key, as `master_key_rotations` is the
# service's.
mirror_master_key_rotations = Table(
    "mirror_master_key_rotations",
    mirror_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rotated_at", UTCDateTime, nullable=False),
    Column("keys_rewrapped", Integer, nullable=False),
    Column("master_key_id", String(16), nullable=False),
)

# The mirror derives no summary ids: no cut-over (ADR 0057).
MIRROR_KEY_TABLES = KeyTables(
    keys=mirror_user_keys, rotations=mirror_master_key_rotations, cut_over=None
)

MIRROR_TABLES = EventTables(
    events=mirror_stored_events, snapshots=mirror_snapshots, tracking=mirror_tracking
)
