"""The raw getters (issue 34, docs/data.md#raw-payloads) through both official clients,
`vital` 2.1.569 and `junction-api-sdk` 2.0.0, unchanged, against the team API served by
uvicorn: a demo Oura ring's pulls keep what the device generated (a demo device's raw
payload), and `sleep`, `activity`, `workouts`, `body`, `profile` and `devices.get_raw`
parse it in the clients' own types. On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import junction
import pytest
import vital
from healthledger.adapters.composition import Service
from vital.core.api_error import ApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS


@pytest.fixture
def clients(api: vital.Vital, base_url: str, team: Team) -> Iterator[list[Any]]:
    other = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    yield [api, other]


def test_both_clients_read_the_demo_rings_raw_payloads(
    api: vital.Vital, clients: list[Any], service: Service
) -> None:
    user_id = str(api.user.create(client_user_id="oc-raw").user_id)
    api.link.connect_demo_provider(user_id=user_id, provider="oura")
    assert service.jobs.run_due_pulls() > 0
    today = datetime.now(UTC).date()
    start, end = str(today - timedelta(days=6)), str(today - timedelta(days=2))
    summaries = {
        s.calendar_date: s for s in api.sleep.get(user_id, start_date=start, end_date=end).sleep
    }
    assert summaries

    for c in clients:
        sleep = c.sleep.get_raw(user_id, start_date=start, end_date=end).sleep
        assert sleep and {s.source.slug for s in sleep} == {"oura"}
        # Each day's record as the demo device generated it, under its generator and day.
        generated = {
            a["request"].removeprefix("demo:sleep/"): a["answer"]
            for s in sleep
            for a in s.data["answers"]
        }
        for day, summary in summaries.items():
            assert generated[str(day)]["score"] == summary.score
            assert generated[str(day)]["hr_lowest"] == summary.hr_lowest
        activity = c.activity.get_raw(user_id, start_date=start, end_date=end).activity
        assert activity and all(a.priority_id == a.source_id for a in activity)
        c.workouts.get_raw(user_id, start_date=start, end_date=end)
        c.body.get_raw(user_id, start_date=start, end_date=end)
        profile = c.profile.get_raw(user_id, provider="oura").profile
        assert profile.user_id == user_id and profile.source.slug == "oura"
        [device] = c.devices.get_raw(user_id).devices
        assert device.source.slug == "oura" and device.data["provider"] == "oura"
        # Bad dates: the clients' 422.
        with pytest.raises(Exception) as refused:
            c.sleep.get_raw(user_id, start_date="not-a-date")
        assert getattr(refused.value, "status_code", None) == 422
    # An unknown user: 404 with a string detail.
    with pytest.raises(ApiError) as missing:
        api.sleep.get_raw("00000000-0000-4000-8000-000000000000", start_date=start)
    assert missing.value.status_code == 404
