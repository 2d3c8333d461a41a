"""A delivery's attempts are recorded as started before their POST (issue 30 §2): a start
counts at once, its outcome completes it, a start with no outcome is of unknown outcome
(possibly sent) and a drop after it says so, a withdrawn start never happened; every
state replays from the stored form."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import (
    DROPPED,
    PENDING,
    POSSIBLY_SENT,
    RETRY_DELAYS,
    SUCCEEDED,
    WebhookDelivery,
)

from tests.unit.stored_form import assert_replays

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="system:scheduler", request_id="send-test")


def _delivery() -> WebhookDelivery:
    return WebhookDelivery.create(
        CTX,
        T0,
        endpoint_id=uuid4(),
        team_id=uuid4(),
        user_id=uuid4(),
        event_type="daily.data.sleep.created",
        source_id=uuid4(),
        source_version=3,
        source_timestamp=T0,
        day=date(2026, 2, 28),
        log_position=7,
    )


def test_a_start_counts_and_its_outcome_completes_it() -> None:
    delivery = _delivery()
    earlier = assert_replays(delivery)
    attempt = delivery.start_attempt(CTX, T0)
    assert (attempt, delivery.attempts, delivery.open_attempts) == (1, 1, (1,))
    assert delivery.possibly_sent and delivery.status == PENDING
    earlier += assert_replays(delivery, earlier)
    delivery.record_attempt(
        CTX, T0, attempt=attempt, status_code=500, latency_ms=1.0, error="http_500"
    )
    assert (delivery.attempts, delivery.open_attempts) == (1, ())
    assert delivery.next_attempt_at == T0 + RETRY_DELAYS[0]
    earlier += assert_replays(delivery, earlier)
    second = delivery.start_attempt(CTX, T0)
    delivery.record_attempt(CTX, T0, attempt=second, status_code=200, latency_ms=1.0, error=None)
    assert (delivery.status, delivery.attempts, delivery.open_attempts) == (SUCCEEDED, 2, ())
    events = assert_replays(delivery, earlier)
    assert [type(e).__name__ for e in events] == ["AttemptStarted", "AttemptMade"]


def test_a_drop_after_an_attempt_of_unknown_outcome_says_possibly_sent() -> None:
    never = _delivery()
    never.drop(CTX, T0, "user erased")
    (_, dropped) = assert_replays(never)
    assert isinstance(dropped, WebhookDelivery.Dropped) and dropped.reason == "user erased"
    # A sender started an attempt and died: the erasure drops it, possibly sent.
    crashed = _delivery()
    crashed.start_attempt(CTX, T0)
    crashed.drop(CTX, T0 + timedelta(days=8), "user erased")
    assert (crashed.status, crashed.attempts) == (DROPPED, 1)
    dropped = assert_replays(crashed)[-1]
    assert isinstance(dropped, WebhookDelivery.Dropped)
    assert dropped.reason == f"user erased: {POSSIBLY_SENT}"


def test_a_takeover_counts_the_unknown_attempt_and_a_late_outcome_never_lowers_it() -> None:
    delivery = _delivery()
    first = delivery.start_attempt(CTX, T0)  # a sender whose lease ran out, still posting
    second = delivery.start_attempt(CTX, T0)  # the sender that took it over
    assert (first, second, delivery.attempts, delivery.open_attempts) == (1, 2, 2, (1, 2))
    delivery.record_attempt(CTX, T0, attempt=second, status_code=200, latency_ms=1.0, error=None)
    delivery.record_attempt(CTX, T0, attempt=first, status_code=200, latency_ms=1.0, error=None)
    assert (delivery.status, delivery.attempts, delivery.open_attempts) == (SUCCEEDED, 2, ())
    assert_replays(delivery)


def test_a_withdrawn_start_never_happened() -> None:
    delivery = _delivery()
    attempt = delivery.start_attempt(CTX, T0)
    delivery.withdraw_attempt(CTX, T0, attempt)
    assert (delivery.attempts, delivery.open_attempts, delivery.possibly_sent) == (0, (), False)
    delivery.drop(CTX, T0, "user erased")
    dropped = assert_replays(delivery)[-1]
    assert isinstance(dropped, WebhookDelivery.Dropped) and dropped.reason == "user erased"
