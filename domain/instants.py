"""Instants as the service keeps them: aware, in UTC where no offset was given."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(moment: datetime) -> datetime:
    """The moment, read as UTC when it has no offset (a database column without a time
    zone, SQLite's, gives it back naive); an aware one unchanged."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
