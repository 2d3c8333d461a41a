"""The WHOOP reader (adapters/providers/whoop.py) against the fake WHOOP shipped with the
package (adapters/makers/fake_whoop.py, a real HTTP server on localhost), on SQLite and
PostgreSQL: a person connects through the OAuth link flow, the pulls read every page of
WHOOP's collections (`nextToken` to the end), and the summaries and timeseries answer what
the fake served, in the person's offset and our units; the maker's failures (429 with and
without Retry-After, 5xx, timeouts, an expired token, a revoked grant, unticked scopes)
take the pulls and the connection where docs/makers/whoop.md says."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.makers.fake_whoop import PEOPLE, FakeWhoop, running_fake_whoop
from healthledger.adapters.providers.whoop import WhoopReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.providers import ProviderError
from healthledger.domain.connections.resource_feeds import ResourceFeed

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.maker_reads import get, provider_status
from tests.integration.oauth_browser import (
    APP,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    clear_copies,
    outcome,
    signed_in_user,
)
from tests.stream_ids import stream_of_connection

GABE = PEOPLE["gabe"]  # UTC-05:00
SLUG = "whoop_v2"
HISTORY_DAYS = 10
# In the catalog's list for WHOOP, not in WHOOP's API v2: their pulls read nothing and
# succeed (unavailable in resource_availability).
NOT_READ = {"heartrate", "calories_active", "sleep_cycle", "hypnogram"}


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
    from healthledger.adapters.http.team_api import create_team_api

    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


def connect(api: Any, home: Team, browser: Browser) -> uuid.UUID:
    return signed_in_user(api, home, browser, SLUG)


def feed(svc: Service, user_id: uuid.UUID, resource: str) -> ResourceFeed:
    return reads.feed(svc, user_id, SLUG, resource)


def statuses(svc: Service, user_id: uuid.UUID) -> dict[str, str | None]:
    return reads.statuses(svc, user_id, SLUG)


def last_error(svc: Service, user_id: uuid.UUID, resource: str) -> str:
    return reads.last_error(svc, user_id, SLUG, resource)


def past_days(clock: Clock) -> list[date]:
    """The days of the history pull that are over (UTC and at the fake person's place)."""
    today = clock().date()
    return [today - timedelta(days=n) for n in range(HISTORY_DAYS - 1, 1, -1)]


def window(clock: Clock) -> dict[str, str]:
    days = past_days(clock)
    return {"start_date": str(days[0]), "end_date": str(days[-1])}


def served_workouts(whoop: FakeWhoop, days: list[date]) -> dict[str, dict[str, Any]]:
    return {w["id"]: w for d in days for w in whoop.workouts(GABE, d)}


def advance_to_retry(svc: Service, clock: Clock, found: ResourceFeed) -> None:
    clock.advance(timedelta(seconds=found.retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()


# -- the data, to the last page -------------------------------------------------------------


def test_whoop_data_arrives_whole_in_the_persons_offset_and_our_units(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    assert svc.jobs.run_due_pulls() > 0
    found = statuses(svc, user_id)
    assert set(found.values()) == {"success"}, found
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "connected"
    # WHOOP's user_id, read from profile/basic at the sign-in (its webhooks name it).
    assert provider["external_user_id"] == str(GABE.user_id)
    days = past_days(clock)

    # Sleep: the night (never the nap) of each local day, stages in seconds.
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(clock))
    by_day = {s["calendar_date"]: s for s in sleeps["sleep"]}
    assert set(by_day) == {str(d) for d in days}
    for day in days:
        [night] = [s for s in whoop.sleeps(GABE, day) if not s["nap"]]
        stages, ours = night["score"]["stage_summary"], by_day[str(day)]
        assert ours["deep"] == round(stages["total_slow_wave_sleep_time_milli"] / 1000)
        assert ours["rem"] == round(stages["total_rem_sleep_time_milli"] / 1000)
        assert ours["duration"] == round(stages["total_in_bed_time_milli"] / 1000)
        assert ours["score"] == night["score"]["sleep_performance_percentage"]
        assert ours["respiratory_rate"] == night["score"]["respiratory_rate"]
        assert ours["timezone_offset"] == -5 * 3600
        assert datetime.fromisoformat(ours["bedtime_start"]) == datetime.fromisoformat(
            night["start"].replace("Z", "+00:00")
        )
        assert ours["bedtime_start"].endswith("-05:00")

    # Activity: each cycle's strain and energy (kilojoules in kcal), with its recovery's
    # resting heart rate.
    activity = get(api, home, f"/v2/summary/activity/{user_id}", **window(clock))
    mine = {a["calendar_date"]: a for a in activity["activity"]}
    assert set(mine) == {str(d) for d in days}
    for day in days:
        [cycle] = whoop.cycles(GABE, day)
        [recovery] = whoop.recoveries(GABE, day)
        ours = mine[str(day)]
        assert ours["strain"] == cycle["score"]["strain"]
        assert ours["calories_total"] == round(cycle["score"]["kilojoule"] / 4.184, 1)
        assert ours["heart_rate"]["resting_bpm"] == recovery["score"]["resting_heart_rate"]
        assert ours["timezone_offset"] == -5 * 3600

    # Workouts: keyed by WHOOP's id.
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    served = served_workouts(whoop, days)
    assert served, "the fake person works out on some of these days"
    assert {w["provider_id"]: w["calories"] for w in workouts["workouts"]} == {
        key: round(w["score"]["kilojoule"] / 4.184, 1) for key, w in served.items()
    }
    assert {w["provider_id"]: w["max_hr"] for w in workouts["workouts"]} == {
        key: w["score"]["max_heart_rate"] for key, w in served.items()
    }

    # Recovery's samples: HRV (RMSSD, ms), SpO2, skin temperature.
    recoveries = [r for d in days for r in whoop.recoveries(GABE, d)]
    for resource, field, unit in (
        ("hrv", "hrv_rmssd_milli", "ms"),
        ("blood_oxygen", "spo2_percentage", "%"),
        ("body_temperature", "skin_temp_celsius", "°C"),
    ):
        samples = get(api, home, f"/v2/timeseries/{user_id}/{resource}", **window(clock))
        assert {s["unit"] for s in samples} == {unit}
        by_moment = {datetime.fromisoformat(s["timestamp"]): s["value"] for s in samples}
        for recovery in recoveries:
            moment = datetime.fromisoformat(recovery["created_at"].replace("Z", "+00:00"))
            if str(moment.date()) in (str(d) for d in days):
                assert by_moment[moment] == recovery["score"][field]
    # Body: today's height, weight and maximum heart rate.
    today = str(clock().date())
    body = get(api, home, f"/v2/summary/body/{user_id}", start_date=today)
    [measured] = body["body"]
    assert (measured["weight"], measured["max_hr"]) == (GABE.weight, GABE.max_hr)
    # The person's tokens are nowhere in clear.
    assert clear_copies(svc, whoop.issued) == set()


def test_a_reader_that_stopped_at_the_first_page_would_be_caught(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    """Two records a page: every sleep and workout is there all the same, and the reader
    followed each `next_token` in turn."""
    whoop.page_size = 2
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    days = past_days(clock)
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(clock))
    assert len(sleeps["sleep"]) == len(days) > 2
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    assert len(workouts["workouts"]) == len(served_workouts(whoop, days)) > 2
    followed = [q for q in whoop.data_requests("activity/sleep") if "nextToken" in q]
    assert len(followed) >= len(days) // 2
    # Every collection asked with WHOOP's largest page (fewer requests of its 100 a minute).
    assert {q.get("limit") for q in whoop.data_requests() if "start" in q} == {"25"}


def test_pages_that_never_move_on_are_a_broken_answer_not_a_loop_or_a_silent_stop(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop
) -> None:
    whoop.page_size, whoop.stuck_paging = 2, True
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "sleep").status == "retrying"
    assert last_error(svc, user_id, "sleep") == "provider_unavailable"
    assert len(whoop.data_requests("activity/sleep")) < 10


# -- the maker's failures -------------------------------------------------------------------


def test_429_without_retry_after_goes_retrying_then_succeeds_without_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    whoop.fail(429, times=1, path="activity/workout")
    svc.jobs.run_due_pulls()
    retrying = feed(svc, user_id, "workouts")
    assert retrying.status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_rate_limit_exceeded"
    assert feed(svc, user_id, "sleep").status == "success"
    advance_to_retry(svc, clock, retrying)
    assert feed(svc, user_id, "workouts").status == "success"
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    ids = [w["provider_id"] for w in workouts["workouts"]]
    assert len(ids) == len(set(ids)) == len(served_workouts(whoop, past_days(clock)))


def test_a_short_retry_after_is_waited_out_and_a_long_one_goes_back_to_the_engine(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    whoop.fail(429, times=1, retry_after="1", path="activity/sleep")
    whoop.fail(429, times=1, retry_after="3600", path="cycle")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "sleep").status == "success"
    activity = feed(svc, user_id, "activity")
    assert activity.status == "retrying"
    assert activity.retry_at >= clock() + timedelta(seconds=3600)
    seen = [s for m, p, q, s in whoop.requests if p.endswith("activity/sleep")]
    assert seen[0] == 429 and set(seen[1:]) == {200}


def test_5xx_and_timeouts_go_retrying_then_succeed(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    whoop.fail(503, times=1, path="recovery")
    svc.jobs.run_due_pulls()
    failed = [r for r, s in statuses(svc, user_id).items() if s == "retrying"]
    assert failed, "the recovery's first reader saw the 503"
    for resource in failed:
        assert last_error(svc, user_id, resource) == "provider_unavailable"
    advance_to_retry(svc, clock, feed(svc, user_id, failed[0]))
    assert set(statuses(svc, user_id).values()) == {"success"}
    # A slow answer (longer than the 2 s timeout): a transport failure, retried.
    other = connect(api, home, browser)
    reads.times_out_after(svc, SLUG, 2.0)
    whoop.slow(4, times=1)
    svc.jobs.run_due_pulls()
    late = [r for r, s in statuses(svc, other).items() if s == "retrying"]
    assert late and last_error(svc, other, late[0]) == "transport_failure"
    advance_to_retry(svc, clock, feed(svc, other, late[0]))
    assert set(statuses(svc, other).values()) == {"success"}


def test_an_expired_access_token_is_refreshed_once(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    connection_id = stream_of_connection(svc, user_id, SLUG)
    before = svc.provider_tokens.current(connection_id)
    assert before is not None and before.tokens.refresh_token  # `offline` was asked
    clock.advance(timedelta(seconds=whoop.expires_in + 60))
    for resource in ("sleep", "workouts", "hrv", "activity"):
        svc.pulls.sync(feed(svc, user_id, resource).id)
    refreshes = [r for r in whoop.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 200
    after = svc.provider_tokens.current(connection_id)
    assert after is not None and after.version == before.version + 1
    assert feed(svc, user_id, "sleep").synced_at == clock()
    assert provider_status(api, home, user_id)["status"] == "connected"


def test_a_revoked_grant_puts_the_connection_in_error_until_the_person_signs_in_again(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    whoop.revoke("gabe")
    svc.jobs.run_due_pulls()
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    events = list(svc.ledger.events.get(stream_of_connection(svc, user_id, SLUG)))
    assert [type(e).__name__ for e in events].count("Errored") == 1
    found = statuses(svc, user_id)
    assert {found.pop(r) for r in NOT_READ} == {"success"}
    assert set(found.values()) == {"failure"}
    refreshes = [r for r in whoop.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 400
    # Allowed again and signed in again: the connection is back, its pulls run to the end.
    whoop.restore("gabe")
    again = api.post(
        "/v2/link/token", json={"user_id": str(user_id), "redirect_url": APP}, headers=home.headers
    )
    assert again.status_code == 200, again.text
    _, answer = browser.sign_in(again.json()["link_token"], SLUG)
    assert outcome(answer) == {"state": "success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(clock))
    assert len(sleeps["sleep"]) == len(past_days(clock))


def test_a_record_scored_again_updates_and_never_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    workouts = feed(svc, user_id, "workouts")
    day = next(d for d in reversed(past_days(clock)) if whoop.workouts(GABE, d))
    before = {w["id"]: w["score"]["kilojoule"] for w in whoop.workouts(GABE, day)}
    whoop.revise("gabe", day)  # WHOOP scores the day's workouts again, same ids
    served = {w["id"]: w["score"]["kilojoule"] for w in whoop.workouts(GABE, day)}
    assert set(served) == set(before) and served != before
    # The reader keeps what a pull read for the pull's `now`: a later run reads afresh.
    clock.advance(timedelta(seconds=1))
    synced = svc.pulls.sync_window(workouts.id, day, day)
    assert synced is not None and synced[1] == [day]  # updated, not created
    answered = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    mine = [w for w in answered["workouts"] if w["calendar_date"] == str(day)]
    assert {w["provider_id"]: w["calories"] for w in mine} == {
        key: round(kj / 4.184, 1) for key, kj in served.items()
    }
    ids = [w["provider_id"] for w in answered["workouts"]]
    assert len(ids) == len(set(ids))


def test_scopes_the_person_did_not_grant_are_unavailable_not_failed_pulls(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    whoop.denied_scopes = {"read:recovery", "read:body_measurement"}  # unticked at WHOOP
    user_id = connect(api, home, browser)
    connection = svc.ledger.find(stream_of_connection(svc, user_id, SLUG))
    assert isinstance(connection, Connection)
    availability = connection.resource_availability
    for resource in ("hrv", "blood_oxygen", "body_temperature", "body", "weight", "profile"):
        assert availability[resource]["status"] == "unavailable"
        assert availability[resource]["scope_requirements"]["user_denied"]["required"]
    for resource in NOT_READ:
        assert availability[resource]["status"] == "unavailable"
    assert availability["sleep"]["status"] == "available"
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    # Nothing was asked of WHOOP that the person did not grant; the cycles still read.
    assert whoop.data_requests("recovery") == []
    assert whoop.data_requests("user/measurement") == []
    activity = get(api, home, f"/v2/summary/activity/{user_id}", **window(clock))
    assert activity["activity"] and all(
        a["heart_rate"]["resting_bpm"] is None for a in activity["activity"]
    )


def test_the_composition_root_reads_whoop_v2_with_the_reader(svc: Service) -> None:
    assert isinstance(svc.pulls.adapter_for(SLUG, False), WhoopReader)


def test_deregistration_revokes_the_access_at_whoop_with_a_refreshed_token(
    svc: Service, api: Any, home: Team, browser: Browser, whoop: FakeWhoop, clock: Clock
) -> None:
    """The reader's revoke (called by the revocation job, ADR 0030): DELETE user/access
    with the person's token, refreshed first when it expired; after it, WHOOP refuses the
    grant's tokens. Asked again, the grant is gone already: done, not an error."""
    user_id = connect(api, home, browser)
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, SLUG))
    assert stored is not None
    reader = svc.pulls.adapter_for(SLUG, False)
    assert isinstance(reader, WhoopReader)
    clock.advance(timedelta(seconds=whoop.expires_in + 60))
    reader.revoke(stored.team_id, stored.client_id, stored.tokens)
    refreshes = [r for r in whoop.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 200
    [revoked] = whoop.revoked
    assert revoked != stored.tokens.access_token  # the refreshed one
    assert [r[3] for r in whoop.requests if r[0] == "DELETE"] == [204]
    svc.jobs.run_due_pulls()
    assert provider_status(api, home, user_id)["status"] == "error"
    # WHOOP down: retried later, not given up.
    whoop.fail(503, path="user/access")
    with pytest.raises(ProviderError) as down:
        reader.revoke(stored.team_id, stored.client_id, replace(stored.tokens, expires_at=None))
    assert down.value.retriable
    # The grant gone already (a 401): done.
    reader.revoke(stored.team_id, stored.client_id, replace(stored.tokens, expires_at=None))
    assert [r[3] for r in whoop.requests if r[0] == "DELETE"] == [204, 503, 401]
