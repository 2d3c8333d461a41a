"""Webhooks out: the dispatcher follows the log, creates a delivery per subscribed
endpoint, and posts to a real local receiver over HTTP, signed so that the receivers' own
libraries verify it; retries, 410, 429, redirects, timeouts, resets and garbage; erased
users' deliveries dropped; redelivery with the original ids; payloads by the rules of the
event's own date. On both databases."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
import standardwebhooks
import svix.webhooks
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import tracking, webhook_deliveries
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks.dispatcher import Dispatcher
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import RETRY_DELAYS, WebhookDelivery, message_id_for
from sqlalchemy import select

from tests.clocks import Clock
from tests.delivery_rows import with_types
from tests.e2e.webhook_team import connected_user, endpoint, the_team
from tests.receivers import Receiver, broken_receiver, free_socket, http_receiver, serving
from tests.stream_ids import stream_of_feed

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CTX = CommandContext(actor="test:actor", request_id="req-webhooks")


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    built.bootstrap()
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def rows(svc: Service, endpoint_id: UUID) -> Sequence[Any]:
    d = webhook_deliveries.c
    with svc.db.read() as conn:
        stored = conn.execute(select(webhook_deliveries).where(d.endpoint_id == endpoint_id)).all()
    return sorted(with_types(svc, stored), key=lambda r: (r.source_timestamp, r.event_type or ""))


def only(headers: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith(prefix + "-")}


# -- delivery, signatures, filters ----------------------------------------------------------


def test_events_are_delivered_signed_once_per_endpoint_in_the_envelope(
    svc: Service, receiver: Receiver
) -> None:
    endpoint_id, secret = endpoint(svc, receiver.url("ok"))
    user_id = connected_user(svc)
    svc.jobs.dispatch_webhooks()
    got = receiver.on("ok")
    types = sorted(json.loads(r.body)["event_type"] for r in got)
    assert types == ["historical.data.glucose.created", "provider.connection.created"]
    for message in got:
        # Both families of receiver library verify the raw body with their own headers.
        standardwebhooks.Webhook(secret).verify(message.body, only(message.headers, "webhook"))
        svix.webhooks.Webhook(secret).verify(message.body, only(message.headers, "svix"))
        assert message.headers["webhook-id"] == message.headers["svix-id"]
        envelope = json.loads(message.body)
        assert set(envelope) == {"event_type", "data", "user_id", "client_user_id", "team_id"}
        assert envelope["user_id"] == str(user_id)
        assert envelope["client_user_id"] == "hook-freestyle_libre-0"
        assert envelope["team_id"] == str(the_team(svc))
    created = next(json.loads(r.body) for r in got if b"connection.created" in r.body)
    data = created["data"]
    libre = svc.catalog["freestyle_libre"]
    assert data["provider"] == {"name": libre.name, "slug": "freestyle_libre", "logo": libre.logo}
    # Past its 2024-07-31 cut-over, kept all the same: the official client requires it.
    assert data["source"] == data["provider"]
    assert data["external_user_id"].startswith("demo-freestyle_libre-")
    historical = next(json.loads(r.body) for r in got if b"historical" in r.body)["data"]
    # `is_final` too is kept past its cut-over (2024-06-30) for the client.
    assert set(historical) == {"user_id", "start_date", "end_date", "provider", "is_final"}
    assert historical["is_final"] is True
    assert datetime.fromisoformat(historical["end_date"]) == T0
    # Each delivery is recorded as succeeded, its attempt with its status and latency.
    (first, second) = rows(svc, endpoint_id)
    assert {first.status, second.status} == {"succeeded"}
    delivery = svc.ledger.find(first.delivery_id)
    assert isinstance(delivery, WebhookDelivery)
    attempt = list(svc.ledger.events.get(delivery.id))[-1]
    assert isinstance(attempt, WebhookDelivery.AttemptMade)
    assert (attempt.status_code, attempt.outcome, attempt.error) == (200, "success", None)
    assert attempt.latency_ms > 0
    # Nothing more is sent: the log was followed once, the deliveries succeeded.
    connected_user(svc, "withings", demo_failures={})
    svc.jobs.dispatch_webhooks()
    assert len(receiver.on("ok")) == 2 + 1 + len(svc.catalog["withings"].supported_resources) - 1
    # The follower's position is one row, however many rounds it took.
    with svc.db.read() as conn:
        positions = conn.execute(
            select(tracking.c.notification_id).where(tracking.c.application_name == "webhooks")
        ).all()
    assert len(positions) == 1


def test_a_message_id_is_keyed_with_the_users_key(svc: Service, receiver: Receiver) -> None:
    # ADR 0028: the id sent is derived under the user's data key, so the log's clear
    # fields (source, version, day) do not give the type away to one who tries each.
    endpoint_id, _secret = endpoint(svc, receiver.url("ok"))
    user_id = connected_user(svc)
    svc.jobs.dispatch_webhooks()
    cipher = svc.key_store.cipher(user_id)
    assert cipher is not None
    stored = rows(svc, endpoint_id)
    types = {row.event_type for row in stored}
    assert len(stored) == 2
    for row in stored:
        args = (row.source_id, row.source_version)
        assert row.message_id == message_id_for(*args, row.event_type, row.day, cipher.digest)
        assert row.message_id not in {message_id_for(*args, t, row.day) for t in types}
    assert {r.headers["webhook-id"] for r in receiver.on("ok")} == {r.message_id for r in stored}


def test_filters_and_environments_choose_the_endpoints(svc: Service, receiver: Receiver) -> None:
    historical, _ = endpoint(svc, receiver.url("historical"), filter_types=["historical.data.*"])
    production = svc.webhooks.create(
        CTX, the_team(svc), "production", url=receiver.url("production")
    )
    connected_user(svc)
    svc.jobs.dispatch_webhooks()
    assert [json.loads(r.body)["event_type"] for r in receiver.on("historical")] == [
        "historical.data.glucose.created"
    ]
    assert receiver.on("production") == []  # the user is a sandbox user
    assert rows(svc, production.id) == []
    assert len(rows(svc, historical)) == 1

    # A user made with a production key is a production user, whoever connects it later.
    production_ctx = CommandContext(actor="test:actor", request_id="r", environment="production")
    connected_user(svc, "oura", ctx=production_ctx)
    svc.jobs.dispatch_webhooks()
    announced = {json.loads(r.body)["event_type"] for r in receiver.on("production")}
    assert "provider.connection.created" in announced
    assert len(rows(svc, historical)) == 1  # the sandbox endpoint heard nothing of it


def test_two_dispatchers_following_together_create_each_delivery_once(
    svc: Service, receiver: Receiver
) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("ok"))
    connected_user(svc, "oura")
    barrier = threading.Barrier(3)

    def follow() -> None:
        barrier.wait()
        while svc.dispatcher.follow(limit=7):
            pass

    threads = [threading.Thread(target=follow) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    delivered = rows(svc, endpoint_id)
    resources = len(svc.catalog["oura"].supported_resources)
    withdrawn = 1  # the hypnogram events are no longer sent in 2026
    assert len(delivered) == 1 + resources - withdrawn
    assert len({r.message_id for r in delivered}) == len(delivered)


# -- failures and the retry schedule --------------------------------------------------------


def test_a_failing_receiver_is_retried_on_the_schedule_then_the_message_fails(
    svc: Service, receiver: Receiver, clock: Clock
) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("fail"), filter_types=["historical.data.*"])
    connected_user(svc)
    svc.jobs.dispatch_webhooks()
    assert len(receiver.on("fail")) == 2  # the first try, and the immediate retry
    for attempt, delay in enumerate(RETRY_DELAYS[1:], start=3):
        clock.advance(delay - timedelta(seconds=1))
        svc.jobs.dispatch_webhooks()
        assert len(receiver.on("fail")) == attempt - 1, "sent before its time"
        clock.advance(timedelta(seconds=1))
        svc.jobs.dispatch_webhooks()
        assert len(receiver.on("fail")) == attempt
    (row,) = rows(svc, endpoint_id)
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 9, 500)
    ids = {r.headers["webhook-id"] for r in receiver.on("fail")}
    assert len(ids) == 1  # the same message id on every try
    clock.advance(timedelta(days=1))
    svc.jobs.dispatch_webhooks()
    assert len(receiver.on("fail")) == 9


def test_410_disables_the_endpoint_and_its_queued_deliveries_are_dropped(
    svc: Service, receiver: Receiver
) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("gone"))
    connected_user(svc)
    svc.dispatcher.follow()  # two deliveries queued
    assert svc.dispatcher.send_due(limit=1) == 1
    view = svc.webhook_queries.endpoint(endpoint_id)
    assert view is not None and view["disabled_reason"] == "endpoint_gone"
    # The other one, still queued, is dropped: never sent to a gone endpoint.
    assert svc.dispatcher.send_due() == 1
    assert len(receiver.on("gone")) == 1
    assert sorted(r.status for r in rows(svc, endpoint_id)) == ["dropped", "failed"]
    (sent,) = [r for r in rows(svc, endpoint_id) if r.status == "failed"]
    *_, attempt = svc.ledger.events.get(sent.delivery_id)
    assert isinstance(attempt, WebhookDelivery.AttemptMade)
    assert (attempt.status_code, attempt.error, attempt.next_attempt_at) == (410, "gone", None)
    (dropped,) = [r for r in rows(svc, endpoint_id) if r.status == "dropped"]
    last = list(svc.ledger.events.get(dropped.delivery_id))[-1]
    assert isinstance(last, WebhookDelivery.Dropped)
    assert last.reason == "endpoint disabled or deleted"
    # A disabled endpoint is subscribed to nothing: no delivery is even created.
    connected_user(svc, "withings")
    svc.jobs.dispatch_webhooks()
    assert len(receiver.on("gone")) == 1
    assert len(rows(svc, endpoint_id)) == 2


def test_429_retry_after_is_honoured(svc: Service, receiver: Receiver, clock: Clock) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("busy"), filter_types=["historical.data.*"])
    connected_user(svc)
    svc.jobs.dispatch_webhooks()
    (row,) = rows(svc, endpoint_id)
    # The schedule says "immediately", the receiver says 120 s: the later one wins.
    assert row.next_attempt_at == T0 + timedelta(seconds=120)
    assert len(receiver.on("busy")) == 1
    clock.advance(timedelta(seconds=119))
    svc.jobs.dispatch_webhooks()
    assert len(receiver.on("busy")) == 1
    clock.advance(timedelta(seconds=1))
    svc.jobs.dispatch_webhooks()
    assert len(receiver.on("busy")) == 2


def test_a_redirect_is_a_failure_and_is_not_followed(svc: Service, receiver: Receiver) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("moved"), filter_types=["historical.data.*"])
    connected_user(svc)
    svc.dispatcher.follow()
    svc.dispatcher.send_due()
    assert len(receiver.on("moved")) == 1 and receiver.on("ok") == []
    (row,) = rows(svc, endpoint_id)
    (_, started, attempt) = svc.ledger.events.get(row.delivery_id)
    # Recorded as started before the POST, then its outcome.
    assert isinstance(started, WebhookDelivery.AttemptStarted) and started.attempt == 1
    assert isinstance(attempt, WebhookDelivery.AttemptMade) and attempt.attempt == 1
    assert (attempt.status_code, attempt.error, row.status) == (302, "redirect", "pending")


def test_hangs_resets_and_garbage_are_failures(svc: Service, receiver: Receiver) -> None:
    svc.dispatcher.close()
    svc.dispatcher = Dispatcher(
        svc.ledger,
        svc.recorder,
        svc.clock,
        svc.webhook_queries,
        svc.webhooks,
        svc.dispatcher.payloads,
        svc.dispatcher.rules_at,
        timeout=timedelta(seconds=0.5),
    )
    with broken_receiver("reset") as reset, broken_receiver("garbage") as garbage:
        ids = {
            "timeout": endpoint(svc, receiver.url("slow"), filter_types=["historical.data.*"])[0],
            "connection_error": endpoint(svc, reset, filter_types=["historical.data.*"])[0],
            "garbage": endpoint(svc, garbage, filter_types=["historical.data.*"])[0],
        }
        connected_user(svc)
        svc.dispatcher.follow()
        svc.dispatcher.send_due()
    for expected, endpoint_id in ids.items():
        (row,) = rows(svc, endpoint_id)
        attempt = list(svc.ledger.events.get(row.delivery_id))[-1]
        assert isinstance(attempt, WebhookDelivery.AttemptMade)
        assert attempt.outcome == "failure" and attempt.status_code is None
        wanted = "connection_error" if expected == "garbage" else expected
        assert attempt.error == wanted, expected
        assert row.status == "pending"  # retried later


def test_an_endpoint_failing_for_5_days_is_disabled(
    svc: Service, receiver: Receiver, clock: Clock
) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("fail"), filter_types=["daily.data.*"])
    connected_user(svc)
    for _ in range(8):
        svc.pulls.sync_due()
        svc.jobs.dispatch_webhooks()
        clock.advance(timedelta(days=1))
    view = svc.webhook_queries.endpoint(endpoint_id)
    assert view is not None and view["disabled_reason"] == "failing_for_5_days"
    events = list(svc.ledger.events.get(endpoint_id))
    assert type(events[-1]).__name__ == "Disabled"


# -- erasure and redelivery ---------------------------------------------------------------------


def test_an_erased_users_queued_deliveries_are_dropped_never_sent(
    svc: Service, receiver: Receiver, clock: Clock
) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("ok"))
    user_id = connected_user(svc)
    svc.dispatcher.follow()  # queued, not sent yet
    svc.users.delete_user(CTX, the_team(svc), user_id)
    clock.advance(timedelta(days=7))
    assert svc.users.erase_user(CTX, user_id)
    svc.jobs.dispatch_webhooks()
    # Only `user.erased` (ours) goes out: it carries nothing personal, and it tells the
    # endpoint's mirror to forget the user. The deletion it supersedes is dropped too.
    (sent,) = receiver.received
    body = json.loads(sent.body)
    assert body["event_type"] == "user.erased" and body["client_user_id"] is None
    assert b"hook-freestyle_libre" not in sent.body
    # The dropped ones' types went with the user's key (ADR 0028): only the lifecycle's
    # type is in clear.
    stored = rows(svc, endpoint_id)
    assert [(r.event_type, r.status) for r in stored if r.lifecycle_type] == [
        ("user.deleted", "dropped"),
        ("user.erased", "succeeded"),
    ]
    others = [r for r in stored if not r.lifecycle_type]
    assert others and {(r.event_type, r.status) for r in others} == {(None, "dropped")}


def test_redelivery_resends_since_an_instant_with_the_original_ids(
    svc: Service, receiver: Receiver, clock: Clock
) -> None:
    endpoint_id, _ = endpoint(svc, receiver.url("ok"))
    connected_user(svc)
    svc.jobs.dispatch_webhooks()
    first = {r.headers["webhook-id"]: r.body for r in receiver.on("ok")}
    clock.advance(timedelta(hours=1))
    assert svc.redeliveries.replay(CTX, endpoint_id, T0 - timedelta(minutes=1)) == 2
    assert svc.redeliveries.replay(CTX, endpoint_id, T0 + timedelta(minutes=1)) == 0
    svc.jobs.dispatch_webhooks()
    again = receiver.on("ok")[2:]
    assert {r.headers["webhook-id"]: r.body for r in again} == first


# -- payloads by the rules of the event's own date -----------------------------------------------


@pytest.mark.parametrize(
    ("moment", "legacy_source", "hypnogram"),
    [
        (datetime(2024, 6, 29, 12, tzinfo=UTC), True, True),
        (datetime(2024, 7, 1, 12, tzinfo=UTC), True, True),
        (datetime(2024, 8, 1, 12, tzinfo=UTC), False, True),
        (datetime(2025, 2, 1, 12, tzinfo=UTC), False, False),
    ],
)
def test_payloads_follow_the_rules_in_force_at_the_events_own_time(
    svc: Service,
    receiver: Receiver,
    clock: Clock,
    moment: datetime,
    legacy_source: bool,
    hypnogram: bool,
) -> None:
    clock.now = moment
    endpoint(svc, receiver.url("ok"))
    connected_user(svc, "withings")
    clock.advance(timedelta(days=1))
    svc.pulls.sync_due()  # daily data events, of the day after (same rules)
    # Delivered a year later: rendered as at the event's own time all the same.
    clock.advance(timedelta(days=365))
    svc.jobs.dispatch_webhooks()
    by_type = {json.loads(r.body)["event_type"]: json.loads(r.body) for r in receiver.on("ok")}
    # `source` in provider.connection.created and `is_final` are sent on every date: the
    # official client requires both (docs/webhooks.md, "Client over calendar").
    created = by_type["provider.connection.created"]["data"]
    assert created["source"] == created["provider"]
    sleep = by_type["historical.data.sleep.created"]["data"]
    assert sleep["is_final"] is True
    # The source context's name, logo and slug go on 2024-07-31 (the client has them
    # optional); provider, type and app_id stay.
    daily = by_type["daily.data.heartrate.created"]["data"]
    assert {"provider", "type", "app_id"} <= set(daily["source"])
    assert ("logo" in daily["source"]) is legacy_source
    assert ("historical.timeseries.hypnogram.created" in by_type) is hypnogram
    assert "historical.data.sleep_cycle.created" in by_type


# -- end to end: our service delivers to our receiver ----------------------------------------


def test_our_receiver_mirrors_what_the_service_delivers(
    svc: Service, clock: Clock, database_url: str, tmp_path: Any
) -> None:
    from healthledger.adapters.http.team_api import create_team_api
    from healthledger.adapters.mirror.receiver import build_receiver
    from healthledger.adapters.mirror.receiver_app import create_receiver_app
    from healthledger.adapters.persistence.keys.master_key import FileKeySource
    from starlette.testclient import TestClient

    sock = free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/webhooks"
    _, secret = endpoint(svc, url)
    receiver = build_receiver(
        database_url, [secret], master_key=FileKeySource(tmp_path / "receiver-keys" / "mirror.key")
    )
    try:
        with serving(create_receiver_app(receiver), sock):
            oura = connected_user(svc, "oura")
            fitbit = connected_user(
                svc,
                "fitbit",
                demo_failures={"sleep": {"code": "token_refresh_failed", "times": None}},
            )
            clock.advance(timedelta(days=1))
            svc.pulls.sync_due()
            svc.jobs.dispatch_webhooks()
            counts = svc.webhook_queries.delivery_counts()
            assert set(counts) == {"succeeded"}, counts
        client = TestClient(create_team_api(svc))
        key = svc.teams.issue_team_api_key(CTX, the_team(svc)).plain
        for user_id in (oura, fitbit):
            mirrored = receiver.user(user_id)
            assert mirrored is not None
            listed = client.get(
                f"/v2/user/providers/{user_id}", headers={"x-service-api-key": key}
            ).json()["providers"]
            user = client.get(f"/v2/user/{user_id}", headers={"x-service-api-key": key}).json()
            assert mirrored.client_user_id == user["client_user_id"]
            assert str(mirrored.team_id) == user["team_id"]
            assert len(mirrored.connections) == len(listed) == 1
            # The fitbit grant broke during its pulls: the error was announced and mirrored.
            assert listed[0]["status"] == ("error" if user_id == fitbit else "connected")
            for item in listed:
                seen = mirrored.connection(item["slug"])
                assert seen is not None
                assert seen.status == item["status"]
                assert seen.external_user_id == item["external_user_id"]
                assert seen.resource_availability == item["resource_availability"]
                if item["status"] == "error":
                    assert seen.error_details is not None
                    assert seen.error_details["error_type"] == "token_refresh_failed"
            # Every pull that succeeded was announced once; daily days match the syncs.
            for item in listed:
                slug = item["slug"]
                for resource in svc.catalog[slug].supported_resources:
                    feed = svc.ledger.find(stream_of_feed(svc, user_id, slug, resource))
                    assert isinstance(feed, ResourceFeed)
                    seen_resource = mirrored.resource(slug, resource)
                    sent = resource != "hypnogram"  # withdrawn in 2025
                    if feed.status != "success" or not sent:
                        assert seen_resource is None or seen_resource.historical is None
                        continue
                    assert seen_resource is not None and seen_resource.historical is not None
                    created = sum(
                        len(e.created_days)
                        for e in svc.ledger.events.get(feed.id)
                        if isinstance(e, ResourceFeed.DailySynced)
                    )
                    assert seen_resource.days_created == created
    finally:
        receiver.close()
