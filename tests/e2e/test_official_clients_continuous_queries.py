"""Continuous queries through both official clients, unchanged (issue 34, ADR 0044): the
real team API under uvicorn; the query registered over plain HTTP (neither client has a
create method), run by the scheduler's job, then read by `vital` 2.1.569's and
`junction-api-sdk` 2.0.0's `aggregate.get_result_table_for_continuous_query` (parsed as
their AggregationResult) and `aggregate.get_task_history_for_continuous_query` (their
ContinuousQueryTaskHistoryResponse, paged with their `next_cursor` and `limit`), by id and
by slug, held to what the API answers over plain HTTP. On both databases."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, time, timedelta

import httpx
import junction
import vital
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext
from vital.core.api_error import ApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS


def test_both_clients_read_a_continuous_querys_result_and_its_task_history(
    api: vital.Vital, base_url: str, service: Service, team: Team
) -> None:
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "aggregate_query", True)
    user_id = str(api.user.create(client_user_id="oc-continuous").user_id)
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    start = datetime.combine(yesterday, time(8), UTC)
    samples = [
        {"timestamp": (start + timedelta(minutes=n)).isoformat(), "value": v, "unit": "bpm"}
        for n, v in enumerate([58, 62, 75])
    ]
    service.health_data.store(uuid.UUID(user_id), "oura", {"heartrate": {yesterday: samples}})
    heart = {"timeseries": "heartrate", "field": "value"}
    body = {
        "slug": "resting_hr",
        "past": {"value": 7, "unit": "day"},
        "interval_minutes": 30,
        "query": {"select": [{"func": "min", "arg": heart}, {"func": "max", "arg": heart}]},
    }
    headers = {"x-vital-api-key": team.key}
    plain = httpx.Client(base_url=base_url, headers=headers, timeout=30)
    url = f"/aggregate/v1/user/{user_id}/continuous_query"
    created = plain.post(url, json=body)
    assert created.status_code == 201, created.text
    query_id = created.json()["id"]
    clients: dict[str, vital.Vital | junction.Junction] = {
        "vital": api,
        "junction": junction.Junction(api_key=team.key, base_url=base_url, timeout=30),
    }

    # Before its first run: no table (the client raises its ApiError), one scheduled task.
    try:
        api.aggregate.get_result_table_for_continuous_query(user_id, "resting_hr")
        raise AssertionError("a table before any run")
    except ApiError as error:
        assert error.status_code == 404
    assert service.jobs.run_due_continuous_queries() == 1

    expected_table = plain.get(f"{url}/{query_id}/result_table").json()
    assert expected_table == {"table": {"min": [58.0], "max": [75.0]}}
    for name, client in clients.items():
        for key in (query_id, "resting_hr"):
            result = client.aggregate.get_result_table_for_continuous_query(user_id, key)
            assert result.table == expected_table["table"], name
            history = client.aggregate.get_task_history_for_continuous_query(user_id, key)
            assert [str(t.status.value) for t in history.data] == ["scheduled", "completed"], name
            done = history.data[1]
            assert (done.query_id, done.user_id) == (query_id, user_id)
            assert done.started_at is not None and done.ended_at is not None
            assert done.error_details is None and history.next_cursor is None
            # Paged by the client's own parameters: one task a page, then the next.
            first = client.aggregate.get_task_history_for_continuous_query(user_id, key, limit=1)
            assert first.next_cursor is not None and len(first.data) == 1
            rest = client.aggregate.get_task_history_for_continuous_query(
                user_id, key, next_cursor=first.next_cursor, limit=1
            )
            assert [t.scheduled_at for t in first.data + rest.data] == [
                t.scheduled_at for t in history.data
            ]
            assert rest.next_cursor is None
    plain.close()
