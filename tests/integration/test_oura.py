"""The Oura reader (adapters/providers/oura.py) against the fake Oura shipped with the
package (adapters/makers/fake_oura.py, a real HTTP server on localhost), on SQLite and
PostgreSQL: a person connects through the OAuth link flow, the pulls read every page of
Oura's collections, and the summaries and timeseries answer what the fake served; the
maker's failures (429 with and without Retry-After, 5xx, timeouts, an expired token, a
revoked grant) take the pulls and the connection where docs/makers/oura.md says."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_oura import PEOPLE, FakeOura, running_fake_oura
from healthledger.adapters.outbound import retry_after
from healthledger.adapters.providers.oauth2 import OAuth2Maker
from healthledger.adapters.providers.oura import OuraReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.maker_reads import times_out_after
from tests.integration.oauth_browser import (
    API,
    APP,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    clear_copies,
    outcome,
    signed_in_user,
)
from tests.stream_ids import stream_of_connection, stream_of_feed

AVA = PEOPLE["ava"]
HISTORY_DAYS = 10


@pytest.fixture
def oura(clock: Clock) -> Iterator[FakeOura]:
    with running_fake_oura(FakeOura(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, oura: FakeOura, clock: Clock) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": oura.base,
            "oura_api_url": oura.base,
            "oura_history_days": HISTORY_DAYS,
            "oauth_clients": {"oura": SERVICE},
        }
    )
    built = build_service(configured, clock=clock)
    yield built
    built.close()


@pytest.fixture
def home(svc: Service) -> Team:
    boot = svc.bootstrap()
    assert boot is not None
    return Team(boot.team_id, boot.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[Any]:
    from fastapi.testclient import TestClient
    from healthledger.adapters.http.team_api import create_team_api

    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


def connect(api: Any, home: Team, browser: Browser) -> uuid.UUID:
    return signed_in_user(api, home, browser, "oura")


def feed(svc: Service, user_id: uuid.UUID, resource: str) -> ResourceFeed:
    found = svc.ledger.find(stream_of_feed(svc, user_id, "oura", resource))
    assert isinstance(found, ResourceFeed)
    return found


def statuses(svc: Service, user_id: uuid.UUID) -> dict[str, str | None]:
    entry = svc.catalog["oura"]
    return {r: feed(svc, user_id, r).status for r in entry.supported_resources}


def last_error(svc: Service, user_id: uuid.UUID, resource: str) -> str:
    """The error code of the pull's last event (retrying or failed)."""
    event: Any = list(svc.ledger.events.get(feed(svc, user_id, resource).id))[-1]
    return str(event.error_code)


def get(api: Any, home: Team, path: str, **params: Any) -> Any:
    response = api.get(path, params=params, headers=home.headers)
    assert response.status_code == 200, response.text
    return response.json()


def provider_status(api: Any, home: Team, user_id: uuid.UUID) -> dict[str, Any]:
    [provider] = get(api, home, f"/v2/user/providers/{user_id}")["providers"]
    return dict(provider)


def past_days(clock: Clock) -> list[date]:
    """The days of the history pull that are over (UTC and at the fake person's place)."""
    today = clock().date()
    return [today - timedelta(days=n) for n in range(HISTORY_DAYS - 1, 1, -1)]


def main_sleep(oura: FakeOura, day: date) -> dict[str, Any]:
    [main] = [s for s in oura.sleeps(AVA, day) if s["type"] == "long_sleep"]
    return main


# -- the data, to the last page -------------------------------------------------------------


def test_oura_data_arrives_whole_in_the_shapes_the_summaries_and_timeseries_answer(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    assert svc.jobs.run_due_pulls() > 0
    assert set(statuses(svc, user_id).values()) == {"success"}
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "connected"
    # Oura's account id, read from personal_info at the sign-in (its webhooks name it).
    assert provider["external_user_id"] == AVA.user_id
    days = past_days(clock)
    first, last = str(days[0]), str(days[-1])

    # Sleep: the night's long sleep, its score from daily_sleep, Oura's local times.
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", start_date=first, end_date=last)
    by_day = {s["calendar_date"]: s for s in sleeps["sleep"]}
    assert set(by_day) == {str(d) for d in days}
    for day in days:
        served, ours = main_sleep(oura, day), by_day[str(day)]
        assert ours["total"] == served["total_sleep_duration"]
        assert ours["deep"] == served["deep_sleep_duration"]
        assert ours["duration"] == served["time_in_bed"]
        assert ours["hr_lowest"] == served["lowest_heart_rate"]
        assert ours["respiratory_rate"] == served["average_breath"]
        assert ours["temperature_delta"] == served["readiness"]["temperature_deviation"]
        assert ours["score"] == oura.daily_sleep(AVA, day)[0]["score"]
        assert ours["timezone_offset"] == 2 * 3600
        assert ours["source"]["provider"] == "oura" and ours["source"]["type"] == "ring"
        assert datetime.fromisoformat(ours["bedtime_start"]) == datetime.fromisoformat(
            served["bedtime_start"]
        )

    # Activity: Oura's daily_activity of each local day.
    activity = get(api, home, f"/v2/summary/activity/{user_id}", start_date=first, end_date=last)
    steps = {a["calendar_date"]: a["steps"] for a in activity["activity"]}
    assert steps == {str(d): oura.daily_activity(AVA, d)[0]["steps"] for d in days}

    # Workouts: one each, named by Oura's id.
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", start_date=first, end_date=last)
    served_workouts = {w["id"]: w for d in days for w in oura.workouts(AVA, d)}
    assert served_workouts, "the fake person works out on some of these days"
    assert {w["provider_id"]: w["calories"] for w in workouts["workouts"]} == {
        key: w["calories"] for key, w in served_workouts.items()
    }

    # Heart rate: every sample of every page of the window.
    start = datetime.combine(days[0], time(0), UTC)
    end = datetime.combine(days[-1] + timedelta(days=1), time(0), UTC)
    samples = get(api, home, f"/v2/timeseries/{user_id}/heartrate", start_date=first, end_date=last)
    served_hr = oura.heartrate(AVA, start, end)
    assert len(served_hr) > 3 * oura.heartrate_page_size  # several pages
    assert [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in samples] == [
        (datetime.fromisoformat(s["timestamp"]), s["bpm"]) for s in served_hr
    ]
    assert any("next_token" in q for q in oura.data_requests("heartrate"))
    assert any("next_token" in q for q in oura.data_requests("sleep"))

    # HRV from the nights' samples, SpO2 and the temperature deviation from the dailies.
    day = days[3]
    hrv = get(api, home, f"/v2/timeseries/{user_id}/hrv", start_date=str(day))
    assert hrv and {s["unit"] for s in hrv} == {"ms"}
    spo2 = get(api, home, f"/v2/timeseries/{user_id}/blood_oxygen", start_date=first, end_date=last)
    assert sorted(s["value"] for s in spo2) == sorted(
        oura.daily_spo2(AVA, d)[0]["spo2_percentage"]["average"] for d in days
    )
    # The person's tokens are nowhere in clear.
    assert clear_copies(svc, oura.issued) == set()


def test_a_reader_that_stopped_at_the_first_page_would_be_caught(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    """The same pull with pages of one document: every workout and every day of sleep is
    there all the same, and the reader asked for each page in turn."""
    oura.daily_page_size = 1
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "success"
    days = past_days(clock)
    workouts = get(
        api,
        home,
        f"/v2/summary/workouts/{user_id}",
        start_date=str(days[0]),
        end_date=str(days[-1]),
    )
    served = [w for d in days for w in oura.workouts(AVA, d)]
    assert len(workouts["workouts"]) == len(served) > 1
    sleeps = get(
        api, home, f"/v2/summary/sleep/{user_id}", start_date=str(days[0]), end_date=str(days[-1])
    )
    assert len(sleeps["sleep"]) == len(days)
    tokens = [q.get("next_token") for q in oura.data_requests("workout")]
    assert len([t for t in tokens if t]) >= len(served) - 2  # a request per page


# -- the maker's failures -------------------------------------------------------------------


def test_429_without_retry_after_goes_retrying_then_succeeds_without_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    oura.fail(429, times=1, path="workout")
    svc.jobs.run_due_pulls()
    retrying = feed(svc, user_id, "workouts")
    assert retrying.status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_rate_limit_exceeded"
    assert feed(svc, user_id, "sleep").status == "success"
    clock.advance(timedelta(seconds=retrying.retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "success"
    days = past_days(clock)
    workouts = get(
        api,
        home,
        f"/v2/summary/workouts/{user_id}",
        start_date=str(days[0]),
        end_date=str(days[-1]),
    )
    ids = [w["provider_id"] for w in workouts["workouts"]]
    assert len(ids) == len(set(ids)) == len([w for d in days for w in oura.workouts(AVA, d)])


def test_a_short_retry_after_is_waited_out_and_a_long_one_goes_back_to_the_engine(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    oura.fail(429, times=1, retry_after="1", path="daily_activity")
    oura.fail(429, times=1, retry_after="3600", path="heartrate")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "activity").status == "success"
    heartrate = feed(svc, user_id, "heartrate")
    assert heartrate.status == "retrying"
    # No sooner than Oura said (an hour), though the engine's first delay is shorter.
    assert heartrate.retry_at >= clock() + timedelta(seconds=3600)
    statuses_seen = [s for m, p, q, s in oura.requests if p.endswith("/daily_activity")]
    assert statuses_seen[0] == 429 and set(statuses_seen[1:]) == {200}


def test_5xx_and_timeouts_go_retrying(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura
) -> None:
    user_id = connect(api, home, browser)
    oura.fail(503, times=1, path="daily_spo2")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "blood_oxygen").status == "retrying"
    assert last_error(svc, user_id, "blood_oxygen") == "provider_unavailable"
    # A slow answer (longer than the 1 s timeout): a transport failure, retried.
    other = connect(api, home, browser)
    times_out_after(svc, "oura", 1.0)
    oura.slow(2.5, times=1)
    svc.jobs.run_due_pulls()
    found = statuses(svc, other)
    # The slowed answer's resource, and any other the loaded machine's fake answered past
    # the second (CI saw two): each retried as a transport failure.
    late = [r for r, s in found.items() if s == "retrying"]
    assert late, found
    assert {last_error(svc, other, r) for r in late} == {"transport_failure"}


def test_an_expired_access_token_is_refreshed_once(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    connection_id = stream_of_connection(svc, user_id, "oura")
    before = svc.provider_tokens.current(connection_id)
    assert before is not None
    clock.advance(timedelta(seconds=oura.expires_in + 60))
    for resource in ("sleep", "workouts", "heartrate", "activity"):
        svc.pulls.sync(feed(svc, user_id, resource).id)
    refreshes = [r for r in oura.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 200
    after = svc.provider_tokens.current(connection_id)
    assert after is not None and after.version == before.version + 1
    assert feed(svc, user_id, "sleep").synced_at == clock()
    assert provider_status(api, home, user_id)["status"] == "connected"


def test_two_workers_with_an_expired_token_refresh_it_once(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    connection_id = stream_of_connection(svc, user_id, "oura")
    clock.advance(timedelta(seconds=oura.expires_in + 60))
    reader = svc.oauth_makers["oura"]
    barrier = threading.Barrier(2)
    tokens: list[str] = []

    def worker() -> None:
        barrier.wait()
        tokens.append(reader.access_token(connection_id, clock()))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Both hold the same new token, and Oura was asked once: the second worker waited for
    # the first and took its grant (Oura's refresh tokens are single use: spending the old
    # one again would be refused, and read as a revoked grant).
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    granted = [r for r in oura.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in granted] == [200]
    stored = svc.provider_tokens.current(connection_id)
    assert stored is not None and stored.version == 2 and stored.tokens.access_token == tokens[0]
    assert provider_status(api, home, user_id)["status"] == "connected"


def test_two_processes_with_an_expired_token_end_with_one_grant(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    """Two processes' adapters (each its own locks) refresh at once: Oura grants one and
    refuses the other's spent refresh token; the refused one waits for the winner's grant
    to be stored and uses it, so the connection is not put in error."""
    user_id = connect(api, home, browser)
    connection_id = stream_of_connection(svc, user_id, "oura")
    clock.advance(timedelta(seconds=oura.expires_in + 60))
    mine = svc.oauth_makers["oura"]
    entry = svc.catalog["oura"]
    assert entry.oauth is not None
    other = OAuth2Maker(
        entry,
        entry.oauth,
        service_client=mine.service_client,
        custom_client=lambda team_id, provider: None,
        tokens=svc.provider_tokens,
        http=svc.oauth_http,
        clock=clock,
        maker_url=oura.base,
    )
    barrier = threading.Barrier(2)
    tokens: list[str] = []

    def worker(adapter: OAuth2Maker) -> None:
        barrier.wait()
        tokens.append(adapter.access_token(connection_id, clock()))

    threads = [threading.Thread(target=worker, args=(a,)) for a in (mine, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    granted = [r for r in oura.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in granted].count(200) == 1
    stored = svc.provider_tokens.current(connection_id)
    assert stored is not None and stored.version == 2


def test_a_revoked_grant_puts_the_connection_in_error_until_the_person_signs_in_again(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    oura.revoke("ava")  # at Oura, before the token's expiry
    svc.jobs.run_due_pulls()
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    # Every resource Oura gives failed (stress_level is not in Oura's API: nothing to read).
    found = statuses(svc, user_id)
    assert found.pop("stress_level") == "success"
    assert set(found.values()) == {"failure"}
    # Oura was asked to refresh the grant once, not once per resource.
    refreshes = [r for r in oura.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 400
    # The person allows us again and signs in again: the connection is back, and its
    # pulls run again to the end.
    oura.restore("ava")
    again = api.post(
        "/v2/link/token", json={"user_id": str(user_id), "redirect_url": APP}, headers=home.headers
    )
    assert again.status_code == 200, again.text
    _, answer = browser.sign_in(again.json()["link_token"], "oura")
    assert outcome(answer) == {"state": "success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    svc.jobs.run_due_pulls()
    found = statuses(svc, user_id)
    assert set(found.values()) == {"success"}
    days = past_days(clock)
    window = {"start_date": str(days[0]), "end_date": str(days[-1])}
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window)
    assert len(sleeps["sleep"]) == len(days)


def test_a_record_sent_again_changed_updates_and_never_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    workouts = feed(svc, user_id, "workouts")
    day = workouts.newest_day
    assert day is not None
    before = {w["id"]: w["calories"] for w in oura.workouts(AVA, day)}
    # Oura sends the day's workouts again, changed, under the same ids.
    for _ in range(20):
        oura.revise("ava", day)
        served = {w["id"]: w["calories"] for w in oura.workouts(AVA, day)}
        if set(served) & set(before):
            break
    assert set(served) & set(before) and served != before
    # The sync comes later than the pull: at the pull's own instant it would be served
    # the pull's reads again (RecentReads keys a read by its pull's `now`), and on the
    # first of a month its window is the pull's last chunk's.
    clock.advance(timedelta(minutes=1))
    synced = svc.pulls.sync(workouts.id)
    assert synced is not None and day in synced[1]  # updated, not created
    answered = get(api, home, f"/v2/summary/workouts/{user_id}", start_date=str(day))
    mine = [w for w in answered["workouts"] if w["calendar_date"] == str(day)]
    assert {w["provider_id"]: w["calories"] for w in mine} == served


def test_scopes_the_person_did_not_grant_are_unavailable_not_failed_pulls(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura
) -> None:
    oura.denied_scopes = {"heartrate", "workout"}  # unticked on Oura's consent screen
    user_id = connect(api, home, browser)
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "oura"))
    assert isinstance(connection, Connection)
    availability = connection.resource_availability
    for resource in ("heartrate", "workouts"):
        assert availability[resource]["status"] == "unavailable"
        assert availability[resource]["scope_requirements"]["user_denied"]["required"]
    assert availability["sleep"]["status"] == "available"
    # Without the personal scope, Oura's account id is not asked for.
    oura.denied_scopes.add("personal")
    asked = len(oura.data_requests("personal_info"))
    other = connect(api, home, browser)
    assert provider_status(api, home, other)["external_user_id"] is None
    assert len(oura.data_requests("personal_info")) == asked
    svc.jobs.run_due_pulls()
    found = statuses(svc, user_id)
    assert set(found.values()) == {"success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    # Nothing was asked of Oura that the person did not grant.
    assert oura.data_requests("heartrate") == [] and oura.data_requests("workout") == []
    assert oura.data_requests("sleep")


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after("7", now) == timedelta(seconds=7)
    assert retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now) == timedelta(seconds=30)
    assert retry_after(None, now) is None and retry_after("soon", now) is None


def test_the_composition_root_reads_oura_with_the_reader(svc: Service) -> None:
    assert isinstance(svc.pulls.adapter_for("oura", False), OuraReader)
    assert svc.pulls.adapter_for("oura", False) is svc.oauth_makers["oura"]
