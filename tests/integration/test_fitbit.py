"""The Fitbit reader (adapters/providers/fitbit.py) against the fake Fitbit shipped with the
package (adapters/makers/fake_fitbit.py, a real HTTP server on localhost), on SQLite and
PostgreSQL: a person connects through the OAuth link flow, the pulls read Fitbit's ranged
endpoints and every page of the activity log list, and the summaries and timeseries answer
what the fake served, in the person's time zone; the maker's failures (429 with and
without Retry-After, 5xx, timeouts, an expired token, a revoked grant) take the pulls and
the connection where docs/makers/fitbit.md says."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.makers.fake_fitbit import PEOPLE, FakeFitbit, running_fake_fitbit
from healthledger.adapters.providers.fitbit import FitbitReader
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
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

ELI = PEOPLE["eli"]  # Europe/Paris
HISTORY_DAYS = 10
# In the catalog's list for Fitbit, not in Fitbit's Web API as read here: their pulls
# read nothing and succeed (unavailable in resource_availability).
NOT_READ = {"sleep_stream", "vo2_max", "water", "meal"}


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
    return signed_in_user(api, home, browser, "fitbit")


def feed(svc: Service, user_id: uuid.UUID, resource: str) -> ResourceFeed:
    return reads.feed(svc, user_id, "fitbit", resource)


def statuses(svc: Service, user_id: uuid.UUID) -> dict[str, str | None]:
    return reads.statuses(svc, user_id, "fitbit")


def last_error(svc: Service, user_id: uuid.UUID, resource: str) -> str:
    return reads.last_error(svc, user_id, "fitbit", resource)


def past_days(clock: Clock) -> list[date]:
    """The days of the history pull that are over (UTC and at the fake person's place)."""
    today = clock().date()
    return [today - timedelta(days=n) for n in range(HISTORY_DAYS - 1, 1, -1)]


def window(clock: Clock) -> dict[str, str]:
    days = past_days(clock)
    return {"start_date": str(days[0]), "end_date": str(days[-1])}


def served_workouts(fitbit: FakeFitbit, days: list[date]) -> dict[str, dict[str, Any]]:
    return {str(w["logId"]): w for d in days for w in fitbit.workouts(ELI, d)}


# -- the data, to the last page -------------------------------------------------------------


def test_fitbit_data_arrives_whole_in_the_persons_zone_and_our_units(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    assert svc.jobs.run_due_pulls() > 0
    found = statuses(svc, user_id)
    assert set(found.values()) == {"success"}, found
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "connected"
    # Fitbit's encoded user id, from its token answer (its notifications name it).
    assert provider["external_user_id"] == ELI.encoded_id
    # No subscriber configured here: the person is not subscribed to notifications.
    assert fitbit.subscriptions == {}
    days = past_days(clock)

    # Sleep: the main sleep of each night, Fitbit's local times placed in Europe/Paris.
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(clock))
    by_day = {s["calendar_date"]: s for s in sleeps["sleep"]}
    assert set(by_day) == {str(d) for d in days}
    for day in days:
        [main] = [s for s in fitbit.sleeps(ELI, day) if s["isMainSleep"]]
        ours = by_day[str(day)]
        begin = datetime.fromisoformat(main["startTime"]).replace(tzinfo=ELI.zone)
        assert datetime.fromisoformat(ours["bedtime_start"]) == begin
        assert ours["timezone_offset"] == begin.utcoffset().total_seconds()  # type: ignore[union-attr]
        assert ours["total"] == 60 * main["minutesAsleep"]
        assert ours["duration"] == main["duration"] // 1000
        assert ours["awake"] == 60 * main["minutesAwake"]
        if main["type"] == "stages":
            assert ours["deep"] == 60 * main["levels"]["summary"]["deep"]["minutes"]
        assert ours["source"]["provider"] == "fitbit"

    # Activity: the time series of each local day, distance from km to m.
    activity = get(api, home, f"/v2/summary/activity/{user_id}", **window(clock))
    assert {a["calendar_date"]: (a["steps"], a["distance"]) for a in activity["activity"]} == {
        str(d): (
            fitbit.activity(ELI, d)["steps"],  # type: ignore[index]
            round(fitbit.activity(ELI, d)["distance"] * 1000, 1),  # type: ignore[index]
        )
        for d in days
    }

    # Workouts: one session per logId, every page of the activity log list.
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    served = served_workouts(fitbit, days)
    assert served, "the fake person works out on some of these days"
    assert {w["provider_id"]: w["calories"] for w in workouts["workouts"]} == {
        key: w["calories"] for key, w in served.items()
    }

    # Heart rate: every intraday minute of the window's UTC days, local times placed.
    first = datetime.fromisoformat(window(clock)["start_date"]).replace(tzinfo=UTC)
    last = datetime.fromisoformat(window(clock)["end_date"]).replace(tzinfo=UTC) + timedelta(days=1)
    expected = sorted(
        (m.astimezone(UTC), v)
        for d in [days[0] - timedelta(days=1), *days, days[-1] + timedelta(days=1)]
        for m, v in fitbit.heart_minutes(ELI, d)
        if first <= m < last
    )
    samples = get(api, home, f"/v2/timeseries/{user_id}/heartrate", **window(clock))
    assert [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in samples] == expected

    # The nightly values and the weighings, in our units.
    # SpO2 of the night filed under day d: at d's local midnight (the UTC evening before).
    spo2 = get(api, home, f"/v2/timeseries/{user_id}/blood_oxygen", **window(clock))
    nights = [days[0] - timedelta(days=1), *days, days[-1] + timedelta(days=1)]
    assert [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in spo2] == [
        (datetime.combine(d, time(0), ELI.zone), fitbit.spo2(ELI, d)["avg"])  # type: ignore[index]
        for d in nights
        if fitbit.spo2(ELI, d) and first <= datetime.combine(d, time(0), ELI.zone) < last
    ]
    hrv = get(api, home, f"/v2/timeseries/{user_id}/hrv", **window(clock))
    assert hrv and {s["unit"] for s in hrv} == {"ms"}
    weighed = [w for d in days for w in fitbit.weighings(ELI, d)]
    body = get(api, home, f"/v2/summary/body/{user_id}", **window(clock))
    assert {b["calendar_date"]: b["weight"] for b in body["body"]} == {
        w["date"]: w["weight"] for w in weighed
    }
    # The person's tokens are nowhere in clear.
    assert clear_copies(svc, fitbit.issued) == set()


def test_a_reader_that_stopped_at_the_first_page_would_be_caught(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    """The activity log list a log a page: every workout is there all the same, and the
    reader followed each `pagination.next` in turn."""
    fitbit.activity_page_size = 1
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "success"
    days = past_days(clock)
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    served = served_workouts(fitbit, days)
    assert len(workouts["workouts"]) == len(served) > 1
    pages = fitbit.data_requests("activities/list")
    assert len([q for _, q in pages if q.get("offset") != "0"]) >= len(served) - 1


def test_the_reader_asks_for_long_ranges_once_per_pull(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit
) -> None:
    """Fitbit allows 150 requests an hour: the 10-day history (two chunks) reads each
    ranged endpoint once, not once per chunk and resource."""
    connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert len(fitbit.data_requests("/sleep/date/")) == 1
    assert len(fitbit.data_requests("/activities/steps/date/")) == 1
    assert len(fitbit.data_requests("/spo2/date/")) == 1
    assert len(fitbit.data_requests("/profile.json")) == 1


# -- the maker's failures -------------------------------------------------------------------


def test_429_without_retry_after_goes_retrying_then_succeeds_without_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    fitbit.fail(429, times=1, path="activities/list")
    svc.jobs.run_due_pulls()
    retrying = feed(svc, user_id, "workouts")
    assert retrying.status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_rate_limit_exceeded"
    assert feed(svc, user_id, "sleep").status == "success"
    clock.advance(timedelta(seconds=retrying.retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "success"
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    ids = [w["provider_id"] for w in workouts["workouts"]]
    assert len(ids) == len(set(ids)) == len(served_workouts(fitbit, past_days(clock)))


def test_a_short_retry_after_is_waited_out_and_a_long_one_goes_back_to_the_engine(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    fitbit.fail(429, times=1, retry_after="1", path="/sleep/date/")
    fitbit.fail(429, times=1, retry_after="3600", path="/spo2/date/")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "sleep").status == "success"
    spo2 = feed(svc, user_id, "blood_oxygen")
    assert spo2.status == "retrying"
    assert spo2.retry_at >= clock() + timedelta(seconds=3600)
    seen = [s for m, p, q, s in fitbit.requests if "/sleep/date/" in p]
    assert seen[0] == 429 and set(seen[1:]) == {200}


def test_fitbits_hourly_quota_without_retry_after_waits_for_its_reset(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    """Over Fitbit's quota the answer is a 429; without Retry-After, the reader takes the
    `Fitbit-Rate-Limit-Reset` header: the pull retries no sooner than the hour's reset,
    and then finishes."""
    twenty_past = clock().replace(minute=20, second=0, microsecond=0)
    if twenty_past <= clock():
        twenty_past += timedelta(hours=1)
    clock.advance(twenty_past - clock())
    fitbit.rate_limit, fitbit.retry_after_on_429 = 5, False
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    found = statuses(svc, user_id)
    assert "retrying" in found.values()
    late = [r for r, s in found.items() if s == "retrying"]
    top = clock().replace(minute=0) + timedelta(hours=1)
    for resource in late:
        assert last_error(svc, user_id, resource) == "provider_rate_limit_exceeded"
        assert feed(svc, user_id, resource).retry_at >= top
    fitbit.rate_limit = None
    clock.advance(top - clock() + timedelta(minutes=1))
    while svc.jobs.run_due_pulls():
        pass
    assert set(statuses(svc, user_id).values()) == {"success"}, [
        (r, feed(svc, user_id, r).retry_at, clock(), last_error(svc, user_id, r))
        for r, s in statuses(svc, user_id).items()
        if s != "success"
    ]
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(clock))
    assert len(sleeps["sleep"]) == len(past_days(clock))


def test_5xx_and_timeouts_go_retrying_then_succeed(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    fitbit.fail(503, times=1, path="/hrv/date/")
    svc.jobs.run_due_pulls()
    hrv = feed(svc, user_id, "hrv")
    assert hrv.status == "retrying"
    assert last_error(svc, user_id, "hrv") == "provider_unavailable"
    clock.advance(timedelta(seconds=hrv.retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "hrv").status == "success"
    # A slow answer (longer than the 2 s timeout): a transport failure, retried.
    other = connect(api, home, browser)
    reads.times_out_after(svc, "fitbit", 2.0)
    fitbit.slow(4, times=1)
    svc.jobs.run_due_pulls()
    found = statuses(svc, other)
    # The slowed answer's resource, and any other a loaded machine's fake answered past
    # the timeout: each retried as a transport failure.
    late = [r for r, s in found.items() if s == "retrying"]
    assert late, found
    assert {last_error(svc, other, r) for r in late} == {"transport_failure"}
    retry_at = max(feed(svc, other, r).retry_at for r in late)
    clock.advance(timedelta(seconds=retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, other).values()) == {"success"}


def test_an_expired_access_token_is_refreshed_once(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    connection_id = stream_of_connection(svc, user_id, "fitbit")
    before = svc.provider_tokens.current(connection_id)
    assert before is not None
    clock.advance(timedelta(seconds=fitbit.expires_in + 60))
    for resource in ("sleep", "workouts", "heartrate", "activity"):
        svc.pulls.sync(feed(svc, user_id, resource).id)
    refreshes = [r for r in fitbit.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 200
    after = svc.provider_tokens.current(connection_id)
    assert after is not None and after.version == before.version + 1
    assert feed(svc, user_id, "sleep").synced_at == clock()
    assert provider_status(api, home, user_id)["status"] == "connected"


def test_a_revoked_grant_puts_the_connection_in_error_until_the_person_signs_in_again(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    fitbit.revoke("eli")
    svc.jobs.run_due_pulls()
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    # Announced as provider.connection.error (the Errored event announces it).
    events = list(svc.ledger.events.get(stream_of_connection(svc, user_id, "fitbit")))
    assert [type(e).__name__ for e in events].count("Errored") == 1
    assert "provider.connection.error" in type(events[-1]).ANNOUNCES  # type: ignore[attr-defined]
    found = statuses(svc, user_id)
    assert {found.pop(r) for r in NOT_READ} == {"success"}
    assert set(found.values()) == {"failure"}
    refreshes = [r for r in fitbit.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 400
    # Allowed again and signed in again: the connection is back, its pulls run to the end.
    fitbit.restore("eli")
    again = api.post(
        "/v2/link/token", json={"user_id": str(user_id), "redirect_url": APP}, headers=home.headers
    )
    assert again.status_code == 200, again.text
    _, answer = browser.sign_in(again.json()["link_token"], "fitbit")
    assert outcome(answer) == {"state": "success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(clock))
    assert len(sleeps["sleep"]) == len(past_days(clock))


def test_a_record_sent_again_changed_updates_and_never_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    workouts = feed(svc, user_id, "workouts")
    day = next(d for d in reversed(past_days(clock)) if fitbit.workouts(ELI, d))
    before = {str(w["logId"]): w["calories"] for w in fitbit.workouts(ELI, day)}
    # Fitbit sends the day's logs again, changed, under the same logIds.
    for _ in range(20):
        fitbit.revise("eli", day)
        served = {str(w["logId"]): w["calories"] for w in fitbit.workouts(ELI, day)}
        if set(served) & set(before) and served != before:
            break
    assert set(served) & set(before) and served != before
    # The reader keeps what a pull read for the pull's `now`: a later run reads afresh.
    clock.advance(timedelta(seconds=1))
    synced = svc.pulls.sync_window(workouts.id, day, day)
    assert synced is not None and synced[1] == [day]  # updated, not created
    answered = get(api, home, f"/v2/summary/workouts/{user_id}", **window(clock))
    mine = [w for w in answered["workouts"] if w["calendar_date"] == str(day)]
    assert {w["provider_id"]: w["calories"] for w in mine} == served
    ids = [w["provider_id"] for w in answered["workouts"]]
    assert len(ids) == len(set(ids))


def test_scopes_the_person_did_not_grant_are_unavailable_not_failed_pulls(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    fitbit.denied_scopes = {"heartrate", "weight"}  # unticked on Fitbit's consent screen
    user_id = connect(api, home, browser)
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "fitbit"))
    assert isinstance(connection, Connection)
    availability = connection.resource_availability
    for resource in ("heartrate", "hrv", "body", "weight"):
        assert availability[resource]["status"] == "unavailable"
        assert availability[resource]["scope_requirements"]["user_denied"]["required"]
    assert availability["sleep"]["status"] == "available"
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    # Nothing was asked of Fitbit that the person did not grant.
    assert fitbit.data_requests("/heart/") == [] and fitbit.data_requests("/hrv/") == []
    assert fitbit.data_requests("/body/") == []
    assert fitbit.data_requests("/sleep/")


def test_without_the_profile_scope_local_times_are_read_as_utc(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    fitbit.denied_scopes = {"profile"}
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    day = past_days(clock)[-1]
    [main] = [s for s in fitbit.sleeps(ELI, day) if s["isMainSleep"]]
    answered = get(
        api, home, f"/v2/summary/sleep/{user_id}", start_date=str(day), end_date=str(day)
    )
    [ours] = [s for s in answered["sleep"] if s["calendar_date"] == str(day)]
    start = datetime.fromisoformat(main["startTime"]).replace(tzinfo=UTC)
    assert datetime.fromisoformat(ours["bedtime_start"]) == start


def test_without_intraday_access_heart_rate_reads_nothing_and_asks_once(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    fitbit.intraday = False
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "heartrate").status == "success"
    assert get(api, home, f"/v2/timeseries/{user_id}/heartrate", **window(clock)) == []
    # A request per chunk (it says at once that intraday is not granted), not per day.
    assert len(fitbit.data_requests("/activities/heart/")) <= 2


def test_the_composition_root_reads_fitbit_with_the_reader(svc: Service) -> None:
    assert isinstance(svc.pulls.adapter_for("fitbit", False), FitbitReader)


def test_the_fakes_revocation_endpoint_ends_the_grant(
    svc: Service, api: Any, home: Team, browser: Browser, fitbit: FakeFitbit, clock: Clock
) -> None:
    """The fake serves Fitbit's RFC 7009 revocation (`{base}/fitbit/revoke`, where the
    generic adapter's revocation goes with HEALTHLEDGER_OAUTH_MAKER_URL): the grant's
    tokens stop working, and the next pull puts the connection in error."""
    user_id = connect(api, home, browser)
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, "fitbit"))
    assert stored is not None and stored.tokens.refresh_token
    refused = httpx.post(
        f"{fitbit.base}/fitbit/revoke",
        data={"token": stored.tokens.refresh_token},
        auth=(SERVICE_CLIENT, "wrong"),
    )
    assert refused.status_code == 401
    revoked = httpx.post(
        f"{fitbit.base}/fitbit/revoke",
        data={"token": stored.tokens.refresh_token},
        auth=(SERVICE_CLIENT, SERVICE_SECRET),
    )
    assert revoked.status_code == 200
    svc.jobs.run_due_pulls()
    assert provider_status(api, home, user_id)["status"] == "error"
