"""A fake-Oura user read through the official Python client `vital` (issue 28): the person
signs in at the fake Oura (adapters/makers/fake_oura.py, a real local HTTP server) through
the link page's OAuth flow, the pulls read Oura's API v2 there, and the client's sleep,
activity, workouts, body and heart rate getters parse what the fake served. On both
databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_oura import PEOPLE, FakeOura, running_fake_oura
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

BEN = PEOPLE["ben"]  # UTC-5


@pytest.fixture
def oura() -> Iterator[FakeOura]:
    with running_fake_oura(FakeOura(default_person="ben")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, oura: FakeOura) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": oura.base,
            "oura_api_url": oura.base,
            "oura_history_days": 8,
            "oauth_clients": {"oura": SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def test_the_official_client_reads_a_fake_oura_user(
    api: vital.Vital, base_url: str, team: Team, service: Service, oura: FakeOura
) -> None:
    user_id = str(api.user.create(client_user_id="oc-oura").user_id)
    token = httpx.post(
        f"{base_url}/v2/link/token",
        json={"user_id": user_id, "redirect_url": APP},
        headers=team.headers,
    ).json()["link_token"]
    browser = a_browser(service)
    try:
        _, answer = browser.sign_in(token, "oura")
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
        [served] = [s for s in oura.sleeps(BEN, day) if s["type"] == "long_sleep"]
        assert summary.total == served["total_sleep_duration"]
        assert summary.bedtime_start == datetime.fromisoformat(served["bedtime_start"])
        assert summary.timezone_offset == -5 * 3600
        assert summary.source.provider == "oura"

    activity = api.activity.get(user_id, start_date=start, end_date=end).activity
    assert {a.calendar_date: a.steps for a in activity} == {
        str(d): oura.daily_activity(BEN, d)[0]["steps"] for d in days
    }

    workouts = api.workouts.get(user_id, start_date=start, end_date=end).workouts
    served_workouts = {w["id"]: w for d in days for w in oura.workouts(BEN, d)}
    assert {w.provider_id for w in workouts} == set(served_workouts)
    for workout in workouts:
        assert workout.calories == served_workouts[workout.provider_id]["calories"]

    body = api.body.get(user_id, start_date=str(today - timedelta(days=1)), end_date=str(today))
    assert [b.weight for b in body.body] == [BEN.weight]
    assert api.profile.get(user_id).height == round(BEN.height * 100)

    heartrate = api.vitals.heartrate(user_id, start_date=start, end_date=end)
    first = datetime.combine(days[0], time(0), UTC)
    last = datetime.combine(days[-1] + timedelta(days=1), time(0), UTC)
    served_hr = oura.heartrate(BEN, first, last)
    assert [(s.timestamp, s.value) for s in heartrate] == [
        (datetime.fromisoformat(s["timestamp"]), s["bpm"]) for s in served_hr
    ]
