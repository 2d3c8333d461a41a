"""A fake-Polar user read through the official Python client `vital` (issue 31): the
person signs in at the fake Polar (adapters/makers/fake_polar.py, a real local HTTP
server) through the link page's OAuth flow and is registered with AccessLink there, the
pulls read the exercise, activity and physical-information transactions and commit each
once stored, and the client's sleep, activity, workouts, body, weight, profile and HRV getters parse
what the fake served, in the person's Helsinki offset. Polar serves no body measurement
as a resource of ours (docs/makers/polar.md: its weight is not read), so there is no body
getter to ask. On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta, timezone
from typing import Any

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_polar import PEOPLE, FakePolar, running_fake_polar
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

PIA = PEOPLE["pia"]  # Europe/Helsinki
SLUG = "polar"
HISTORY_DAYS = 15  # beyond the fake's 14 unsynced days: every record read, each committed


def _exercise_start(exercise: dict[str, Any]) -> datetime:
    """Polar's local `start-time` in its `start-time-utc-offset` (minutes)."""
    offset = timezone(timedelta(minutes=exercise["start-time-utc-offset"]))
    return datetime.fromisoformat(exercise["start-time"]).replace(tzinfo=offset)


@pytest.fixture
def polar() -> Iterator[FakePolar]:
    with running_fake_polar(FakePolar(default_person="pia")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, polar: FakePolar) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": polar.base,
            "polar_api_url": polar.base,
            "polar_history_days": HISTORY_DAYS,
            "oauth_clients": {SLUG: SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def test_the_official_client_reads_a_fake_polar_user(
    api: vital.Vital, base_url: str, team: Team, service: Service, polar: FakePolar
) -> None:
    user_id = str(api.user.create(client_user_id="oc-polar").user_id)
    token = httpx.post(
        f"{base_url}/v2/link/token",
        json={"user_id": user_id, "redirect_url": APP},
        headers=team.headers,
    ).json()["link_token"]
    browser = a_browser(service)
    try:
        _, answer = browser.sign_in(token, SLUG)
    finally:
        browser.client.close()
    assert outcome(answer) == {"state": "success"}
    assert polar.is_registered("pia")  # AccessLink's registration, at the sign-in
    assert service.jobs.run_due_pulls() > 0

    days = polar.unsynced_days(PIA)
    start, end = str(days[0]), str(days[-1])
    # Every exercise and day's activity, and the physical information, committed once.
    assert set(polar.committed.values()) == {1}
    assert len(polar.committed) == 2 * len(days) + 1

    sleep = api.sleep.get(user_id, start_date=start, end_date=end).sleep
    assert {s.calendar_date for s in sleep} == {str(d) for d in days}
    for summary in sleep:
        night = polar.night(PIA, datetime.fromisoformat(summary.calendar_date).date())
        bedtime = datetime.fromisoformat(night["sleep_start_time"])
        assert summary.bedtime_start == bedtime
        assert summary.bedtime_stop == datetime.fromisoformat(night["sleep_end_time"])
        offset = bedtime.utcoffset()
        assert offset is not None and summary.timezone_offset == offset.total_seconds()
        assert (summary.deep, summary.rem, summary.light) == (
            night["deep_sleep"],
            night["rem_sleep"],
            night["light_sleep"],
        )
        assert summary.source.provider == SLUG

    activity = api.activity.get(user_id, start_date=start, end_date=end).activity
    assert {a.calendar_date: (a.steps, a.calories_total) for a in activity} == {
        str(d): (polar.activity(PIA, d)["active-steps"], polar.activity(PIA, d)["calories"])
        for d in days
    }

    workouts = api.workouts.get(user_id, start_date=start, end_date=end).workouts
    served = {str(e["id"]): e for e in (polar.exercise(PIA, d) for d in days)}
    assert {w.provider_id for w in workouts} == set(served)
    for workout in workouts:
        exercise = served[workout.provider_id]
        assert workout.time_start == _exercise_start(exercise)
        assert workout.calories == exercise["calories"]
        assert workout.max_hr == exercise["heart-rate"]["maximum"]
        assert workout.distance == exercise["distance"]

    assert api.profile.get(user_id).height == polar.physical(PIA, days[0])["height"]
    # The weight of the physical information, on the day it was set.
    physical = polar.physical(PIA, days[0])
    [body] = api.body.get(user_id, start_date=start, end_date=end).body
    assert (body.calendar_date, body.weight) == (str(days[0]), physical["weight"])
    [weight] = api.vitals.body_weight(user_id, start_date=start, end_date=end)
    assert weight.value == physical["weight"] and weight.unit == "kg"

    hrv = api.vitals.hrv(user_id, start_date=start, end_date=end)
    # One sample a night, at the UTC midnight of the night's date (docs/makers/polar.md).
    assert {s.timestamp: s.value for s in hrv} == {
        datetime.combine(d, time(), UTC): polar.recharge(PIA, d)["heart_rate_variability_avg"]
        for d in days
    }
