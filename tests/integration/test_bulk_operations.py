"""Bulk operations of the link API (adapters/http/bulk_operations.py,
domain/connections/bulk_operations.py) on SQLite and PostgreSQL: a historical pull
triggered again for many users is a tracked job whose progress the list shows, resumed
after a stop where it stopped, never doing a user twice; users not connected, or another
team's, are its failures; bad input is a 422."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.bulk_operations import BulkOperation, BulkOperations
from healthledger.domain.context import CommandContext

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.stream_ids import stream_of_connection


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    yield built
    built.close()


@pytest.fixture
def api(svc: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def home(svc: Service) -> Team:
    created = svc.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def demo_user(api: TestClient, home: Team, connect: bool = True) -> str:
    created = api.post("/v2/user", json={"client_user_id": uuid.uuid4().hex}, headers=home.headers)
    user_id = str(created.json()["user_id"])
    if connect:
        connected = api.post(
            "/v2/link/connect/demo",
            json={"user_id": user_id, "provider": "oura"},
            headers=home.headers,
        )
        assert connected.status_code == 200, connected.text
    return user_id


def pull_number(svc: Service, user_id: str) -> int:
    return reads.feed(svc, uuid.UUID(user_id), "oura", "sleep").pull_number


def test_a_historical_pull_triggered_again_for_many_users(
    svc: Service, api: TestClient, home: Team
) -> None:
    users = [demo_user(api, home) for _ in range(3)]
    assert svc.jobs.run_due_pulls() > 0
    before = {u: pull_number(svc, u) for u in users}
    lonely = demo_user(api, home, connect=False)
    stranger = str(uuid.uuid4())
    answer = api.post(
        "/v2/link/bulk_trigger_historical_pull",
        json={"user_ids": [*users, lonely, stranger, users[0]], "provider": "oura"},
        headers=home.headers,
    )
    assert answer.status_code == 200, answer.text
    job = answer.json()
    assert job["type"] == "link_bulk_historical_trigger" and job["status"] == "success"
    # Each user once: three done, the unconnected and the unknown user failed.
    assert (job["processed"], job["pending"]) == (5, 0)
    assert set(job["failed_user_ids"]) == {lonely, stranger}
    assert {u: pull_number(svc, u) for u in users} == {u: n + 1 for u, n in before.items()}
    assert svc.jobs.run_due_pulls() > 0
    assert all(reads.feed(svc, uuid.UUID(u), "oura", "sleep").status == "success" for u in users)

    listed = api.get("/v2/link/bulk_op", headers=home.headers).json()
    assert [op["id"] for op in listed["data"]] == [job["id"]] and listed["next_cursor"] is None


def test_a_job_stopped_halfway_is_resumed_where_it_stopped(
    svc: Service, api: TestClient, home: Team, clock: Clock
) -> None:
    users = [demo_user(api, home) for _ in range(5)]
    answer = api.post(
        "/v2/link/bulk_trigger_historical_pull",
        json={"user_ids": users, "provider": "oura", "wait_for_completion": False},
        headers=home.headers,
    )
    job_id = uuid.UUID(answer.json()["id"])
    assert answer.json()["status"] == "in_progress" and answer.json()["pending"] == 5
    requested_at = svc.clock()
    clock.advance(timedelta(seconds=1))
    # A worker does one batch of two, then stops (a restart).
    own = svc.bulk_operations
    operations = BulkOperations(
        svc.connections, svc.provider_tokens, own.client_of, own.resources_of, batch=2
    )
    halfway = operations.run(job_id, batches=1)
    assert halfway is not None and (len(halfway.done), len(halfway.pending)) == (2, 3)
    listed = api.get("/v2/link/bulk_op", headers=home.headers).json()["data"][0]
    assert (listed["processed"], listed["pending"], listed["status"]) == (2, 3, "in_progress")
    halfway_at = svc.clock()
    clock.advance(timedelta(seconds=1))
    # The scheduler's job resumes it: the rest once, the first two not again.
    assert svc.jobs.run_due_bulk_operations() == 1
    ended = svc.ledger.find(job_id)
    assert isinstance(ended, BulkOperation) and ended.status == "success"
    assert sorted(ended.done) == sorted(users) and len(ended.done) == 5
    assert [pull_number(svc, u) for u in users] == [2] * 5
    assert svc.jobs.run_due_bulk_operations() == 0

    # The list as it was: at the request, halfway, and before the job.
    def at(instant: datetime) -> list[Any]:
        answer = api.get(
            "/v2/link/bulk_op", params={"as_of": instant.isoformat()}, headers=home.headers
        )
        assert answer.status_code == 200, answer.text
        return [(op["processed"], op["pending"], op["status"]) for op in answer.json()["data"]]

    assert at(requested_at) == [(0, 5, "in_progress")]
    assert at(halfway_at) == [(2, 3, "in_progress")]
    assert at(svc.clock()) == [(5, 0, "success")]


def test_the_list_pages_and_bad_input_is_refused(svc: Service, api: TestClient, home: Team) -> None:
    user_id = demo_user(api, home)
    for _ in range(3):
        api.post(
            "/v2/link/bulk_trigger_historical_pull",
            json={"user_ids": [user_id], "provider": "oura"},
            headers=home.headers,
        )
    first = api.get("/v2/link/bulk_op", params={"page_size": 2}, headers=home.headers).json()
    second = api.get(
        "/v2/link/bulk_op",
        params={"page_size": 2, "next_cursor": first["next_cursor"]},
        headers=home.headers,
    ).json()
    assert len(first["data"]) == 2 and len(second["data"]) == 1
    assert second["next_cursor"] is None
    assert first["data"][0]["started_at"] >= second["data"][0]["started_at"]
    for body in (
        {"user_ids": [], "provider": "oura"},
        {"user_ids": [user_id], "provider": "no-such-provider"},
        {"user_ids": ["not-a-uuid"], "provider": "oura"},
    ):
        refused = api.post("/v2/link/bulk_trigger_historical_pull", json=body, headers=home.headers)
        assert refused.status_code == 422, body
    forged = api.get("/v2/link/bulk_op", params={"next_cursor": "x.y"}, headers=home.headers)
    assert forged.status_code == 400
    # Another team sees none of them.
    setup = CommandContext.system("test:setup")
    other = svc.teams.create_team(setup, svc.teams.create_organization(setup, "O"), "O", "eu")
    other_key = svc.teams.issue_team_api_key(setup, other).plain
    theirs = api.get("/v2/link/bulk_op", headers={"x-service-api-key": other_key}).json()
    assert theirs == {"data": [], "next_cursor": None}


def test_a_bulk_pause_holds_until_the_person_connects_again(
    svc: Service, api: TestClient, home: Team
) -> None:
    paused, running = demo_user(api, home), demo_user(api, home)
    answer = api.post(
        "/v2/link/bulk_pause", json={"user_ids": [paused], "provider": "oura"}, headers=home.headers
    )
    assert answer.status_code == 200, answer.text
    assert (answer.json()["type"], answer.json()["status"]) == ("link_bulk_pause", "success")

    def status(user_id: str) -> str:
        return str(reads.provider_status(api, home, uuid.UUID(user_id))["status"])

    assert (status(paused), status(running)) == ("paused", "connected")
    # Nothing is pulled for it; the ingestion bounds (no ingestion_end) do not lift it.
    connection_id = stream_of_connection(svc, uuid.UUID(paused), "oura")
    svc.pulls.apply_ingestion_bounds([connection_id])
    assert status(paused) == "paused"
    svc.jobs.run_due_pulls()
    # A pull due on a paused connection ends without reading the maker (as for a pause
    # by the ingestion bounds).
    assert reads.feed(svc, uuid.UUID(paused), "oura", "sleep").status == "failure"
    assert reads.last_error(svc, uuid.UUID(paused), "oura", "sleep") == "non_retriable_error"
    assert reads.feed(svc, uuid.UUID(running), "oura", "sleep").status == "success"
    # The person connects again: the pause ends with the new connection period.
    again = api.post(
        "/v2/link/connect/demo", json={"user_id": paused, "provider": "oura"}, headers=home.headers
    )
    assert again.status_code == 200, again.text
    assert status(paused) == "connected"
