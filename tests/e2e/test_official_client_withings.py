"""A fake-Withings user read through the official Python client `vital` (issue 28): the
person signs in at the fake Withings (adapters/makers/fake_withings.py, a real local HTTP
server) through the link page's OAuth flow, the pulls read Withings' Public API there, and
the client's body, sleep, activity, workouts, weight, blood pressure and heart rate
getters parse what the fake served (measures as value * 10^unit, on the person's zone).
On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_withings import (
    PEOPLE,
    FakeWithings,
    running_fake_withings,
)
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

ELI = PEOPLE["eli"]  # America/New_York


@pytest.fixture
def withings() -> Iterator[FakeWithings]:
    with running_fake_withings(FakeWithings(default_person="eli")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, withings: FakeWithings) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": withings.base,
            "withings_api_url": withings.base,
            "withings_history_days": 8,
            "oauth_clients": {"withings": SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def weighings(withings: FakeWithings, day: date) -> list[dict[str, Any]]:
    return [g for g in withings.measure_groups(ELI, day) if g["measures"][0]["type"] == 1]


def test_the_official_client_reads_a_fake_withings_user(
    api: vital.Vital, base_url: str, team: Team, service: Service, withings: FakeWithings
) -> None:
    user_id = str(api.user.create(client_user_id="oc-withings").user_id)
    token = httpx.post(
        f"{base_url}/v2/link/token",
        json={"user_id": user_id, "redirect_url": APP},
        headers=team.headers,
    ).json()["link_token"]
    browser = a_browser(service)
    try:
        _, answer = browser.sign_in(token, "withings")
    finally:
        browser.client.close()
    assert outcome(answer) == {"state": "success"}
    assert service.jobs.run_due_pulls() > 0

    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in range(6, 1, -1)]
    start, end = str(days[0]), str(days[-1])

    # Body: the day's weighing, in kg, on the person's local day.
    body = api.body.get(user_id, start_date=start, end_date=end).body
    served = {str(d): weighings(withings, d) for d in days}
    assert {b.calendar_date: b.weight for b in body} == {
        d: g[0]["measures"][0]["value"] / 1000 for d, g in served.items() if g
    }
    for summary in body:
        assert summary.source.provider == "withings"

    sleep = api.sleep.get(user_id, start_date=start, end_date=end).sleep
    assert {s.calendar_date for s in sleep} == {str(d) for d in days}
    for summary in sleep:
        day = datetime.fromisoformat(summary.calendar_date).date()
        [night] = withings.sleep_summary(ELI, day)
        assert summary.total == night["data"]["total_sleep_time"]
        assert summary.deep == night["data"]["deepsleepduration"]
        assert summary.bedtime_start.timestamp() == night["startdate"]
        assert summary.timezone_offset in (-5 * 3600, -4 * 3600)  # New York
        assert summary.source.provider == "withings"

    activity = api.activity.get(user_id, start_date=start, end_date=end).activity
    assert {a.calendar_date: a.steps for a in activity} == {
        str(d): withings.activity(ELI, d)[0]["steps"] for d in days
    }

    workouts = api.workouts.get(user_id, start_date=start, end_date=end).workouts
    served_workouts = {str(w["id"]): w for d in days for w in withings.workouts(ELI, d)}
    assert {w.provider_id for w in workouts} == set(served_workouts)
    for workout in workouts:
        assert workout.calories == served_workouts[workout.provider_id]["data"]["calories"]

    # Blood pressure and SpO2: every reading of the UTC days, value * 10^unit.
    local = [days[0] - timedelta(days=1), *days, days[-1] + timedelta(days=1)]
    groups = [g for d in local for g in withings.measure_groups(ELI, d)]

    def readings(kind: int) -> list[tuple[float, float]]:
        return sorted(
            (float(g["date"]), m["value"] * 10.0 ** m["unit"])
            for g in groups
            for m in g["measures"]
            if m["type"] == kind and datetime.fromtimestamp(g["date"], UTC).date() in days
        )

    pressure = api.vitals.blood_pressure(user_id, start_date=start, end_date=end)
    assert [(p.timestamp.timestamp(), p.systolic) for p in pressure] == readings(10)
    spo2 = api.vitals.blood_oxygen(user_id, start_date=start, end_date=end)
    assert [(s.timestamp.timestamp(), s.value) for s in spo2] == [
        (at, round(value, 1)) for at, value in readings(54)
    ]
    heartrate = api.vitals.heartrate(user_id, start_date=start, end_date=end)
    assert len(heartrate) > 100 * len(days)
