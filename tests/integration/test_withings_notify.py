"""Withings Notify through the makers' webhook route (adapters/providers/withings_webhooks.py,
docs/makers/withings.md#notify-webhooks-in), against the fake Withings (a real HTTP server)
calling the team API served by uvicorn on a loopback port, on SQLite and PostgreSQL: the
subscriptions made at the sign-in pass Withings' HEAD probe of our callback; a
notification about a corrected weighing is acknowledged, recorded, synced for just that
window and announced once at a real local receiver, and the same notification again
changes nothing; a person unlinking us ends the connection; a notice about an account we
do not know is acknowledged and dropped; a body that is not Withings' form is a 400 with
nothing stored."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_withings import PEOPLE, FakeWithings, running_fake_withings
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.providers.withings import WithingsReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.context import CommandContext
from sqlalchemy import func, select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.oauth_browser import SERVICE_CLIENT, SERVICE_SECRET, Browser, signed_in_user
from tests.receivers import Receiver, http_receiver, serving
from tests.stream_ids import stream_of_connection

DANA = PEOPLE["dana"]
HISTORY_DAYS = 6
CTX = CommandContext(actor="test:actor", request_id="req-withings-notify")


@pytest.fixture
def withings(clock: Clock) -> Iterator[FakeWithings]:
    with running_fake_withings(FakeWithings(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, withings: FakeWithings, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings,
        clock,
        "withings",
        withings.base,
        withings_api_url=withings.base,
        withings_history_days=HISTORY_DAYS,
    ) as built:
        yield built


@pytest.fixture
def callback(svc: Service) -> Iterator[str]:
    """The team API on a real loopback port, where the fake Withings probes and calls us;
    the reader subscribes there."""
    with serving(create_team_api(svc)) as base:
        reader = svc.oauth_makers["withings"]
        assert isinstance(reader, WithingsReader)
        reader.callback_url = f"{base}/makers/withings/webhook"
        yield reader.callback_url


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def connected_user(svc: Service, api: Any, home: Team, browser: Browser) -> uuid.UUID:
    """A person signed in at the fake Withings, the history pulled."""
    user_id = signed_in_user(api, home, browser, "withings")
    svc.jobs.run_due_pulls()
    assert set(reads.statuses(svc, user_id, "withings").values()) == {"success"}
    return user_id


def daily_events(receiver: Receiver) -> list[tuple[str, str]]:
    """(event type, day) of each daily.data.* webhook received."""
    found = []
    for received in receiver.on("ok"):
        body = json.loads(received.body)
        if body["event_type"].startswith("daily.data."):
            data = body["data"]
            found.append((body["event_type"], str(data.get("calendar_date") or data.get("date"))))
    return found


def log_length(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


def weighing(withings: FakeWithings, day: Any) -> dict[str, Any]:
    [group] = [g for g in withings.measure_groups(DANA, day) if g["measures"][0]["type"] == 1]
    return group


def test_a_notification_syncs_its_window_and_announces_each_change_once(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    withings: FakeWithings,
    clock: Clock,
    callback: str,
    receiver: Receiver,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    # The subscriptions made at the sign-in passed Withings' probe of the real route.
    assert withings.subscriptions == {("dana", a): [callback] for a in (1, 2, 4, 16, 44)}
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    svc.jobs.dispatch_webhooks()
    receiver.received.clear()
    day = reads.feed(svc, user_id, "withings", "body").newest_day
    assert day is not None
    withings.revise("dana", day)  # a weighing corrected at Withings, same grpid
    corrected = weighing(withings, day)
    withings.requests.clear()
    clock.advance(timedelta(minutes=5))
    sent = {"startdate": corrected["date"], "enddate": corrected["date"]}
    assert withings.notify("dana", 1, **sent) == [200]
    assert withings.data_requests() == []  # answered before any sync
    svc.jobs.run_due_pulls()
    # Only the named window was read, and only the weight-related resources' service.
    asked = withings.data_requests()
    assert asked and {q["action"] for q in asked} == {"getmeas"}
    first = min(int(q["startdate"]) for q in asked)
    assert datetime.fromtimestamp(first, UTC).date() >= day - timedelta(days=3)
    svc.jobs.dispatch_webhooks()
    events = daily_events(receiver)
    assert ("daily.data.body.updated", str(day)) in events
    assert len(events) == len(set(events)), "each change announced once"
    body = reads.get(api, home, f"/v2/summary/body/{user_id}", start_date=str(day))
    [mine] = [b for b in body["body"] if b["calendar_date"] == str(day)]
    assert mine["weight"] == corrected["measures"][0]["value"] / 1000
    # The same notification again (Withings retries): recorded once, nothing synced again.
    before = log_length(svc)
    assert withings.notify("dana", 1, **sent) == [200]
    assert log_length(svc) == before
    svc.jobs.run_due_pulls()
    svc.jobs.dispatch_webhooks()
    assert daily_events(receiver) == events


def test_unlinking_ends_the_connection_and_the_team_is_told(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    withings: FakeWithings,
    callback: str,
    receiver: Receiver,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    svc.jobs.dispatch_webhooks()
    receiver.received.clear()
    # Withings' user category: Notify posts to what the person's subscriptions name.
    withings.subscriptions[("dana", 46)] = [callback]
    assert withings.notify("dana", 46, action="unlink") == [200]
    svc.jobs.run_due_pulls()
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "withings"))
    assert isinstance(connection, Connection) and connection.status == "error"
    assert connection.error_details is not None
    assert connection.error_details["error_type"] == "deregistered_per_provider"
    svc.jobs.dispatch_webhooks()
    types = [json.loads(r.body)["event_type"] for r in receiver.on("ok")]
    assert types.count("provider.connection.error") == 1


def test_a_notice_about_an_unknown_account_or_not_withings_form_stores_nothing(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, callback: str
) -> None:
    connected_user(svc, api, home, browser)
    before = log_length(svc)
    withings.subscriptions[("eli", 1)] = [callback]  # a person who never connected here
    assert withings.notify("eli", 1, startdate=1, enddate=2) == [200]
    assert log_length(svc) == before
    refused = httpx.post(callback, content=b"userid=dana%40example.com&appli=1")
    assert refused.status_code == 400
    assert "dana" not in refused.text
    assert log_length(svc) == before


def test_a_deleted_connection_s_subscriptions_are_revoked_with_a_refreshed_token(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    withings: FakeWithings,
    clock: Clock,
    callback: str,
) -> None:
    """Withings offers partners no way to end the grant: the deregistration's revocation
    (ADR 0030) ends our Notify subscriptions, with the person's token refreshed first when
    it expired meanwhile; once, and Withings calls us about them no more."""
    user_id = connected_user(svc, api, home, browser)
    assert len(withings.subscriptions) == 5
    assert api.delete(f"/v2/user/{user_id}/withings", headers=home.headers).status_code == 200
    clock.advance(timedelta(seconds=withings.expires_in + 60))
    assert svc.jobs.revoke_grants() == 1
    assert withings.subscriptions == {}
    revokes = [r for r in withings.requests if r[1] == "/notify" and r[2]["action"] == "revoke"]
    assert sorted(int(r[2]["appli"]) for r in revokes) == [1, 2, 4, 16, 44]
    assert {r[3] for r in revokes} == {0}
    refreshes = [r for r in withings.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in refreshes] == [0]
    assert svc.jobs.revoke_grants() == 0  # done once
    assert withings.notify("dana", 1, startdate=1, enddate=2) == []  # no one to call


def test_a_revocation_withings_cannot_answer_is_tried_again(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    withings: FakeWithings,
    clock: Clock,
    callback: str,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    assert api.delete(f"/v2/user/{user_id}/withings", headers=home.headers).status_code == 200
    withings.fail(601, times=1, action="revoke")  # too many requests
    assert svc.jobs.revoke_grants() == 0
    assert len(withings.subscriptions) == 5
    clock.advance(timedelta(minutes=2))
    assert svc.jobs.revoke_grants() == 1
    assert withings.subscriptions == {}
