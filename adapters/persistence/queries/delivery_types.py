"""Webhook deliveries' event types, opened from their read-model rows (ADR 0028).

A row holds the type as the log does: sealed with the user's key (`sealed_facts`), and
in clear only when it says nothing of a person's health (`lifecycle_type`: `user.*`, a
team-level type). The sender, the brokers' publisher and the portal open the rows they
read with the keys of their users, read in one query on the read's connection (the key
store's `opener_on`): one key per user, however many rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from healthledger.adapters.persistence.queries.connection_facts import OpenerOn
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from sqlalchemy import Connection


def delivery_types(conn: Connection, rows: Sequence[Any], opener_on: OpenerOn) -> list[str | None]:
    """Each row's event type, in order; None where it is sealed and the user's key is gone
    (erased: nothing of theirs is sent any more)."""
    sealed_of = [row.user_id for row in rows if row.lifecycle_type is None]
    opener = opener_on(conn, {user_id for user_id in sealed_of if user_id is not None})
    found: list[str | None] = []
    for row in rows:
        if row.lifecycle_type is not None:
            found.append(row.lifecycle_type)
            continue
        sealed = row.sealed_facts
        opened = None
        if sealed is not None and sealed != ERASED_PLACEHOLDER and row.user_id is not None:
            opened = opener(conn, row.user_id, sealed)
        found.append(None if opened is None else str(opened["event_type"]))
    return found
