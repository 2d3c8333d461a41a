"""Oura's webhooks in (adapters/providers/oura_webhooks.py, docs/makers/oura.md#webhooks),
against the fake Oura (a real HTTP server) calling the team API served by uvicorn on a
loopback port, on SQLite and PostgreSQL: our subscriptions pass Oura's handshake; a
signed notification about a person's changed day is recorded, synced for just that
window, and announced once at a real local receiver; a bad signature is a 401 with
nothing stored; a revocation ends the connection."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.compliance.audit import user_audit
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_oura import PEOPLE, FakeOura, running_fake_oura
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.providers.maker_webhooks import oura_verification_token
from healthledger.adapters.providers.oura_subscriptions import (
    SubscriptionFailed,
    ensure_subscriptions,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.notice_intake import NoticeReceipt
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import SEALED_PLACEHOLDER
from sqlalchemy import func, select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.maker_reads import feed, maker_service
from tests.integration.oauth_browser import (
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    signed_in_user,
)
from tests.receivers import Receiver, http_receiver, serving
from tests.stream_ids import stream_of_connection

AVA = PEOPLE["ava"]
# The receipts of notices (sealed since ADR 0032: v2).
RECEIVED_TOPIC = NoticeReceipt.Received.TOPIC
OURA_DATA_TYPES = (
    "sleep",
    "daily_sleep",
    "daily_activity",
    "workout",
    "daily_spo2",
    "daily_readiness",
)
HISTORY_DAYS = 6
CTX = CommandContext(actor="test:actor", request_id="req-oura-webhooks")


@pytest.fixture
def oura(clock: Clock) -> Iterator[FakeOura]:
    with running_fake_oura(FakeOura(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


def oura_service(settings: Settings, oura: FakeOura, clock: Clock) -> Any:
    """A service reading the fake Oura (closed when the context ends): the tests' OAuth
    client, whose secret signs the fake's notifications."""
    return maker_service(
        settings,
        clock,
        "oura",
        oura.base,
        oura_api_url=oura.base,
        oura_history_days=HISTORY_DAYS,
    )


@pytest.fixture
def svc(settings: Settings, oura: FakeOura, clock: Clock) -> Iterator[Service]:
    with oura_service(settings, oura, clock) as built:
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
def served(svc: Service) -> Iterator[str]:
    """The team API on a real loopback port: where the fake Oura calls us."""
    with serving(create_team_api(svc)) as base:
        yield base


@pytest.fixture
def callback(served: str) -> str:
    return f"{served}/makers/oura/webhook"


def subscribe(svc: Service, oura: FakeOura, callback: str) -> list[str]:
    with httpx.Client(timeout=10) as http:
        changes = ensure_subscriptions(
            http,
            oura.base,
            SERVICE_CLIENT,
            SERVICE_SECRET,
            callback,
            oura_verification_token(svc.settings),
            svc.clock(),
        )
    return [change.action for change in changes]


@pytest.fixture
def subscribed(svc: Service, oura: FakeOura, callback: str) -> None:
    assert set(subscribe(svc, oura, callback)) == {"created"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def connected_user(svc: Service, api: Any, home: Team, browser: Browser) -> uuid.UUID:
    """A person signed in at the fake Oura, the history pulled."""
    user_id = signed_in_user(api, home, browser, "oura")
    svc.jobs.run_due_pulls()
    for resource in ("sleep", "activity", "workouts"):
        assert feed(svc, user_id, "oura", resource).status == "success"
    return user_id


def daily_events(receiver: Receiver) -> list[tuple[str, str, str | None]]:
    """(event type, day, the object's id) of each daily.data.* webhook received."""
    found = []
    for received in receiver.on("ok"):
        body = json.loads(received.body)
        if body["event_type"].startswith("daily.data."):
            data = body["data"]
            day = data.get("calendar_date") or data.get("date") or data.get("day")
            found.append((body["event_type"], str(day), data.get("id")))
    return found


def notice_streams(svc: Service) -> list[NoticeReceipt]:
    e = stored_events.c
    query = select(e.originator_id).where(e.topic == RECEIVED_TOPIC).distinct()
    with svc.db.read() as conn:
        rows = conn.execute(query).all()
    found = [svc.ledger.find(uuid.UUID(str(row[0]))) for row in rows]
    return [n for n in found if isinstance(n, NoticeReceipt)]


def log_length(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


# -- subscriptions and the handshake ---------------------------------------------------


def test_our_subscriptions_pass_ouras_handshake_and_are_kept_when_made_again(
    svc: Service, oura: FakeOura, callback: str, clock: Clock
) -> None:
    assert set(subscribe(svc, oura, callback)) == {"created"}
    subscriptions = list(oura.webhooks.subscriptions.values())
    # Every data type we read, made and changed, at our callback.
    assert {(s["data_type"], s["event_type"]) for s in subscriptions} == {
        (d, e) for d in OURA_DATA_TYPES for e in ("create", "update")
    }
    assert {s["callback_url"] for s in subscriptions} == {callback}
    # Made again: nothing changes; near their expiry, they are renewed.
    assert set(subscribe(svc, oura, callback)) == {"kept"}
    clock.advance(timedelta(days=85))
    assert set(subscribe(svc, oura, callback)) == {"renewed"}
    assert len(oura.webhooks.subscriptions) == 12


def test_the_handshake_refuses_another_token_and_a_callback_that_fails_it_is_not_subscribed(
    svc: Service, oura: FakeOura, served: str
) -> None:
    url = f"{served}/makers/oura/webhook"
    token = oura_verification_token(svc.settings)
    good = httpx.get(url, params={"verification_token": token, "challenge": "c-1"})
    assert good.status_code == 200 and good.json() == {"challenge": "c-1"}
    bad = httpx.get(url, params={"verification_token": "not-ours", "challenge": "c-2"})
    assert bad.status_code == 401 and "c-2" not in bad.text
    assert httpx.get(url).status_code == 404  # no handshake
    assert httpx.get(f"{served}/makers/nobody/webhook").status_code == 404
    # A callback that does not answer the challenge (another path): Oura refuses it.
    with pytest.raises(SubscriptionFailed, match="400"):
        subscribe(svc, oura, f"{served}/makers/nobody/webhook")
    assert oura.webhooks.subscriptions == {}


# -- a notification, to the window's sync, to our webhook ------------------------------


def test_a_notification_syncs_its_window_and_announces_each_change_once(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
    subscribed: None,
    receiver: Receiver,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    svc.jobs.dispatch_webhooks()
    receiver.received.clear()
    oura.requests.clear()
    day = clock().date() - timedelta(days=1)
    workouts_before = {w["id"] for w in oura.workouts(AVA, day)}
    oura.revise("ava", day)  # Oura tells us: one notification per data type
    assert [s.status for s in oura.webhooks.sent] == [200] * 6
    # Answered before any sync: Oura was asked nothing yet.
    assert oura.data_requests() == []
    notices = notice_streams(svc)
    assert len(notices) == 6 and {n.status for n in notices} == {"received"}
    # Stored with the maker, the resources and the window sealed, by an unnamed maker
    # (ADR 0032): the user's audit shows them as sealed values.
    with svc.db.read() as conn:
        states = [
            bytes(state)
            for (state,) in conn.execute(
                select(stored_events.c.state).where(stored_events.c.topic == RECEIVED_TOPIC)
            )
        ]
    assert len(states) == 6
    assert not [s for s in states if b'"provider"' in s or b'"resources"' in s or b"oura" in s]
    # The window too (revision 0035): the notice's days are in no receipt in clear.
    assert not [s for s in states if b'"start"' in s or str(day).encode() in s]
    audit = user_audit(svc, uuid.UUID(str(user_id))).entries
    received = [e for e in audit if e.event == "NoticeReceipt.Received"]
    assert len(received) == 6 and {e.actor for e in received} == {"maker"}
    shown = {
        (e.changes["provider"], e.changes["resources"], e.changes["start"], e.changes["end"])
        for e in received
    }
    assert shown == {(SEALED_PLACEHOLDER,) * 4}
    svc.jobs.run_due_pulls()
    assert {n.status for n in notice_streams(svc)} == {"handled"}
    # Only the window was read: the notice's two days (a day more each side for samples).
    asked = [date.fromisoformat(q["start_date"]) for q in oura.data_requests() if "start_date" in q]
    assert asked and min(asked) >= day - timedelta(days=2)
    svc.jobs.dispatch_webhooks()
    events = daily_events(receiver)
    assert events, "the revised day was announced"
    assert len(events) == len(set(events)), "each change announced once"
    # What the day held is updated; a workout the revision added (the fake's revised
    # day can hold more workouts than before, by the day's draw) is created.
    added = {w["id"] for w in oura.workouts(AVA, day)} - workouts_before
    others = [e[0] for e in events if not e[0].startswith("daily.data.workouts.")]
    assert {t.rsplit(".", 1)[1] for t in others} == {"updated"}
    created = [e for e in events if e[0] == "daily.data.workouts.created"]
    assert len(created) == len(added)
    assert {e[1] for e in events} == {str(day)}
    # What was announced is what the API answers now.
    sleep = api.get(
        f"/v2/summary/sleep/{user_id}", params={"start_date": str(day)}, headers=home.headers
    ).json()["sleep"]
    [main] = [s for s in oura.sleeps(AVA, day) if s["type"] == "long_sleep"]
    answered = next(s for s in sleep if s["calendar_date"] == str(day))
    assert answered["hr_lowest"] == main["lowest_heart_rate"]

    # The same notifications again (Oura retries): recorded once, nothing synced again.
    before = log_length(svc)
    first = list(oura.webhooks.sent)
    resent = [oura.webhooks.post(s.callback_url, SERVICE_CLIENT, s.body) for s in first]
    assert {r.status for r in resent} == {200}
    assert log_length(svc) == before
    # An older notification arriving late (out of order): synced, nothing changed, so
    # nothing announced. Older, but of the same UTC day: a notice's window is the day of
    # its event_time and the day before, and between 00:00 and 01:00 UTC an hour earlier
    # is the day before, whose window reaches a day the first notice did not cover (the
    # revised night began there, in Ava's UTC+2), which is then rightly found changed.
    now = clock()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    oura.webhooks.notify(
        AVA.user_id, "sleep", "update", "late", event_time=max(now - timedelta(hours=1), midnight)
    )
    svc.jobs.run_due_pulls()
    svc.jobs.dispatch_webhooks()
    assert daily_events(receiver) == events


def test_a_bad_signature_is_a_401_and_nothing_is_stored(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
    subscribed: None,
) -> None:
    connected_user(svc, api, home, browser)
    before = log_length(svc)
    oura.webhooks.bad_signature = True
    oura.revise("ava", clock().date())
    assert [s.status for s in oura.webhooks.sent] == [401] * 6
    [sent] = oura.webhooks.sent[:1]
    unsigned = httpx.post(sent.callback_url, json=sent.body)
    assert unsigned.status_code == 401 and unsigned.json()["detail"]
    assert AVA.user_id not in unsigned.text
    assert log_length(svc) == before
    assert svc.maker_notice_queries.due_notices(clock(), 10) == []


def test_a_notice_about_an_unknown_account_is_acknowledged_and_dropped(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, subscribed: None
) -> None:
    connected_user(svc, api, home, browser)
    before = log_length(svc)
    [sent] = oura.webhooks.notify(PEOPLE["ben"].user_id, "workout", "create")
    assert sent.status == 200
    assert log_length(svc) == before


def test_a_revocation_ends_the_connection_and_the_team_is_told(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    subscribed: None,
    receiver: Receiver,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    svc.jobs.dispatch_webhooks()
    receiver.received.clear()
    oura.revoke("ava")
    assert [s.status for s in oura.webhooks.sent] == [200]  # once, not per subscription
    svc.jobs.run_due_pulls()
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "oura"))
    assert isinstance(connection, Connection) and connection.status == "error"
    assert connection.error_details is not None
    assert connection.error_details["error_type"] == "deregistered_per_provider"
    svc.jobs.dispatch_webhooks()
    types = [json.loads(r.body)["event_type"] for r in receiver.on("ok")]
    assert types.count("provider.connection.error") == 1


def test_the_subscribe_command_registers_our_subscriptions_at_oura(
    svc: Service,
    oura: FakeOura,
    served: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from healthledger.adapters.cli import main

    settings = svc.settings
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))
    monkeypatch.setenv("HEALTHLEDGER_OURA_API_URL", oura.base)
    monkeypatch.setenv("HEALTHLEDGER_PUBLIC_BASE_URL", served)
    monkeypatch.setenv(
        "HEALTHLEDGER_OAUTH_CLIENTS",
        json.dumps({"oura": {"client_id": SERVICE_CLIENT, "client_secret": SERVICE_SECRET}}),
    )
    assert main(["makers", "subscribe"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("created") == 12 and SERVICE_SECRET not in printed
    assert {s["callback_url"] for s in oura.webhooks.subscriptions.values()} == {
        f"{served}/makers/oura/webhook"
    }
    assert main(["makers", "subscribe"]) == 0
    assert capsys.readouterr().out.count("kept") == 12
    # Oura out of reach: a clear failure, no secret printed.
    monkeypatch.setenv("HEALTHLEDGER_OURA_API_URL", "http://127.0.0.1:9")
    assert main(["makers", "subscribe"]) == 1
    failed = capsys.readouterr().err
    assert "could not be reached" in failed and SERVICE_SECRET not in failed
