"""The ISO text of the datetime a command stamps its events with, made once.

A command stamps all its events (and the read-model rows they project) with one `now`: a
create's two events, a delete's two or three. The C `isoformat` of an aware datetime
formats two strings (the time's and the offset's) through `PyUnicode_FromFormat`, about
5,000 instructions; its text is kept for the last datetime, which the stored event's JSON
(`LedgerTranscoder`) and SQLite's DATETIME text (`sqlite_datetime_text`, a slice of it)
both read.
"""

from __future__ import annotations

from datetime import datetime


def iso_text(value: datetime) -> str:
    """`value.isoformat()`, remembered for the last datetime. Datetimes are immutable and
    the memo holds the object, so its identity is not reused while it is kept."""
    global _last
    last = _last
    if last[0] is value:
        return last[1]
    text = value.isoformat()
    _last = (value, text)
    return text


def remembered_iso_text(value: datetime) -> str | None:
    """`value.isoformat()` if it is the datetime `iso_text` made the text of last; None
    otherwise (never made here: a caller with another datetime keeps the memo as it is)."""
    last = _last
    return last[1] if last[0] is value else None


# (datetime, its isoformat), replaced whole: another thread sees one pair or the other.
_last: tuple[datetime | None, str] = (None, "")
