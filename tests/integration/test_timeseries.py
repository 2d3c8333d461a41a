"""The timeseries getters (`GET /v2/timeseries/{user_id}/{resource}` and `.../grouped`,
docs/data.md): the samples the demo devices stored, at their resolution (heart rate every
minute while worn, a CGM's glucose every 5 minutes), ranges of days and of instants,
several providers merged or grouped, and every refusal. On both databases."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.http.timeseries import PATH_NAMES, TIMESERIES_RESOURCES
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.context import CommandContext

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
DAY = T0.date() - timedelta(days=3)
CTX = CommandContext(actor="test:actor", request_id="req-timeseries")


def pulled_user(service: Service, client: TestClient, team: Team, *providers: str) -> str:
    with freeze_time(T0):
        user = create_user(client, team, f"t-{'-'.join(providers)}")["user_id"]
        for provider in providers:
            connect(client, team, user, provider)
        service.jobs.run_due_pulls()
    return str(user)


def demo(user: str, provider: str, resource: str, first: date, last: date) -> list[Any]:
    """The demo device's samples of the days, in order: the test's own account."""
    found = DemoProvider().fetch(PullTarget(UUID(user), provider, resource, {}), first, last, T0, 1)
    return [sample for day in sorted(found) for sample in found[day]]


def get(client: TestClient, team: Team, path: str, **params: Any) -> Any:
    with freeze_time(T0):
        response = client.get(path, params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def fitbit(service: Service, client: TestClient, team: Team) -> str:
    return pulled_user(service, client, team, "fitbit")


def test_heart_rate_is_every_minute_while_worn(client: TestClient, team: Team, fitbit: str) -> None:
    samples = get(client, team, f"/v2/timeseries/{fitbit}/heartrate", start_date=str(DAY))
    assert samples == demo(fitbit, "fitbit", "heartrate", DAY, DAY)
    assert 1300 < len(samples) <= 1440
    moments = [datetime.fromisoformat(s["timestamp"]) for s in samples]
    assert all(m.date() == DAY for m in moments)
    gaps = [b - a for a, b in pairwise(moments)]
    # A minute apart, but for the one stretch off the wrist (charging).
    assert sum(1 for g in gaps if g != timedelta(minutes=1)) == 1
    assert {s["unit"] for s in samples} == {"bpm"}
    assert 30 <= min(s["value"] for s in samples) < max(s["value"] for s in samples) <= 130


def test_a_cgm_reads_glucose_every_five_minutes(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "freestyle_libre")
    samples = get(client, team, f"/v2/timeseries/{user}/glucose", start_date=str(DAY))
    assert len(samples) == 288
    moments = [datetime.fromisoformat(s["timestamp"]) for s in samples]
    assert {b - a for a, b in pairwise(moments)} == {timedelta(minutes=5)}
    assert samples == demo(user, "freestyle_libre", "glucose", DAY, DAY)


def test_ranges_of_days_and_of_instants(client: TestClient, team: Team, fitbit: str) -> None:
    path = f"/v2/timeseries/{fitbit}/steps"
    start = DAY - timedelta(days=2)
    days = get(client, team, path, start_date=str(start), end_date=str(DAY))
    assert days == demo(fitbit, "fitbit", "steps", start, DAY)
    # Interval samples carry their interval.
    assert all(s["start"] == s["timestamp"] and s["end"] > s["start"] for s in days)
    # Instants cut through days: the samples whose timestamp is in the range, inclusive.
    first, last = days[3]["timestamp"], days[-4]["timestamp"]
    cut = get(client, team, path, start_date=first, end_date=last)
    assert cut == days[3:-3]
    # A naive date-time is UTC; a date alone as the end is the end of its day.
    naive = get(client, team, path, start_date=first.removesuffix("+00:00"), end_date=str(DAY))
    assert naive == days[3:]


def test_several_providers_merged_in_time_order_or_grouped(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "oura", "withings")
    path = f"/v2/timeseries/{user}/heartrate"
    oura = demo(user, "oura", "heartrate", DAY, DAY)
    withings = demo(user, "withings", "heartrate", DAY, DAY)
    merged = get(client, team, path, start_date=str(DAY))
    assert len(merged) == len(oura) + len(withings)
    assert [s["timestamp"] for s in merged] == sorted(s["timestamp"] for s in merged)
    assert get(client, team, path, start_date=str(DAY), provider="withings") == withings

    grouped = get(client, team, path + "/grouped", start_date=str(DAY))
    assert grouped == {
        "groups": {
            "oura": [
                {"source": {"provider": "oura", "type": "ring", "app_id": None}, "data": oura}
            ],
            "withings": [
                {
                    "source": {"provider": "withings", "type": "multiple_sources", "app_id": None},
                    "data": withings,
                }
            ],
        },
        "next": None,
        "next_cursor": None,
    }
    one = get(client, team, path + "/grouped", start_date=str(DAY), provider="oura")
    assert list(one["groups"]) == ["oura"]
    empty = get(client, team, path + "/grouped", start_date="2020-01-01")
    assert empty == {"groups": {}, "next": None, "next_cursor": None}


def test_the_clients_names_of_weight_and_fat(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "withings")
    start = T0.date() - timedelta(days=30)
    for alias, resource in (("body_weight", "weight"), ("body_fat", "fat")):
        found = get(
            client, team, f"/v2/timeseries/{user}/{alias}", start_date=start, end_date=T0.date()
        )
        assert found == demo(user, "withings", resource, start, T0.date()) != []
        assert (
            get(
                client,
                team,
                f"/v2/timeseries/{user}/{resource}",
                start_date=start,
                end_date=T0.date(),
            )
            == found
        )


def test_every_timeseries_resource_of_a_demo_device_is_served(
    service: Service, client: TestClient, team: Team
) -> None:
    user = pulled_user(service, client, team, "apple_health_kit")
    start = T0.date() - timedelta(days=30)
    offered = set(service.catalog["apple_health_kit"].supported_resources)
    served = offered & set(TIMESERIES_RESOURCES)
    assert served and served <= set(PATH_NAMES)
    for resource in sorted(served):
        found = get(
            client, team, f"/v2/timeseries/{user}/{resource}", start_date=start, end_date=T0.date()
        )
        assert found == demo(user, "apple_health_kit", resource, start, T0.date()), resource


# (path, params, status): each refused, with a detail saying why.
BAD_TIMESERIES_INPUT: list[tuple[str, dict[str, str], int]] = [
    ("heartrate", {"start_date": "2026-03-10", "end_date": "2026-03-01"}, 422),
    ("heartrate", {"start_date": "2024-01-01", "end_date": "2026-03-01"}, 422),
    ("heartrate", {"start_date": "03/01/2026"}, 422),
    ("heartrate", {"start_date": "2026-03-01", "provider": "nope"}, 422),
    ("heartrate", {}, 422),
    ("sleep", {"start_date": "2026-03-01"}, 422),
    ("not_a_resource", {"start_date": "2026-03-01"}, 422),
    ("heartrate/grouped", {"start_date": "2026-03-01", "next_cursor": "abc"}, 400),
    ("heartrate/grouped", {"start_date": "2026-03-01", "cursor": "abc"}, 400),
]


def test_bad_input_is_a_clear_4xx(client: TestClient, team: Team, fitbit: str) -> None:
    # Read-only refusals: every case against the one pulled user.
    for path, params, status in BAD_TIMESERIES_INPUT:
        case = (path, params)
        response = client.get(
            f"/v2/timeseries/{fitbit}/{path}", params=params, headers=team.headers
        )
        assert response.status_code == status, (case, response.text)
        detail = response.json()["detail"]
        assert detail if status == 422 else detail["error_type"] == "INVALID_CURSOR", (
            case,
            detail,
        )
        if path in ("sleep", "not_a_resource"):
            assert len(detail) == 1, (case, detail)
            (problem,) = detail
            assert problem["loc"] == ["path", "resource"] and "heartrate" in problem["msg"], (
                case,
                problem,
            )


def test_another_teams_deleted_and_erased_users_are_404(
    service: Service, client: TestClient, team: Team, other_team: Team, fitbit: str
) -> None:
    params = {"start_date": str(DAY)}
    for path in (f"/v2/timeseries/{fitbit}/heartrate", f"/v2/timeseries/{fitbit}/hrv/grouped"):
        assert client.get(path, params=params, headers=other_team.headers).status_code == 404
    path = f"/v2/timeseries/{fitbit}/heartrate"
    with freeze_time(T0):
        service.users.delete_user(CTX, team.team_id, UUID(fitbit))
        pending = client.get(path, params=params, headers=team.headers)
    assert pending.status_code == 404 and "scheduled for deletion" in pending.json()["detail"]
    with freeze_time(T0 + service.settings.grace_period):
        assert service.jobs.sweep_erasures() == 1
        erased = client.get(path, params=params, headers=team.headers)
    assert erased.status_code == 404 and erased.json() == {"detail": "User not found."}


def test_the_erasure_drops_the_users_opened_days_from_memory(
    service: Service, client: TestClient, team: Team
) -> None:
    """A read keeps the days it opened a while (`OpenedDays`); the sweep that erases the
    user drops them from this process's memory at once, and another user's stay."""
    gone, kept = (pulled_user(service, client, team, p) for p in ("fitbit", "oura"))
    for user in (gone, kept):
        get(client, team, f"/v2/timeseries/{user}/heartrate", start_date=str(DAY))
    with freeze_time(T0):
        service.users.delete_user(CTX, team.team_id, UUID(gone))
    with freeze_time(T0 + service.settings.grace_period):
        assert service.jobs.sweep_erasures() == 1
    # The answers kept (ADR 0043) likewise: the erased user's are gone, the other's held.
    known = service.health_data_queries.known
    assert known is not None
    assert not known.holds(UUID(gone)) and known.holds(UUID(kept))
    opened = service.health_data_queries.opened
    # `forget` says how many entries it dropped: none of the erased user's were left, and
    # the other user's read is still held (the reads of both kept their days alike).
    assert opened.forget([UUID(gone)]) == 0
    assert opened.forget([UUID(kept)]) > 0
