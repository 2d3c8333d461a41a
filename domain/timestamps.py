"""The ISO text of the datetime a command stamps its events with, made once.

A command stamps all its events (and the read-model rows they project) with one `now`: a
create's two events, a delete's two or three. The C `isoformat` of an aware datetime
formats each number through `PyUnicode_FromFormat`, about 11,000 instructions; a UTC
one's text is made here from pieces instead, and the text is kept for the last datetime,
which the stored event's JSON (`LedgerTranscoder`) and SQLite's DATETIME text
(`sqlite_datetime_text`, a slice of it) both read.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_text(value: datetime) -> str:
    """`value.isoformat()`, remembered for the last datetime. Datetimes are immutable and
    the memo holds the object, so its identity is not reused while it is kept."""
    global _last
    last = _last
    if last[0] is value:
        return last[1]
    # UTC with microseconds (nearly every `now`): from pieces. Any other: isoformat
    # itself (without microseconds it leaves the fraction out).
    pieces = value.tzinfo is UTC and value.microsecond
    text = _utc_iso_text(value) if pieces else value.isoformat()
    _last = (value, text)
    return text


def _utc_iso_text(value: datetime) -> str:
    """`value.isoformat()` of a UTC datetime with microseconds, from pieces: the date's
    text kept per day, two-digit texts from a table. The C `isoformat` formats every
    number through `PyUnicode_FromFormat`, about 11,000 instructions; this, about 5,000.
    A test holds the two equal."""
    day = _DAYS.get(value.toordinal())
    if day is None:
        if len(_DAYS) >= _DAYS_KEPT:
            _DAYS.clear()
        day = _DAYS[value.toordinal()] = value.date().isoformat() + "T"
    return "".join(
        (
            day,
            _TWO_DIGITS[value.hour],
            ":",
            _TWO_DIGITS[value.minute],
            ":",
            _TWO_DIGITS[value.second],
            ".",
            str(value.microsecond).zfill(6),
            "+00:00",
        )
    )


# Per day (its ordinal): its ISO text and the "T" (a handful of days are in use).
_DAYS: dict[int, str] = {}
_DAYS_KEPT = 64
_TWO_DIGITS = [f"{number:02d}" for number in range(60)]


def remembered_iso_text(value: datetime) -> str | None:
    """`value.isoformat()` if it is the datetime `iso_text` made the text of last; None
    otherwise (never made here: a caller with another datetime keeps the memo as it is)."""
    last = _last
    return last[1] if last[0] is value else None


# (datetime, its isoformat), replaced whole: another thread sees one pair or the other.
_last: tuple[datetime | None, str] = (None, "")
