"""The read side of health data: a live user's stored days, summaries and timeseries
samples (docs/data.md).

A read checks the user (the team's, live: an unknown, another team's, erased or
pending-erasure user is a 404), opens the user's key and reads the stored days in one
read transaction, so that an erasure committing meanwhile is either wholly before the read
(404) or wholly after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data, session_index, users
from healthledger.adapters.persistence.health_data.blocks import period_of
from healthledger.adapters.persistence.health_data.known_reads import KnownReads
from healthledger.adapters.persistence.health_data.opened import OpenedDays
from healthledger.adapters.persistence.health_data.places import PlaceDigests, Places
from healthledger.adapters.persistence.health_data.sessions import SessionPlace, open_place
from healthledger.adapters.persistence.health_data.store import (
    sealed_at,
    versions_held,
    versions_of_then,
)
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher
from healthledger.domain.connections.health_data import StoredDay
from healthledger.domain.connections.summaries import (
    DayData,
    DescribeProvider,
    source_context,
    summary_objects,
)
from healthledger.domain.errors import SummaryNotFound, UserNotFound, UserScheduledForDeletion
from healthledger.domain.ledger import Clock
from healthledger.domain.teams.source_priorities import provider_rank
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
        known: KnownReads | None = None,
    ) -> None:
        self.db = db
        self.key_store = key_store
        self.describe = describe
        self.rules_at = rules_at
        self.clock = clock
        self.opened = OpenedDays()
        # The digests of the user's provider and resource names the rows hold (ADR 0047),
        # needed before the read's one query: kept a while, without the key.
        self.places = PlaceDigests()
        # The answers given, kept until the user's data changes (ADR 0043).
        self.known = known
        # The user's state, its wrapped key and the current blocks holding the days asked
        # for, in one query (one round trip): a row per block, or one with no block when
        # none is stored. The key's row is gone once the user is erased. As of an
        # instant: the versions of then and later ones (`store.versions_held`).
        keys = key_store.tables.keys
        h = health_data.c

        def held(as_of: Any) -> Any:
            return (
                (h.user_id == users.c.user_id)
                & (h.resource == bindparam("resource"))
                & versions_held(as_of)
                & (h.period >= bindparam("first"))
                & (h.period <= bindparam("last"))
            )

        self.blocks_of = {
            (of_one, travels): select(
                users.c.status,
                users.c.created_on,
                keys.c.wrapped_key,
                h.provider,
                h.resource,
                h.period,
                h.version,
                sealed_at(as_of),
            )
            .select_from(
                users.outerjoin(keys, keys.c.user_id == users.c.user_id).outerjoin(
                    health_data,
                    held(as_of) & (h.provider == bindparam("provider")) if of_one else held(as_of),
                )
            )
            .where(users.c.user_id == bindparam("user_id"), users.c.team_id == bindparam("team_id"))
            for of_one in (False, True)
            for travels, as_of in ((False, None), (True, bindparam("as_of", type_=h.began_at.type)))
        }
        # A session's index row with its user's state and wrapped key (one round trip);
        # another team's session is no row.
        s = session_index.c
        self.session_of = (
            select(s.user_id, s.sealed, users.c.status, keys.c.wrapped_key)
            .select_from(
                session_index.join(users, users.c.user_id == s.user_id).outerjoin(
                    keys, keys.c.user_id == s.user_id
                )
            )
            .where(
                s.session_id == bindparam("session_id"),
                s.team_id == bindparam("team_id"),
                users.c.team_id == bindparam("team_id"),
            )
        )

    def forget(self, user_ids: Sequence[UUID]) -> None:
        """Drop what this process keeps of these users' days (their erasure committed)."""
        self.opened.forget(user_ids)
        self.places.forget(user_ids)
        if self.known is not None:
            self.known.forget(list(user_ids))

    def session_place(
        self, team_id: UUID, session_id: UUID, resource: str
    ) -> tuple[UUID, SessionPlace]:
        """The user and the place of the team's stored session of `resource` (a sleep, a
        workout) that `session_id` names. SummaryNotFound (a 404) for an unknown id,
        another team's or another resource's; the user's 404s for a user scheduled for
        deletion or erased (its rows go with it)."""
        with self.db.read() as conn:
            row = conn.execute(
                self.session_of, {"session_id": session_id, "team_id": team_id}
            ).first()
        if row is None:
            raise SummaryNotFound(f"No {resource} with this id.")
        if row.status == PENDING_ERASURE:
            raise UserScheduledForDeletion()
        cipher = self.key_store.cipher_of(row.user_id, row.wrapped_key)
        if cipher is None:
            raise UserNotFound()
        place = open_place(cipher, session_id, row.sealed)
        if place.resource != resource:
            raise SummaryNotFound(f"No {resource} with this id.")
        return row.user_id, place

    def stored_days(
        self,
        team_id: UUID,
        user_id: UUID,
        resource: str,
        start: date,
        end: date,
        provider: str | None = None,
        as_of: datetime | None = None,
    ) -> list[StoredDay]:
        """The live user's stored days of `resource` in start..end (inclusive), across
        providers or of one, in (day, provider) order; as they were at `as_of` when
        given (a user made after it is unknown then: a 404)."""
        # As of an instant: never kept (the versions of then are read).
        # The digests the rows hold (ADR 0047), before a known answer's reading begins:
        # kept with it, so a read that takes a known answer finds them kept too.
        places = self._places(user_id, resource, provider)
        known = self.known if as_of is None else None
        asked = (team_id, user_id, resource, start, end, provider)
        reading = None
        if known is not None:
            answered, reading = known.get(asked)
            if answered is not None:
                return answered
        values = {
            "user_id": user_id,
            "team_id": team_id,
            # No key (an unknown or erased user): a digest of nothing, no row matches.
            "resource": "" if places is None else places.resource(resource),
            "first": period_of(start),
            "last": end,
        }
        if provider is not None:
            values["provider"] = "" if places is None else places.provider(provider)
        if as_of is not None:
            values["as_of"] = as_of
        with self.db.read() as conn:
            rows = conn.execute(
                self.blocks_of[provider is not None, as_of is not None], values
            ).all()
        if not rows or (as_of is not None and rows[0].created_on > as_of):
            raise UserNotFound()
        if rows[0].status == PENDING_ERASURE:
            raise UserScheduledForDeletion()
        wrapped = rows[0].wrapped_key
        if wrapped is None:
            raise UserNotFound()  # erased (its row goes in the same transaction)

        def cipher() -> UserCipher:
            # Unwrapped only when a block is opened, not for days opened a moment ago.
            opened = self.key_store.cipher_of(user_id, wrapped)
            assert opened is not None
            return opened

        held: list[Any] = (
            [] if places is None else places.named(row for row in rows if row.period is not None)
        )
        if as_of is not None:
            held = versions_of_then(held)
        found = sorted(
            self.opened.days(user_id, held, cipher, start, end, as_of),
            key=lambda d: (d.day, d.provider),
        )
        if known is not None and reading is not None:
            known.keep(asked, user_id, found, reading)
        return found

    def _places(self, user_id: UUID, resource: str, provider: str | None) -> Places | None:
        """The user's digests of these names: kept, or computed under the user's key
        (read now) and kept without it; None when the user has no key."""
        places = self.places.get(user_id)
        if places is not None and places.knows(provider=provider, resource=resource):
            return places
        with self.db.read() as conn:
            cipher = self.key_store.cipher_on(conn, user_id)
        if cipher is None:
            return None
        made = Places(cipher.digest)
        made.resource(resource)
        if provider is not None:
            made.provider(provider)
        return self.places.keep(user_id, made.frozen())

    def sources(
        self, providers: Iterable[str], as_of: datetime | None = None
    ) -> dict[str, dict[str, Any]]:
        """Each provider's source context by the rules in force now, or at `as_of`
        (spec 2.13)."""
        rules = self.rules_at(as_of or self.clock())
        return {p: source_context(p, rules, self.describe) for p in providers}

    def summaries(
        self,
        team_id: UUID,
        user_id: UUID,
        resource: str,
        start: date,
        end: date,
        provider: str | None = None,
        order: Sequence[str] = (),
        as_of: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """The summary objects of `resource` (`domain/connections/summaries.py`, the webhooks' own),
        in day order, then by provider (those of `order`, the team's source priorities,
        first and in its order; then by slug), then in the day's order of sessions."""
        days = self.stored_days(team_id, user_id, resource, start, end, provider, as_of)
        sources = self.sources({d.provider for d in days}, as_of)
        rank = provider_rank(order)
        found: list[dict[str, Any]] = []
        for stored in sorted(days, key=lambda d: (d.day, rank(d.provider), d.provider)):
            it = DayData(
                user_id=user_id,
                provider=stored.provider,
                resource=resource,
                day=stored.day,
                created_at=stored.stored_at,
                updated_at=stored.updated_at,
                source=sources[stored.provider],
                ids=stored.ids,
            )
            found.extend(summary_objects(it, stored.value))
        return found
