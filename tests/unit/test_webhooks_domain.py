"""The webhook event type catalog, filters, URL rules and the WebhookEndpoint aggregate,
without I/O (the catalog is read from its shipped data file)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import get_args
from uuid import UUID, uuid4

import pytest
from healthledger.adapters.reference import (
    ReferenceDataError,
    Resource,
    deprecation_calendar,
    parse_event_type_catalog,
    webhook_event_types,
)
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.announcements import LIFECYCLE_EVENT_TYPES, TEAM_EVENT_TYPES
from healthledger.domain.webhooks.deliveries import (
    DROPPED,
    FAILED,
    PENDING,
    RETRY_DELAYS,
    SUCCEEDED,
    WebhookDelivery,
    message_id_for,
)
from healthledger.domain.webhooks.deprecation_calendar import (
    CALENDAR_ID,
    IS_FINAL_REMOVED,
    CutOver,
    CutOverNotDue,
    DeprecationCalendar,
)
from healthledger.domain.webhooks.endpoints import (
    BY_CALLER,
    FAILING_TOO_LONG,
    ROTATION_OVERLAP,
    WebhookEndpoint,
    new_signing_secret,
)
from healthledger.domain.webhooks.event_types import filter_matches, subscribed
from healthledger.domain.webhooks.management import Destinations, address, url_problem

from tests.unit.stored_form import assert_replays

CTX = CommandContext(actor="test:actor", request_id="req-test")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HYPNOGRAM_TYPES = {
    "historical.timeseries.hypnogram.created": "historical.data.sleep_cycle.created",
    "daily.timeseries.hypnogram.created": "daily.data.sleep_cycle.created",
    "daily.timeseries.hypnogram.updated": "daily.data.sleep_cycle.updated",
}

# Ours, not in the production service's catalog (docs/webhooks.md).
# The user's lifecycle, and the team-level type (issue 35).
OUR_TYPES = ("user.deleted", "user.deletion_undone", "user.erased", "event_destination.disabled")

# -- the catalog ------------------------------------------------------------------------


def test_the_catalog_has_every_event_type_of_the_spec() -> None:
    catalog = webhook_event_types()
    names = [t.name for t in catalog.types]
    assert len(names) == len(set(names))
    resources = [r for r in get_args(Resource) if r != "hypnogram"]
    assert len(resources) == 68 and "sleep_cycle" in resources
    expected = {
        "provider.connection.created",
        "provider.connection.error",
        # Lab test orders (issue 14).
        "labtest.order.created",
        "labtest.order.updated",
        "labtest.result.critical",
        # Appointments (issue 33).
        "labtest.appointment.created",
        "labtest.appointment.updated",
        *HYPNOGRAM_TYPES,
        *OUR_TYPES,
    }
    for resource in resources:
        expected |= {
            f"historical.data.{resource}.created",
            f"daily.data.{resource}.created",
            f"daily.data.{resource}.updated",
        }
    assert set(names) == expected
    # Hypnogram data arrives only as the deprecated timeseries events.
    assert "daily.data.hypnogram.created" not in catalog
    # Our own types are marked as not the production service's; no other type is.
    assert {t.name for t in catalog.types if t.extension} == set(OUR_TYPES)


def test_our_lifecycle_types_are_filtered_like_the_others() -> None:
    catalog = webhook_event_types()
    assert catalog.filter_problem("user.*") is None
    assert catalog.filter_problem("user.erased") is None
    assert catalog.filter_problem("user.undeleted") == "'user.undeleted' is not a known event type."
    assert subscribed(["user.*"], "user.deletion_undone")
    assert subscribed(["user.erased"], "user.erased")
    assert not subscribed(["user.erased"], "user.deleted")
    assert not subscribed(["provider.*", "daily.*"], "user.erased")
    # `announcements` maps each lifecycle event of a user's stream, and each team-level
    # event, to its type.
    assert {*LIFECYCLE_EVENT_TYPES.values(), *TEAM_EVENT_TYPES.values()} == set(OUR_TYPES)


def test_the_hypnogram_events_are_deprecated_with_their_successors_and_date() -> None:
    deprecated = {t.name: t for t in webhook_event_types().types if t.deprecated}
    assert set(deprecated) == set(HYPNOGRAM_TYPES)
    for name, successor in HYPNOGRAM_TYPES.items():
        assert deprecated[name].replaced_by == successor
        assert deprecated[name].removed_on == date(2025, 1, 31)
        assert successor in webhook_event_types()


def test_a_catalog_file_whose_successor_is_missing_is_refused() -> None:
    text = '{"event_types": [], "resource_event_types": []}'
    with pytest.raises(ReferenceDataError, match="is not an event type"):
        parse_event_type_catalog(text, "broken.json", deprecation_calendar())


def test_a_catalog_file_with_a_bad_template_is_refused() -> None:
    text = (
        '{"event_types": [], "resource_event_types": '
        '[{"template": "daily.data.created", "description": "no resource"}]}'
    )
    with pytest.raises(ReferenceDataError, match="not a valid webhook event type catalog"):
        parse_event_type_catalog(text, "broken.json", ())


# -- filters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "event_type", "expected"),
    [
        ("daily.data.sleep.created", "daily.data.sleep.created", True),
        ("daily.data.sleep.created", "daily.data.sleep.updated", False),
        ("daily.data.*", "daily.data.sleep.created", True),
        ("daily.*", "daily.timeseries.hypnogram.created", True),
        ("daily.data.sleep.*", "daily.data.sleep_cycle.created", False),
        ("daily.data.*", "daily.datax.sleep.created", False),
        ("provider.*", "historical.data.sleep.created", False),
    ],
)
def test_filter_entries_match_exact_types_and_dotted_prefixes(
    entry: str, event_type: str, expected: bool
) -> None:
    assert filter_matches(entry, event_type) is expected


def test_no_filter_entries_means_every_event_type() -> None:
    assert subscribed([], "provider.connection.error")
    assert not subscribed(["daily.*"], "provider.connection.error")
    assert subscribed(["daily.*", "provider.connection.error"], "provider.connection.error")


# -- URLs -------------------------------------------------------------------------------

OWN = {address("127.0.0.1", 8000), address("api.example", 443)}
# Loopback allowed, as for a receiver on this machine: the own-address guard still holds.
LOOPBACK_ALLOWED = Destinations.parse(["127.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("https://receiver.example/hook", False),
        ("http://receiver.example:8000/hook", False),
        ("http://127.0.0.1:8080/hook", False),
        ("http://127.0.0.1:8000/hook", True),
        ("http://localhost:8000", True),
        ("http://0.0.0.0:8000/", True),
        ("http://127.0.0.2:8000/", True),
        # Other spellings of this host (issue 30): inet_aton's shorthand, IPv4-mapped IPv6.
        ("http://127.1:8000/", True),
        ("http://[::ffff:127.0.0.1]:8000/", True),
        ("http://[::ffff:7f00:1]:8000/", True),
        ("http://0x7f.0.0.1:8000/", True),
        ("http://0177.0.0.1:8000/", True),
        ("http://2130706433:8000/", True),
        ("http://[::1]:8000/", True),
        ("http://[::]:8000/", True),
        ("http://127.1:8080/", False),
        ("https://API.example./hook", True),
        ("https://api.example:443/hook", True),
        ("http://api.example/hook", False),
        ("mailto:someone@example.com", True),
        ("https://receiver.example/\nhook", True),
    ],
)
def test_url_rules(url: str, refused: bool) -> None:
    assert (url_problem(url, OWN, LOOPBACK_ALLOWED) is not None) is refused


# -- the aggregate ----------------------------------------------------------------------


def _endpoint(**fields: object) -> WebhookEndpoint:
    values: dict[str, object] = {
        "team_id": uuid4(),
        "environment": "sandbox",
        "url": "https://receiver.example/hook",
        "description": "",
        "filter_types": [],
        "disabled": False,
        "sealed_secret": "v1.first",
        **fields,
    }
    return WebhookEndpoint.create(CTX, T0, **values)  # type: ignore[arg-type]


def test_new_secrets_are_standard_webhooks_secrets() -> None:
    import base64

    first, second = new_signing_secret(), new_signing_secret()
    assert first != second
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32


def test_updates_record_only_what_changed() -> None:
    endpoint = _endpoint()
    endpoint.update(CTX, T0, url="https://receiver.example/hook", filter_types=[])
    assert endpoint.collect_events()[1:] == []
    endpoint.update(CTX, T0, description="new", filter_types=["daily.*"])
    (event,) = endpoint.collect_events()
    assert isinstance(event, WebhookEndpoint.Updated)
    assert event.changes == {"description": "new", "filter_types": ["daily.*"]}
    assert endpoint.filter_types == ("daily.*",)
    with pytest.raises(ValueError, match="not an updatable field"):
        endpoint.update(CTX, T0, sealed_secret="v1.stolen")


def test_disable_and_enable_carry_their_reason_and_repeat_as_no_ops() -> None:
    endpoint = _endpoint()
    endpoint.collect_events()
    endpoint.disable(CTX, T0, FAILING_TOO_LONG)
    endpoint.disable(CTX, T0, BY_CALLER)
    assert endpoint.disabled and endpoint.disabled_reason == FAILING_TOO_LONG
    endpoint.enable(CTX, T0)
    endpoint.enable(CTX, T0)
    events = endpoint.collect_events()
    assert [type(e).__name__ for e in events] == ["Disabled", "Enabled"]
    assert [e.reason for e in events] == [FAILING_TOO_LONG, BY_CALLER]  # type: ignore[attr-defined]
    assert not endpoint.disabled


def test_rotation_keeps_the_previous_secret_for_its_overlap() -> None:
    endpoint = _endpoint()
    assert endpoint.sealed_secrets_in_force(T0) == ["v1.first"]
    endpoint.rotate_secret(CTX, T0, "v1.second")
    assert endpoint.sealed_secrets_in_force(T0) == ["v1.second", "v1.first"]
    end = T0 + ROTATION_OVERLAP
    assert timedelta(hours=24) == ROTATION_OVERLAP
    assert endpoint.sealed_secrets_in_force(end - timedelta(microseconds=1)) == [
        "v1.second",
        "v1.first",
    ]
    assert endpoint.sealed_secrets_in_force(end) == ["v1.second"]
    # Replaying the stored events rebuilds the same state.
    events = assert_replays(endpoint)
    assert [type(e).__name__ for e in events] == ["Created", "SecretRotated"]


def test_an_endpoint_created_disabled_is_disabled_by_its_caller_and_deleted_once() -> None:
    endpoint = _endpoint(disabled=True, filter_types=["daily.*"])
    assert endpoint.disabled and endpoint.disabled_reason == BY_CALLER
    assert endpoint.filter_types == ("daily.*",)
    assert (endpoint.sealed_previous_secret, endpoint.deleted_at) == (None, None)
    endpoint.delete(CTX, T0)
    endpoint.delete(CTX, T0 + timedelta(hours=1))
    assert endpoint.deleted_at == T0
    events = assert_replays(endpoint)
    assert [type(e).__name__ for e in events] == ["Created", "Deleted"]


# -- deliveries -------------------------------------------------------------------------

SOURCE_ID = UUID("11111111-2222-4333-8444-000000000007")


def _delivery(endpoint_id: UUID | None = None) -> WebhookDelivery:
    return WebhookDelivery.create(
        CTX,
        T0,
        endpoint_id=endpoint_id or uuid4(),
        team_id=uuid4(),
        user_id=uuid4(),
        event_type="daily.data.sleep.created",
        source_id=SOURCE_ID,
        source_version=3,
        source_timestamp=T0 - timedelta(minutes=1),
        day=date(2026, 2, 28),
        log_position=7,
    )


def test_a_message_id_is_derived_from_the_event_it_announces() -> None:
    first = message_id_for(SOURCE_ID, 3, "daily.data.sleep.created", date(2026, 2, 28))
    assert first == message_id_for(SOURCE_ID, 3, "daily.data.sleep.created", date(2026, 2, 28))
    assert first.startswith("msg_") and len(first) == 4 + 32
    others = {
        message_id_for(SOURCE_ID, 4, "daily.data.sleep.created", date(2026, 2, 28)),
        message_id_for(SOURCE_ID, 3, "daily.data.sleep.updated", date(2026, 2, 28)),
        message_id_for(SOURCE_ID, 3, "daily.data.sleep.created", date(2026, 2, 27)),
        message_id_for(SOURCE_ID, 3, "daily.data.sleep.created", None),
    }
    assert first not in others and len(others) == 4
    endpoint_id = uuid4()
    delivery = _delivery(endpoint_id)
    assert delivery.message_id == first
    assert delivery.id == WebhookDelivery.id_for(endpoint_id, first)
    assert delivery.id != _delivery().id


def _keyed(key: bytes) -> Callable[[bytes], str]:
    return lambda value: hmac.new(key, value, hashlib.sha256).hexdigest()


def test_a_message_id_keyed_with_the_users_key_does_not_give_the_type_away() -> None:
    # Keyed (ADR 0028): stable under one key, so receivers de-duplicate as before, and
    # not found by trying the types without it.
    day = date(2026, 2, 28)
    critical = "labtest.result.critical"
    keyed = message_id_for(SOURCE_ID, 3, critical, day, _keyed(b"user key"))
    assert keyed == message_id_for(SOURCE_ID, 3, critical, day, _keyed(b"user key"))
    assert keyed.startswith("msg_") and len(keyed) == 4 + 32
    assert keyed != message_id_for(SOURCE_ID, 3, critical, day, _keyed(b"another key"))
    tried = {
        message_id_for(SOURCE_ID, 3, event_type, day)
        for event_type in (critical, "labtest.order.updated", "daily.data.sleep.created")
    }
    assert keyed not in tried
    assert message_id_for(SOURCE_ID, 3, critical, day) in tried  # the unkeyed one is found


def test_a_new_delivery_is_due_at_once_and_a_2xx_succeeds() -> None:
    delivery = _delivery()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (PENDING, 0, T0)
    delivery.record_attempt(CTX, T0, status_code=204, latency_ms=12.34567, error=None)
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (SUCCEEDED, 1, 204)
    assert delivery.next_attempt_at is None
    events = assert_replays(delivery)
    attempt = events[-1]
    assert isinstance(attempt, WebhookDelivery.AttemptMade)
    assert (attempt.outcome, attempt.latency_ms, attempt.error) == ("success", 12.346, None)


def test_failures_are_retried_on_the_schedule_and_the_last_one_is_final() -> None:
    delivery = _delivery()
    now = T0
    for attempt, delay in enumerate(RETRY_DELAYS, start=1):
        delivery.record_attempt(CTX, now, status_code=500, latency_ms=1.0, error="http_500")
        assert (delivery.status, delivery.attempts) == (PENDING, attempt)
        assert delivery.next_attempt_at == now + delay
        now = now + delay
    delivery.record_attempt(CTX, now, status_code=500, latency_ms=1.0, error="http_500")
    assert (delivery.status, delivery.attempts) == (FAILED, len(RETRY_DELAYS) + 1)
    assert delivery.next_attempt_at is None
    # A failed delivery is not dropped; a redelivery sends it again from the start.
    delivery.drop(CTX, now, "endpoint_deleted")
    assert delivery.status == FAILED
    delivery.replay(CTX, now)
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (PENDING, 0, now)
    events = assert_replays(delivery)
    assert [type(e).__name__ for e in events[-2:]] == ["AttemptMade", "Replayed"]


def test_a_retry_after_delays_the_next_try_and_a_gone_endpoint_ends_it() -> None:
    delivery = _delivery()
    delivery.record_attempt(
        CTX,
        T0,
        status_code=429,
        latency_ms=1.0,
        error="http_429",
        retry_after=timedelta(minutes=1),
    )
    assert delivery.next_attempt_at == T0 + timedelta(minutes=1)
    # A Retry-After shorter than the schedule's delay does not bring the try forward.
    delivery.record_attempt(
        CTX,
        T0,
        status_code=429,
        latency_ms=1.0,
        error="http_429",
        retry_after=timedelta(seconds=1),
    )
    assert delivery.next_attempt_at == T0 + RETRY_DELAYS[1]
    delivery.record_attempt(CTX, T0, status_code=410, latency_ms=1.0, error="gone", final=True)
    assert (delivery.status, delivery.next_attempt_at) == (FAILED, None)
    assert_replays(delivery)


def test_a_late_post_counts_and_only_a_success_changes_the_outcome() -> None:
    # Another sender recorded the outcome first (ADR 0019); the late POSTs still count.
    succeeded = _delivery()
    succeeded.record_attempt(CTX, T0, status_code=200, latency_ms=1.0, error=None)
    succeeded.record_attempt(CTX, T0, status_code=500, latency_ms=1.0, error="http_500")
    assert (succeeded.status, succeeded.attempts, succeeded.last_status_code) == (
        SUCCEEDED,
        2,
        500,
    )
    assert succeeded.next_attempt_at is None
    late = assert_replays(succeeded)[-1]
    assert isinstance(late, WebhookDelivery.AttemptMade) and late.next_attempt_at is None
    # A dropped delivery that a late POST reached anyway: the receiver has it.
    dropped = _delivery()
    dropped.drop(CTX, T0, "user_erased")
    dropped.record_attempt(CTX, T0, status_code=500, latency_ms=1.0, error="http_500")
    assert (dropped.status, dropped.attempts) == (DROPPED, 1)
    dropped.record_attempt(CTX, T0, status_code=200, latency_ms=1.0, error=None)
    assert (dropped.status, dropped.attempts) == (SUCCEEDED, 2)
    assert_replays(dropped)


def test_only_a_pending_delivery_is_dropped() -> None:
    delivery = _delivery()
    delivery.drop(CTX, T0, "user_erased")
    assert (delivery.status, delivery.next_attempt_at) == (DROPPED, None)
    delivery.drop(CTX, T0, "user_erased")
    events = assert_replays(delivery)
    assert [type(e).__name__ for e in events] == ["Created", "Dropped"]


# -- the deprecation calendar -----------------------------------------------------------


def test_a_cut_over_is_applied_once_and_not_before_its_date() -> None:
    cut_over = CutOver(
        key=IS_FINAL_REMOVED,
        effective_on=date(2026, 3, 2),
        what="is_final removed",
        before="sent",
        after="not sent",
    )
    calendar = DeprecationCalendar.start(CTX, T0)
    assert calendar.id == CALENDAR_ID and calendar.applied == {}
    with pytest.raises(CutOverNotDue):
        calendar.apply_cut_over(CTX, T0, cut_over)
    due = cut_over.effective_at
    assert calendar.apply_cut_over(CTX, due, cut_over) is True
    assert calendar.apply_cut_over(CTX, due + timedelta(days=1), cut_over) is False
    assert calendar.applied == {IS_FINAL_REMOVED: due}
    events = assert_replays(calendar)
    assert [type(e).__name__ for e in events] == ["Created", "CutOverApplied"]
