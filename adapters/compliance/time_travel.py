"""Time travel: any aggregate as it was at an instant, and the team API's reads as they
answered then, built from the event log.

The version a stream had at an instant comes from the timestamp index (each event row
carries its event's time: `LedgerRecorder.version_at`, and `versions_at` for many streams
in one query). The aggregate at that version loads as any historical version does
(`Ledger.find(id, version=...)`, eventsourcing's repository): from the newest snapshot at
or below that version, then the events after it. A long-lived user is snapshotted every
`HEALTHLEDGER_USER_SNAPSHOT_INTERVAL` events, so an instant costs one index lookup and at
most that many events, however long the stream (docs/performance.md, "Audit").

`ReadsAsOf` answers the questions the team API's reads ask of the read models (the user
row and its connections, the connections and pulls of the introspection), with the
aggregates as of the instant in the place of the rows, so that the routes render them
with the same code and models as their live answers. A user deleted or erased since is
answered as it was; the personal values of an erased user, whose key is gone, show as
`ERASED_PLACEHOLDER`. Which streams were a user's, and which users a team's, comes from
the `stream_owners` table (ids only; erasure leaves it), filtered by the time each stream
began.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeGuard
from uuid import UUID

from eventsourcing.domain import Aggregate
from healthledger.adapters.answers.orders import OrderRow
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import custom_credentials as credentials_table
from healthledger.adapters.persistence.engine.schema import lab_tests as lab_test_table
from healthledger.adapters.persistence.engine.schema import management_keys as management_key_table
from healthledger.adapters.persistence.engine.schema import stream_owners
from healthledger.adapters.persistence.engine.schema import team_api_keys as team_api_key_table
from healthledger.adapters.persistence.engine.schema import teams as team_table
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder
from healthledger.adapters.persistence.eventstore.sealed_facts import keys_preloaded
from healthledger.adapters.persistence.projections.connections import ATTEMPT_FAILED
from healthledger.adapters.persistence.projections.read_models import ReadModels
from healthledger.adapters.persistence.projections.stream_owners import (
    CONNECTION,
    OWNED_STREAMS,
    PULL,
    USER,
)
from healthledger.adapters.persistence.queries.connections import ConnectionQueries
from healthledger.adapters.persistence.queries.directory import UserQueries
from healthledger.adapters.persistence.queries.lab_tests import LabTestRow
from healthledger.adapters.persistence.queries.orders import OrderFilters
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import IN_PROGRESS as PULL_IN_PROGRESS
from healthledger.domain.connections.resource_feeds import SUCCESS as PULL_SUCCESS
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.errors import (
    DemographicsNotFound,
    FeatureNotEnabled,
    InvalidRequest,
    OrganizationNotFound,
    TeamNotFound,
    UserNotFound,
    WebhookEndpointNotFound,
)
from healthledger.domain.labs.lab_tests import LabTest
from healthledger.domain.labs.orders import Order
from healthledger.domain.personal_data import (
    ERASED_PLACEHOLDER,
    SEALED_PLACEHOLDER,
    PersonalDataVault,
)
from healthledger.domain.teams.custom_credentials import DELETED as CREDENTIALS_DELETED
from healthledger.domain.teams.custom_credentials import SET as CREDENTIALS_SET
from healthledger.domain.teams.custom_credentials import CustomCredentials
from healthledger.domain.teams.management_keys import ManagementKey
from healthledger.domain.teams.teams import Organization, Team, TeamApiKey
from healthledger.domain.users.user import ACTIVE, ERASED, User, client_user_id_problem
from healthledger.domain.webhooks.endpoints import WebhookEndpoint
from sqlalchemy import func, insert, select

# An instant as the API and the CLI take it: ISO 8601 date and time, with an offset.
_ISO_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
INSTANT_EXAMPLE = "2026-03-01T12:00:00Z"
# The closed-beta switch of the demographics reads (adapters/operations/users.py).
DEMOGRAPHICS = "demographics"
ERASED_FILTER = (
    "an order the team had then belongs to a user erased since: its interpretation is "
    "destroyed with its key, so the orders as of this instant cannot be filtered by it; "
    "ask without interpretation."
)
# The kind of an order's stream in `stream_owners`.
ORDER = OWNED_STREAMS[Order]
# Streams whose versions one query asks for at most (bind parameters stay well below
# every database's limit).
_IDS_PER_QUERY = 500


def parse_instant(text: str) -> datetime:
    """An ISO 8601 instant with an offset (`Z` or `+hh:mm`), in UTC; a ValueError that
    says what is expected otherwise (a date alone, a time without an offset, a number)."""
    if not _ISO_INSTANT.match(text):
        raise ValueError(f"an instant is ISO 8601 with an offset, e.g. {INSTANT_EXAMPLE}")
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a valid ISO 8601 instant (e.g. {INSTANT_EXAMPLE})") from None
    if instant.tzinfo is None:
        raise ValueError(f"an instant needs an offset (Z or +hh:mm), e.g. {INSTANT_EXAMPLE}")
    try:
        return instant.astimezone(UTC)
    except OverflowError:  # the first or last hours of the calendar, moved to UTC
        raise ValueError("the instant is out of range") from None


# -- which instants an answer about the past may be asked for ------------------------------

# One message per case, the same in the API (a 422 on `as_of`) and the CLI (`--as-of`).
FUTURE = "as_of is in the future: give a past instant."
NOT_TRAVELLING = (
    "this read does not travel in time: as_of is not supported here (yet); ask without it."
)


def before_message(what: str, began: datetime) -> str:
    return (
        f"as_of is before the {what} existed (created at {began.isoformat()}): "
        "give a later instant."
    )


def stream_began(service: Service, stream_id: UUID) -> datetime | None:
    """When a stream's first event was recorded (a team's or organization's creation;
    None for no stream)."""
    c = service.recorder.tables.events.c
    with service.db.read() as conn:
        found: datetime | None = conn.execute(
            select(c.timestamp).where(c.originator_id == stream_id, c.originator_version == 1)
        ).scalar()
    return found


def refuse_instant(
    service: Service, instant: datetime, *, began: datetime | None, what: str = "team"
) -> None:
    """InvalidRequest (a 422 on `as_of`) for an instant no answer is given about: in the
    future (what the log will hold then is not known, and an answer about an instant must
    not change once given), or before the team (organization) existed."""
    if instant > service.clock():
        raise InvalidRequest(FUTURE, "as_of", "query")
    if began is not None and instant < began:
        raise InvalidRequest(before_message(what, began), "as_of", "query")


def stream_refusal(service: Service, stream_id: UUID, instant: datetime) -> str | None:
    """Why no state of a stream is given at `instant` (`audit ID --as-of`), in the API's
    words, or None: in the future, or before the team the stream belongs to existed."""
    try:
        refuse_instant(service, instant, began=None)
        now = service.ledger.find(stream_id)
        team_id = getattr(now, "team_id", None)
        if isinstance(team_id, UUID):
            refuse_instant(service, instant, began=stream_began(service, team_id))
    except InvalidRequest as exc:
        return exc.message
    return None


def streams_founded(service: Service, founding: type, instant: datetime) -> list[UUID]:
    """The streams whose first event is of class `founding` and was recorded by
    `instant`: the aggregates of a kind that existed then, deleted since or not (their
    read model rows go with the deletion; the log keeps them). The event table has no
    index on the topic: this reads every first event of the log up to the instant, which
    suits a debugging read, not a hot path."""
    c = service.recorder.tables.events.c
    query = select(c.originator_id).where(
        c.originator_version == 1,
        c.topic == founding.TOPIC,  # type: ignore[attr-defined]
        c.timestamp <= instant,
    )
    with service.db.read() as conn:
        return list(conn.execute(query).scalars())


# -- one aggregate ---------------------------------------------------------------------


def aggregate_as_of(service: Service, aggregate_id: UUID, instant: datetime) -> Aggregate | None:
    """The aggregate as it was at `instant` (None if its stream had not begun)."""
    version = service.recorder.version_at(aggregate_id, instant)
    if version is None:
        return None
    return service.ledger.find(aggregate_id, version=version)


def versions_at(service: Service, ids: Iterable[UUID], instant: datetime) -> dict[UUID, int]:
    """The version each stream of `ids` had at `instant` (streams not begun by then are
    left out): `version_at` for many streams, one query per few hundred."""
    c = service.recorder.tables.events.c
    wanted = list(dict.fromkeys(ids))
    found: dict[UUID, int] = {}
    with service.db.read() as conn:
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            query = (
                select(c.originator_id, func.max(c.originator_version))
                .where(
                    c.originator_id.in_(wanted[start : start + _IDS_PER_QUERY]),
                    c.timestamp <= instant,
                )
                .group_by(c.originator_id)
            )
            found.update({row[0]: row[1] for row in conn.execute(query)})
    return found


def aggregates_as_of(service: Service, ids: Iterable[UUID], instant: datetime) -> list[Aggregate]:
    """The aggregates of `ids` whose streams had begun at `instant`, as they were then
    (read at once: `Ledger.find_many` at their versions of then)."""
    versions = versions_at(service, ids, instant)
    found = service.ledger.find_many(list(versions), versions)
    return [found[aggregate_id] for aggregate_id in versions if aggregate_id in found]


def key_owner(aggregate: Aggregate) -> UUID:
    """Whose data key seals the aggregate's sealed values: a user's own, a user's for
    what belongs to a user (a connection's external id), else its team's (webhook signing
    secrets, custom credentials), else its own."""
    if isinstance(aggregate, User):
        return aggregate.id
    for owner in ("user_id", "team_id"):
        found = getattr(aggregate, owner, None)
        if isinstance(found, UUID):
            return found
    return aggregate.id


def placeholder(key_exists: bool) -> str:
    """How a sealed value shows where it is never printed: whether its key still exists."""
    return SEALED_PLACEHOLDER if key_exists else ERASED_PLACEHOLDER


def state_as_of(service: Service, aggregate_id: UUID, instant: datetime) -> dict[str, Any] | None:
    """Any aggregate as it was at `instant`, for the audit (None if its stream had not
    begun): its attributes, every sealed value as a placeholder that says whether its key
    still exists. A user shows its settings by value (as the API names them)."""
    aggregate = aggregate_as_of(service, aggregate_id, instant)
    if aggregate is None:
        return None
    key_exists = service.key_store.has_key(key_owner(aggregate))
    state: dict[str, Any] = {
        "as_of": instant,
        "aggregate": type(aggregate).__name__,
        "id": aggregate.id,
        "version": aggregate.version,
        "created_on": aggregate.created_on,
        "modified_on": aggregate.modified_on,
    }
    if isinstance(aggregate, User):
        return {**state, **_user_state(aggregate, key_exists, service.key_store.open)}
    for name, value in vars(aggregate).items():
        if name.startswith("_"):
            continue  # eventsourcing's own (id, version and times are given above)
        if name.startswith("sealed_") and value is not None:
            value = placeholder(key_exists)
        state[name] = _plain(value)
    return state


def _user_state(
    user: User, key_exists: bool, open_: Callable[[UUID, str], Any | None]
) -> dict[str, Any]:
    def sealed(value: Any) -> str | None:
        return None if value is None else placeholder(key_exists)

    # The time zone by value, as the audit has always shown it: opened with the user's
    # key, or the erased placeholder once the key is gone. In clear only if it was
    # recorded in clear and not redacted yet.
    time_zone: Any = user.fallback_time_zone
    if user.sealed_fallback_time_zone is not None:
        zone, source, updated_at = user.sealed_fallback_time_zone
        opened = open_(user.id, zone) if key_exists else None
        time_zone = (ERASED_PLACEHOLDER if opened is None else opened, source, updated_at)
    birth_date = user.sealed_birth_date
    return {
        "user_id": user.id,
        "team_id": user.team_id,
        # In clear only if it was recorded in clear (before it was sealed).
        "client_user_id": user.client_user_id or sealed(user.sealed_client_user_id),
        "claim_id": user.claim_id,
        "status": user.status,
        "fallback_time_zone": None if time_zone is None else time_zone[0],
        "fallback_birth_date": sealed(birth_date and birth_date[0]),
        "ingestion_start": user.ingestion_start,
        "ingestion_end": user.ingestion_end,
        "demographics": sealed(user.sealed_demographics),
        "deleted_at": user.deleted_at,
        "erasure_due_at": user.erasure_due_at,
        "erased_at": user.erased_at,
    }


def _plain(value: Any) -> Any:
    # Tuples (a snapshot restores them as lists) print as lists either way.
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# -- the team API's reads at an instant --------------------------------------------------


class PlaceholderVault:
    """The vault as an answer about the past opens it: a value whose key was destroyed
    (the user erased since) shows as `ERASED_PLACEHOLDER` instead of being left out."""

    def __init__(self, vault: PersonalDataVault) -> None:
        self.vault = vault

    def seal(self, user_id: UUID, value: Any) -> str:
        raise TypeError("the past is read, never sealed into")

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        value = self.vault.open(user_id, sealed)
        return ERASED_PLACEHOLDER if value is None else value

    def has_key(self, user_id: UUID) -> bool:
        return self.vault.has_key(user_id)

    def discard(self, user_id: UUID) -> None:
        raise TypeError("the past is read, never changed")


@dataclass(frozen=True)
class UserRow:
    """A user as the users read model held it (the columns its rendering reads)."""

    user_id: UUID
    team_id: UUID
    client_user_id: str
    status: str
    created_on: datetime
    sealed_fallback_time_zone: str | None
    fallback_time_zone_source: str | None
    fallback_time_zone_updated_at: datetime | None
    sealed_birth_date: str | None
    birth_date_source: str | None
    birth_date_updated_at: datetime | None
    ingestion_start: date | None
    ingestion_end: date | None

    @classmethod
    def of(cls, user: User, vault: PersonalDataVault) -> UserRow:
        """The row of `user`; its client_user_id as recorded (in clear before it was
        sealed), else opened with `vault`, as the projection opens it. The time zone as
        the read model holds it: sealed (the start redacted every record that held it in
        clear, before anything reads)."""
        zone, birth = user.sealed_fallback_time_zone, user.sealed_birth_date
        client_user_id = user.client_user_id
        if client_user_id is None:
            assert user.sealed_client_user_id is not None, "held in clear or sealed"
            client_user_id = str(vault.open(user.id, user.sealed_client_user_id))
        return cls(
            user_id=user.id,
            team_id=user.team_id,
            client_user_id=client_user_id,
            status=user.status,
            created_on=user.created_on,
            sealed_fallback_time_zone=None if zone is None else zone[0],
            fallback_time_zone_source=None if zone is None else zone[1],
            fallback_time_zone_updated_at=None if zone is None else zone[2],
            sealed_birth_date=None if birth is None else birth[0],
            birth_date_source=None if birth is None else birth[1],
            birth_date_updated_at=None if birth is None else birth[2],
            ingestion_start=user.ingestion_start,
            ingestion_end=user.ingestion_end,
        )


@dataclass(frozen=True)
class ConnectionRow:
    """A connection as the connections read model held it."""

    connection_id: UUID
    user_id: UUID
    team_id: UUID
    provider: str
    status: str
    created_on: datetime
    resource_availability: dict[str, Any]
    error_details: dict[str, Any] | None
    sealed_external_user_id: str | None

    @classmethod
    def of(cls, connection: Connection) -> ConnectionRow:
        details = connection.error_details
        if details is not None:
            # The read model keeps the time as the text the projection wrote.
            details = {**details, "errored_at": details["errored_at"].isoformat()}
        return cls(
            connection_id=connection.id,
            user_id=connection.user_id,
            team_id=connection.team_id,
            provider=connection.provider,
            status=connection.status,
            created_on=connection.connected_at,
            resource_availability=connection.resource_availability,
            error_details=details,
            sealed_external_user_id=connection.sealed_external_user_id,
        )


@dataclass(frozen=True)
class FeedRow:
    """A resource feed's pull as the resource_feeds read model held it (a feed whose
    first pull was scheduled)."""

    user_id: UUID
    provider: str
    resource: str
    status: str
    # None: the window is sealed and the user's key is gone.
    range_start: datetime | None
    range_end: datetime | None
    scheduled_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    days_with_data: int
    release: str
    trace_id: str
    error_code: str | None

    @classmethod
    def of(cls, feed: ResourceFeed) -> FeedRow:
        assert feed.status is not None
        return cls(
            user_id=feed.user_id,
            provider=feed.provider,
            resource=feed.resource,
            status=feed.status,
            range_start=feed.range_start,
            range_end=feed.range_end,
            scheduled_at=feed.scheduled_at,
            started_at=feed.started_at,
            ended_at=feed.ended_at,
            days_with_data=feed.days_with_data,
            release=feed.release,
            trace_id=feed.trace_id,
            error_code=feed.error_code,
        )


@dataclass(frozen=True)
class ResourceRow:
    """A feed as `/v2/introspect/resources` reads it: the resource_feeds row joined with
    its connection's status."""

    user_id: UUID
    provider: str
    resource: str
    status: str | None
    connection_status: str
    last_attempt_at: datetime | None
    last_attempt_status: str | None
    oldest_day: date | None
    newest_day: date | None


# How each event of a feed leaves its last attempt (projections/connections.py).
_ATTEMPTS: dict[type, str] = {
    ResourceFeed.PullStarted: PULL_IN_PROGRESS,
    ResourceFeed.PullRetrying: ATTEMPT_FAILED,
    ResourceFeed.PullSucceeded: PULL_SUCCESS,
    ResourceFeed.PullFailed: ATTEMPT_FAILED,
    ResourceFeed.DailySynced: PULL_SUCCESS,
}


def reads_as_of(service: Service, instant: datetime) -> ReadsAsOf:
    """The team API's reads as of `instant`. A future instant is refused (422): what the
    log will hold then is not known, and an answer about an instant must not change once
    given."""
    refuse_instant(service, instant, began=None)
    return ReadsAsOf(service, instant)


class ReadsAsOf:
    """The reads of the team API's user, connection and introspection routes, as of
    `instant`: each method answers what its live namesake (`UserLifecycle.load_live`,
    `UserQueries.resolved_user`, `ConnectionQueries.providers_of`, `PullQueries`'
    introspection reads) answered then, from the aggregates as they were."""

    def __init__(self, service: Service, instant: datetime) -> None:
        self.service = service
        self.instant = instant
        self.vault = vault = PlaceholderVault(service.key_store)
        self.user_queries = UserQueries(service.db, vault)
        self.connection_queries = ConnectionQueries(
            service.db,
            vault,
            service.connection_queries.describe,
            service.connection_queries.opener_on,
        )
        # Loaded once per answer: a page asks for the same streams several times.
        self.users: dict[UUID, User | None] = {}
        self.connections: dict[UUID, list[Connection]] = {}

    def keys_of(self, user_ids: Sequence[UUID]) -> AbstractContextManager[None]:
        """Within it, the facts of these users' streams replayed (connections' and feeds'
        providers, resources and windows: ADR 0032) open with their keys read once, not
        one key read and unwrap per sealed fact of every event replayed."""
        return keys_preloaded(self.service.ledger.mapper, user_ids)

    # -- users -------------------------------------------------------------------------

    def load(self, team_id: UUID, user_id: UUID) -> User:
        """The user as it was, in any state; not yet created, or another team's: 404."""
        if user_id not in self.users:
            found = aggregate_as_of(self.service, user_id, self.instant)
            self.users[user_id] = found if isinstance(found, User) else None
        user = self.users[user_id]
        if user is None or user.team_id != team_id:
            raise UserNotFound()
        return user

    def load_live(self, team_id: UUID, user_id: UUID) -> User:
        user = self.load(team_id, user_id)
        user.require_live()  # the 404s the live reads answered for a gone user
        return user

    def resolved_user(self, team_id: UUID, user_id: UUID) -> dict[str, Any]:
        user = self.load_live(team_id, user_id)
        sources = self.connection_queries.sources_by_user(self.connection_rows([user_id], None))
        row = UserRow.of(user, self.vault)
        return self.user_queries.render(row, sources.get(user_id, []))

    def team_users(self, team_id: UUID) -> list[User]:
        """Every user the team had by the instant, as it was then (any state)."""
        found = aggregates_as_of(self.service, self.team_user_ids(team_id), self.instant)
        users = [u for u in found if isinstance(u, User) and u.team_id == team_id]
        self.users.update({u.id: u for u in users})
        return users

    def list_users(
        self, team_id: UUID, offset: int, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """`UserQueries.list_users` then: the live users, oldest first, one page of them,
        and their number. Loads every user the team had (a debugging read, not a fast one)."""
        live = sorted(
            (u for u in self.team_users(team_id) if u.status == ACTIVE),
            key=lambda u: (u.created_on, u.id),
        )
        page = live[offset : offset + limit]
        rows = self.connection_rows([u.id for u in page], None)
        sources = self.connection_queries.sources_by_user(rows)
        rendered = [
            self.user_queries.render(UserRow.of(u, self.vault), sources.get(u.id, [])) for u in page
        ]
        return rendered, len(live)

    def resolve(self, team_id: UUID, client_user_id: str) -> dict[str, Any]:
        """`UserQueries.resolve` then: the live user that held `client_user_id`, else the
        newest that did (a 404 saying it is scheduled for deletion), else a 404. A user
        erased since cannot be found by it: its value is destroyed with its key."""
        if client_user_id_problem(client_user_id) is not None:
            raise UserNotFound()
        holders = sorted(
            (
                u
                for u in self.team_users(team_id)
                if u.status != ERASED and UserRow.of(u, self.vault).client_user_id == client_user_id
            ),
            key=lambda u: u.created_on,
            reverse=True,
        )
        live = [u for u in holders if u.status == ACTIVE]
        chosen = live[0] if live else (holders[0] if holders else None)
        if chosen is None:
            raise UserNotFound()
        return self.resolved_user(team_id, chosen.id)

    def demographics(self, team_id: UUID, user_id: UUID) -> dict[str, Any]:
        """`UserQueries.demographics` then (the team's closed-beta switch as it was too).
        An erased user's demographics are destroyed with its key: a 404, as now."""
        team = aggregate_as_of(self.service, team_id, self.instant)
        if DEMOGRAPHICS not in getattr(team, "features", ()):
            raise FeatureNotEnabled(DEMOGRAPHICS)
        user = self.load_live(team_id, user_id)
        if user.sealed_demographics is None:
            raise DemographicsNotFound()
        value = self.service.key_store.open(user.id, user.sealed_demographics)
        if value is None:
            raise UserNotFound()
        found: dict[str, Any] = value
        return found

    # -- orders ------------------------------------------------------------------------

    def team_orders(self, team_id: UUID) -> list[Order]:
        """Every order the team had placed by the instant, as it was then (an order of a
        user erased since included: the live listing then showed it)."""
        o = stream_owners.c
        query = select(o.originator_id).where(
            o.team_id == team_id, o.kind == ORDER, o.first_seen_at <= self.instant
        )
        with self.service.db.read() as conn:
            ids = list(dict.fromkeys(conn.execute(query).scalars()))
        found = aggregates_as_of(self.service, ids, self.instant)
        return [a for a in found if isinstance(a, Order) and a.team_id == team_id]

    def order_page(
        self, team_id: UUID, filters: OrderFilters, page: int, size: int
    ) -> tuple[list[OrderRow], int]:
        """`OrderQueries.page` then: the team's orders that passed the filters, newest
        first, one page of them, and their number. The rows are the orders as they were,
        their sealed values opened by the placeholder vault. Filtered by `interpretation`
        when an order's was erased since, it is a 422: whether that order passed is gone
        with its user's key, and a listing that leaves it out would be a wrong answer."""
        rows = [OrderRow.of(order, self.vault) for order in self.team_orders(team_id)]
        if filters.interpretation is not None and any(
            row.interpretation == ERASED_PLACEHOLDER for row in rows
        ):
            raise InvalidRequest(ERASED_FILTER, "interpretation", "query")
        kept = sorted(
            (row for row in rows if _passes(row, filters)),
            key=lambda row: (row.created_at, row.order_id),
            reverse=True,
        )
        return kept[(page - 1) * size : page * size], len(kept)

    # -- lab tests ---------------------------------------------------------------------

    def lab_tests(self, team_id: UUID) -> list[LabTestRow]:
        """`LabTestQueries.team_lab_tests` then: the shared demo tests, then the team's
        own created by the instant, oldest first. The demo tests are reference data
        shipped with the service, not in the log: they show as the running release has
        them. A team's lab test is never removed, so its id is in the read model; its
        name and state then (`Updated` events up to the instant) are in the log."""
        demo = [r for r in self.service.lab_tests.team_lab_tests(team_id) if r.auto_generated]
        t = lab_test_table.c
        with self.service.db.read() as conn:
            ids = list(conn.execute(select(t.lab_test_id).where(t.team_id == team_id)).scalars())
        own = [
            _lab_test_row(a)
            for a in aggregates_as_of(self.service, ids, self.instant)
            if isinstance(a, LabTest) and a.team_id == team_id
        ]
        return [*demo, *sorted(own, key=lambda r: (r.created_at, r.view.id))]

    def lab_test(self, team_id: UUID, lab_test_id: UUID) -> LabTestRow | None:
        """`LabTestQueries.row` then: a shared demo test (reference data, as now), or the
        team's own if it was created by the instant; None otherwise."""
        now = self.service.lab_tests.row(team_id, lab_test_id)
        if now is not None and now.auto_generated:
            return now
        found = aggregate_as_of(self.service, lab_test_id, self.instant)
        if not isinstance(found, LabTest) or found.team_id != team_id:
            return None
        return _lab_test_row(found)

    # -- webhook endpoints (the management API) ----------------------------------------

    def webhook_endpoints(self, team_id: UUID, environment: str) -> list[dict[str, Any]]:
        """`WebhookQueries.endpoints` then: the team's endpoints of the environment that
        existed and were not deleted at the instant, oldest first. An endpoint deleted
        since is gone from the read model, so they are found by their founding event's
        topic in the log (`streams_founded`). Never their secrets."""
        ids = streams_founded(self.service, WebhookEndpoint.Created, self.instant)
        found = sorted(
            (
                a
                for a in aggregates_as_of(self.service, ids, self.instant)
                if _endpoint_of(a, team_id, environment)
            ),
            key=lambda a: (a.created_on, a.id),
        )
        return [_endpoint_view(a) for a in found]

    def webhook_endpoint(
        self, team_id: UUID, environment: str, endpoint_id: UUID
    ) -> dict[str, Any]:
        """`WebhookQueries.endpoint` then (`WebhookEndpoints.endpoint`'s 404s as then:
        not created yet, deleted by then, another team's or environment's)."""
        found = aggregate_as_of(self.service, endpoint_id, self.instant)
        if not _endpoint_of(found, team_id, environment):
            raise WebhookEndpointNotFound()
        return _endpoint_view(found)

    # -- team API keys (the management API) --------------------------------------------

    def team_api_keys(self, team_id: UUID, environment: str) -> list[dict[str, Any]]:
        """`TeamQueries.team_api_keys` then: the team's keys of the environment issued
        and not revoked by the instant, oldest first, without their hashes. A revoked
        key keeps its read model row (`revoked_at`), so the ids come from there and
        each key's state from the log."""
        c = team_api_key_table.c
        query = select(c.key_id).where(c.team_id == team_id, c.environment == environment)
        with self.service.db.read() as conn:
            ids = list(conn.execute(query).scalars())
        keys = sorted(
            (
                a
                for a in aggregates_as_of(self.service, ids, self.instant)
                if isinstance(a, TeamApiKey) and a.revoked_at is None
            ),
            key=lambda a: a.created_on,
        )
        return [
            {
                "id": k.id,
                "team_id": k.team_id,
                "environment": k.environment,
                "region": k.region,
                "created_on": k.created_on,
            }
            for k in keys
        ]

    # -- the organization and its teams (the management API) ---------------------------

    def organization(self, org_id: UUID) -> dict[str, Any]:
        """`TeamQueries.organization` then (its name as then)."""
        found = aggregate_as_of(self.service, org_id, self.instant)
        if not isinstance(found, Organization):
            raise OrganizationNotFound()
        return {"id": found.id, "name": found.name, "created_on": found.created_on}

    def team(self, org_id: UUID, team_id: UUID) -> dict[str, Any]:
        """`TeamQueries.team` then: the organization's team, created and not deleted by
        the instant (else TeamNotFound, a 404)."""
        found = aggregate_as_of(self.service, team_id, self.instant)
        if not isinstance(found, Team) or found.org_id != org_id or found.deleted_at is not None:
            raise TeamNotFound()
        return _team_view(found)

    def teams_page(
        self,
        org_id: UUID,
        *,
        regions: Sequence[str] = (),
        search: str | None = None,
        after: tuple[datetime, UUID] | None = None,
        limit: int = 50,
        only: frozenset[UUID] | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """`TeamQueries.teams_page` then: one page of the organization's teams alive at
        the instant, oldest first, and whether more followed. A deleted team keeps its
        row (`deleted_at`): the ids come from the read model, each team from the log."""
        c = team_table.c
        with self.service.db.read() as conn:
            ids = list(conn.execute(select(c.team_id).where(c.org_id == org_id)).scalars())
        teams = sorted(
            (
                a
                for a in aggregates_as_of(self.service, ids, self.instant)
                if isinstance(a, Team) and a.org_id == org_id and a.deleted_at is None
            ),
            key=lambda a: (a.created_on, a.id),
        )
        needle = None if search is None else search.casefold()
        kept = [
            t
            for t in teams
            if (not regions or t.region in regions)
            and (needle is None or needle in t.name.casefold())
            and (only is None or t.id in only)
            and (after is None or (t.created_on, t.id) > after)
        ]
        return [_team_view(t) for t in kept[:limit]], len(kept) > limit

    def credentials(self, team_id: UUID) -> list[dict[str, Any]]:
        """`TeamQueries.credentials` then: the team's custom credentials not deleted at
        the instant, by provider, never their secrets (a deleted pair keeps its read
        model row: the ids come from there, each pair's state from the log)."""
        c = credentials_table.c
        query = select(c.credentials_id).where(c.team_id == team_id)
        with self.service.db.read() as conn:
            ids = list(conn.execute(query).scalars())
        found = sorted(
            (
                a
                for a in aggregates_as_of(self.service, ids, self.instant)
                if isinstance(a, CustomCredentials)
                and a.team_id == team_id
                and a.status != CREDENTIALS_DELETED
            ),
            key=lambda a: a.provider,
        )
        return [
            {
                "provider": a.provider,
                "status": a.status,
                "client_id": a.client_id,
                "has_client_secret": a.status == CREDENTIALS_SET,
                "updated_at": a.modified_on,
            }
            for a in found
        ]

    def management_keys(self, org_id: UUID) -> list[dict[str, Any]]:
        """`TeamQueries.management_keys` then: the organization's management keys issued
        and not revoked by the instant, oldest first, with their labels and team
        bindings as then, never their text or hash (a revoked key keeps its row: the ids
        come from the read model, each key's state from the log)."""
        c = management_key_table.c
        with self.service.db.read() as conn:
            ids = list(conn.execute(select(c.key_id).where(c.org_id == org_id)).scalars())
        keys = sorted(
            (
                a
                for a in aggregates_as_of(self.service, ids, self.instant)
                if isinstance(a, ManagementKey) and a.org_id == org_id and a.revoked_at is None
            ),
            key=lambda a: a.created_on,
        )
        return [
            {
                "id": k.id,
                "label": k.label,
                "role": k.role,
                "team_role_bindings": [{"team_id": t} for t in k.team_ids],
                "created_on": k.created_on,
            }
            for k in keys
        ]

    # -- connections -------------------------------------------------------------------

    def owned(self, user_ids: Sequence[UUID], kind: str) -> list[UUID]:
        """The streams of this kind that the users owned by the instant."""
        o = stream_owners.c
        query = select(o.originator_id).where(
            o.user_id.in_(list(user_ids)), o.kind == kind, o.first_seen_at <= self.instant
        )
        with self.service.db.read() as conn:
            return list(conn.execute(query).scalars())

    def live_connections(self, user_id: UUID) -> list[Connection]:
        """The user's connections that were not deregistered, in the read model's order."""
        if user_id not in self.connections:
            ids = self.owned([user_id], CONNECTION)
            with self.keys_of([user_id]):
                found = [
                    c
                    for c in aggregates_as_of(self.service, ids, self.instant)
                    if isinstance(c, Connection) and c.is_live
                ]
            self.connections[user_id] = sorted(found, key=lambda c: (c.connected_at, c.provider))
        return self.connections[user_id]

    def connection_rows(
        self, user_ids: Sequence[UUID], provider: str | None
    ) -> list[ConnectionRow]:
        return [
            ConnectionRow.of(c)
            for user_id in sorted(user_ids)
            for c in self.live_connections(user_id)
            if provider is None or c.provider == provider
        ]

    def providers_of(self, user_id: UUID) -> list[dict[str, Any]]:
        return self.connection_queries.provider_items(self.connection_rows([user_id], None))

    # -- introspection -----------------------------------------------------------------

    def user_page(
        self,
        team_id: UUID,
        *,
        user_id: UUID | None,
        provider: str | None,
        after: UUID | None,
        limit: int,
    ) -> list[UUID]:
        """Live users of the team with a live connection (to `provider` if given), by id."""
        candidates = [user_id] if user_id is not None else self.team_user_ids(team_id)
        page: list[UUID] = []
        for candidate in sorted(candidates):
            if len(page) == limit:
                break
            if after is not None and candidate <= after:
                continue
            try:
                user = self.load(team_id, candidate)
            except UserNotFound:
                continue
            if user.status == ACTIVE and self.connection_rows([candidate], provider):
                page.append(candidate)
        return page

    def team_user_ids(self, team_id: UUID) -> list[UUID]:
        """Every user the team had created by the instant (any state then)."""
        o = stream_owners.c
        query = select(o.user_id).where(
            o.team_id == team_id, o.kind == USER, o.first_seen_at <= self.instant
        )
        with self.service.db.read() as conn:
            return list(conn.execute(query).scalars())

    def feeds_of(self, user_ids: Sequence[UUID], provider: str | None) -> list[FeedRow]:
        """The pulls of the users' live connections (feeds with a pull scheduled)."""
        # The page's keys read once for its connections and feeds alike (a user's own
        # `keys_of` within it adds no query).
        with self.keys_of(user_ids):
            live = {row.connection_id for row in self.connection_rows(user_ids, provider)}
            rows = [
                FeedRow.of(f)
                for f in aggregates_as_of(self.service, self.owned(user_ids, PULL), self.instant)
                if isinstance(f, ResourceFeed) and f.connection_id in live and f.status is not None
            ]
        return sorted(rows, key=lambda f: (f.user_id, f.provider, f.resource))

    def live_providers_of(
        self, user_ids: Sequence[UUID], provider: str | None
    ) -> list[ConnectionRow]:
        return self.connection_rows(user_ids, provider)

    def resource_feeds_of(
        self, user_ids: Sequence[UUID], provider: str | None
    ) -> list[ResourceRow]:
        """`PullQueries.feeds_of` then (`/v2/introspect/resources`): every feed of the
        users' live connections (a pull scheduled or not), with its connection's status
        and its last attempt, which the read model keeps and the aggregate does not: it
        comes from the feed's own events up to the instant, newest first."""
        rows = []
        versions = versions_at(self.service, self.owned(user_ids, PULL), self.instant)
        with self.keys_of(user_ids):
            live = {
                c.id: c
                for user_id in user_ids
                for c in self.live_connections(user_id)
                if provider is None or c.provider == provider
            }
            feeds = self.service.ledger.find_many(list(versions), versions)
            for feed_id, version in versions.items():
                feed = feeds.get(feed_id)
                if not isinstance(feed, ResourceFeed) or feed.connection_id not in live:
                    continue
                attempt_at, attempt_status = self.last_attempt(feed_id, version)
                rows.append(
                    ResourceRow(
                        user_id=feed.user_id,
                        provider=feed.provider,
                        resource=feed.resource,
                        status=feed.status,
                        connection_status=live[feed.connection_id].status,
                        last_attempt_at=attempt_at,
                        last_attempt_status=attempt_status,
                        oldest_day=feed.oldest_day,
                        newest_day=feed.newest_day,
                    )
                )
        return sorted(rows, key=lambda f: (f.user_id, f.provider, f.resource))

    def last_attempt(self, feed_id: UUID, version: int) -> tuple[datetime | None, str | None]:
        """The feed's last attempt at `version`, as the connections projection keeps it:
        when the last pull attempt or daily sync began, and how the last one went."""
        at: datetime | None = None
        status: str | None = None
        below = version
        while below > 0 and at is None:
            page = list(self.service.ledger.events.get(feed_id, lte=below, desc=True, limit=64))
            if not page:
                break
            for event in page:
                found = _ATTEMPTS.get(type(event))
                if found is not None:
                    status = status or found
                    if isinstance(event, (ResourceFeed.PullStarted, ResourceFeed.DailySynced)):
                        at = event.timestamp
                        break
            below = page[-1].originator_version - 1
        return at, status


def _team_view(team: Team) -> dict[str, Any]:
    """What `TeamQueries` answers of a team's row."""
    return {
        "id": team.id,
        "name": team.name,
        "created_on": team.created_on,
        "region": team.region,
        "org_id": team.org_id,
        "settings": team.settings,
        "features": sorted(team.features),
    }


def _endpoint_of(found: Any, team_id: UUID, environment: str) -> TypeGuard[WebhookEndpoint]:
    """Whether `found` is a live endpoint of the team's environment."""
    return (
        isinstance(found, WebhookEndpoint)
        and found.deleted_at is None
        and found.team_id == team_id
        and found.environment == environment
    )


def _endpoint_view(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """What `WebhookQueries` answers of an endpoint's row (no secret)."""
    return {
        "id": endpoint.id,
        "team_id": endpoint.team_id,
        "environment": endpoint.environment,
        "url": endpoint.url,
        "description": endpoint.description,
        "filter_types": list(endpoint.filter_types),
        "disabled": endpoint.disabled_reason is not None,
        "disabled_reason": endpoint.disabled_reason,
        "created_on": endpoint.created_on,
        "updated_at": endpoint.modified_on,
    }


def _lab_test_row(test: LabTest) -> LabTestRow:
    """The row the lab_tests projection made of `test`."""
    return LabTestRow.of(test)


def _passes(row: OrderRow, filters: OrderFilters) -> bool:
    """Whether an order passes a listing's filters: `orders._conditions`, in Python."""
    if filters.user_id is not None and row.user_id != filters.user_id:
        return False
    if filters.statuses and not any(
        row.status == status or row.detailed_status.endswith(f".{status}")
        for status in filters.statuses
    ):
        return False
    if filters.interpretation is not None and row.interpretation != filters.interpretation:
        return False
    for value, start, end in (
        (row.created_at, filters.created_from, filters.created_until),
        (row.updated_at, filters.updated_from, filters.updated_until),
    ):
        if (start is not None and value < start) or (end is not None and value > end):
            return False
    if filters.methods and row.collection_method not in filters.methods:
        return False
    return not filters.order_ids or row.order_id in filters.order_ids


# -- the read models as of an instant, in a database of their own ------------------------


@dataclass(frozen=True)
class Replayed:
    path: Path
    events: int


class ReplayRefused(ValueError):
    """The target cannot be written: it exists (without `force`), it is the source, or its
    directory does not exist."""


def replay_until(
    service: Service,
    until: datetime,
    target: Path,
    *,
    force: bool = False,
    progress: Callable[[int], None] = lambda n: None,
) -> Replayed:
    """Build the read models as they were at `until` into a new SQLite database at
    `target`, for debugging: the schema at its head, the events up to the instant copied
    from the service's log (as stored, with their notification ids), then every read
    model projected from them by the rebuild (`ReadModels.rebuild`). `progress` is called
    with the number of events of each page copied, then of each page projected.

    The source is only read. The copy holds no data key (a copy of a key would outlive
    the erasure of its user), so its sealed values cannot be opened: the client_user_ids
    the users rows hold in clear are placeholders (sealed, or erased since). Nor does it
    hold pulled health data, snapshots or tracking positions: it is for reading, not for
    serving."""
    target = target.resolve()
    source = service.db.url
    if service.db.is_sqlite and source.database and Path(source.database).resolve() == target:
        raise ReplayRefused(f"{target} is the service's own database")
    if not target.parent.is_dir():
        raise ReplayRefused(f"{target.parent} is not a directory: make it first")
    companions = [target, *(target.with_name(target.name + s) for s in _SQLITE_FILES)]
    if any(path.exists() for path in companions):
        if not force:
            raise ReplayRefused(f"{target} exists (give --force to replace it)")
        for path in companions:
            path.unlink(missing_ok=True)
    url = f"sqlite:///{target}"
    migrating.upgrade(url)
    db = Database(url)
    try:
        copied = _copy_events(service, db, until, progress)

        def open_sealed(conn: Any, user_id: UUID, sealed: str) -> str | None:
            # A value the projection opens (a client_user_id) shows as sealed while the
            # service holds its key, and as erased (None) once the key is destroyed.
            return SEALED_PLACEHOLDER if service.key_store.has_key(user_id) else None

        read_models = ReadModels(db, open_sealed)
        read_models.rebuild(LedgerRecorder(db), service.ledger.mapper, progress=progress)
    finally:
        db.dispose()
    return Replayed(target, copied)


# A SQLite database's companion files, removed with it when it is replaced.
_SQLITE_FILES = ("-wal", "-shm", "-journal")
_COPY_PAGE = 500


def _copy_events(
    service: Service, db: Database, until: datetime, progress: Callable[[int], None]
) -> int:
    """Copy the log's events up to `until` into `db`'s, page by page, every column as
    stored."""
    source = service.recorder.tables.events
    target = LedgerRecorder(db).tables.events
    copied, after = 0, 0
    while True:
        query = (
            select(source)
            .where(source.c.notification_id > after, source.c.timestamp <= until)
            .order_by(source.c.notification_id)
            .limit(_COPY_PAGE)
        )
        with service.db.read() as conn:
            rows = [dict(row) for row in conn.execute(query).mappings()]
        if not rows:
            return copied
        with db.write() as conn:
            conn.execute(insert(target), rows)
        copied += len(rows)
        after = rows[-1]["notification_id"]
        progress(len(rows))
