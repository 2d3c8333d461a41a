"""Summaries and timeseries through the official Python client `vital==2.1.569` (issue 18,
docs/compatibility.md): the real team API under uvicorn, the client's `sleep.get`,
`activity.get`, ... and every `vitals.*` method of a resource the demo devices produce,
each answer parsed by the client's models and held to what our API answers over plain
HTTP. And the client's timeseries types against our OpenAPI document: our one generic path
(`/v2/timeseries/{user_id}/{resource}`) stands for the client's many, so the check of
test_official_client.py (which matches paths) is made here, method by method. On both
databases."""

from __future__ import annotations

import re
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.http.timeseries import PATH_NAMES
from vital.vitals.client import VitalsClient

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.official_client import client_calls, gaps

pytestmark = CLIENTS_PARSE_ANSWERS

# The client's timeseries calls: `vitals.<name>` on /v2/timeseries/{}/<resource>[/grouped].
_TIMESERIES = re.compile(r"^/v2/timeseries/\{\}/(\w+)(/grouped)?$")
# Summary calls: client resource -> the answer's list attribute (profile: one object).
SUMMARIES = {
    "sleep": "sleep",
    "activity": "activity",
    "workouts": "workouts",
    "body": "body",
    "meal": "meals",
    "sleep_cycle": "sleep_cycle",
    "menstrual_cycle": "menstrual_cycle",
    "electrocardiogram": "electrocardiogram",
}
DEVICES = ("oura", "apple_health_kit", "withings", "freestyle_libre")


def vitals_calls() -> dict[str, tuple[str, bool]]:
    """`vitals` method -> (the resource in its path, grouped?), for the resources we serve."""
    found = {}
    for name, (method, path) in client_calls().items():
        match = _TIMESERIES.match(path)
        served = match is not None and match.group(1) in PATH_NAMES
        if name.startswith("vitals.") and method == "GET" and served:
            assert match is not None
            found[name.removeprefix("vitals.")] = (match.group(1), bool(match.group(2)))
    return found


@pytest.fixture
def connected(api: vital.Vital, service: Service) -> str:
    user_id = api.user.create(client_user_id="oc-health-data").user_id
    for provider in DEVICES:
        api.link.connect_demo_provider(user_id=user_id, provider=provider)
    assert service.jobs.run_due_pulls() > 0
    return str(user_id)


def test_every_summary_getter_through_the_client(
    api: vital.Vital,
    base_url: str,
    team: Team,
    connected: str,
) -> None:
    today = datetime.now(UTC).date()
    start, end = str(today - timedelta(days=30)), str(today)
    for resource, key in SUMMARIES.items():
        parsed = getattr(api, resource).get(connected, start_date=start, end_date=end)
        summaries = getattr(parsed, key)
        plain = httpx.get(
            f"{base_url}/v2/summary/{resource}/{connected}",
            params={"start_date": start, "end_date": end},
            headers=team.headers,
        ).json()[key]
        assert len(summaries) == len(plain), resource
        # An ECG is taken on a day in seven or so: a month may rarely have none.
        assert summaries or resource == "electrocardiogram", resource
        for model, ours in zip(summaries, plain, strict=True):
            assert (model.id, model.user_id) == (ours["id"], connected), resource
            assert model.source.provider == ours["provider"] in DEVICES
            assert model.source.name is None  # no name, logo, slug since 2024-07-31
    # Two days, not today alone: just after midnight (UTC) today's night has not ended.
    two_days = str(today - timedelta(days=2))
    sleep = api.sleep.get(connected, start_date=two_days, end_date=end, provider="oura").sleep
    assert sleep and all(s.duration == s.total + s.awake for s in sleep)
    profile = api.profile.get(connected, provider="withings")
    assert profile.user_id == connected and profile.height and profile.source.provider == "withings"


def test_every_vitals_method_of_a_demo_resource_through_the_client(
    api: vital.Vital,
    base_url: str,
    team: Team,
    connected: str,
) -> None:
    today = datetime.now(UTC).date()
    start, end = str(today - timedelta(days=6)), str(today)
    calls = vitals_calls()
    assert {"heartrate", "glucose_grouped", "body_weight", "steps_grouped"} <= set(calls)
    with_data = set()
    for method, (resource, grouped) in sorted(calls.items()):
        parsed: Any = getattr(api.vitals, method)(connected, start_date=start, end_date=end)
        path = f"{base_url}/v2/timeseries/{connected}/{resource}" + ("/grouped" if grouped else "")
        plain = httpx.get(
            path, params={"start_date": start, "end_date": end}, headers=team.headers
        ).json()
        if grouped:
            assert set(parsed.groups) == set(plain["groups"]), method
            counts = {p: len(g[0].data) for p, g in parsed.groups.items()}
            assert counts == {p: len(g[0]["data"]) for p, g in plain["groups"].items()}
            assert parsed.next_cursor is None
            with_data |= {resource} if counts else set()
        else:
            assert len(parsed) == len(plain), method
            assert [s.timestamp for s in parsed] == [
                datetime.fromisoformat(s["timestamp"]) for s in plain
            ]
            with_data |= {resource} if parsed else set()
    # The demo devices' resolution, as the client reads it: a whole day (yesterday; today
    # has barely begun just after midnight) holds at most one beat a minute.
    yesterday = str(today - timedelta(days=1))
    beats = api.vitals.heartrate(
        connected, start_date=yesterday, end_date=yesterday, provider="oura"
    )
    assert 0 < len(beats) <= 1440 and beats[0].unit == "bpm"
    assert {"heartrate", "glucose", "steps", "body_weight", "hrv"} <= with_data


def test_the_clients_timeseries_types_are_in_our_openapi(service: Service) -> None:
    document = create_team_api(service).openapi()
    paths = document["paths"]
    found: list[str] = []
    calls = vitals_calls()
    assert len(calls) > 60  # the listing of the client's calls works
    for method, (_resource, grouped) in sorted(calls.items()):
        path = "/v2/timeseries/{user_id}/{resource}" + ("/grouped" if grouped else "")
        operation = paths[path]["get"]
        returned = typing.get_type_hints(getattr(VitalsClient, method))["return"]
        content = operation["responses"]["200"]["content"]["application/json"]
        found += gaps(document, returned, content["schema"], f"vitals.{method}")
    assert found == []
