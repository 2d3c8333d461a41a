"""The read side of health data: a live user's stored days, summaries and timeseries
samples (docs/data.md).

A read checks the user (the team's, live: an unknown, another team's, erased or
pending-erasure user is a 404), opens the user's key and reads the stored days in one
read transaction, so that an erasure committing meanwhile is either wholly before the read
(404) or wholly after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data, users
from healthledger.adapters.persistence.health_data.store import opened_days
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.domain.connections.health_data import StoredDay
from healthledger.domain.connections.summaries import (
    DayData,
    DescribeProvider,
    source_context,
    summary_objects,
)
from healthledger.domain.errors import UserNotFound, UserScheduledForDeletion
from healthledger.domain.ledger import Clock
from healthledger.domain.users.user import PENDING_ERASURE
from healthledger.domain.webhooks.deprecation_calendar import Rules
from sqlalchemy import bindparam, select

RulesAt = Callable[[datetime], Rules]


class HealthDataQueries:
    def __init__(
        self,
        db: Database,
        key_store: KeyStore,
        describe: DescribeProvider,
        rules_at: RulesAt,
        clock: Clock,
    ) -> None:
        self.db = db
        self.key_store = key_store
        self.describe = describe
        self.rules_at = rules_at
        self.clock = clock
        # The user's state, its wrapped key and the days asked for, in one query (one
        # round trip): a row per stored day, or one with no day when none is stored. The
        # key's row is gone once the user is erased.
        keys = key_store.tables.keys
        h = health_data.c
        days = (
            (h.user_id == users.c.user_id)
            & (h.resource == bindparam("resource"))
            & (h.day >= bindparam("first"))
            & (h.day <= bindparam("last"))
        )
        self.days_of = {
            of_one: select(
                users.c.status,
                keys.c.wrapped_key,
                h.provider,
                h.resource,
                h.day,
                h.sealed,
                h.stored_at,
                h.updated_at,
            )
            .select_from(
                users.outerjoin(keys, keys.c.user_id == users.c.user_id).outerjoin(
                    health_data, days & (h.provider == bindparam("provider")) if of_one else days
                )
            )
            .where(users.c.user_id == bindparam("user_id"), users.c.team_id == bindparam("team_id"))
            .order_by(h.day, h.provider)
            for of_one in (False, True)
        }

    def stored_days(
        self,
        team_id: UUID,
        user_id: UUID,
        resource: str,
        start: date,
        end: date,
        provider: str | None = None,
    ) -> list[StoredDay]:
        """The live user's stored days of `resource` in start..end (inclusive), across
        providers or of one, in (day, provider) order."""
        values = {
            "user_id": user_id,
            "team_id": team_id,
            "resource": resource,
            "first": start,
            "last": end,
        }
        if provider is not None:
            values["provider"] = provider
        with self.db.read() as conn:
            rows = conn.execute(self.days_of[provider is not None], values).all()
        if not rows:
            raise UserNotFound()
        if rows[0].status == PENDING_ERASURE:
            raise UserScheduledForDeletion()
        cipher = self.key_store.cipher_of(user_id, rows[0].wrapped_key)
        if cipher is None:
            raise UserNotFound()  # erased (its row goes in the same transaction)
        return opened_days([row for row in rows if row.day is not None], cipher)

    def sources(self, providers: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Each provider's source context by the rules in force now (spec 2.13)."""
        rules = self.rules_at(self.clock())
        return {p: source_context(p, rules, self.describe) for p in providers}

    def summaries(
        self,
        team_id: UUID,
        user_id: UUID,
        resource: str,
        start: date,
        end: date,
        provider: str | None = None,
    ) -> list[dict[str, Any]]:
        """The summary objects of `resource` (`domain/connections/summaries.py`, the webhooks' own),
        in day order, then by provider, then in the day's order of sessions."""
        days = self.stored_days(team_id, user_id, resource, start, end, provider)
        sources = self.sources({d.provider for d in days})
        found: list[dict[str, Any]] = []
        for stored in sorted(days, key=lambda d: (d.day, d.provider)):
            it = DayData(
                user_id=user_id,
                provider=stored.provider,
                resource=resource,
                day=stored.day,
                created_at=stored.stored_at,
                updated_at=stored.updated_at,
                source=sources[stored.provider],
            )
            found.extend(summary_objects(it, stored.value))
        return found
