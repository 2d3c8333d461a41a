"""The integrity checks the scheduler runs (issue 30 §3), recorded in the log.

Each run of the checks (the hash chain walked, its signed heads and the head file's heads
compared with it; the read models rebuilt from the log and compared with the live ones)
is one `IntegrityCheck` stream of one event: what was checked, by counts, whether it
passed, and the first problem named by kind and place only (a position, a stream id, a
table and its columns), never a value: no personal data.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from healthledger.domain.audited import Audited
from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Clock, Ledger


@dataclass(frozen=True)
class IntegrityFindings:
    """What one run of the checks found (the adapters run them)."""

    # The chain: records walked, the database's signed heads checked, the head file's
    # heads compared (None: no head file to compare with).
    records_checked: int
    signed_heads_checked: int
    anchored_heads_checked: int | None
    # The read models: rows compared, and how many differ (None: not checked, e.g. an
    # unfinished rebuild left its shadow; that counts as a failure).
    read_model_rows_compared: int
    read_model_differences: int | None
    # The first problem, by kind and place only; None when every check passed.
    first_problem: str | None

    @property
    def passed(self) -> bool:
        return self.first_problem is None


class IntegrityCheck(Audited):
    """One run of the integrity checks: its Created event is the result."""

    TOPIC = "healthledger:IntegrityCheck"
    USER_STREAM = None

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        """The checks ran: their counts, whether they passed, and the first problem."""

        TOPIC = "healthledger:IntegrityCheck.Created.v1"
        passed: bool
        records_checked: int
        signed_heads_checked: int
        anchored_heads_checked: int | None
        read_model_rows_compared: int
        read_model_differences: int | None
        first_problem: str | None

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        passed: bool,
        records_checked: int,
        signed_heads_checked: int,
        anchored_heads_checked: int | None,
        read_model_rows_compared: int,
        read_model_differences: int | None,
        first_problem: str | None,
    ) -> None:
        self.passed = passed
        self.records_checked = records_checked
        self.signed_heads_checked = signed_heads_checked
        self.anchored_heads_checked = anchored_heads_checked
        self.read_model_rows_compared = read_model_rows_compared
        self.read_model_differences = read_model_differences
        self.first_problem = first_problem

    @classmethod
    def record_findings(
        cls, ctx: CommandContext, now: datetime, findings: IntegrityFindings, *, id: UUID
    ) -> IntegrityCheck:
        return cls.new(
            ctx,
            now,
            id=id,
            passed=findings.passed,
            records_checked=findings.records_checked,
            signed_heads_checked=findings.signed_heads_checked,
            anchored_heads_checked=findings.anchored_heads_checked,
            read_model_rows_compared=findings.read_model_rows_compared,
            read_model_differences=findings.read_model_differences,
            first_problem=findings.first_problem,
        )


class IntegrityChecks:
    """Use case: record what a run of the checks found."""

    def __init__(self, ledger: Ledger, clock: Clock) -> None:
        self.ledger = ledger
        self.clock = clock

    def record(self, ctx: CommandContext, findings: IntegrityFindings) -> IntegrityCheck:
        check = IntegrityCheck.record_findings(ctx, self.clock(), findings, id=uuid4())
        self.ledger.save(check)
        return check
