"""WHOOP's webhooks in (adapters/providers/whoop_webhooks.py,
docs/makers/whoop.md#webhooks-in), on SQLite and PostgreSQL: the fake WHOOP (a real HTTP
server) POSTs signed webhooks to the team API served on a real loopback port; a
notification is recorded once and synced as a recent window, the changed record read
again; a bad signature is a 401 and stores nothing."""

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
from healthledger.adapters.makers.fake_whoop import PEOPLE, FakeWhoop, running_fake_whoop
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.providers.whoop_webhooks import WhoopWebhooks, sign
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.maker_notices import NoticeMalformed, NoticeRefused
from sqlalchemy import func, select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.oauth_browser import SERVICE_CLIENT, SERVICE_SECRET, Browser, signed_in_user
from tests.receivers import serving

GABE = PEOPLE["gabe"]
SLUG = "whoop_v2"
HISTORY_DAYS = 6


@pytest.fixture
def whoop(clock: Clock) -> Iterator[FakeWhoop]:
    with running_fake_whoop(FakeWhoop(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, whoop: FakeWhoop, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings,
        clock,
        SLUG,
        whoop.base,
        whoop_api_url=whoop.base,
        whoop_history_days=HISTORY_DAYS,
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
def hooked(svc: Service, whoop: FakeWhoop) -> Iterator[None]:
    """The team API on a real loopback port, set as the webhook URL at the fake."""
    with serving(create_team_api(svc)) as base:
        whoop.webhook_url = f"{base}/makers/{SLUG}/webhook"
        yield


def connected_user(svc: Service, api: Any, home: Team, browser: Browser) -> uuid.UUID:
    user_id = signed_in_user(api, home, browser, SLUG)
    svc.jobs.run_due_pulls()
    assert set(reads.statuses(svc, user_id, SLUG).values()) == {"success"}
    return user_id


def log_length(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


# -- the verifier alone ------------------------------------------------------------------


def test_the_signature_is_whoops_hmac_sha256_of_timestamp_and_body_in_base64() -> None:
    now = datetime(2026, 11, 21, 9, tzinfo=UTC)
    stamp = str(int(now.timestamp() * 1000))
    body = b'{"user_id":10129,"id":"a-sleep","type":"sleep.updated","trace_id":"t1"}'
    expected = base64.b64encode(
        hmac.new(b"s3cret", stamp.encode() + body, hashlib.sha256).digest()
    ).decode()
    assert sign("s3cret", stamp, body) == expected
    hooks = WhoopWebhooks("s3cret")
    signed = {"x-whoop-signature": expected, "x-whoop-signature-timestamp": stamp}
    [notice] = hooks.notices(signed, body, now)
    assert (notice.account_id, notice.start, notice.end) == (
        "10129",
        date(2026, 11, 19),
        date(2026, 11, 22),
    )
    assert notice.resources == {"sleep", "respiratory_rate"} and not notice.deauthorized
    # The same delivery again is the same notice; another delivery a new one.
    [again] = hooks.notices(signed, body, now + timedelta(seconds=30))
    other = body.replace(b"t1", b"t2")
    [later] = hooks.notices(
        {"x-whoop-signature": sign("s3cret", stamp, other), "x-whoop-signature-timestamp": stamp},
        other,
        now,
    )
    assert again.key == notice.key != later.key
    for headers, at in (
        ({}, now),
        ({"x-whoop-signature": expected}, now),
        ({**signed, "x-whoop-signature": sign("other", stamp, body)}, now),
        (signed, now + timedelta(minutes=6)),  # an old delivery replayed
    ):
        with pytest.raises(NoticeRefused):
            hooks.notices(headers, body, at)
    for bad in (b"[]", b"not json", b'{"type": "sleep.updated"}'):
        with pytest.raises(NoticeMalformed):
            hooks.notices(
                {
                    "x-whoop-signature": sign("s3cret", stamp, bad),
                    "x-whoop-signature-timestamp": stamp,
                },
                bad,
                now,
            )
    unknown = b'{"user_id":10129,"id":1,"type":"body.updated","trace_id":"t3"}'
    assert (
        hooks.notices(
            {
                "x-whoop-signature": sign("s3cret", stamp, unknown),
                "x-whoop-signature-timestamp": stamp,
            },
            unknown,
            now,
        )
        == []
    )
    assert hooks.challenge("GET", {}, {}) is None


# -- notifications through the route -----------------------------------------------------


def test_a_webhook_syncs_the_recent_window_once_and_the_record_is_read_again(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    whoop: FakeWhoop,
    clock: Clock,
    hooked: None,
) -> None:
    user_id = connected_user(svc, api, home, browser)
    day = next(
        d for d in (clock().date() - timedelta(days=n) for n in (1, 2)) if whoop.workouts(GABE, d)
    )
    whoop.requests.clear()
    clock.advance(timedelta(seconds=1))  # a new run: the reader reads afresh
    whoop.revise("gabe", day)  # WHOOP tells us: sleep, recovery, each workout
    assert [status for _, _, status in whoop.sent] == [200] * len(whoop.sent) and whoop.sent
    assert whoop.data_requests() == []  # answered before any sync
    svc.jobs.run_due_pulls()
    # Only the recent window was read, not the history.
    asked = whoop.data_requests("activity/workout")
    assert asked and all(q["start"] >= str(clock().date() - timedelta(days=4)) for q in asked)
    workouts = reads.get(
        api, home, f"/v2/summary/workouts/{user_id}", start_date=str(day), end_date=str(day)
    )
    mine = {w["provider_id"]: w["calories"] for w in workouts["workouts"]}
    assert mine == {
        w["id"]: round(w["score"]["kilojoule"] / 4.184, 1) for w in whoop.workouts(GABE, day)
    }
    # The same deliveries again (WHOOP retries): nothing recorded again.
    before = log_length(svc)
    assert {whoop.post(body, headers) for body, headers, _ in list(whoop.sent)} == {200}
    assert log_length(svc) == before


def test_a_bad_signature_is_a_401_and_nothing_is_stored(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    whoop: FakeWhoop,
    clock: Clock,
    hooked: None,
) -> None:
    connected_user(svc, api, home, browser)
    before = log_length(svc)
    whoop.bad_signature = True
    whoop.revise("gabe", clock().date() - timedelta(days=1))
    assert whoop.sent and {status for _, _, status in whoop.sent} == {401}
    assert whoop.webhook_url is not None
    unsigned = httpx.post(whoop.webhook_url, content=whoop.sent[0][0])
    assert unsigned.status_code == 401 and str(GABE.user_id) not in unsigned.text
    assert log_length(svc) == before
    assert svc.maker_notice_queries.due_notices(clock(), 10) == []


def test_a_webhook_about_an_unknown_account_is_acknowledged_and_dropped(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    whoop: FakeWhoop,
    clock: Clock,
    hooked: None,
) -> None:
    connected_user(svc, api, home, browser)
    before = log_length(svc)
    assert whoop.notify("nobody", "sleep.updated", "a-sleep") == 200
    assert log_length(svc) == before
    assert json.loads(whoop.sent[-1][0])["user_id"] != GABE.user_id
