"""At the service's start: the records of old event versions whose successors seal their
health facts, redacted into those successors (ADR 0028).

Revision 0016 lists them in `pending_redactions` (it cannot seal: a migration has no
master key). The start takes them in batches: each record decoded, its successor built
with the health facts sealed with the user's data key (or, for a user erased already, the
erased placeholder in their place: no key is made for someone who is gone), and the batch
redacted in one transaction (`Redactor`), which also deletes their pending rows and gives
the read models the sealed values. Interrupted, it resumes with the rows left; run by
several processes at once, a record redacted by another one meanwhile is skipped.

Old versions handled: `Order.CreatedV1` (its lab test's id, name and markers in clear).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    orders,
    pending_redactions,
    stored_events,
)
from healthledger.adapters.persistence.eventstore.redaction import (
    RedactionRaced,
    Redactor,
    Replacement,
)
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.orders import Order, OrderedTest
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from sqlalchemy import Connection, delete, select, text, update

log = logging.getLogger(__name__)

# Who redacts: the service itself, at its start.
ACTOR = "system:redaction"
# Records per redaction (one transaction and one redaction record each).
BATCH = 200
# Attempts at a batch that another process's redaction raced.
ATTEMPTS = 5
# PostgreSQL: how long the rewrite waits for transactions older than the redactions.
OLDER_SNAPSHOTS_WAIT = 30.0
# Other sessions whose snapshot or transaction is older than the transaction `xid`: of
# any database of the server (VACUUM's horizon may count sessions of other databases too,
# and a test's server holds several).
OLDER_SNAPSHOTS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
    " AND ((backend_xmin IS NOT NULL AND age(backend_xmin) >= age(CAST(:xid AS xid)))"
    " OR (backend_xid IS NOT NULL AND age(backend_xid) >= age(CAST(:xid AS xid))))"
)

# A user's sealer: seals a JSON value with the user's data key; None when the user has
# no key (erased). Never makes a key.
Sealer = Callable[[UUID], Callable[[Any], str] | None]


@dataclass(frozen=True)
class Successor:
    """A record's redacted form, and what the read models get with it."""

    replacement: Replacement
    reason: str
    # The orders row's sealed test (None: the user is erased, its row is gone).
    order_id: UUID
    sealed_lab_test: str | None


def order_successor(
    mapper: Mapper[UUID], record: StoredEvent, position: int, sealer: Sealer
) -> Successor:
    """An order's Created v1 as its v2: the test sealed (or the placeholder)."""
    old = mapper.to_domain_event(record)
    assert isinstance(old, Order.CreatedV1)
    seal = sealer(old.user_id)
    test = OrderedTest(old.lab_test_id, old.lab_test_name, tuple(old.marker_ids))
    sealed = ERASED_PLACEHOLDER if seal is None else seal(test.sealable())
    # eventsourcing's events are dataclasses its metaclass makes: their fields, which the
    # type checker cannot see, are the constructor's.
    successor: Callable[..., Order.Created] = Order.Created
    new = successor(
        originator_id=old.originator_id,
        originator_version=old.originator_version,
        timestamp=old.timestamp,
        originator_topic=old.originator_topic,
        actor=old.actor,
        request_id=old.request_id,
        user_id=old.user_id,
        team_id=old.team_id,
        environment=old.environment,
        lab_id=old.lab_id,
        collection_method=old.collection_method,
        sealed_lab_test=sealed,
        sealed_patient_details=old.sealed_patient_details,
        sealed_patient_address=old.sealed_patient_address,
        sealed_request_digest=old.sealed_request_digest,
        status=old.status,
        next_step_at=old.next_step_at,
    )
    stored = mapper.to_stored_event(new)
    return Successor(
        Replacement(position, record.topic, record.state, stored.topic, stored.state),
        REMOVED if seal is None else SEALED,
        old.originator_id,
        None if seal is None else sealed,
    )


# Per old version's topic (each declares `SUPERSEDED_BY`): what builds its successor.
SUCCESSORS = {Order.CreatedV1.TOPIC: order_successor}


def redact_old_versions(
    db: Database, redactor: Redactor, mapper: Mapper[UUID], sealer: Sealer, batch: int = BATCH
) -> int:
    """Redact every record `pending_redactions` lists; the number redacted. On an
    up-to-date database, one query that finds none."""
    ctx = CommandContext.system(ACTOR)
    redacted = 0
    raced = 0
    while True:
        with db.read() as conn:
            positions = list(
                conn.execute(
                    select(pending_redactions.c.position)
                    .order_by(pending_redactions.c.position)
                    .limit(batch)
                ).scalars()
            )
            if not positions:
                break
            c = stored_events.c
            rows = conn.execute(
                select(
                    c.chain_position, c.originator_id, c.originator_version, c.topic, c.state
                ).where(c.chain_position.in_(positions))
            ).all()
        successors: list[Successor] = []
        for position, originator_id, version, topic, state in rows:
            build = SUCCESSORS.get(topic)
            if build is None:
                continue  # redacted meanwhile by another process (or not an old version)
            record = StoredEvent(originator_id, version, topic, bytes(state))
            successors.append(build(mapper, record, int(position), sealer))
        try:
            for reason in (SEALED, REMOVED):
                chosen = [s for s in successors if s.reason == reason]
                if chosen:
                    redactor.redact(
                        ctx, reason, [s.replacement for s in chosen], also=_done(chosen)
                    )
                    redacted += len(chosen)
        except RedactionRaced:
            raced += 1
            if raced >= ATTEMPTS:
                raise
            continue
        # Rows whose record needed no redaction (done by another process): no longer due.
        left = set(positions) - {s.replacement.position for s in successors}
        if left:
            with db.write() as conn:
                conn.execute(
                    delete(pending_redactions).where(pending_redactions.c.position.in_(left))
                )
    if redacted:
        log.info("redacted %d record(s) of old event versions into their sealed form", redacted)
    return redacted


def _done(chosen: list[Successor]) -> Callable[[Connection], None]:
    """In the redaction's transaction: the records no longer pending, the read models'
    sealed values given."""

    def also(conn: Connection) -> None:
        conn.execute(
            delete(pending_redactions).where(
                pending_redactions.c.position.in_([s.replacement.position for s in chosen])
            )
        )
        for successor in chosen:
            if successor.sealed_lab_test is not None:
                conn.execute(
                    update(orders)
                    .where(orders.c.order_id == successor.order_id)
                    .values(sealed_lab_test=successor.sealed_lab_test)
                )

    return also


def leave_no_redacted_values(db: Database) -> None:
    """After redacting: no page this database reaches keeps the replaced payloads (nor
    the orders rows' dropped clear columns). SQLite: secure_delete overwrote them in the
    file; the WAL's older page images go with a checkpoint. PostgreSQL: an UPDATE (and
    DROP COLUMN) leaves the old row versions in the table's file: `VACUUM FULL` writes
    each table into a new file. Its WAL, replicas and backups are out of reach."""
    if db.is_sqlite:
        db.vacuum_key_store()  # a WAL checkpoint (TRUNCATE), whatever the table
        return
    with db.writer.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # VACUUM FULL copies a replaced row version that a transaction begun before the
        # redaction may still see (an autovacuum's ANALYZE, another process's read): wait
        # for those to end first, up to a bound.
        redacted_by = conn.execute(text("SELECT CAST(xid(pg_current_xact_id()) AS text)")).scalar()
        waited = 0.0
        while (
            waited < OLDER_SNAPSHOTS_WAIT
            and conn.execute(OLDER_SNAPSHOTS, {"xid": redacted_by}).scalar()
        ):
            time.sleep(0.1)
            waited += 0.1
        if waited >= OLDER_SNAPSHOTS_WAIT:
            log.warning(
                "transactions older than the redaction outlasted %.0f s: their row versions "
                "may stay in the table's file until the next VACUUM",
                OLDER_SNAPSHOTS_WAIT,
            )
        for table in (stored_events.name, orders.name):
            conn.exec_driver_sql(f"VACUUM FULL {table}")
