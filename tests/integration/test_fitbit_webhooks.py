"""Fitbit's webhooks in (adapters/providers/fitbit_webhooks.py,
docs/makers/fitbit.md#subscriptions-webhooks-in), on SQLite and PostgreSQL: the fake Fitbit
(a real HTTP server) verifies our subscriber URL and POSTs signed notifications to the
team API served on a real loopback port; a notification is recorded once and synced as
a window, announcing each change once; a bad signature is a 401 and stores nothing; the
person's revocation ends the connection."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_fitbit import PEOPLE, FakeFitbit, running_fake_fitbit
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.providers.fitbit import subscription_id
from healthledger.adapters.providers.fitbit_webhooks import FitbitWebhooks, sign
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.maker_notices import NoticeMalformed, NoticeRefused
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from pydantic import SecretStr
from sqlalchemy import func, select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.oauth_browser import (
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    signed_in_user,
)
from tests.receivers import Receiver, http_receiver, serving
from tests.stream_ids import stream_of_connection, stream_of_feed

ELI = PEOPLE["eli"]
CODE = "a1b2c3-subscriber-code"
HISTORY_DAYS = 6
CTX = CommandContext(actor="test:actor", request_id="req-fitbit-webhooks")


@pytest.fixture
def fitbit(clock: Clock) -> Iterator[FakeFitbit]:
    with running_fake_fitbit(FakeFitbit(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, fitbit: FakeFitbit, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings,
        clock,
        "fitbit",
        fitbit.base,
        fitbit_api_url=fitbit.base,
        fitbit_history_days=HISTORY_DAYS,
        fitbit_subscriber_verification_code=SecretStr(CODE),
        maker_api_timeout=timedelta(seconds=5),
    ) as built:
        yield built


@pytest.fixture
def home(svc: Service) -> Team:
    boot = svc.bootstrap()
    assert boot is not None
    return Team(boot.team_id, boot.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def subscribed(svc: Service, fitbit: FakeFitbit) -> Iterator[None]:
    """The team API on a real loopback port, registered as the fake's subscriber."""
    with serving(create_team_api(svc)) as base:
        fitbit.subscriber_url = f"{base}/makers/fitbit/webhook"
        yield


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def connected_user(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit
) -> uuid.UUID:
    user_id = signed_in_user(api, home, browser, "fitbit")
    # Subscribed at the sign-in (our subscriber is configured), under a digest of the id.
    assert fitbit.subscriptions == {"eli": subscription_id(ELI.encoded_id)}
    svc.jobs.run_due_pulls()
    feed = svc.ledger.find(stream_of_feed(svc, user_id, "fitbit", "sleep"))
    assert isinstance(feed, ResourceFeed) and feed.status == "success"
    return user_id


def log_length(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


def daily_events(receiver: Receiver) -> list[tuple[str, str]]:
    found = []
    for received in receiver.on("ok"):
        body = json.loads(received.body)
        if body["event_type"].startswith("daily.data."):
            data = body["data"]
            found.append((body["event_type"], str(data.get("calendar_date") or data.get("date"))))
    return found


# -- the verifier alone ------------------------------------------------------------------


def test_the_signature_is_fitbits_hmac_sha1_under_the_secret_and_an_ampersand() -> None:
    body = b'[{"collectionType":"sleep","date":"2026-11-20","ownerId":"7QK2LB"}]'
    expected = base64.b64encode(hmac.new(b"s3cret&", body, hashlib.sha1).digest()).decode()
    assert sign("s3cret", body) == expected
    hooks = FitbitWebhooks("s3cret", CODE)
    now = datetime(2026, 11, 21, 9, tzinfo=UTC)
    [notice] = hooks.notices({"x-fitbit-signature": expected}, body, now)
    assert (notice.account_id, notice.start, notice.end) == (
        "7QK2LB",
        date(2026, 11, 19),
        date(2026, 11, 21),
    )
    assert "hrv" in notice.resources and not notice.deauthorized
    # The same notice a minute later is the same notice; an hour later a new one.
    [again] = hooks.notices({"x-fitbit-signature": expected}, body, now + timedelta(minutes=1))
    [later] = hooks.notices({"x-fitbit-signature": expected}, body, now + timedelta(hours=1))
    assert again.key == notice.key != later.key
    for headers in ({}, {"x-fitbit-signature": sign("other", body)}):
        with pytest.raises(NoticeRefused):
            hooks.notices(headers, body, now)
    for bad in (b"{}", b"not json", b'[{"ownerId": "7QK2LB"}]', b'["x"]'):
        with pytest.raises(NoticeMalformed):
            hooks.notices({"x-fitbit-signature": sign("s3cret", bad)}, bad, now)
    foods = b'[{"collectionType":"foods","date":"2026-11-20","ownerId":"7QK2LB"}]'
    assert hooks.notices({"x-fitbit-signature": sign("s3cret", foods)}, foods, now) == []


def test_the_subscriber_verification_answers_204_to_our_code_and_404_to_another(
    svc: Service, fitbit: FakeFitbit, subscribed: None
) -> None:
    assert fitbit.verify_subscriber(CODE) == (204, 404)
    assert fitbit.verify_subscriber("not-our-code") == (404, 404)


# -- notifications through the route -----------------------------------------------------


def test_a_notification_syncs_its_window_and_announces_each_change_once(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    fitbit: FakeFitbit,
    clock: Clock,
    subscribed: None,
    receiver: Receiver,
) -> None:
    user_id = connected_user(svc, api, home, browser, fitbit)
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    svc.jobs.dispatch_webhooks()
    receiver.received.clear()
    fitbit.requests.clear()
    day = clock().date() - timedelta(days=2)
    clock.advance(timedelta(seconds=1))  # a new run: the reader reads afresh
    fitbit.revise("eli", day)  # Fitbit tells us: activities, sleep, body
    assert [s.status for s in fitbit.sent] == [200] * 3
    assert fitbit.data_requests() == []  # answered before any sync
    svc.jobs.run_due_pulls()
    # Only the window was read (the day and one each side), not the history.
    asked = [p for p, _ in fitbit.data_requests("/sleep/date/")]
    assert asked and all(str(day - timedelta(days=10)) not in p for p in asked)
    svc.jobs.dispatch_webhooks()
    events = daily_events(receiver)
    assert events, "the revised day was announced"
    assert len(events) == len(set(events)), "each change announced once"
    assert ("daily.data.sleep.updated", str(day)) in events
    sleep = api.get(
        f"/v2/summary/sleep/{user_id}",
        params={"start_date": str(day), "end_date": str(day)},
        headers=home.headers,
    ).json()["sleep"]
    [main] = [s for s in fitbit.sleeps(ELI, day) if s["isMainSleep"]]
    [answered] = [s for s in sleep if s["calendar_date"] == str(day)]
    assert answered["total"] == 60 * main["minutesAsleep"]
    # The same notifications again at once (Fitbit retries): nothing recorded again.
    before = log_length(svc)
    assert {fitbit.post(s.body).status for s in list(fitbit.sent)} == {200}
    assert log_length(svc) == before


def test_a_bad_signature_is_a_401_and_nothing_is_stored(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    fitbit: FakeFitbit,
    clock: Clock,
    subscribed: None,
) -> None:
    connected_user(svc, api, home, browser, fitbit)
    before = log_length(svc)
    fitbit.bad_signature = True
    fitbit.revise("eli", clock().date())
    assert [s.status for s in fitbit.sent] == [401] * 3
    assert fitbit.subscriber_url is not None
    unsigned = httpx.post(fitbit.subscriber_url, content=fitbit.sent[0].body)
    assert unsigned.status_code == 401 and ELI.encoded_id not in unsigned.text
    assert log_length(svc) == before
    assert svc.maker_notice_queries.due_notices(clock(), 10) == []


def test_a_notice_about_an_unknown_account_is_acknowledged_and_dropped(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    fitbit: FakeFitbit,
    clock: Clock,
    subscribed: None,
) -> None:
    connected_user(svc, api, home, browser, fitbit)
    before = log_length(svc)
    assert fitbit.notify("gus", "sleep", clock().date()).status == 200
    assert log_length(svc) == before


def test_the_persons_revocation_ends_the_connection_and_the_team_is_told(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    fitbit: FakeFitbit,
    subscribed: None,
    receiver: Receiver,
) -> None:
    user_id = connected_user(svc, api, home, browser, fitbit)
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    svc.jobs.dispatch_webhooks()
    receiver.received.clear()
    fitbit.revoke("eli")  # userRevokedAccess
    assert [s.status for s in fitbit.sent] == [200]
    svc.jobs.run_due_pulls()
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "fitbit"))
    assert isinstance(connection, Connection) and connection.status == "error"
    assert connection.error_details is not None
    assert connection.error_details["error_type"] == "deregistered_per_provider"
    svc.jobs.dispatch_webhooks()
    types = [json.loads(r.body)["event_type"] for r in receiver.on("ok")]
    assert types.count("provider.connection.error") == 1
