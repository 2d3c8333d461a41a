"""The connections context's read models: provider connections, their resource feeds
(each feed's latest historical pull and daily sync) and link tokens."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.projections import Handlers
from healthledger.adapters.persistence.schema import (
    UTCDateTime,
    connections,
    link_tokens,
    resource_feeds,
)
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
from sqlalchemy import Connection, case, func, insert, literal, update

# last_attempt_status of a feed whose attempt failed (retrying or failure).
ATTEMPT_FAILED = "failed"

# -- provider connections -------------------------------------------------------------


def connection_connected(conn: Connection, e: Any) -> None:
    c = connections.c
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
        conn.execute(
            insert(connections).values(
                connection_id=e.originator_id,
                user_id=e.user_id,
                team_id=e.team_id,
                provider=e.provider,
                **values,
            )
        )
    else:
        conn.execute(update(connections).where(c.connection_id == e.originator_id).values(**values))


def connection_deregistered(conn: Connection, e: Any) -> None:
    conn.execute(
        update(connections)
        .where(connections.c.connection_id == e.originator_id)
        .values(status=CONNECTION_DEREGISTERED, updated_at=e.timestamp)
    )


def connection_errored(conn: Connection, e: Any) -> None:
    details = {
        "error_type": e.error_type,
        "error_message": e.error_message,
        "errored_at": e.timestamp.isoformat(),
    }
    conn.execute(
        update(connections)
        .where(connections.c.connection_id == e.originator_id)
        .values(status=CONNECTION_ERROR, error_details=details, updated_at=e.timestamp)
    )


def connection_status(conn: Connection, e: Any) -> None:
    status = PAUSED if isinstance(e, ProviderConnection.Paused) else CONNECTED
    conn.execute(
        update(connections)
        .where(connections.c.connection_id == e.originator_id)
        .values(status=status, updated_at=e.timestamp)
    )


# -- resource feeds and their pulls ---------------------------------------------------


def feed_created(conn: Connection, e: ResourceFeed.Created) -> None:
    conn.execute(
        insert(resource_feeds).values(
            feed_id=e.originator_id,
            connection_id=e.connection_id,
            user_id=e.user_id,
            team_id=e.team_id,
            provider=e.provider,
            resource=e.resource,
            days_with_data=0,
            attempts=0,
            version=e.originator_version,
        )
    )


def update_feed(conn: Connection, e: Any, **values: Any) -> None:
    conn.execute(
        update(resource_feeds)
        .where(resource_feeds.c.feed_id == e.originator_id)
        .values(version=e.originator_version, **values)
    )


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


def pull_started(conn: Connection, e: ResourceFeed.PullStarted) -> None:
    f = resource_feeds.c
    update_feed(
        conn,
        e,
        status=PULL_IN_PROGRESS,
        # Typed: a datetime SQLAlchemy cannot type by itself (freezegun's) would be
        # bound as the driver's own text.
        started_at=func.coalesce(f.started_at, literal(e.timestamp, UTCDateTime)),
        attempts=e.attempt,
        due_at=None,
        last_attempt_at=e.timestamp,
        last_attempt_status=PULL_IN_PROGRESS,
    )


def pull_retrying(conn: Connection, e: ResourceFeed.PullRetrying) -> None:
    update_feed(
        conn,
        e,
        status=PULL_RETRYING,
        error_code=e.error_code,
        due_at=e.retry_at,
        last_attempt_status=ATTEMPT_FAILED,
    )


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
    """Column values that widen the feed's data span to include oldest..newest."""
    f = resource_feeds.c
    values: dict[str, Any] = {}
    if oldest is not None:
        values["oldest_day"] = case(
            (f.oldest_day.is_(None), oldest), (f.oldest_day > oldest, oldest), else_=f.oldest_day
        )
    if newest is not None:
        values["newest_day"] = case(
            (f.newest_day.is_(None), newest), (f.newest_day < newest, newest), else_=f.newest_day
        )
    return values


# -- link tokens ----------------------------------------------------------------------


def link_token_issued(conn: Connection, e: LinkToken.Issued) -> None:
    conn.execute(
        insert(link_tokens).values(
            token_id=e.originator_id,
            team_id=e.team_id,
            user_id=e.user_id,
            environment=e.environment,
            token_hash=e.token_hash,
            provider=e.provider,
            redirect_url=e.redirect_url,
            filter_on_providers=e.filter_on_providers,
            on_error=e.on_error,
            on_close=e.on_close,
            issued_at=e.timestamp,
        )
    )


def link_token_consumed(conn: Connection, e: LinkToken.Consumed) -> None:
    conn.execute(
        update(link_tokens)
        .where(link_tokens.c.token_id == e.originator_id)
        .values(consumed_at=e.timestamp, consumed_provider=e.provider)
    )


HANDLERS: Handlers = {
    ProviderConnection.Created: connection_connected,
    ProviderConnection.Reconnected: connection_connected,
    ProviderConnection.Deregistered: connection_deregistered,
    ProviderConnection.Errored: connection_errored,
    ProviderConnection.Paused: connection_status,
    ProviderConnection.Resumed: connection_status,
    ResourceFeed.Created: feed_created,
    ResourceFeed.PullScheduled: pull_scheduled,
    ResourceFeed.PullStarted: pull_started,
    ResourceFeed.PullRetrying: pull_retrying,
    ResourceFeed.PullSucceeded: pull_succeeded,
    ResourceFeed.PullFailed: pull_failed,
    ResourceFeed.DailySynced: daily_synced,
    LinkToken.Issued: link_token_issued,
    LinkToken.Consumed: link_token_consumed,
}
