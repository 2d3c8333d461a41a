"""Polar's webhooks in (adapters/providers/polar_webhooks.py,
docs/makers/polar.md#webhooks-in), on SQLite and PostgreSQL: the fake Polar (a real HTTP
server) POSTs signed notifications to the team API served on a real loopback port; an
EXERCISE notice is recorded once and synced as a window, reading the new exercise from
its transaction (committed once stored); a bad or missing signature is a 401 and stores
nothing; Polar's PING is acknowledged and names nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_polar import PEOPLE, FakePolar, running_fake_polar
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.providers.polar_webhooks import PolarWebhooks, sign
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.maker_notices import NoticeMalformed, NoticeRefused
from pydantic import SecretStr
from sqlalchemy import func, select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.maker_reads import get
from tests.integration.oauth_browser import (
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    signed_in_user,
)
from tests.receivers import serving

PIA = PEOPLE["pia"]
SECRET = "polar-webhook-secret"
NOW = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


@pytest.fixture
def polar(clock: Clock) -> Iterator[FakePolar]:
    with running_fake_polar(FakePolar(clock=clock, webhook_secret=SECRET)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, polar: FakePolar, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings,
        clock,
        "polar",
        polar.base,
        polar_api_url=polar.base,
        polar_webhook_signature_secret=SecretStr(SECRET),
    ) as built:
        yield built


@pytest.fixture
def hooked(svc: Service, polar: FakePolar) -> Iterator[None]:
    """The team API on a real loopback port, the fake's webhook pointing at it."""
    with serving(create_team_api(svc)) as base:
        polar.webhook_url = f"{base}/makers/polar/webhook"
        yield


def log_length(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


# -- the verifier alone ------------------------------------------------------------------


def test_the_signature_is_hmac_sha256_hex_of_the_body_under_the_secret() -> None:
    body = json.dumps(
        {
            "event": "EXERCISE",
            "user_id": 41000001,
            "entity_id": "aQlC83",
            "timestamp": "2026-11-20T08:00:00.000Z",
        }
    ).encode()
    assert sign("s3cret", body) == hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    webhooks = PolarWebhooks("s3cret")
    [notice] = webhooks.notices({"polar-webhook-signature": sign("s3cret", body)}, body, NOW)
    assert notice.account_id == "41000001" and notice.resources == {"workouts"}
    assert (notice.start.isoformat(), notice.end.isoformat()) == ("2026-11-19", "2026-11-21")
    for headers in ({}, {"polar-webhook-signature": sign("other", body)}):
        with pytest.raises(NoticeRefused):
            webhooks.notices(headers, body, NOW)
    ping = json.dumps({"event": "PING", "timestamp": "2026-11-20T08:00:00Z"}).encode()
    assert webhooks.notices({"polar-webhook-signature": sign("s3cret", ping)}, ping, NOW) == []
    unknown = json.dumps({"event": "CONTINUOUS_HEART_RATE", "user_id": 1}).encode()
    signed = {"polar-webhook-signature": sign("s3cret", unknown)}
    assert webhooks.notices(signed, unknown, NOW) == []
    broken = b'{"event": "EXERCISE", "user_id": 1}'  # no timestamp
    with pytest.raises(NoticeMalformed):
        webhooks.notices({"polar-webhook-signature": sign("s3cret", broken)}, broken, NOW)


# -- through the route ---------------------------------------------------------------------


def test_an_exercise_notice_syncs_the_new_exercise_once_and_commits_it(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    polar: FakePolar,
    clock: Clock,
    hooked: None,
) -> None:
    user_id = signed_in_user(api, home, browser, "polar")
    svc.jobs.run_due_pulls()
    # A day on, the watch uploads yesterday's exercise; Polar tells us.
    clock.advance(timedelta(days=1))
    newest = polar.unsynced_days(PIA)[-1]
    exercise = str(polar.exercise(PIA, newest)["id"])
    assert exercise not in polar.committed
    answer = polar.push("pia", "EXERCISE", exercise, clock())
    assert answer.status_code == 200 and answer.json()["recorded"] == 1
    svc.jobs.run_due_pulls()
    found = get(api, home, f"/v2/summary/workouts/{user_id}", start_date=str(newest))
    assert [w["provider_id"] for w in found["workouts"]] == [exercise]
    assert polar.committed[f"exercises/{exercise}"] == 1
    # The same notice again (Polar retries): a duplicate, nothing recorded.
    before = log_length(svc)
    again = polar.push("pia", "EXERCISE", exercise, clock())
    assert again.status_code == 200 and again.json()["duplicates"] == 1
    assert log_length(svc) == before
    # Polar's PING at the webhook's creation: acknowledged, nothing recorded.
    assert polar.push("pia", "PING", "", clock()).json()["recorded"] == 0


def test_a_bad_or_missing_signature_is_a_401_and_nothing_is_stored(
    svc: Service, api: Any, home: Team, browser: Browser, polar: FakePolar, hooked: None
) -> None:
    signed_in_user(api, home, browser, "polar")
    before = log_length(svc)
    unsigned = polar.push("pia", "EXERCISE", "x1", datetime.now(UTC), signed=False)
    assert unsigned.status_code == 401 and str(PIA.user_id) not in unsigned.text
    polar.webhook_secret = "not-ours"
    forged = polar.push("pia", "EXERCISE", "x1", datetime.now(UTC))
    assert forged.status_code == 401
    assert log_length(svc) == before
