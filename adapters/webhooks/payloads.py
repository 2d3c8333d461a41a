"""Webhook payloads, built when a delivery is sent (gaps.md Webhooks).

A delivery names the event it announces; the payload is rebuilt from that event and the
data it points at, by the deprecation rules in force at the event's own time, so a
redelivery today carries what the first delivery carried. Nothing personal is kept in a
delivery: a user erased since has no client_user_id, no key and no data left, and
`build` answers None (the delivery is dropped, never sent).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.database import Database
from healthledger.adapters.persistence.health_data_store import SqlHealthDataStore
from healthledger.adapters.persistence.key_store import KeyStore
from healthledger.adapters.persistence.schema import users
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.providers import SUMMARY_RESOURCES
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import attributed
from healthledger.domain.ledger import Ledger
from healthledger.domain.webhooks.deprecation_calendar import Rules
from sqlalchemy import select

# slug -> {"name", "slug", "logo"}
DescribeProvider = Callable[[str], dict[str, Any]]
RulesAt = Callable[[datetime], Rules]


class Payloads:
    def __init__(
        self,
        db: Database,
        ledger: Ledger,
        key_store: KeyStore,
        health_data: SqlHealthDataStore,
        describe: DescribeProvider,
        rules_at: RulesAt,
    ) -> None:
        self.db = db
        self.ledger = ledger
        self.key_store = key_store
        self.health_data = health_data
        self.describe = describe
        self.rules_at = rules_at

    def build(
        self,
        *,
        event_type: str,
        user_id: UUID,
        team_id: UUID,
        source_id: UUID,
        source_version: int,
        day: date | None,
    ) -> bytes | None:
        """The JSON body of the message, or None when the user is gone (erased)."""
        with self.db.read() as conn:
            row = conn.execute(
                select(users.c.client_user_id).where(users.c.user_id == user_id)
            ).first()
        if row is None:
            return None
        (stored,) = self.ledger.events.get(source_id, gt=source_version - 1, lte=source_version)
        event = attributed(stored)
        # Who and what a stream is does not change; a pull's range does (a reconnection
        # schedules a new pull), so a pull's completion is read at its own version.
        historical = isinstance(event, ResourceFeed.PullSucceeded)
        stream = self.ledger.find(source_id, version=source_version if historical else None)
        rules = self.rules_at(event.timestamp)
        data = self._data(event_type, event, stream, user_id, day, rules)
        if data is None:
            return None
        envelope = {
            "event_type": event_type,
            "data": data,
            "user_id": str(user_id),
            "client_user_id": row.client_user_id,
            "team_id": str(team_id),
        }
        return json.dumps(envelope, separators=(",", ":"), default=_json_default).encode()

    def _data(
        self,
        event_type: str,
        event: Any,
        stream: Any,
        user_id: UUID,
        day: date | None,
        rules: Rules,
    ) -> dict[str, Any] | None:
        if isinstance(event, Connection.Created | Connection.Reconnected):
            provider = self.describe(stream.provider)
            external = None
            if event.sealed_external_user_id is not None:
                external = self.key_store.open(user_id, event.sealed_external_user_id)
                if external is None:
                    return None  # the key is gone: erased
            data: dict[str, Any] = {
                "user_id": str(user_id),
                "provider": provider,
                "resource_availability": event.resource_availability,
                "external_user_id": external,
            }
            if rules.connection_source:
                data["source"] = dict(provider)
            return data
        if isinstance(event, Connection.Errored):
            return {
                "provider": stream.provider,
                "user_id": str(user_id),
                "message": event.error_message,
                "error_type": event.error_type,
            }
        assert isinstance(stream, ResourceFeed)
        if isinstance(event, ResourceFeed.PullSucceeded):
            data = {
                "user_id": str(user_id),
                "start_date": stream.range_start,
                "end_date": stream.range_end,
                "provider": stream.provider,
            }
            if rules.is_final:
                data["is_final"] = True
            return data
        # Daily data: the day's stored data, as it is now (a later sync may have updated it).
        assert day is not None
        found = self.health_data.read(user_id, stream.provider, stream.resource, day, day)
        if day not in found:
            return None
        source: dict[str, Any] = {"provider": stream.provider}
        if rules.legacy_source_fields:
            source.update(self.describe(stream.provider))
        key = "summary" if stream.resource in SUMMARY_RESOURCES else "data"
        return {
            "user_id": str(user_id),
            "provider": stream.provider,
            "calendar_date": day.isoformat(),
            key: found[day],
            "source": source,
        }


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")
