"""Connections' and feeds' read-model rows with their sealed facts opened (ADR 0032).

The rows hold a connection's provider and resource availability, and a feed's provider
and resource, only as the log holds them: sealed with the user's key. A read opens them
with the keys of the users it answers about, read in one query on the read's own
connection (the key store's `opener_on`): one key per user, however many rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from types import SimpleNamespace
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.eventstore.sealed_facts import opened_facts
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from sqlalchemy import Connection

# Opens a user's sealed value on a connection (None once the key is gone).
Opener = Callable[[Connection, UUID, str], Any | None]
# The key store's `opener_on`: an opener with these users' keys read at once.
OpenerOn = Callable[[Connection, Collection[UUID]], Opener]

# What the facts read as once the user's key is gone (a row is deleted with its user:
# only a read that races the erasure meets one).
ERASED_CONNECTION = {"provider": ERASED_PLACEHOLDER, "resource_availability": {}}
ERASED_FEED = {"provider": ERASED_PLACEHOLDER, "resource": ERASED_PLACEHOLDER}
ERASED_WINDOW = {"range_start": None, "range_end": None}


def opened_connections(
    conn: Connection, rows: Sequence[Any], opener_on: OpenerOn
) -> list[SimpleNamespace]:
    """Connections rows with `provider` and `resource_availability` (the last
    reconnection's, else the first connection's)."""
    opener = opener_on(conn, {row.user_id for row in rows})
    found = []
    for row in rows:
        facts = _opened(conn, opener, row, "sealed_facts") or ERASED_CONNECTION
        values = {**row._mapping, **facts}
        if row.sealed_availability is not None:
            again = _opened(conn, opener, row, "sealed_availability")
            values.update(again or {"resource_availability": {}})
        found.append(SimpleNamespace(**values))
    return found


def opened_feeds(
    conn: Connection, rows: Sequence[Any], opener_on: OpenerOn
) -> list[SimpleNamespace]:
    """Resource feeds rows (with whatever else the query selected) with `provider` and
    `resource`, and the current pull's `range_start` and `range_end` (None before a pull
    was scheduled, or once the key is gone)."""
    opener = opener_on(conn, {row.user_id for row in rows})
    found = []
    for row in rows:
        values = {**row._mapping, **(_opened(conn, opener, row, "sealed_facts") or ERASED_FEED)}
        values.update(_opened(conn, opener, row, "sealed_window") or ERASED_WINDOW)
        found.append(SimpleNamespace(**values))
    return found


def _opened(conn: Connection, opener: Opener, row: Any, column: str) -> dict[str, Any] | None:
    sealed = getattr(row, column)
    if sealed is None or sealed == ERASED_PLACEHOLDER:
        return None
    # As the log's mapper opens them (a window's dates decoded).
    return opened_facts(opener(conn, row.user_id, sealed))
