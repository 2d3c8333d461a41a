"""The connections context's read models: provider connections, their resource feeds
(each feed's latest historical pull and daily sync) and link tokens."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.schema import (
    connections,
    link_tokens,
    resource_feeds,
)
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    UpdatesByKey,
    insert_of,
)
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.connections.connection import CONNECTED, PAUSED
from healthledger.domain.connections.connection import DEREGISTERED as CONNECTION_DEREGISTERED
from healthledger.domain.connections.connection import ERROR as CONNECTION_ERROR
from healthledger.domain.connections.connection import Connection as ProviderConnection
from healthledger.domain.connections.link_tokens import LinkToken
from healthledger.domain.connections.resource_feeds import FAILURE as PULL_FAILURE
from healthledger.domain.connections.resource_feeds import IN_PROGRESS as PULL_IN_PROGRESS
from healthledger.domain.connections.resource_feeds import RETRYING as PULL_RETRYING
from healthledger.domain.connections.resource_feeds import SCHEDULED as PULL_SCHEDULED
from healthledger.domain.connections.resource_feeds import SUCCESS as PULL_SUCCESS
from healthledger.domain.connections.resource_feeds import ResourceFeed
from sqlalchemy import ColumnElement, Connection, case, func

# last_attempt_status of a feed whose attempt failed (retrying or failure).
ATTEMPT_FAILED = "failed"

# Compiled once (per set of columns an update sets): a rebuild runs them for every
# event, held and run together (ReadModels.rebuild).
_f = resource_feeds.c
INSERT_CONNECTION = CompiledStatement(
    insert_of(
        connections,
        (
            "connection_id",
            "user_id",
            "team_id",
            "provider",
            "status",
            "created_on",
            "resource_availability",
            "error_details",
            "sealed_external_user_id",
            "demo",
            "updated_at",
        ),
    )
)
UPDATE_CONNECTION = UpdatesByKey(connections, "connection_id")
INSERT_FEED = CompiledStatement(
    insert_of(
        resource_feeds,
        (
            "feed_id",
            "connection_id",
            "user_id",
            "team_id",
            "provider",
            "resource",
            "days_with_data",
            "attempts",
            "version",
        ),
    )
)


def _earliest(bound: ColumnElement[Any]) -> ColumnElement[Any]:
    """The feed's oldest day, widened down to `bound`."""
    return case(
        (_f.oldest_day.is_(None), bound), (_f.oldest_day > bound, bound), else_=_f.oldest_day
    )


def _latest(bound: ColumnElement[Any]) -> ColumnElement[Any]:
    """The feed's newest day, widened up to `bound`."""
    return case(
        (_f.newest_day.is_(None), bound), (_f.newest_day < bound, bound), else_=_f.newest_day
    )


UPDATE_FEED = UpdatesByKey(
    resource_feeds,
    "feed_id",
    {
        # A pull's first start is kept over its retries.
        "started_at": lambda bound: func.coalesce(_f.started_at, bound),
        "oldest_day": _earliest,
        "newest_day": _latest,
    },
)
INSERT_LINK_TOKEN = CompiledStatement(
    insert_of(
        link_tokens,
        (
            "token_id",
            "team_id",
            "user_id",
            "environment",
            "token_hash",
            "provider",
            "redirect_url",
            "filter_on_providers",
            "on_error",
            "on_close",
            "issued_at",
        ),
    )
)
UPDATE_LINK_TOKEN = UpdatesByKey(link_tokens, "token_id")

# -- provider connections -------------------------------------------------------------


@handles(ProviderConnection.Created, ProviderConnection.Reconnected)
def connection_connected(conn: Connection, e: Any) -> None:
    values = {
        "status": CONNECTED,
        "created_on": e.timestamp,
        "resource_availability": e.resource_availability,
        "error_details": None,
        "sealed_external_user_id": e.sealed_external_user_id,
        "demo": e.demo,
        "updated_at": e.timestamp,
    }
    if isinstance(e, ProviderConnection.Created):
        INSERT_CONNECTION.execute(
            conn,
            {
                "connection_id": e.originator_id,
                "user_id": e.user_id,
                "team_id": e.team_id,
                "provider": e.provider,
                **values,
            },
        )
    else:
        UPDATE_CONNECTION.execute(conn, e.originator_id, values)


@handles(ProviderConnection.Deregistered)
def connection_deregistered(conn: Connection, e: Any) -> None:
    UPDATE_CONNECTION.execute(
        conn, e.originator_id, {"status": CONNECTION_DEREGISTERED, "updated_at": e.timestamp}
    )


@handles(ProviderConnection.Errored)
def connection_errored(conn: Connection, e: Any) -> None:
    details = {
        "error_type": e.error_type,
        "error_message": e.error_message,
        "errored_at": e.timestamp.isoformat(),
    }
    UPDATE_CONNECTION.execute(
        conn,
        e.originator_id,
        {"status": CONNECTION_ERROR, "error_details": details, "updated_at": e.timestamp},
    )


@handles(ProviderConnection.Paused, ProviderConnection.Resumed)
def connection_status(conn: Connection, e: Any) -> None:
    status = PAUSED if isinstance(e, ProviderConnection.Paused) else CONNECTED
    UPDATE_CONNECTION.execute(conn, e.originator_id, {"status": status, "updated_at": e.timestamp})


# -- resource feeds and their pulls ---------------------------------------------------


@handles(ResourceFeed.Created)
def feed_created(conn: Connection, e: ResourceFeed.Created) -> None:
    INSERT_FEED.execute(
        conn,
        {
            "feed_id": e.originator_id,
            "connection_id": e.connection_id,
            "user_id": e.user_id,
            "team_id": e.team_id,
            "provider": e.provider,
            "resource": e.resource,
            "days_with_data": 0,
            "attempts": 0,
            "version": e.originator_version,
        },
    )


def update_feed(conn: Connection, e: Any, **values: Any) -> None:
    UPDATE_FEED.execute(conn, e.originator_id, {"version": e.originator_version, **values})


@handles(ResourceFeed.PullScheduled)
def pull_scheduled(conn: Connection, e: ResourceFeed.PullScheduled) -> None:
    update_feed(
        conn,
        e,
        status=PULL_SCHEDULED,
        range_start=e.range_start,
        range_end=e.range_end,
        scheduled_at=e.timestamp,
        started_at=None,
        ended_at=None,
        days_with_data=0,
        release=e.release,
        trace_id=e.trace_id,
        error_code=None,
        attempts=0,
        due_at=e.timestamp,
        synced_at=None,
    )


@handles(ResourceFeed.PullStarted)
def pull_started(conn: Connection, e: ResourceFeed.PullStarted) -> None:
    update_feed(
        conn,
        e,
        status=PULL_IN_PROGRESS,
        # Kept if set (UPDATE_FEED's expression): the first attempt's start.
        started_at=e.timestamp,
        attempts=e.attempt,
        due_at=None,
        last_attempt_at=e.timestamp,
        last_attempt_status=PULL_IN_PROGRESS,
    )


@handles(ResourceFeed.PullRetrying)
def pull_retrying(conn: Connection, e: ResourceFeed.PullRetrying) -> None:
    update_feed(
        conn,
        e,
        status=PULL_RETRYING,
        error_code=e.error_code,
        due_at=e.retry_at,
        last_attempt_status=ATTEMPT_FAILED,
    )


@handles(ResourceFeed.PullSucceeded)
def pull_succeeded(conn: Connection, e: ResourceFeed.PullSucceeded) -> None:
    update_feed(
        conn,
        e,
        status=PULL_SUCCESS,
        ended_at=e.timestamp,
        days_with_data=e.days_with_data,
        error_code=None,
        due_at=None,
        synced_at=e.timestamp,
        last_attempt_status=PULL_SUCCESS,
        **widened(e.oldest_day, e.newest_day),
    )


@handles(ResourceFeed.PullFailed)
def pull_failed(conn: Connection, e: ResourceFeed.PullFailed) -> None:
    update_feed(
        conn,
        e,
        status=PULL_FAILURE,
        ended_at=e.timestamp,
        error_code=e.error_code,
        due_at=None,
        last_attempt_status=ATTEMPT_FAILED,
    )


@handles(ResourceFeed.DailySynced)
def daily_synced(conn: Connection, e: ResourceFeed.DailySynced) -> None:
    days = [*e.created_days, *e.updated_days]
    update_feed(
        conn,
        e,
        synced_at=e.timestamp,
        last_attempt_at=e.timestamp,
        last_attempt_status=PULL_SUCCESS,
        **(widened(min(days), max(days)) if days else {}),
    )


def widened(oldest: Any, newest: Any) -> dict[str, Any]:
    """Column values that widen the feed's data span to include oldest..newest
    (UPDATE_FEED's expressions keep what is wider)."""
    values: dict[str, Any] = {}
    if oldest is not None:
        values["oldest_day"] = oldest
    if newest is not None:
        values["newest_day"] = newest
    return values


# -- link tokens ----------------------------------------------------------------------


@handles(LinkToken.Issued)
def link_token_issued(conn: Connection, e: LinkToken.Issued) -> None:
    INSERT_LINK_TOKEN.execute(
        conn,
        {
            "token_id": e.originator_id,
            "team_id": e.team_id,
            "user_id": e.user_id,
            "environment": e.environment,
            "token_hash": e.token_hash,
            "provider": e.provider,
            "redirect_url": e.redirect_url,
            "filter_on_providers": e.filter_on_providers,
            "on_error": e.on_error,
            "on_close": e.on_close,
            "issued_at": e.timestamp,
        },
    )


@handles(LinkToken.Consumed)
def link_token_consumed(conn: Connection, e: LinkToken.Consumed) -> None:
    UPDATE_LINK_TOKEN.execute(
        conn, e.originator_id, {"consumed_at": e.timestamp, "consumed_provider": e.provider}
    )
