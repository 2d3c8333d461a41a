"""A fake-Garmin user read through the official Python client `vital` (issue 31): the
person signs in at the fake Garmin (adapters/makers/fake_garmin.py, a real local HTTP
server) through the link page's OAuth PKCE flow, the history pull asks Garmin's backfill,
the fake pushes the summaries to the team API's webhook (served on a real port), and the
client's sleep, activity, workouts and body getters parse what Garmin delivered, in the
person's +09:00 offset. On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_garmin import PEOPLE, FakeGarmin, running_fake_garmin
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

LENA = PEOPLE["lena"]  # UTC+09:00
SLUG = "garmin"
HISTORY_DAYS = 15


@pytest.fixture
def garmin() -> Iterator[FakeGarmin]:
    with running_fake_garmin(FakeGarmin(default_person="lena")) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def service(settings: Settings, garmin: FakeGarmin) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": garmin.base,
            "garmin_api_url": garmin.base,
            "garmin_history_days": HISTORY_DAYS,
            "oauth_clients": {SLUG: SERVICE},
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def test_the_official_client_reads_a_fake_garmin_user(
    api: vital.Vital, base_url: str, team: Team, service: Service, garmin: FakeGarmin
) -> None:
    user_id = str(api.user.create(client_user_id="oc-garmin").user_id)
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
    assert service.jobs.run_due_pulls() > 0  # the backfills asked
    garmin.webhook_url = f"{base_url}/makers/{SLUG}/webhook"
    assert garmin.deliver() > 0 and {status for _, status in garmin.sent} == {200}
    service.jobs.run_due_pulls()  # the deliveries stored

    today = datetime.now(UTC).astimezone(LENA.tz).date()
    days = [today - timedelta(days=n) for n in range(HISTORY_DAYS - 2, 0, -1)]
    start, end = str(days[0]), str(days[-1])

    sleep = api.sleep.get(user_id, start_date=start, end_date=end).sleep
    assert {s.calendar_date for s in sleep} == {str(d) for d in days}
    for summary in sleep:
        day = datetime.fromisoformat(summary.calendar_date).date()
        [night] = garmin.sleeps(LENA, day)
        assert summary.deep == night["deepSleepDurationInSeconds"]
        assert summary.bedtime_start == datetime.fromtimestamp(night["startTimeInSeconds"], UTC)
        assert summary.timezone_offset == 9 * 3600
        assert summary.source.provider == SLUG

    activity = api.activity.get(user_id, start_date=start, end_date=end).activity
    assert {a.calendar_date: a.steps for a in activity} == {
        str(d): garmin.dailies(LENA, d)[0]["steps"] for d in days
    }

    workouts = api.workouts.get(user_id, start_date=start, end_date=end).workouts
    served = {a["summaryId"]: a for d in days for a in garmin.activities(LENA, d)}
    assert served and {w.provider_id for w in workouts} == set(served)
    for workout in workouts:
        moment = served[workout.provider_id]["startTimeInSeconds"]
        assert workout.time_start == datetime.fromtimestamp(moment, UTC)
        assert workout.max_hr == served[workout.provider_id]["maxHeartRateInBeatsPerMinute"]

    body = api.body.get(user_id, start_date=start, end_date=end).body
    weighed = {str(d): m for d in days for m in garmin.body_comps(LENA, d)}
    assert weighed and {b.calendar_date for b in body} == set(weighed)
    for measurement in body:
        assert measurement.weight == round(
            weighed[measurement.calendar_date]["weightInGrams"] / 1000, 2
        )
