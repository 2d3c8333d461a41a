"""Connections, resource feeds (the historical pull's state machine) and link tokens:
their commands, events, refused transitions and replay, without I/O."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, date, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from healthledger.domain.connections.connection import (
    BY_TEAM,
    BY_USER_DELETION,
    CONNECTED,
    DEREGISTERED,
    ERROR,
    PAUSED,
    AlreadyConnected,
    Connection,
    NotConnected,
)
from healthledger.domain.connections.link_tokens import (
    INVALID_TOKEN,
    LINK_TOKEN_LIFETIME,
    TOKEN_CONSUMED,
    TOKEN_EXPIRED,
    LinkToken,
    LinkTokenRejected,
    link_error_message,
    link_token_problem,
)
from healthledger.domain.connections.providers import RETRY_QUOTA_EXHAUSTED
from healthledger.domain.connections.resource_feeds import (
    FAILURE,
    IN_PROGRESS,
    RELEASE_LEGACY,
    RELEASE_RETRYING,
    RETRYING,
    RETRYING_SINCE,
    SCHEDULED,
    SUCCESS,
    ResourceFeed,
)
from healthledger.domain.connections.stream_ids import (
    UsersDigest,
    keyed_connection_id,
    keyed_feed_id,
)
from healthledger.domain.context import CommandContext
from healthledger.domain.keys import link_token_id

from tests.unit.stored_form import assert_replays

CTX = CommandContext(actor="team_api_key:k", request_id="req-1")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def digest_of(user_id: UUID) -> UsersDigest:
    """A user's keyed digest, its key made of the id (the aggregates take any id)."""
    return lambda data: hmac.new(user_id.bytes, data, hashlib.sha256).hexdigest()


DELAYS = [60.0, 300.0]

# -- connections ---------------------------------------------------------------------------


def connect(user_id: UUID | None = None, demo: bool = False) -> Connection:
    user_id = user_id or uuid4()
    return Connection.connect_new(
        CTX,
        T0,
        id=keyed_connection_id(digest_of(user_id), "oura"),
        user_id=user_id,
        team_id=uuid4(),
        provider="oura",
        sealed_external_user_id="v1.ext",
        resource_availability={"sleep": "available"},
        demo=demo,
    )


def test_a_new_connection_is_connected_on_the_stream_it_is_given() -> None:
    user_id = uuid4()
    connection = connect(user_id)
    assert connection.id == keyed_connection_id(digest_of(user_id), "oura")
    assert (connection.status, connection.connected_at) == (CONNECTED, T0)
    assert connection.is_live and connection.is_pulling
    assert connection.error_details is None and connection.deregistered_at is None
    assert connection.demo_failures == {}
    (created,) = assert_replays(connection)
    assert isinstance(created, Connection.Created)
    assert (created.actor, created.request_id) == (CTX.actor, CTX.request_id)


def test_error_pause_and_resume_move_only_from_their_states() -> None:
    connection = connect()
    earlier = connection.collect_events()
    connection.resume(CTX, T0)  # not paused: nothing
    connection.pause(CTX, T0)
    assert connection.status == PAUSED and connection.is_live and not connection.is_pulling
    connection.error(CTX, T0, "token_revoked", "revoked")  # paused: not an error
    connection.pause(CTX, T0)  # already paused: nothing
    connection.resume(CTX, T0)
    assert connection.status == CONNECTED
    later = T0 + timedelta(hours=1)
    connection.error(CTX, later, "token_revoked", "The grant was revoked.")
    assert connection.status == ERROR and not connection.is_pulling
    assert connection.error_details == {
        "error_type": "token_revoked",
        "error_message": "The grant was revoked.",
        "errored_at": later,
    }
    connection.pause(CTX, later)  # in error: not paused
    events = assert_replays(connection, earlier)
    assert [type(e).__name__ for e in events] == ["Paused", "Resumed", "Errored"]


def test_reconnecting_is_refused_while_connected_and_repairs_an_error() -> None:
    connection = connect()
    earlier = connection.collect_events()
    with pytest.raises(AlreadyConnected):
        connection.reconnect(
            CTX, T0, sealed_external_user_id=None, resource_availability={}, demo=False
        )
    connection.pause(CTX, T0)
    with pytest.raises(AlreadyConnected):
        connection.reconnect(
            CTX, T0, sealed_external_user_id=None, resource_availability={}, demo=False
        )
    connection.resume(CTX, T0)
    connection.error(CTX, T0, "token_revoked", "revoked")
    later = T0 + timedelta(days=1)
    connection.reconnect(
        CTX, later, sealed_external_user_id="v1.new", resource_availability={}, demo=True
    )
    assert (connection.status, connection.connected_at, connection.error_details) == (
        CONNECTED,
        later,
        None,
    )
    assert connection.sealed_external_user_id == "v1.new" and connection.demo
    assert_replays(connection, earlier)


def test_a_deregistered_connection_connects_again_on_the_same_stream() -> None:
    connection = connect(demo=True)
    connection.configure_demo_failures(CTX, T0, {"sleep": {"code": "unexpected"}})
    assert connection.demo_failures == {"sleep": {"code": "unexpected"}}
    later = T0 + timedelta(hours=2)
    connection.deregister(CTX, later, BY_TEAM)
    assert (connection.status, connection.deregistered_at) == (DEREGISTERED, later)
    assert not connection.is_live
    with pytest.raises(NotConnected):
        connection.deregister(CTX, later, BY_USER_DELETION)
    connection.error(CTX, later, "token_revoked", "revoked")  # deregistered: nothing
    connection.reconnect(
        CTX, later, sealed_external_user_id=None, resource_availability={}, demo=True
    )
    # A new period starts without the previous period's injected failures.
    assert connection.status == CONNECTED and connection.demo_failures == {}
    assert connection.deregistered_at is None and connection.version == 4
    events = assert_replays(connection)
    assert [type(e).__name__ for e in events] == [
        "Created",
        "DemoFailuresConfigured",
        "Deregistered",
        "Reconnected",
    ]


# -- resource feeds: the historical pull ---------------------------------------------------


def feed_with_pull(connection_created_at: datetime = RETRYING_SINCE) -> ResourceFeed:
    connection_id = uuid4()
    feed_id = keyed_feed_id(digest_of(connection_id), connection_id, "sleep")
    feed = ResourceFeed.open(
        CTX,
        T0,
        id=feed_id,
        connection_id=connection_id,
        user_id=uuid4(),
        team_id=uuid4(),
        provider="oura",
        resource="sleep",
    )
    assert feed.id == feed_id
    assert (feed.pull_number, feed.status, feed.is_pending) == (0, None, False)
    feed.schedule_pull(
        CTX,
        T0,
        range_start=T0 - timedelta(days=30),
        range_end=T0,
        connection_created_at=connection_created_at,
    )
    return feed


def test_a_scheduled_pull_starts_and_succeeds() -> None:
    feed = feed_with_pull()
    assert (feed.pull_number, feed.status, feed.is_pending) == (1, SCHEDULED, True)
    assert (feed.retries_allowed, feed.release, feed.scheduled_at) == (True, RELEASE_RETRYING, T0)
    assert UUID(hex=feed.trace_id).hex == feed.trace_id
    started = T0 + timedelta(seconds=1)
    feed.start_attempt(CTX, started)
    assert (feed.status, feed.attempts, feed.started_at) == (IN_PROGRESS, 1, started)
    ended = T0 + timedelta(seconds=5)
    feed.succeed(
        CTX,
        ended,
        days_with_data=3,
        oldest_day=date(2026, 2, 1),
        newest_day=date(2026, 2, 28),
    )
    assert (feed.status, feed.ended_at, feed.error_code, feed.is_pending) == (
        SUCCESS,
        ended,
        None,
        False,
    )
    assert (feed.oldest_day, feed.newest_day, feed.days_with_data) == (
        date(2026, 2, 1),
        date(2026, 2, 28),
        3,
    )
    events = assert_replays(feed)
    assert [type(e).__name__ for e in events] == [
        "Created",
        "PullScheduled",
        "PullStarted",
        "PullSucceeded",
    ]


def test_a_passing_failure_retries_on_the_schedule_until_the_quota_is_spent() -> None:
    feed = feed_with_pull()
    feed.start_attempt(CTX, T0)
    feed.attempt_failed(
        CTX, T0, code="provider_unavailable", reason="503", retriable=True, retry_delays=DELAYS
    )
    assert (feed.status, feed.failures, feed.error_code) == (RETRYING, 1, "provider_unavailable")
    assert feed.retry_at == T0 + timedelta(seconds=60) and feed.is_pending
    feed.start_attempt(CTX, feed.retry_at)
    # The first start is kept: the pull started once, however many attempts it takes.
    assert (feed.attempts, feed.started_at) == (2, T0)
    feed.attempt_failed(
        CTX, T0, code="provider_unavailable", reason="503", retriable=True, retry_delays=DELAYS
    )
    assert feed.retry_at == T0 + timedelta(seconds=300)
    feed.start_attempt(CTX, feed.retry_at)
    feed.attempt_failed(
        CTX, T0, code="provider_unavailable", reason="503", retriable=True, retry_delays=DELAYS
    )
    assert (feed.status, feed.error_code, feed.is_pending) == (
        FAILURE,
        RETRY_QUOTA_EXHAUSTED,
        False,
    )
    events = assert_replays(feed)
    failed = events[-1]
    assert isinstance(failed, ResourceFeed.PullFailed)
    assert failed.reason == "provider_unavailable on every one of 3 tries"


def test_a_final_code_fails_at_once_and_a_legacy_connection_never_retries() -> None:
    feed = feed_with_pull()
    feed.start_attempt(CTX, T0)
    feed.attempt_failed(
        CTX, T0, code="non_retriable", reason="401", retriable=False, retry_delays=DELAYS
    )
    assert (feed.status, feed.error_code, feed.failures) == (FAILURE, "non_retriable", 0)

    legacy = feed_with_pull(connection_created_at=RETRYING_SINCE - timedelta(microseconds=1))
    assert (legacy.retries_allowed, legacy.release) == (False, RELEASE_LEGACY)
    legacy.start_attempt(CTX, T0)
    legacy.attempt_failed(
        CTX, T0, code="provider_unavailable", reason="503", retriable=True, retry_delays=DELAYS
    )
    assert (legacy.status, legacy.error_code) == (FAILURE, "provider_unavailable")
    assert_replays(feed)
    assert_replays(legacy)


def test_a_new_pull_starts_afresh_and_daily_syncs_widen_the_known_days() -> None:
    feed = feed_with_pull()
    feed.start_attempt(CTX, T0)
    feed.fail(CTX, T0, code="unexpected", reason="boom")
    feed.schedule_pull(CTX, T0, range_start=T0, range_end=T0, connection_created_at=RETRYING_SINCE)
    assert (feed.pull_number, feed.status, feed.attempts, feed.failures) == (2, SCHEDULED, 0, 0)
    assert (feed.started_at, feed.ended_at, feed.error_code) == (None, None, None)
    feed.start_attempt(CTX, T0)
    feed.succeed(CTX, T0, days_with_data=0, oldest_day=None, newest_day=None)
    assert (feed.oldest_day, feed.newest_day) == (None, None)
    feed.synced(CTX, T0, created_days=[date(2026, 3, 1)], updated_days=[date(2026, 2, 20)])
    feed.synced(CTX, T0, created_days=[], updated_days=[])
    feed.synced(CTX, T0, created_days=[date(2026, 2, 25)], updated_days=[])
    assert (feed.oldest_day, feed.newest_day) == (date(2026, 2, 20), date(2026, 3, 1))
    assert_replays(feed)


# -- link tokens ---------------------------------------------------------------------------


def issue() -> tuple[LinkToken, str]:
    return LinkToken.issue(
        CTX,
        T0,
        team_id=uuid4(),
        user_id=uuid4(),
        environment="sandbox",
        provider="oura",
        redirect_url=None,
        filter_on_providers=None,
        on_error=None,
        on_close=None,
    )


def test_an_issued_token_is_known_by_its_text_and_stores_only_a_hash() -> None:
    token, plain = issue()
    assert link_token_id(plain) == token.id
    assert plain not in token.token_hash and token.matches(plain)
    assert not token.matches(plain[:-1] + ("A" if plain[-1] != "A" else "B"))
    assert token.expires_at == T0 + LINK_TOKEN_LIFETIME
    (issued,) = assert_replays(token)
    assert isinstance(issued, LinkToken.Issued)
    assert issued.token_hash == token.token_hash


def test_a_token_is_consumed_once_and_only_before_it_expires() -> None:
    token, _ = issue()
    expiry = T0 + LINK_TOKEN_LIFETIME
    later = expiry - timedelta(microseconds=1)
    token.consume(CTX, later, "whoop")
    assert (token.consumed_at, token.consumed_provider) == (later, "whoop")
    with pytest.raises(LinkTokenRejected) as refused:
        token.consume(CTX, later, "oura")
    assert refused.value.error_type == TOKEN_CONSUMED
    # A consumed token says so even once it has expired too.
    with pytest.raises(LinkTokenRejected) as refused:
        token.require_usable(expiry + timedelta(days=1))
    assert refused.value.error_type == TOKEN_CONSUMED
    assert_replays(token)

    unused, _ = issue()
    with pytest.raises(LinkTokenRejected) as refused:
        unused.consume(CTX, expiry, "oura")
    assert refused.value.error_type == TOKEN_EXPIRED
    assert unused.collect_events()[1:] == []


def test_the_reasons_and_their_fixed_messages() -> None:
    assert link_token_problem(T0, consumed=False, now=T0) is None
    assert link_token_problem(T0, consumed=False, now=T0 + LINK_TOKEN_LIFETIME) == TOKEN_EXPIRED
    assert link_token_problem(T0, consumed=True, now=T0) == TOKEN_CONSUMED
    messages = {link_error_message(t) for t in (INVALID_TOKEN, TOKEN_EXPIRED, TOKEN_CONSUMED)}
    assert len(messages) == 3
