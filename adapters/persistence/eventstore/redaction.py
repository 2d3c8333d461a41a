"""Redacting stored events (ADR 0028): records of the log whose payloads are replaced by
their sealed form, their place and link hash kept, with a chained record that says so.

`Redactor.redact` does one redaction in one write transaction: the `Redaction` record
appended onto the chain by the recorder (and so covered by the next signed head), and,
with it (the recorder's `effect`), each redacted row's topic and state replaced and its
entry in `chain_redactions` written, after checking under the writers' lock that each row
still holds the state whose digest the redaction record names (another process may have
redacted it meanwhile: the transaction then rolls back with `RedactionRaced`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from uuid import UUID, uuid4

from eventsourcing.persistence import Mapper
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import chain_redactions, stored_events
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder
from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Clock
from healthledger.domain.redaction import RedactedRecord, Redaction
from sqlalchemy import Connection, insert, select, update


class RedactionRaced(Exception):
    """A record to redact no longer holds the state it was read with (redacted by
    another process meanwhile, or changed): nothing of the redaction was written."""


@dataclass(frozen=True)
class Replacement:
    """A stored record's new form: the record by its chain position, the state it was read
    with (what its link covers), and its new topic and state."""

    position: int
    original_topic: str
    original_state: bytes
    topic: str
    state: bytes

    def recorded(self) -> RedactedRecord:
        return RedactedRecord(
            position=self.position,
            original_topic=self.original_topic,
            original_digest=hashlib.sha256(self.original_state).hexdigest(),
            redacted_topic=self.topic,
            redacted_digest=hashlib.sha256(self.state).hexdigest(),
        )


class Redactor:
    def __init__(
        self, db: Database, recorder: LedgerRecorder, mapper: Mapper[UUID], clock: Clock
    ) -> None:
        self.db = db
        self.recorder = recorder
        self.mapper = mapper
        self.clock = clock

    def redact(
        self,
        ctx: CommandContext,
        reason: str,
        replacements: Sequence[Replacement],
        also: Callable[[Connection], None] | None = None,
    ) -> Redaction:
        """Replace the records' payloads and record the redaction, in one transaction;
        `also` runs the caller's statements in it (the read models' sealed values)."""
        by_position = {r.position: r for r in replacements}
        if len(by_position) != len(replacements):
            raise ValueError("a record is redacted once")
        redaction = Redaction.of_records(
            ctx,
            self.clock(),
            id=uuid4(),
            reason=reason,
            records=[r.recorded() for r in replacements],
        )
        events = redaction.collect_events()
        stored = [self.mapper.to_stored_event(event) for event in events]

        def replace(conn: Connection, linked: tuple[int, int]) -> None:
            # Under the writers' lock (SQLite's one writer; the recorder's table lock on
            # PostgreSQL), after the redaction record was linked at `linked[1]`.
            redaction_position = linked[1]
            c = stored_events.c
            rows = conn.execute(
                select(c.chain_position, c.topic, c.state).where(
                    c.chain_position.in_(list(by_position))
                )
            ).all()
            held = {int(position): (topic, bytes(state)) for position, topic, state in rows}
            for position, replacement in by_position.items():
                if held.get(position) != (replacement.original_topic, replacement.original_state):
                    raise RedactionRaced(f"the record at position {position} changed meanwhile")
                conn.execute(
                    update(stored_events)
                    .where(c.chain_position == position)
                    .values(topic=replacement.topic, state=replacement.state)
                )
            conn.execute(
                insert(chain_redactions),
                [
                    {
                        "position": r.position,
                        "original_topic": r.original_topic,
                        "original_digest": hashlib.sha256(r.original_state).digest(),
                        "redacted_topic": r.topic,
                        "redacted_digest": hashlib.sha256(r.state).digest(),
                        "redaction_position": redaction_position,
                    }
                    for r in by_position.values()
                ],
            )
            if also is not None:
                also(conn)

        self.recorder.insert_events(stored, aggregate_events=events, effect=replace)
        return redaction
