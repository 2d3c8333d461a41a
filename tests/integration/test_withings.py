"""The Withings reader (adapters/providers/withings.py) against the fake Withings shipped
with the package (adapters/makers/fake_withings.py, a real HTTP server on localhost), on
SQLite and PostgreSQL: a person connects through the OAuth link flow (Withings' own token
endpoint: `action=requesttoken`, answers wrapped in `{"status", "body"}`), the pulls read
every page of every service, and the summaries and timeseries answer what the fake
served; Withings' failures (status 601, "an error occurred" statuses, HTTP 5xx,
timeouts, an expired token, a revoked grant, unticked scopes) take the pulls and the
connection where docs/makers/withings.md says."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.makers.fake_withings import (
    PEOPLE,
    FakeWithings,
    running_fake_withings,
)
from healthledger.adapters.providers.oauth2 import TokenEndpointError
from healthledger.adapters.providers.withings import WithingsReader
from healthledger.adapters.providers.withings_webhooks import WithingsWebhooks
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.maker_notices import MakerNotice
from healthledger.domain.connections.resource_feeds import ResourceFeed
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

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
from tests.receivers import serving
from tests.stream_ids import stream_of_connection

DANA = PEOPLE["dana"]
HISTORY_DAYS = 10
# Resources Withings' API does not give: their pulls succeed with nothing.
NOT_READ = {"electrocardiogram", "body_mass_index"}


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


def connect(api: Any, home: Team, browser: Browser) -> uuid.UUID:
    return signed_in_user(api, home, browser, "withings")


def feed(svc: Service, user_id: uuid.UUID, resource: str) -> ResourceFeed:
    return reads.feed(svc, user_id, "withings", resource)


def statuses(svc: Service, user_id: uuid.UUID) -> dict[str, str | None]:
    return reads.statuses(svc, user_id, "withings")


def last_error(svc: Service, user_id: uuid.UUID, resource: str) -> str:
    return reads.last_error(svc, user_id, "withings", resource)


def past_days(clock: Clock) -> list[date]:
    """The days of the history pull that are over (UTC and at the person's place)."""
    today = clock().date()
    return [today - timedelta(days=n) for n in range(HISTORY_DAYS - 1, 1, -1)]


def window(days: list[date]) -> dict[str, str]:
    return {"start_date": str(days[0]), "end_date": str(days[-1])}


def served_measures(
    fake: FakeWithings, days: list[date], kind: int
) -> list[tuple[datetime, float]]:
    """(instant, value * 10^unit) of every measure of `kind` the fake serves on the UTC
    days `days` (its groups are listed by the person's local day)."""
    found = []
    for local in [days[0] - timedelta(days=1), *days, days[-1] + timedelta(days=1)]:
        for group in fake.measure_groups(DANA, local):
            moment = datetime.fromtimestamp(group["date"], UTC)
            for m in group["measures"]:
                if m["type"] == kind and moment.date() in days:
                    found.append((moment, round(m["value"] * 10.0 ** m["unit"], -m["unit"])))
    return sorted(found)


def series(api: Any, home: Team, user_id: uuid.UUID, resource: str, days: list[date]) -> Any:
    return get(api, home, f"/v2/timeseries/{user_id}/{resource}", **window(days))


# -- the data, to the last page -------------------------------------------------------------


def test_withings_data_arrives_whole_in_the_shapes_the_summaries_and_timeseries_answer(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    assert svc.jobs.run_due_pulls() > 0
    assert set(statuses(svc, user_id).values()) == {"success"}
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "connected"
    # Withings' userid, from the token answer (its notifications name the person by it).
    assert provider["external_user_id"] == str(DANA.userid)
    days = past_days(clock)

    # Weight, fat ratio, SpO2: every measure of every page, value * 10^unit, in time order.
    for resource, kind in (("weight", 1), ("fat", 6), ("blood_oxygen", 54)):
        answered = series(api, home, user_id, resource, days)
        served = served_measures(withings, days, kind)
        assert served, resource
        assert [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in answered] == served
    assert any("offset" in q for q in withings.data_requests("getmeas"))

    # Blood pressure: systolic over diastolic of the same group.
    pressure = series(api, home, user_id, "blood_pressure", days)
    systolic = served_measures(withings, days, 10)
    assert [(datetime.fromisoformat(r["timestamp"]), r["systolic"]) for r in pressure] == systolic
    assert {r["unit"] for r in pressure} == {"mmHg"}

    # Body: the day's weighing, on the person's local day (Paris).
    body = get(api, home, f"/v2/summary/body/{user_id}", **window(days))
    weighed = {
        str(d): g
        for d in days
        for g in withings.measure_groups(DANA, d)
        if g["measures"][0]["type"] == 1
    }
    assert {b["calendar_date"]: b["weight"] for b in body["body"]} == {
        d: g["measures"][0]["value"] / 1000 for d, g in weighed.items()
    }

    # Sleep: the night's summary, Withings' durations, its zone's offset.
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(days))
    by_day = {s["calendar_date"]: s for s in sleeps["sleep"]}
    assert set(by_day) == {str(d) for d in days}
    for day in days:
        [night] = withings.sleep_summary(DANA, day)
        ours = by_day[str(day)]
        assert ours["deep"] == night["data"]["deepsleepduration"]
        assert ours["total"] == night["data"]["total_sleep_time"]
        assert ours["score"] == night["data"]["sleep_score"]
        assert ours["hr_lowest"] == night["data"]["hr_min"]
        assert ours["source"]["provider"] == "withings"
        start = datetime.fromisoformat(ours["bedtime_start"])
        assert start.timestamp() == night["startdate"]
        assert ours["timezone_offset"] == start.utcoffset().total_seconds()  # type: ignore[union-attr]
        assert ours["timezone_offset"] in (3600, 7200)  # Paris, winter or summer

    # Activity of each local day; workouts named by Withings' ids.
    activity = get(api, home, f"/v2/summary/activity/{user_id}", **window(days))
    assert {a["calendar_date"]: a["steps"] for a in activity["activity"]} == {
        str(d): withings.activity(DANA, d)[0]["steps"] for d in days
    }
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(days))
    served_workouts = {str(w["id"]): w for d in days for w in withings.workouts(DANA, d)}
    assert served_workouts
    assert {w["provider_id"]: w["calories"] for w in workouts["workouts"]} == {
        key: w["data"]["calories"] for key, w in served_workouts.items()
    }

    # Heart rate from the watch's intraday series (a day a request), with the pulses
    # measured at weighings and blood pressures.
    heart = series(api, home, user_id, "heartrate", days)
    intraday = len(withings.data_requests("getintradayactivity"))
    assert intraday >= HISTORY_DAYS
    pulses = served_measures(withings, days, 11)
    assert len(heart) > 100 * len(days) and len(pulses) > 0
    answered_pulses = {(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in heart}
    assert set(pulses) <= answered_pulses

    # Hypnogram: the night's states, in our stage codes.
    day = days[3]
    [night] = withings.sleep_summary(DANA, day)
    states = withings.sleep_states(
        DANA,
        datetime.fromtimestamp(night["startdate"], UTC),
        datetime.fromtimestamp(night["enddate"], UTC),
    )
    hypnogram = get(api, home, f"/v2/timeseries/{user_id}/hypnogram", start_date=str(day))
    codes = {0: 4, 1: 2, 2: 1, 3: 3}
    mine = [
        s
        for s in hypnogram
        if datetime.fromisoformat(s["timestamp"]).timestamp() >= night["startdate"]
    ]
    assert [s["value"] for s in mine][: len(states)] == [codes[s["state"]] for s in states]
    # The person's tokens are nowhere in clear.
    assert clear_copies(svc, withings.issued) == set()


def test_a_reader_that_stopped_at_the_first_page_would_be_caught(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    """Pages of one record: every weighing, workout and night is there all the same, and
    the reader asked for each page in turn (`offset`)."""
    withings.page_size = 1
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    days = past_days(clock)
    assert feed(svc, user_id, "workouts").status == "success"
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(days))
    served = [w for d in days for w in withings.workouts(DANA, d)]
    assert len(workouts["workouts"]) == len(served) > 1
    weights = series(api, home, user_id, "weight", days)
    assert len(weights) == len(served_measures(withings, days, 1)) > 1
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(days))
    assert len(sleeps["sleep"]) == len(days)
    offsets = [q.get("offset") for q in withings.data_requests("getworkouts")]
    assert len([o for o in offsets if o]) >= len(served) - 2  # a request per page


def test_pages_that_never_move_on_are_a_broken_answer_not_a_loop_or_a_silent_stop(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    withings.stuck_paging = True  # `more` forever, the same offset sent back
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "activity").status == "retrying"
    assert last_error(svc, user_id, "activity") == "provider_unavailable"
    asked = [q.get("offset") for q in withings.data_requests("getactivity")]
    assert len(asked) == 2  # the first page, the page it pointed at again: then given up
    withings.stuck_paging = False
    clock.advance(timedelta(hours=1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "activity").status == "success"


# -- Withings' failures ---------------------------------------------------------------------


def test_status_601_goes_retrying_then_succeeds_without_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    withings.fail(601, times=1, action="getworkouts")
    svc.jobs.run_due_pulls()
    retrying = feed(svc, user_id, "workouts")
    assert retrying.status == "retrying"
    assert last_error(svc, user_id, "workouts") == "provider_rate_limit_exceeded"
    assert feed(svc, user_id, "sleep").status == "success"
    clock.advance(timedelta(seconds=retrying.retry_at.timestamp() - clock().timestamp() + 1))
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "workouts").status == "success"
    days = past_days(clock)
    workouts = get(api, home, f"/v2/summary/workouts/{user_id}", **window(days))
    ids = [w["provider_id"] for w in workouts["workouts"]]
    assert len(ids) == len(set(ids)) == len([w for d in days for w in withings.workouts(DANA, d)])


def test_error_statuses_5xx_and_timeouts_go_retrying_then_succeed(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    withings.fail(522, times=1, action="getactivity")  # Withings' "timeout" status
    withings.fail(503, times=1, action="getsummary")  # an HTTP 503
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "activity").status == "retrying"
    assert last_error(svc, user_id, "activity") == "provider_unavailable"
    # The first of the resources read from sleep summaries met the 503.
    nights = [
        r
        for r in ("sleep", "sleep_cycle", "hypnogram")
        if feed(svc, user_id, r).status == "retrying"
    ]
    assert len(nights) == 1 and last_error(svc, user_id, nights[0]) == "provider_unavailable"
    # A slow answer (longer than the 1 s timeout): a transport failure, retried.
    other = connect(api, home, browser)
    reads.times_out_after(svc, "withings", 1.0)
    withings.slow(2.5, times=1)
    svc.jobs.run_due_pulls()
    found = statuses(svc, other)
    # The slowed answer's resource, and any other a loaded machine's fake answered past
    # the timeout: each retried as a transport failure.
    late = [r for r, s in found.items() if s == "retrying"]
    assert late, found
    assert {last_error(svc, other, r) for r in late} == {"transport_failure"}
    # The retries succeed, and no window is lost: every day of sleep is there once.
    clock.advance(timedelta(hours=1))
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    assert set(statuses(svc, other).values()) == {"success"}
    days = past_days(clock)
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(days))
    assert sorted(s["calendar_date"] for s in sleeps["sleep"]) == [str(d) for d in days]


def test_an_expired_access_token_is_refreshed_once(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    connection_id = stream_of_connection(svc, user_id, "withings")
    before = svc.provider_tokens.current(connection_id)
    assert before is not None
    clock.advance(timedelta(seconds=withings.expires_in + 60))
    for resource in ("sleep", "weight", "workouts", "heartrate"):
        svc.pulls.sync(feed(svc, user_id, resource).id)
    refreshes = [r for r in withings.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 0
    after = svc.provider_tokens.current(connection_id)
    assert after is not None and after.version == before.version + 1
    assert feed(svc, user_id, "weight").synced_at == clock()
    assert provider_status(api, home, user_id)["status"] == "connected"


def test_a_token_refused_before_its_expiry_is_refreshed_once_then_used(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings
) -> None:
    """Withings says 401 in the body of an HTTP 200: the grant is refreshed, the request
    made again with the new token."""
    user_id = connect(api, home, browser)
    withings.fail(401, times=1, action="getmeas")
    svc.jobs.run_due_pulls()
    assert feed(svc, user_id, "weight").status == "success"
    refreshes = [r for r in withings.requests if r[2].get("grant_type") == "refresh_token"]
    assert [r[3] for r in refreshes] == [0]


def test_a_revoked_grant_puts_the_connection_in_error_until_the_person_signs_in_again(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    withings.revoke("dana")
    svc.jobs.run_due_pulls()
    provider = provider_status(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    # Announced as provider.connection.error (the Errored event announces it).
    events = list(svc.ledger.events.get(stream_of_connection(svc, user_id, "withings")))
    assert [type(e).__name__ for e in events].count("Errored") == 1
    assert "provider.connection.error" in type(events[-1]).ANNOUNCES  # type: ignore[attr-defined]
    found = statuses(svc, user_id)
    assert {found.pop(r) for r in NOT_READ} == {"success"}
    assert set(found.values()) == {"failure"}
    refreshes = [r for r in withings.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] != 0
    # Allowed again and signed in again: the connection is back, its pulls run to the end.
    withings.restore("dana")
    again = api.post(
        "/v2/link/token", json={"user_id": str(user_id), "redirect_url": APP}, headers=home.headers
    )
    assert again.status_code == 200, again.text
    _, answer = browser.sign_in(again.json()["link_token"], "withings")
    assert outcome(answer) == {"state": "success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    days = past_days(clock)
    sleeps = get(api, home, f"/v2/summary/sleep/{user_id}", **window(days))
    assert len(sleeps["sleep"]) == len(days)


def test_a_revised_measure_updates_and_never_duplicates(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    user_id = connect(api, home, browser)
    svc.jobs.run_due_pulls()
    body = feed(svc, user_id, "body")
    day = body.newest_day  # within the daily sync's look-back
    assert day is not None
    [before] = [g for g in withings.measure_groups(DANA, day) if g["measures"][0]["type"] == 1]
    withings.revise("dana", day)  # the weighing corrected at Withings: same grpid
    [after] = [g for g in withings.measure_groups(DANA, day) if g["measures"][0]["type"] == 1]
    assert after["grpid"] == before["grpid"] and after["measures"] != before["measures"]
    clock.advance(timedelta(minutes=5))
    synced = svc.pulls.sync(body.id)
    assert synced is not None and day in synced[1]  # updated, not created
    svc.pulls.sync(feed(svc, user_id, "weight").id)
    answered = get(api, home, f"/v2/summary/body/{user_id}", start_date=str(day))
    [mine] = [b for b in answered["body"] if b["calendar_date"] == str(day)]
    assert mine["weight"] == after["measures"][0]["value"] / 1000
    # The weight samples: the revised one in place of the old, none twice.
    span = [day - timedelta(days=n) for n in range(3, -1, -1)]
    weights = series(api, home, user_id, "weight", span)
    assert [(datetime.fromisoformat(s["timestamp"]), s["value"]) for s in weights] == (
        served_measures(withings, span, 1)
    )
    assert after["date"] in [datetime.fromisoformat(s["timestamp"]).timestamp() for s in weights]
    # A revised workout (same id) replaces its own.
    workouts = feed(svc, user_id, "workouts")
    day = workouts.newest_day
    assert day is not None
    before_w = {str(w["id"]): w["data"]["calories"] for w in withings.workouts(DANA, day)}
    withings.revise("dana", day)
    served = {str(w["id"]): w["data"]["calories"] for w in withings.workouts(DANA, day)}
    assert served.keys() == before_w.keys() and served != before_w
    clock.advance(timedelta(minutes=5))  # a later sync (what a pull read is kept for its `now`)
    synced = svc.pulls.sync(workouts.id)
    assert synced is not None and day in synced[1]
    answered = get(api, home, f"/v2/summary/workouts/{user_id}", start_date=str(day))
    mine_w = [w for w in answered["workouts"] if w["calendar_date"] == str(day)]
    assert {w["provider_id"]: w["calories"] for w in mine_w} == served


def test_scopes_the_person_did_not_grant_are_unavailable_not_failed_pulls(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings
) -> None:
    withings.denied_scopes = {"user.sleepevents", "user.activity"}
    user_id = connect(api, home, browser)
    connection = svc.ledger.find(stream_of_connection(svc, user_id, "withings"))
    assert isinstance(connection, Connection)
    availability = connection.resource_availability
    for resource in ("sleep", "hypnogram", "activity", "steps", "heartrate"):
        assert availability[resource]["status"] == "unavailable"
        assert availability[resource]["scope_requirements"]["user_denied"]["required"]
    assert availability["weight"]["status"] == "available"
    assert availability["electrocardiogram"]["status"] == "unavailable"
    svc.jobs.run_due_pulls()
    assert set(statuses(svc, user_id).values()) == {"success"}
    assert provider_status(api, home, user_id)["status"] == "connected"
    # Nothing was asked of Withings that the person did not grant.
    for action in ("getsummary", "get", "getactivity", "getintradayactivity", "getworkouts"):
        assert withings.data_requests(action) == [], action
    assert withings.data_requests("getmeas")


# -- Withings Notify -------------------------------------------------------------------------


def test_notify_subscribed_at_sign_in_calls_back_a_notice_that_syncs_the_revised_day(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings, clock: Clock
) -> None:
    """At the sign-in the reader subscribes the person's categories; Withings probes our
    callback (HEAD) first. A weighing corrected at Withings is called back as Withings'
    form, read by WithingsWebhooks into a notice naming the account and the day, and a sync
    of the resources it names stores the corrected value. (The callback here is served by
    a stand-in of the makers' webhook route built on the port, on a real port.)"""
    webhooks = WithingsWebhooks()
    notices: list[MakerNotice] = []

    async def route(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if request.method == "HEAD":
            probe = webhooks.challenge("HEAD", dict(request.query_params), headers)
            return Response(status_code=404 if probe is None else probe.status)
        notices.extend(webhooks.notices(headers, await request.body(), clock()))
        return Response(status_code=200)

    app = Starlette(routes=[Route("/makers/withings/webhook", route, methods=["HEAD", "POST"])])
    with serving(app) as base:
        reader = svc.oauth_makers["withings"]
        assert isinstance(reader, WithingsReader)
        reader.callback_url = f"{base}/makers/withings/webhook"
        user_id = connect(api, home, browser)
        assert withings.subscriptions == {
            ("dana", appli): [reader.callback_url] for appli in (1, 2, 4, 16, 44)
        }
        svc.jobs.run_due_pulls()
        body = feed(svc, user_id, "body")
        day = body.newest_day
        assert day is not None
        withings.revise("dana", day)
        [group] = [g for g in withings.measure_groups(DANA, day) if g["measures"][0]["type"] == 1]
        assert withings.notify("dana", 1, startdate=group["date"], enddate=group["date"]) == [200]
        # Twice, as Withings may: the same notice, the same key.
        assert withings.notify("dana", 1, startdate=group["date"], enddate=group["date"]) == [200]
    first, again = notices
    assert first == again
    assert first.account_id == provider_status(api, home, user_id)["external_user_id"]
    assert first.start <= day <= first.end and {"body", "weight"} <= first.resources
    clock.advance(timedelta(minutes=5))
    synced = svc.pulls.sync(feed(svc, user_id, "body").id)
    assert synced is not None and day in synced[1]
    answered = get(api, home, f"/v2/summary/body/{user_id}", start_date=str(day))
    [mine] = [b for b in answered["body"] if b["calendar_date"] == str(day)]
    assert mine["weight"] == group["measures"][0]["value"] / 1000


def test_notify_is_not_subscribed_for_scopes_not_granted_and_a_refused_probe_leaves_the_sign_in(
    svc: Service, api: Any, home: Team, browser: Browser, withings: FakeWithings
) -> None:
    withings.denied_scopes = {"user.sleepevents"}
    reader = svc.oauth_makers["withings"]
    assert isinstance(reader, WithingsReader)
    with serving(Starlette(routes=[])) as base:  # answers 404 to Withings' probe
        reader.callback_url = f"{base}/makers/withings/webhook"
        user_id = connect(api, home, browser)
    assert provider_status(api, home, user_id)["status"] == "connected"
    assert withings.subscriptions == {}
    probes = [r for r in withings.requests if r[1] == "/notify"]
    assert sorted(int(r[2]["appli"]) for r in probes) == [1, 2, 4, 16]  # not 44: not granted
    assert {r[3] for r in probes} == {293}


# -- the token endpoint ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ({"status": 601, "body": {}}, "rate_limited"),
        ({"status": 522, "body": {}}, "unavailable"),
        ({"status": 503, "body": {}, "error": "Invalid Params: invalid code"}, "refused"),
        ({"status": 401, "body": {}}, "refused"),
        ({"status": 0, "body": []}, "malformed"),
        ([1, 2], "refused"),
    ],
)
def test_withings_token_answers_are_read_by_their_status(
    svc: Service, answer: Any, kind: str
) -> None:
    reader = svc.oauth_makers["withings"]
    assert isinstance(reader, WithingsReader)
    with pytest.raises(TokenEndpointError) as caught:
        reader.token_answer(httpx.Response(200, json=answer))
    assert caught.value.kind == kind
    granted = reader.token_answer(
        httpx.Response(
            200,
            json={"status": 0, "body": {"access_token": "a", "scope": "user.info,user.metrics"}},
        )
    )
    assert granted["scope"] == "user.info user.metrics"  # RFC 6749's separator


def test_the_composition_root_reads_withings_with_the_reader(svc: Service) -> None:
    assert isinstance(svc.pulls.adapter_for("withings", False), WithingsReader)
    assert svc.pulls.adapter_for("withings", False) is svc.oauth_makers["withings"]
