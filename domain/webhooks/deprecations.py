"""Use case of the deprecation calendar: apply every cut-over whose date has passed.

Idempotent by construction: what was applied is read from our own tables (the caller
passes the applied keys from the read model), the aggregate refuses to apply a key twice,
and two processes applying at once meet in the event store, where exactly one wins.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from eventsourcing.persistence import IntegrityError
from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.webhooks.deprecation_calendar import (
    CALENDAR_ID,
    CutOver,
    DeprecationCalendar,
    Rules,
    rules_from,
)


class Deprecations:
    def __init__(self, ledger: Ledger, clock: Clock, calendar: Sequence[CutOver]) -> None:
        self.ledger = ledger
        self.clock = clock
        self.calendar = tuple(sorted(calendar, key=lambda c: (c.effective_on, c.key)))

    def due(self, applied_keys: Collection[str]) -> list[CutOver]:
        now = self.clock()
        return [c for c in self.calendar if c.in_force_at(now) and c.key not in applied_keys]

    def apply_due(self, ctx: CommandContext, applied_keys: Collection[str]) -> list[str]:
        """Apply the cut-overs that are due and not in `applied_keys`; returns the keys this
        call recorded (none when another process recorded them first)."""
        due = self.due(applied_keys)
        if not due:
            return []  # the periodic case: no read of the calendar stream at all
        now = self.clock()
        calendar = self.ledger.find(CALENDAR_ID)
        if not isinstance(calendar, DeprecationCalendar):
            calendar = DeprecationCalendar.start(ctx, now)
        recorded = [c.key for c in due if calendar.apply_cut_over(ctx, now, c)]
        if not recorded:
            return []
        try:
            self.ledger.save(calendar)
        except IntegrityError:
            return []  # another process applied them first; its events stand
        return recorded

    def rules_at(self, instant: datetime) -> Rules:
        """The rules of this calendar at `instant` (see `rules_from`)."""
        return rules_from(instant, self.calendar)
