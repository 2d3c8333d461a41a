"""Continuous queries (issue 34, ADR 0044) through the team API's ASGI app and the
scheduler's job, on SQLite and PostgreSQL: a registered query runs at once and then at its
interval over a window that moves with the day, its result table sealed with the user's
key, its runs kept as tasks and paged; a run whose worker died is taken over once its
lease has passed; and the caller's mistakes are 4xx with our sentences, never a 500."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.answers.continuous_queries import LEASE
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import continuous_queries
from healthledger.adapters.persistence.queries.continuous_queries import ContinuousQueryStore
from healthledger.domain.context import CommandContext
from sqlalchemy import select

from tests.conftest import Team, create_user

T0 = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)
BASE = "/aggregate/v1/user/{}/continuous_query"
HEART = {"timeseries": "heartrate", "field": "value"}
DAILY_MEAN = {
    "select": [{"group_key": "*"}, {"func": "mean", "arg": HEART}, {"func": "count", "arg": HEART}],
    "group_by": [{"date_trunc": {"value": 1, "unit": "day"}, "arg": {"index": "timeseries"}}],
}


def definition(slug: str = "daily_hr", **changes: Any) -> dict[str, Any]:
    return {
        "slug": slug,
        "past": {"value": 3, "unit": "day"},
        "interval_minutes": 60,
        "query": DAILY_MEAN,
        **changes,
    }


def beta(service: Service, team: Team) -> None:
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "aggregate_query", True)


def heart_day(day: date, values: list[int]) -> list[dict[str, Any]]:
    start = datetime.combine(day, time(6), UTC)
    return [
        {"timestamp": (start + timedelta(minutes=n)).isoformat(), "value": v, "unit": "bpm"}
        for n, v in enumerate(values)
    ]


def day_key(day: date) -> str:
    return datetime.combine(day, time(0), UTC).isoformat()


def test_a_query_runs_at_once_then_at_its_interval_over_a_moving_window(
    service: Service, client: TestClient, team: Team
) -> None:
    beta(service, team)
    today = T0.date()
    with freeze_time(T0):
        user_id = create_user(client, team, "cq-1")["user_id"]
        uid = uuid.UUID(user_id)
        # Day -3 is outside the three days that end with today; days -2 and -1 inside.
        service.health_data.store(
            uid,
            "oura",
            {
                "heartrate": {
                    today - timedelta(days=3): heart_day(today - timedelta(days=3), [99]),
                    today - timedelta(days=2): heart_day(today - timedelta(days=2), [60, 70]),
                    today - timedelta(days=1): heart_day(today - timedelta(days=1), [80]),
                }
            },
        )
        created = client.post(BASE.format(user_id), json=definition(), headers=team.headers)
        assert created.status_code == 201, created.text
        query_id = created.json()["id"]
        assert created.json()["slug"] == "daily_hr" and created.json()["result_at"] is None
        # No run yet: the table is a 404 that says so, the history the run to come.
        early = client.get(f"{BASE.format(user_id)}/daily_hr/result_table", headers=team.headers)
        assert early.status_code == 404 and "no completed run" in early.json()["detail"]
        history = client.get(
            f"{BASE.format(user_id)}/{query_id}/task_history", headers=team.headers
        )
        assert [t["status"] for t in history.json()["data"]] == ["scheduled"]

        assert service.jobs.run_due_continuous_queries() == 1
        assert service.jobs.run_due_continuous_queries() == 0  # the next one is not due yet

    table = client.get(f"{BASE.format(user_id)}/daily_hr/result_table", headers=team.headers)
    assert table.status_code == 200, table.text
    assert table.json() == {
        "table": {
            "group_key.0": [day_key(today - timedelta(days=2)), day_key(today - timedelta(days=1))],
            "mean": [65.0, 80.0],
            "count": [2, 1],
        }
    }
    # Health data: the stored result is sealed with the user's key, never in clear.
    with service.db.read() as conn:
        sealed = conn.execute(
            select(continuous_queries.c.sealed_result).where(
                continuous_queries.c.query_id == uuid.UUID(query_id)
            )
        ).scalar_one()
    assert "65.0" not in sealed and "mean" not in sealed
    assert service.key_store.open(uid, sealed) == table.json()["table"]

    # A day on: that day's data arrives, and the run due an hour after the first runs,
    # late, over the three days that end with the day it runs (day -2 of T0 is out).
    later = T0 + timedelta(days=1, minutes=5)
    with freeze_time(later):
        service.health_data.store(
            uid, "oura", {"heartrate": {later.date(): heart_day(later.date(), [90, 100])}}
        )
        assert service.jobs.run_due_continuous_queries() == 1
    moved = client.get(f"{BASE.format(user_id)}/{query_id}/result_table", headers=team.headers)
    assert moved.json()["table"] == {
        "group_key.0": [day_key(today - timedelta(days=1)), day_key(later.date())],
        "mean": [80.0, 95.0],
        "count": [1, 2],
    }

    # The history, the latest first, one a page: the next run (due an hour after the
    # missed ones, in the query's rhythm), then the two completed.
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1, **({"next_cursor": cursor} if cursor else {})}
        page = client.get(
            f"{BASE.format(user_id)}/daily_hr/task_history", params=params, headers=team.headers
        ).json()
        seen += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [t["status"] for t in seen] == ["scheduled", "completed", "completed"]
    assert [datetime.fromisoformat(t["scheduled_at"]) for t in seen] == [
        T0 + timedelta(days=1, hours=1),
        T0 + timedelta(hours=1),
        T0,
    ]
    first = seen[-1]
    assert first["query_id"] == query_id and first["user_id"] == user_id
    assert datetime.fromisoformat(first["started_at"]) == T0
    assert first["ended_at"] is not None and first["error_details"] is None

    listed = client.get(BASE.format(user_id), headers=team.headers).json()["data"]
    assert [q["id"] for q in listed] == [query_id] and listed[0]["result_at"] is not None
    # Deleted: the query, its result and its history.
    gone = client.delete(f"{BASE.format(user_id)}/daily_hr", headers=team.headers)
    assert gone.status_code == 204
    again = client.get(f"{BASE.format(user_id)}/{query_id}/task_history", headers=team.headers)
    assert again.status_code == 404
    assert client.get(BASE.format(user_id), headers=team.headers).json() == {"data": []}


def test_a_run_whose_worker_died_is_taken_over_once_its_lease_has_passed(
    service: Service, client: TestClient, team: Team
) -> None:
    beta(service, team)
    store = ContinuousQueryStore(service.db)
    with freeze_time(T0):
        user_id = create_user(client, team, "cq-2")["user_id"]
        assert (
            client.post(BASE.format(user_id), json=definition(), headers=team.headers).status_code
            == 201
        )
        # Another process claimed the run, then died.
        [held] = store.claim_due(T0, "dead-process", LEASE, 10)
        assert service.jobs.run_due_continuous_queries() == 0  # its lease still runs
    with freeze_time(T0 + LEASE + timedelta(seconds=1)):
        assert service.jobs.run_due_continuous_queries() == 1
        # The dead process's late end is refused: the run is recorded once.
        assert not store.finish(held, "dead-process", T0 + LEASE, None, "late", T0)
    history = client.get(f"{BASE.format(user_id)}/daily_hr/task_history", headers=team.headers)
    assert [t["status"] for t in history.json()["data"]] == ["scheduled", "completed"]


def test_mistakes_are_answered_with_their_status_and_never_a_500(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    user_id = create_user(client, team, "cq-3")["user_id"]
    url = BASE.format(user_id)
    # The aggregate query's closed-beta switch covers continuous queries.
    assert client.post(url, json=definition(), headers=team.headers).status_code == 403
    beta(service, team)
    beta(service, other_team)
    # Another team's user is no user of the caller's.
    assert client.post(url, json=definition(), headers=other_team.headers).status_code == 404
    assert client.get(url, headers=other_team.headers).status_code == 404
    assert client.post(url, json=definition(), headers=team.headers).status_code == 201
    assert client.get(f"{url}/daily_hr/result_table", headers=other_team.headers).status_code == 404

    taken = client.post(url, json=definition(), headers=team.headers)
    assert taken.status_code == 409 and "slug" in taken.json()["detail"]
    refused = client.post(
        url,
        json=definition(
            "typed",
            query={
                "select": [{"func": "sum", "arg": {"timeseries": "heartrate", "field": "type"}}]
            },
        ),
        headers=team.headers,
    )
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"][:2] == ["body", "query"]
    for bad in (
        definition("too_often", interval_minutes=1),
        definition("Not A Slug"),
        {**definition("extra"), "timeframe": {}},
    ):
        assert client.post(url, json=bad, headers=team.headers).status_code == 422, bad
    assert client.get(f"{url}/nothing/result_table", headers=team.headers).status_code == 404
    assert client.get(f"{url}/nothing/task_history", headers=team.headers).status_code == 404
    assert client.delete(f"{url}/nothing", headers=team.headers).status_code == 404
    forged = client.get(
        f"{url}/daily_hr/task_history", params={"next_cursor": "forged"}, headers=team.headers
    )
    assert forged.status_code == 400
    assert (
        client.get(f"{url}/daily_hr/task_history", params={"limit": 0}, headers=team.headers)
    ).status_code == 422
    assert client.get(BASE.format("not-a-uuid"), headers=team.headers).status_code == 422


def test_a_deleted_users_queries_wait_and_its_erasure_removes_them(
    service: Service, client: TestClient, team: Team
) -> None:
    beta(service, team)
    ctx = CommandContext.system("test")
    with freeze_time(T0):
        user_id = create_user(client, team, "cq-4")["user_id"]
        client.post(BASE.format(user_id), json=definition(), headers=team.headers)
        service.users.delete_user(ctx, team.team_id, uuid.UUID(user_id))
        # A user scheduled for deletion is not queried for its team any more.
        assert service.jobs.run_due_continuous_queries() == 0
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
    with service.db.read() as conn:
        left = conn.execute(
            select(continuous_queries).where(continuous_queries.c.user_id == uuid.UUID(user_id))
        ).all()
    assert left == []
