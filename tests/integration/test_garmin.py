"""Garmin's Health API (adapters/providers/garmin.py, garmin_webhooks.py,
docs/makers/garmin.md) against the fake Garmin (a real HTTP server), on SQLite and
PostgreSQL: the sign-in names the person and their permissions; the history is asked by
backfill requests in 90-day windows and arrives later by push or ping to the team API
served on a real loopback port; each delivery is stored and announced once, whatever
Garmin resends; a POST without our consumer key stores nothing; 429/5xx go to
`retrying`, an expired token is refreshed, a revoked grant ends in `error`; Garmin's
deregistration notice ends the connection, and our deregistration ends it at Garmin."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_garmin import PEOPLE, TYPES, FakeGarmin, running_fake_garmin
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.providers.garmin import BACKFILL_DAYS, GarminReader
from healthledger.adapters.providers.garmin_webhooks import GarminWebhooks
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.maker_notices import NoticeMalformed, NoticeRefused
from healthledger.domain.connections.notice_intake import NoticeReceipt
from healthledger.domain.connections.providers import ProviderError
from sqlalchemy import func, select

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.oauth_browser import (
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    clear_copies,
    signed_in_user,
)
from tests.receivers import serving
from tests.stream_ids import stream_of_connection

KAI = PEOPLE["kai"]  # UTC-07:00
SLUG = "garmin"
HISTORY_DAYS = 200


@pytest.fixture
def garmin(clock: Clock) -> Iterator[FakeGarmin]:
    with running_fake_garmin(FakeGarmin(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, garmin: FakeGarmin, clock: Clock) -> Iterator[Service]:
    with reads.maker_service(
        settings,
        clock,
        SLUG,
        garmin.base,
        garmin_api_url=garmin.base,
        garmin_history_days=HISTORY_DAYS,
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
def hooked(svc: Service, garmin: FakeGarmin) -> Iterator[None]:
    """The team API on a real loopback port, set as the endpoint at the fake Garmin."""
    with serving(create_team_api(svc)) as base:
        garmin.webhook_url = f"{base}/makers/{SLUG}/webhook"
        yield


def connected(svc: Service, api: Any, home: Team, browser: Browser) -> uuid.UUID:
    """Signed in, its history pull run (backfills asked): every feed a success."""
    user_id = signed_in_user(api, home, browser, SLUG)
    svc.jobs.run_due_pulls()
    assert set(reads.statuses(svc, user_id, SLUG).values()) == {"success"}
    return user_id


def log_length(svc: Service) -> int:
    with svc.db.read() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_events)).scalar_one())


def announced(svc: Service, user_id: uuid.UUID, resource: str) -> list[date]:
    """The days the feed's syncs recorded new or changed (each announced once)."""
    feed = reads.feed(svc, user_id, SLUG, resource)
    found: list[date] = []
    for event in svc.ledger.events.get(feed.id):
        if type(event).__name__ == "DailySynced":
            found += [*event.created_days, *event.updated_days]  # type: ignore[attr-defined]
    return found


def local_days(clock: Clock, back: int) -> list[date]:
    """The last `back` days at the fake person's place that are over."""
    today = clock().astimezone(KAI.tz).date()
    return [today - timedelta(days=n) for n in range(back, 0, -1)]


# -- the verifier alone ------------------------------------------------------------------


def test_a_post_is_garmins_when_it_carries_our_consumer_key() -> None:
    hooks = GarminWebhooks("our-client")
    now = datetime(2026, 11, 21, 9, tzinfo=UTC)
    push = json.dumps(
        {
            "sleeps": [{"userId": "u-1", "summaryId": "s1", "startTimeInSeconds": 1_763_600_000}],
            "moveIQActivities": [{"userId": "u-1"}],  # a type we do not read: dropped
        }
    ).encode()
    ours = {"garmin-client-id": "our-client"}
    [notice] = hooks.notices(ours, push, now)
    assert notice.account_id == "u-1" and notice.resources == {"sleep"}
    assert notice.delivery == {
        "type": "sleeps",
        "records": [{"summaryId": "s1", **{"startTimeInSeconds": 1_763_600_000}}],
    }
    assert "u-1" not in repr(notice)  # the account id and the records stay out of reprs
    [again] = hooks.notices(ours, push, now + timedelta(hours=1))
    assert again.key == notice.key  # Garmin's retry of the POST: the same notice
    ping = b'{"dailies":[{"userId":"u-1","callbackURL":"https://apis.garmin.com/x"}]}'
    [pinged] = hooks.notices(ours, ping, now)
    assert pinged.delivery == {"type": "dailies", "callbacks": ["https://apis.garmin.com/x"]}
    [gone] = hooks.notices(ours, b'{"deregistrations":[{"userId":"u-1"}]}', now)
    assert gone.deauthorized and gone.delivery is None
    narrowed = b'{"userPermissionsChange":[{"userId":"u-1","permissions":["HEALTH_EXPORT"]}]}'
    [narrowing] = hooks.notices(ours, narrowed, now)
    assert narrowing.delivery == {"type": "permissions", "permissions": ["HEALTH_EXPORT"]}
    assert not narrowing.deauthorized
    for headers in ({}, {"garmin-client-id": "another"}):
        with pytest.raises(NoticeRefused):
            hooks.notices(headers, push, now)
    for bad in (b"[]", b"nope", b'{"sleeps": {}}', b'{"sleeps": [{"summaryId": "s"}]}'):
        with pytest.raises(NoticeMalformed):
            hooks.notices(ours, bad, now)
    assert hooks.challenge("GET", {}, {}) is None


# -- the sign-in and the history -----------------------------------------------------------


def test_the_history_is_asked_in_90_day_backfills_and_each_push_is_stored_and_announced_once(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    user_id = connected(svc, api, home, browser)
    provider = reads.provider_status(api, home, user_id)
    assert provider["external_user_id"] == KAI.user_id  # from user/id, after the exchange
    # Every summary type asked once, from the history's first day to now, 90 days at most
    # a request, back to back; nothing delivered yet, nothing stored.
    asked = [q for m, p, q, s in garmin.requests if "/backfill/" in p]
    kinds = {p.rsplit("/", 1)[1] for m, p, q, s in garmin.requests if "/backfill/" in p}
    assert kinds == set(TYPES)
    windows = sorted(
        (int(q["summaryStartTimeInSeconds"]), int(q["summaryEndTimeInSeconds"])) for q in asked
    )
    assert all(0 < end - start <= BACKFILL_DAYS * 86_400 for start, end in windows)
    assert len(asked) == len(TYPES) * 3  # 200 days: three windows each
    assert (
        reads.get(api, home, f"/v2/summary/sleep/{user_id}", start_date="2000-01-01")["sleep"] == []
    )
    # Garmin delivers (push, a week a POST): every POST acknowledged at once, stored by
    # the worker after.
    assert garmin.deliver() > 0
    assert {status for _, status in garmin.sent} == {200}
    svc.jobs.run_due_pulls()
    days = local_days(clock, 60)
    window = {"start_date": str(days[0]), "end_date": str(days[-1])}
    sleeps = {
        s["calendar_date"]: s
        for s in reads.get(api, home, f"/v2/summary/sleep/{user_id}", **window)["sleep"]
    }
    assert set(sleeps) == {str(d) for d in days}
    for day in days:
        [night] = garmin.sleeps(KAI, day)
        ours = sleeps[str(day)]
        assert ours["deep"] == night["deepSleepDurationInSeconds"]
        assert ours["score"] == night["overallSleepScore"]["value"]
        assert ours["timezone_offset"] == -7 * 3600 and ours["bedtime_start"].endswith("-07:00")
    activity = {
        a["calendar_date"]: a
        for a in reads.get(api, home, f"/v2/summary/activity/{user_id}", **window)["activity"]
    }
    for day in days:
        [daily] = garmin.dailies(KAI, day)
        assert activity[str(day)]["steps"] == daily["steps"]
    workouts = reads.get(api, home, f"/v2/summary/workouts/{user_id}", **window)["workouts"]
    served = {a["summaryId"] for d in days for a in garmin.activities(KAI, d)}
    assert {w["provider_id"] for w in workouts} == served and served
    steps = reads.get(api, home, f"/v2/timeseries/{user_id}/steps", **window)
    assert len(steps) == 96 * len(days) or steps  # a quarter hour each (UTC days)
    first = {r: sorted(announced(svc, user_id, r)) for r in ("sleep", "activity", "steps")}
    assert len(first["sleep"]) == len(set(first["sleep"])) >= len(days)
    # Garmin sends every POST again: recorded once, nothing stored or announced again.
    before = log_length(svc)
    for body, _ in list(garmin.sent):
        assert garmin.post(body) == 200
    assert log_length(svc) == before
    svc.jobs.run_due_pulls()
    assert {r: sorted(announced(svc, user_id, r)) for r in first} == first


def test_a_ping_is_fetched_with_the_persons_token_only_from_garmins_api(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    user_id = connected(svc, api, home, browser)
    garmin.mode = "ping"
    day = local_days(clock, 1)[0]
    assert garmin.synced("kai", day) == len(TYPES)
    fetched = [p for m, p, q, s in garmin.requests if "uploadStartTimeInSeconds" in q]
    assert fetched == []  # acknowledged before anything is fetched
    svc.jobs.run_due_pulls()
    fetched = [p for m, p, q, s in garmin.requests if "uploadStartTimeInSeconds" in q]
    # Each callback once (a day at most each: two for the day's summaries from the
    # evening before), whichever of our resources reads it.
    assert Counter(p.rsplit("/", 1)[1] for p in fetched) == {kind: 2 for kind in TYPES}
    [sleep] = reads.get(
        api, home, f"/v2/summary/sleep/{user_id}", start_date=str(day), end_date=str(day)
    )["sleep"]
    assert sleep["deep"] == garmin.sleeps(KAI, day)[0]["deepSleepDurationInSeconds"]
    nights = announced(svc, user_id, "sleep")
    assert day in nights and len(nights) == len(set(nights))
    # The same pings again: nothing fetched, stored or announced again.
    count = len(garmin.requests)
    for body, _ in list(garmin.sent):
        assert garmin.post(body) == 200
    svc.jobs.run_due_pulls()
    assert len(garmin.requests) == count and announced(svc, user_id, "sleep") == nights
    # A ping naming a URL outside Garmin's API: our token is never sent there.
    elsewhere = {"dailies": [{"userId": KAI.user_id, "callbackURL": "http://127.0.0.9/steal"}]}
    assert garmin.post(elsewhere) == 200
    svc.jobs.run_due_pulls()
    assert len(garmin.requests) == count


def test_a_post_without_our_consumer_key_is_a_401_and_an_unknown_person_is_dropped(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    import httpx

    connected(svc, api, home, browser)
    before = log_length(svc)
    assert garmin.webhook_url is not None
    body = json.dumps(
        {"sleeps": [{"userId": KAI.user_id, **garmin.sleeps(KAI, clock().date())[0]}]}
    )
    forged = httpx.post(garmin.webhook_url, content=body, headers={"garmin-client-id": "x"})
    assert forged.status_code == 401 and KAI.user_id not in forged.text
    bare = httpx.post(garmin.webhook_url, content=body)
    assert bare.status_code == 401
    assert log_length(svc) == before
    stranger = {"sleeps": [{"userId": "not-a-person-we-know", "summaryId": "s"}]}
    assert garmin.post(stranger) == 200
    assert log_length(svc) == before
    assert svc.maker_notice_queries.due_notices(clock(), 10) == []


# -- failures ------------------------------------------------------------------------------


def test_backfills_refused_for_a_while_go_retrying_then_ask_again(
    svc: Service, api: Any, home: Team, browser: Browser, garmin: FakeGarmin, clock: Clock
) -> None:
    user_id = signed_in_user(api, home, browser, SLUG)
    garmin.fail(429, retry_after="600", path="backfill/sleeps")
    garmin.fail(503, path="backfill/activities")
    svc.jobs.run_due_pulls()
    sleep, workouts = (reads.feed(svc, user_id, SLUG, r) for r in ("sleep", "workouts"))
    assert (sleep.status, workouts.status) == ("retrying", "retrying")
    assert reads.last_error(svc, user_id, SLUG, "sleep") == "provider_rate_limit_exceeded"
    assert reads.last_error(svc, user_id, SLUG, "workouts") == "provider_unavailable"
    clock.advance(timedelta(hours=3))
    svc.jobs.run_due_pulls()
    assert set(reads.statuses(svc, user_id, SLUG).values()) == {"success"}
    # A window asked already (409) counts as asked: no duplicate request is an error.
    asked = [(p, q) for m, p, q, s in garmin.requests if p.endswith("backfill/sleeps")]
    assert len({json.dumps(q, sort_keys=True) for _, q in asked}) == 3


def test_a_ping_garmin_fails_is_tried_again_and_an_expired_token_refreshed_once(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    user_id = connected(svc, api, home, browser)
    garmin.mode = "ping"
    clock.advance(timedelta(seconds=garmin.expires_in + 60))
    day = local_days(clock, 1)[0]
    garmin.fail(500, path="/sleeps")
    garmin.synced("kai", day)
    svc.jobs.run_due_pulls()
    assert announced(svc, user_id, "sleep") == []  # failed: the notice waits
    refreshes = [r for r in garmin.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 200
    clock.advance(svc.settings.pull_lease + timedelta(seconds=1))
    svc.jobs.run_due_pulls()
    assert day in announced(svc, user_id, "sleep")
    assert reads.provider_status(api, home, user_id)["status"] == "connected"


def test_a_revoked_grant_ends_in_error_and_garmins_deregistration_ends_the_connection(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    user_id = connected(svc, api, home, browser)
    garmin.mode = "ping"
    garmin.revoke("kai")
    clock.advance(timedelta(seconds=garmin.expires_in + 60))
    garmin.synced("kai", local_days(clock, 1)[0])
    svc.jobs.run_due_pulls()
    provider = reads.provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    # Another person: Garmin tells us they removed the application.
    other = signed_in_user(api, home, browser, SLUG)
    svc.jobs.run_due_pulls()
    assert garmin.deregister("kai") == 200
    svc.jobs.run_due_pulls()
    ended = reads.provider_status(api, home, other)
    assert ended["status"] == "error"
    assert ended["error_details"]["error_type"] == "deregistered_per_provider"


def test_our_deregistration_ends_the_registration_at_garmin(
    svc: Service, api: Any, home: Team, browser: Browser, garmin: FakeGarmin, clock: Clock
) -> None:
    """The reader's revoke (the revocation job's, ADR 0030): DELETE user/registration as
    the person, refreshed first when expired; Garmin then refuses the tokens. Again: gone
    already (401), done; Garmin down: retried later."""
    user_id = connected(svc, api, home, browser)
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, SLUG))
    assert stored is not None
    reader = svc.pulls.adapter_for(SLUG, False)
    assert isinstance(reader, GarminReader)
    clock.advance(timedelta(seconds=garmin.expires_in + 60))
    reader.revoke(stored.team_id, stored.client_id, stored.tokens)
    assert garmin.deregistered == ["kai"]
    assert [r[3] for r in garmin.requests if r[0] == "DELETE"] == [204]
    garmin.fail(503, path="user/registration")
    with pytest.raises(ProviderError) as down:
        reader.revoke(stored.team_id, stored.client_id, replace(stored.tokens, expires_at=None))
    assert down.value.retriable
    reader.revoke(stored.team_id, stored.client_id, replace(stored.tokens, expires_at=None))
    assert [r[3] for r in garmin.requests if r[0] == "DELETE"] == [204, 503, 401]


def test_permissions_the_person_unticked_are_unavailable(
    svc: Service, api: Any, home: Team, browser: Browser, garmin: FakeGarmin
) -> None:
    garmin.denied.add("ACTIVITY_EXPORT")
    user_id = connected(svc, api, home, browser)
    resources = reads.provider_status(api, home, user_id)["resource_availability"]
    assert resources["workouts"]["status"] == "unavailable"
    assert resources["sleep"]["status"] == "available"
    assert not [p for m, p, q, s in garmin.requests if p.endswith("backfill/activities")]


def test_a_push_is_kept_sealed_with_the_person_and_erased_with_them(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    """Between the 200 and the worker, a push's records are only in the notice's
    `Delivered` event, sealed with the person's key: none of them is in clear in any
    table (nor the SQLite files); the person's erasure destroys the key, and the records
    with it."""
    user_id = connected(svc, api, home, browser)
    day = local_days(clock, 1)[0]
    posts = garmin.synced("kai", day)  # a push a type that has records that day
    served = [r for kind in TYPES for r in garmin.summaries(kind, KAI, day)]
    assert clear_copies(svc, [r["summaryId"] for r in served]) == set()
    events = [
        event
        for notice in svc.maker_notice_queries.due_notices(clock(), 50)
        for event in svc.ledger.events.get(notice)
    ]
    sealed = [e for e in events if isinstance(e, NoticeReceipt.Delivered)]
    assert posts >= 4 and len(sealed) == posts
    opened = [svc.key_store.open(user_id, e.sealed_delivery) for e in sealed]
    assert all(isinstance(d, dict) and d.get("records") for d in opened)
    svc.jobs.run_due_pulls()
    assert announced(svc, user_id, "sleep")
    assert api.delete(f"/v2/user/{user_id}", headers=home.headers).status_code == 200
    clock.advance(timedelta(days=7, minutes=1))
    assert svc.jobs.sweep_erasures() == 1
    assert [svc.key_store.open(user_id, e.sealed_delivery) for e in sealed] == [None] * len(sealed)


def test_permissions_the_person_withdraws_at_garmin_narrow_the_grant(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    garmin: FakeGarmin,
    clock: Clock,
    hooked: None,
) -> None:
    """Garmin's userPermissionsChange leaving HEALTH_EXPORT: the grant's scope becomes
    it, and the next syncs ask no backfill of activities (ACTIVITY_EXPORT's)."""
    user_id = connected(svc, api, home, browser)
    change = {
        "userPermissionsChange": [
            {"userId": KAI.user_id, "summaryId": "p1", "permissions": ["HEALTH_EXPORT"]}
        ]
    }
    assert garmin.post(change) == 200
    svc.jobs.run_due_pulls()
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, SLUG))
    assert stored is not None and stored.tokens.scope == "HEALTH_EXPORT"
    assert reads.provider_status(api, home, user_id)["status"] == "connected"
    garmin.requests.clear()
    clock.advance(timedelta(days=1, minutes=1))
    svc.jobs.sync_connected_feeds()
    asked = {p.rsplit("/", 1)[1] for m, p, q, s in garmin.requests if "/backfill/" in p}
    assert "sleeps" in asked and "activities" not in asked
