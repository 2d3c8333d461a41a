"""Introspection of pulls (gaps.md: historical pulls; `resources` is not in the spec and
answers the official client's shape, docs/compatibility.md): per user, per live
connection, what was pulled, when, and how it ended. Paged by user with signed cursors
bound to the listing's filters."""

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Protocol
from uuid import UUID

from fastapi import APIRouter, Query
from healthledger.adapters.compliance.time_travel import reads_as_of
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller, TeamCaller
from healthledger.adapters.http.cursors import CursorCodec, InvalidCursor
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService, Cursors
from healthledger.adapters.operations.schemas import HistoricalPullsPage, UserResourcesPage
from healthledger.domain.connections.connection import CONNECTED
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.personal_data import ERASED_PLACEHOLDER

# The official client sends the page cursor as `cursor` (deprecated there) or `next_cursor`;
# a caller that pages with `cursor` must not be handed the first page again, forever.
CURSOR_ALIAS = Query(
    max_length=512, deprecated=True, description="The same as next_cursor, which wins."
)


class IntrospectionReads(Protocol):
    """What a listing reads: now (`LiveReads`), or as of an instant (`ReadsAsOf`)."""

    def load_live(self, team_id: UUID, user_id: UUID) -> Any: ...

    def user_page(
        self,
        team_id: UUID,
        *,
        user_id: UUID | None,
        provider: str | None,
        after: UUID | None,
        limit: int,
    ) -> list[UUID]: ...

    def feeds_of(self, user_ids: Sequence[UUID], provider: str | None) -> Sequence[Any]: ...

    def live_providers_of(
        self, user_ids: Sequence[UUID], provider: str | None
    ) -> Sequence[Any]: ...


class LiveReads:
    """The listings' reads now: the live user (from its stream) and the read models."""

    def __init__(self, service: Service) -> None:
        queries = service.pull_queries
        self.load_live = service.users.load_live
        self.user_page = queries.user_page
        self.feeds_of = queries.feeds_of
        self.live_providers_of = queries.live_providers_of
        self.ledger = service.ledger

    def resource_feeds_of(self, user_ids: Sequence[UUID], provider: str | None) -> list[Any]:
        """`feeds_of`, each with the oldest and newest day of data its feed holds: sealed
        in the feed's events (issue 29: which days a person had data), so read from the
        page's feeds' aggregates (two queries for the page) rather than a clear column."""
        rows = self.feeds_of(user_ids, provider)
        feeds = self.ledger.find_many([row.feed_id for row in rows])
        for row in rows:
            feed = feeds.get(row.feed_id)
            row.oldest_day = feed.oldest_day if isinstance(feed, ResourceFeed) else None
            row.newest_day = feed.newest_day if isinstance(feed, ResourceFeed) else None
        return rows


# What a resource's feed looks like from outside in /v2/introspect/resources.
_FEED_STATUS = {CONNECTED: "active"}


def _named(row: Any) -> bool:
    """Whether a connection's or feed's provider and resource can be named: not those of
    a user erased since, read as of before (ADR 0032). The answers key their maps by
    them, so those are left out rather than merged under one placeholder."""
    return row.provider != ERASED_PLACEHOLDER and getattr(row, "resource", None) != (
        ERASED_PLACEHOLDER
    )


def _page(
    service: Service,
    cursors: CursorCodec,
    listing: str,
    caller: TeamCaller,
    reads: IntrospectionReads,
    user_id: UUID | None,
    provider: str | None,
    user_limit: int,
    next_cursor: str | None,
    render: Callable[[list[UUID]], list[dict[str, Any]]],
) -> dict[str, Any]:
    if provider is not None and provider not in service.catalog:
        raise InvalidRequest("Unknown provider slug.", "provider", "query")
    if user_id is not None:
        reads.load_live(caller.team_id, user_id)  # another team's user: 404
    scope = f"{listing}:{caller.team_id}:{user_id or ''}:{provider or ''}:{user_limit}"
    after = None
    if next_cursor:
        try:
            after = UUID(cursors.decode(next_cursor, scope)["u"])
        except (KeyError, TypeError, ValueError):
            raise InvalidCursor() from None
    user_ids = reads.user_page(
        caller.team_id, user_id=user_id, provider=provider, after=after, limit=user_limit + 1
    )
    more = len(user_ids) > user_limit
    user_ids = user_ids[:user_limit]
    cursor = cursors.encode({"u": str(user_ids[-1])}, scope) if more else None
    return {"data": render(user_ids), "next_cursor": cursor}


def historical_pulls_of(
    reads: IntrospectionReads, user_ids: list[UUID], provider: str | None
) -> list[dict[str, Any]]:
    """The users' historical pulls as the listing shows them (the facade's too): per
    provider, each resource's pull, and what the provider offers that none covered."""
    pulled: dict[tuple[UUID, str], dict[str, Any]] = {}
    for f in reads.feeds_of(user_ids, provider):
        if f.status is None or not _named(f):
            continue
        pulled.setdefault((f.user_id, f.provider), {})[f.resource] = {
            "status": f.status,
            "range_start": f.range_start,
            "range_end": f.range_end,
            "timeline": {
                "scheduled_at": f.scheduled_at,
                "started_at": f.started_at,
                "ended_at": f.ended_at,
            },
            "days_with_data": f.days_with_data,
            "release": f.release,
            "trace_id": f.trace_id,
            "error_details": f.error_code,
        }
    by_user: dict[UUID, dict[str, Any]] = {u: {} for u in user_ids}
    for row in reads.live_providers_of(user_ids, provider):
        if not _named(row):
            continue
        done = pulled.get((row.user_id, row.provider), {})
        by_user[row.user_id][row.provider] = {
            "pulled": done,
            # What the provider offers that no pull has covered.
            "not_pulled": sorted(set(row.resource_availability) - set(done)),
        }
    return [{"user_id": u, "provider": by_user[u]} for u in user_ids]


router = APIRouter(tags=["introspection"], route_class=LedgerRoute)
RESPONSES = error_responses(400, 401, 404, 422, described=USER_NOT_FOUND)


@router.get(
    "/v2/introspect/historical_pull", response_model=HistoricalPullsPage, responses=RESPONSES
)
def historical_pull(
    service: CurrentService,
    cursors: Cursors,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    user_id: UUID | None = None,
    provider: str | None = None,
    user_limit: Annotated[int, Query(ge=1, le=100)] = 50,
    next_cursor: Annotated[str | None, Query(max_length=512)] = None,
    cursor: Annotated[str | None, CURSOR_ALIAS] = None,
) -> Any:
    """Each live connection's historical pulls, one per resource (gaps.md shape)."""
    reads = LiveReads(service) if as_of is None else reads_as_of(service, as_of)

    def render(user_ids: list[UUID]) -> list[dict[str, Any]]:
        return historical_pulls_of(reads, user_ids, provider)

    return _page(
        service,
        cursors,
        "historical_pull",
        caller,
        reads,
        user_id,
        provider,
        user_limit,
        next_cursor or cursor,
        render,
    )


@router.get(
    "/v2/introspect/resources",
    response_model=UserResourcesPage,
    responses=RESPONSES,
)
def resources(
    service: CurrentService,
    cursors: Cursors,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    user_id: UUID | None = None,
    provider: str | None = None,
    user_limit: Annotated[int, Query(ge=1, le=100)] = 50,
    next_cursor: Annotated[str | None, Query(max_length=512)] = None,
    cursor: Annotated[str | None, CURSOR_ALIAS] = None,
) -> Any:
    """Per resource of each live connection, its last attempt (historical pull or
    daily sync) and the oldest and newest day of data it holds: `provider` maps a slug
    to its resources directly, as the official client reads it. With `as_of`: as it
    answered at that instant (from the log)."""
    past = None if as_of is None else reads_as_of(service, as_of)
    live = LiveReads(service)
    feeds_of = live.resource_feeds_of if past is None else past.resource_feeds_of

    def render(user_ids: list[UUID]) -> list[dict[str, Any]]:
        by_user: dict[UUID, dict[str, Any]] = {u: {} for u in user_ids}
        for f in feeds_of(user_ids, provider):
            if not _named(f):
                continue
            resources = by_user[f.user_id].setdefault(f.provider, {})
            resources[f.resource] = {
                "status": _FEED_STATUS.get(f.connection_status, f.connection_status),
                "pull_status": f.status,
                "last_attempt": None
                if f.last_attempt_at is None
                else {"timestamp": f.last_attempt_at, "status": f.last_attempt_status},
                "oldest_data": f.oldest_day,
                "newest_data": f.newest_day,
                # The client's member; what it counts is not public, so not guessed.
                "sent_count": None,
            }
        return [{"user_id": u, "provider": by_user[u]} for u in user_ids]

    return _page(
        service,
        cursors,
        "resources",
        caller,
        live if past is None else past,
        user_id,
        provider,
        user_limit,
        next_cursor or cursor,
        render,
    )
