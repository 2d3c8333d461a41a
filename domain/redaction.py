"""Redactions of stored events (ADR 0028), recorded in the log.

Events stored before their health facts were sealed hold them in clear. A redaction
replaces such records' payloads by their sealed form (their new version), and is itself
recorded: one `Redaction` stream of one event per batch of redacted records, naming each
by its place on the hash chain with its original topic and state digest (what its link
covers) and its new topic and state digest. Digests and topics only: nothing personal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext

# Why records were redacted: their facts sealed with the user's data key, or removed (the
# user was erased already: no key to seal with).
SEALED = "sealed"
REMOVED = "removed"
REASONS = (SEALED, REMOVED)


@dataclass(frozen=True)
class RedactedRecord:
    """One record of the log as a redaction changed it (digests: SHA-256, hex)."""

    position: int
    original_topic: str
    original_digest: str
    redacted_topic: str
    redacted_digest: str

    def as_fields(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_fields(cls, fields: dict[str, Any]) -> RedactedRecord:
        return cls(**fields)


class Redaction(Audited):
    """One batch of records redacted: its Created event names them."""

    TOPIC = "healthledger:Redaction"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """Records redacted, each by position, and why (`sealed` or `removed`)."""

        TOPIC = "healthledger:Redaction.Created.v1"
        reason: str
        records: list[dict[str, Any]]

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        reason: str,
        records: list[dict[str, Any]],
    ) -> None:
        self.reason = reason
        # As the event holds them (plain values: what a snapshot stores).
        self.records = [dict(fields) for fields in records]

    def redacted(self) -> list[RedactedRecord]:
        """The records it names."""
        return [RedactedRecord.of_fields(fields) for fields in self.records]

    @classmethod
    def of_records(
        cls,
        ctx: CommandContext,
        now: datetime,
        *,
        id: UUID,
        reason: str,
        records: list[RedactedRecord],
    ) -> Redaction:
        if reason not in REASONS:
            raise ValueError(f"a redaction's reason is one of {REASONS}")
        if not records:
            raise ValueError("a redaction names at least one record")
        return cls.new(
            ctx, now, id=id, reason=reason, records=[record.as_fields() for record in records]
        )
