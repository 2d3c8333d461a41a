"""A fake-WHOOP user read through the official Python client `vital` (issue 31): the
person signs in at the fake WHOOP (adapters/makers/fake_whoop.py, a real local HTTP
server) through the link page's OAuth flow, the pulls read WHOOP API v2 there, and the
client's sleep, activity, workouts, body, profile and HRV getters parse what the fake
served, WHOOP's instants in the person's offset and its kilojoules in kcal. On both
databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_whoop import PEOPLE, FakeWhoop, running_fake_whoop
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

HANA = PEOPLE["hana"]  # UTC+09:00
SLUG = "whoop_v2"


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def whoop() -> Iterator[FakeWhoop]:
    with running_fake_whoop(FakeWhoop(default_person="hana")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, whoop: FakeWhoop) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": whoop.base,
            "whoop_api_url": whoop.base,
            "whoop_history_days": 8,
            "oauth_clients": {SLUG: SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def test_the_official_client_reads_a_fake_whoop_user(
    api: vital.Vital, base_url: str, team: Team, service: Service, whoop: FakeWhoop
) -> None:
    user_id = str(api.user.create(client_user_id="oc-whoop").user_id)
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
    assert service.jobs.run_due_pulls() > 0

    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in range(6, 1, -1)]
    start, end = str(days[0]), str(days[-1])

    sleep = api.sleep.get(user_id, start_date=start, end_date=end).sleep
    assert {s.calendar_date for s in sleep} == {str(d) for d in days}
    for summary in sleep:
        day = datetime.fromisoformat(summary.calendar_date).date()
        [night] = [s for s in whoop.sleeps(HANA, day) if not s["nap"]]
        stages = night["score"]["stage_summary"]
        assert summary.rem == round(stages["total_rem_sleep_time_milli"] / 1000)
        assert summary.bedtime_start == _instant(night["start"])
        assert summary.timezone_offset == 9 * 3600
        assert summary.source.provider == SLUG

    activity = api.activity.get(user_id, start_date=start, end_date=end).activity
    assert {a.calendar_date: a.calories_total for a in activity} == {
        str(d): round(whoop.cycles(HANA, d)[0]["score"]["kilojoule"] / 4.184, 1) for d in days
    }

    workouts = api.workouts.get(user_id, start_date=start, end_date=end).workouts
    served = {w["id"]: w for d in days for w in whoop.workouts(HANA, d)}
    assert {w.provider_id for w in workouts} == set(served)
    for workout in workouts:
        assert workout.time_start == _instant(served[workout.provider_id]["start"])
        assert workout.max_hr == served[workout.provider_id]["score"]["max_heart_rate"]

    [body] = api.body.get(user_id, start_date=str(today), end_date=str(today)).body
    assert body.weight == HANA.weight
    assert api.profile.get(user_id).height == round(HANA.height * 100)

    hrv = api.vitals.hrv(user_id, start_date=start, end_date=end)
    served_hrv = {
        _instant(r["created_at"]): r["score"]["hrv_rmssd_milli"]
        for d in [*days, days[-1] + timedelta(days=1)]
        for r in whoop.recoveries(HANA, d)
    }
    assert hrv and all(served_hrv[s.timestamp] == s.value for s in hrv)
