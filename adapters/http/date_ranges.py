"""The `start_date` and `end_date` query parameters of the health data reads (summaries,
timeseries; docs/data.md), as the official client sends them: a date (YYYY-MM-DD) or an
ISO 8601 date-time. A date alone starts at 00:00:00 and, as an end, ends at 23:59:59.999999
of its day (UTC); a date-time without an offset is UTC. The end defaults to the end of the
start's day, is inclusive, may not come before the start, and the range spans at most
`MAX_RANGE_DAYS` calendar days.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated

from fastapi import Query
from healthledger.domain.errors import InvalidRequest

# A year, leap day included: a range over a year is refused.
MAX_RANGE_DAYS = 366

_FORMS = "a date (YYYY-MM-DD) or an ISO 8601 date-time"
StartDate = Annotated[
    str,
    Query(
        min_length=1,
        max_length=64,
        description=f"The first day or instant of the range: {_FORMS}.",
        examples=["2026-03-01"],
    ),
]
OptionalStartDate = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=64,
        description=f"The first day or instant of the range: {_FORMS}. Optional here.",
        examples=["2026-03-01"],
    ),
]
EndDate = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=64,
        description=f"The last day or instant of the range, inclusive ({_FORMS}); the "
        "start's day when absent. At most 366 days after the start.",
        examples=["2026-03-07"],
    ),
]


@dataclass(frozen=True)
class DateRange:
    # Both ends inclusive, in UTC.
    start: datetime
    end: datetime
    # Neither end named a time: whole days, no sample needs its time checked.
    whole_days: bool

    @property
    def first_day(self) -> date:
        return self.start.date()

    @property
    def last_day(self) -> date:
        return self.end.date()

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment <= self.end


def _parse(value: str, field: str, *, end: bool) -> tuple[datetime, bool]:
    """The instant a parameter names, and whether it named a time."""
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime.combine(day, time.max if end else time.min, UTC), False
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        # An instant at the edge of the calendar may have no UTC form (OverflowError).
        return moment.astimezone(UTC), True
    except (ValueError, OverflowError):
        raise InvalidRequest(f"{field} must be {_FORMS}.", field, "query") from None


def date_range(start_date: str, end_date: str | None) -> DateRange:
    start, start_timed = _parse(start_date, "start_date", end=False)
    if end_date is None:
        end, end_timed = datetime.combine(start.date(), time.max, UTC), False
    else:
        end, end_timed = _parse(end_date, "end_date", end=True)
    if end < start:
        raise InvalidRequest("end_date is before start_date.", "end_date", "query")
    if end.date() - start.date() >= timedelta(days=MAX_RANGE_DAYS):
        raise InvalidRequest(
            f"The range is over a year: at most {MAX_RANGE_DAYS} days from start_date to end_date.",
            "end_date",
            "query",
        )
    return DateRange(start, end, whole_days=not (start_timed or end_timed))
