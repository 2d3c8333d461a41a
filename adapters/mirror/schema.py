"""The webhook receiver's tables, apart from the service's: a customer creates them in its
own database (SQLite or PostgreSQL, one SQLAlchemy URL), possibly beside other tables, so
every name starts with `mirror_` or says what it is (`received_webhooks`).

The mirror's event log has the service log's columns (`LedgerRecorder` writes both), under
its own names, so the two never mix even in one database (the tests put both in one).
"""

from __future__ import annotations

from healthledger.adapters.eventstore.recorder import EventTables
from healthledger.adapters.persistence.schema import UTCDateTime
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

MIRROR_TABLES = EventTables(
    events=mirror_stored_events, snapshots=mirror_snapshots, tracking=mirror_tracking
)
