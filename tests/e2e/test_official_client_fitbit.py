"""A fake-Fitbit user read through the official Python client `vital` (issue 28): the
person signs in at the fake Fitbit (adapters/makers/fake_fitbit.py, a real local HTTP
server) through the link page's OAuth flow, the pulls read the Fitbit Web API there, and
the client's sleep, activity, workouts, body, profile and heart rate getters parse what
the fake served, Fitbit's local times placed in the person's zone. On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_fitbit import PEOPLE, FakeFitbit, running_fake_fitbit
from healthledger.adapters.settings import Settings

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.integration.oauth_browser import (
    API,
    APP,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    a_browser,
    outcome,
)

pytestmark = CLIENTS_PARSE_ANSWERS

FAY = PEOPLE["fay"]  # America/Los_Angeles


@pytest.fixture
def fitbit() -> Iterator[FakeFitbit]:
    with running_fake_fitbit(FakeFitbit(default_person="fay")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, fitbit: FakeFitbit) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": fitbit.base,
            "fitbit_api_url": fitbit.base,
            "fitbit_history_days": 8,
            "oauth_clients": {"fitbit": SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def test_the_official_client_reads_a_fake_fitbit_user(
    api: vital.Vital, base_url: str, team: Team, service: Service, fitbit: FakeFitbit
) -> None:
    user_id = str(api.user.create(client_user_id="oc-fitbit").user_id)
    token = httpx.post(
        f"{base_url}/v2/link/token",
        json={"user_id": user_id, "redirect_url": APP},
        headers=team.headers,
    ).json()["link_token"]
    browser = a_browser(service)
    try:
        _, answer = browser.sign_in(token, "fitbit")
    finally:
        browser.client.close()
    assert outcome(answer) == {"state": "success"}
    assert service.jobs.run_due_pulls() > 0

    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in range(6, 1, -1)]
    start, end = str(days[0]), str(days[-1])

    sleep = api.sleep.get(user_id, start_date=start, end_date=end).sleep
    assert {s.calendar_date for s in sleep} == {str(d) for d in days}
    for summary in sleep:
        day = datetime.fromisoformat(summary.calendar_date).date()
        [main] = [s for s in fitbit.sleeps(FAY, day) if s["isMainSleep"]]
        begin = datetime.fromisoformat(main["startTime"]).replace(tzinfo=FAY.zone)
        assert summary.total == 60 * main["minutesAsleep"]
        assert summary.bedtime_start == begin
        assert summary.timezone_offset == begin.utcoffset().total_seconds()  # type: ignore[union-attr]
        assert summary.source.provider == "fitbit"

    activity = api.activity.get(user_id, start_date=start, end_date=end).activity
    assert {a.calendar_date: a.steps for a in activity} == {
        str(d): fitbit.activity(FAY, d)["steps"]  # type: ignore[index]
        for d in days
    }

    workouts = api.workouts.get(user_id, start_date=start, end_date=end).workouts
    served = {str(w["logId"]): w for d in days for w in fitbit.workouts(FAY, d)}
    assert {w.provider_id for w in workouts} == set(served)
    for workout in workouts:
        assert workout.calories == served[workout.provider_id]["calories"]
        assert workout.time_start == datetime.fromisoformat(
            served[workout.provider_id]["startTime"]
        )

    body = api.body.get(user_id, start_date=start, end_date=end).body
    assert {b.calendar_date: b.weight for b in body} == {
        w["date"]: w["weight"] for d in days for w in fitbit.weighings(FAY, d)
    }
    assert api.profile.get(user_id).height == round(FAY.height)

    heartrate = api.vitals.heartrate(user_id, start_date=start, end_date=end)
    first = datetime.combine(days[0], time(0), UTC)
    last = datetime.combine(days[-1] + timedelta(days=1), time(0), UTC)
    local_days = [days[0] - timedelta(days=1), *days, days[-1] + timedelta(days=1)]
    served_hr = [
        (m.astimezone(UTC), v)
        for d in local_days
        for m, v in fitbit.heart_minutes(FAY, d)
        if first <= m < last
    ]
    assert len(served_hr) > 5 * 1000  # a sample a minute while worn
    assert [(s.timestamp, s.value) for s in heartrate] == served_hr
