"""Historical pulls, the health data they store, retries and failures, connection errors
and pauses, and the daily sync: through the team API and the scheduler's jobs, on both
databases."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import health_data
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from sqlalchemy import select

from tests.conftest import Team, create_user
from tests.integration.api_calls import connect, provider_status, pulls_of
from tests.stream_ids import stream_of_feed

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
DELAYS = [60.0, 300.0, 1800.0, 7200.0]  # the default retry delays


def feed(service: Service, user_id: str, provider: str, resource: str) -> ResourceFeed:
    found = service.ledger.find(stream_of_feed(service, user_id, provider, resource))
    assert isinstance(found, ResourceFeed)
    return found


def feed_events(service: Service, user_id: str, provider: str, resource: str) -> list[Any]:
    return list(service.ledger.events.get(feed(service, user_id, provider, resource).id))


# -- a pull from connection to success ----------------------------------------------------


def test_a_connection_schedules_one_pull_per_resource_and_the_worker_completes_them(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p1")["user_id"]
        connect(client, team, user, "withings")
        scheduled = pulls_of(client, team, user, "withings")
        resources = service.catalog["withings"].supported_resources
        assert set(scheduled["pulled"]) == set(resources)
        assert scheduled["not_pulled"] == []
        sleep = scheduled["pulled"]["sleep"]
        assert sleep["status"] == "scheduled"
        timeline = sleep["timeline"]
        assert datetime.fromisoformat(timeline["scheduled_at"]) == T0
        assert (timeline["started_at"], timeline["ended_at"]) == (None, None)
        assert service.jobs.run_due_pulls() == len(resources)
        done = pulls_of(client, team, user, "withings")

    for resource, pull in done["pulled"].items():
        assert set(pull) == {
            "status", "range_start", "range_end", "timeline", "days_with_data", "release",
            "trace_id", "error_details",
        }  # fmt: skip
        assert pull["status"] == "success", resource
        assert pull["error_details"] is None
        assert pull["release"] == "2025-05-09"
        assert len(pull["trace_id"]) == 32
        assert datetime.fromisoformat(pull["range_start"]) == T0 - timedelta(days=30)
        assert datetime.fromisoformat(pull["range_end"]) == T0
        timeline = pull["timeline"]
        assert timeline["started_at"] is not None and timeline["ended_at"] is not None
    # Dense resources have data every day the range touches; sparse ones on fewer days.
    assert done["pulled"]["heartrate"]["days_with_data"] == 31
    assert 0 < done["pulled"]["body"]["days_with_data"] < 31
    # What days_with_data says is what is stored.
    stored = service.health_data.read(UUID(user), "withings", "body", date(2026, 1, 1), T0.date())
    assert len(stored) == done["pulled"]["body"]["days_with_data"]
    # A second run finds nothing due: success is not pulled again.
    with freeze_time(T0 + timedelta(hours=1)):
        assert service.jobs.run_due_pulls() == 0


def test_the_stored_data_is_the_demo_devices_sealed_under_the_users_key(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p2")["user_id"]
        connect(client, team, user, "oura")
        service.jobs.run_due_pulls()
    start, end = T0.date() - timedelta(days=30), T0.date()
    stored = service.health_data.read(UUID(user), "oura", "sleep", start, end)
    expected = DemoProvider().fetch(
        PullTarget(UUID(user), "oura", "sleep", {}), start, end, T0, attempt=1
    )
    assert stored == expected and len(stored) >= 29
    night = stored[T0.date()]
    assert {"bedtime_start", "bedtime_stop", "duration", "deep", "rem", "score"} <= set(night)
    # Nothing readable in the table: no field name, no value.
    with service.db.read() as conn:
        raw = [r.sealed for r in conn.execute(select(health_data.c.sealed)).all()]
    secret = [b"bedtime", night["bedtime_start"].encode(), b"bedtime_start"]
    assert raw and not any(word in bytes(sealed) for sealed in raw for word in secret)


def test_demo_data_is_deterministic_per_user_and_grows_with_the_day() -> None:
    import uuid

    demo = DemoProvider()
    a, b = uuid.uuid4(), uuid.uuid4()
    day = date(2026, 3, 9)
    late = datetime(2026, 3, 11, tzinfo=UTC)

    def fetch(user: uuid.UUID, resource: str, now: datetime) -> dict[date, Any]:
        return demo.fetch(PullTarget(user, "fitbit", resource, {}), day, day, now, 1)

    assert fetch(a, "heartrate", late) == fetch(a, "heartrate", late)
    assert fetch(a, "heartrate", late) != fetch(b, "heartrate", late)
    # Mid-day, today's samples stop at now: the day is not over yet.
    noon = datetime(2026, 3, 9, 12, tzinfo=UTC)
    partial = fetch(a, "heartrate", noon)[day]
    full = fetch(a, "heartrate", late)[day]
    assert 0 < len(partial) < len(full)
    assert all(s["timestamp"] <= noon.isoformat() for s in partial)
    assert full[: len(partial)] == partial


# -- retries and failures -----------------------------------------------------------------


def test_a_passing_failure_is_retried_with_backoff_and_completion_is_recorded_once(
    service: Service, client: TestClient, team: Team
) -> None:
    failures = {"sleep": {"code": "provider_unavailable", "times": 2}}
    with freeze_time(T0):
        user = create_user(client, team, "p3")["user_id"]
        connect(client, team, user, "oura", demo_failures=failures)
        service.jobs.run_due_pulls()
        sleep = pulls_of(client, team, user, "oura")["pulled"]["sleep"]
        assert (sleep["status"], sleep["error_details"]) == ("retrying", "provider_unavailable")
        # The older chunks were stored before the most recent one failed.
        assert service.health_data.read(
            UUID(user), "oura", "sleep", T0.date() - timedelta(days=30), T0.date()
        )
    # Not before the first delay.
    with freeze_time(T0 + timedelta(seconds=DELAYS[0] - 1)):
        service.jobs.run_due_pulls()
        assert feed(service, user, "oura", "sleep").attempts == 1
    with freeze_time(T0 + timedelta(seconds=DELAYS[0])):
        service.jobs.run_due_pulls()
        assert feed(service, user, "oura", "sleep").status == "retrying"
    with freeze_time(T0 + timedelta(seconds=DELAYS[0] + DELAYS[1])):
        service.jobs.run_due_pulls()
        sleep = pulls_of(client, team, user, "oura")["pulled"]["sleep"]
    assert (sleep["status"], sleep["error_details"]) == ("success", None)
    kinds = [type(e).__name__ for e in feed_events(service, user, "oura", "sleep")]
    assert kinds == [
        "Created", "PullScheduled",
        "PullStarted", "PullRetrying",
        "PullStarted", "PullRetrying",
        "PullStarted", "PullSucceeded",
    ]  # fmt: skip
    # The other resources were never affected.
    assert pulls_of(client, team, user, "oura")["pulled"]["hrv"]["status"] == "success"


def test_a_failure_on_every_try_ends_in_retry_quota_exhausted(
    service: Service, client: TestClient, team: Team
) -> None:
    failures = {"glucose": {"code": "provider_rate_limit_exceeded", "times": None}}
    moment = T0
    with freeze_time(moment):
        user = create_user(client, team, "p4")["user_id"]
        connect(client, team, user, "freestyle_libre", demo_failures=failures)
        service.jobs.run_due_pulls()
    for delay in DELAYS:
        moment += timedelta(seconds=delay)
        with freeze_time(moment):
            service.jobs.run_due_pulls()
    with freeze_time(moment):
        glucose = pulls_of(client, team, user, "freestyle_libre")["pulled"]["glucose"]
    assert (glucose["status"], glucose["error_details"]) == ("failure", "retry_quota_exhausted")
    assert feed(service, user, "freestyle_libre", "glucose").attempts == len(DELAYS) + 1
    with freeze_time(moment + timedelta(days=1)):
        assert service.jobs.run_due_pulls() == 0  # failure is final


@pytest.mark.parametrize("code", ["non_retriable_error", "unexpected_error"])
def test_a_final_code_fails_the_pull_at_once(
    service: Service, client: TestClient, team: Team, code: str
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, f"p5-{code}")["user_id"]
        connect(client, team, user, "oura", demo_failures={"hrv": {"code": code, "times": 1}})
        service.jobs.run_due_pulls()
        hrv = pulls_of(client, team, user, "oura")["pulled"]["hrv"]
    assert (hrv["status"], hrv["error_details"]) == ("failure", code)
    assert hrv["timeline"]["ended_at"] is not None


def test_connections_made_before_2025_05_09_never_enter_retrying(
    service: Service, client: TestClient, team: Team
) -> None:
    before = datetime(2025, 5, 8, 23, 59, tzinfo=UTC)
    with freeze_time(before):
        user = create_user(client, team, "p6")["user_id"]
        connect(
            client,
            team,
            user,
            "oura",
            demo_failures={"sleep": {"code": "transport_failure", "times": 1}},
        )
        service.jobs.run_due_pulls()
        sleep = pulls_of(client, team, user, "oura")["pulled"]["sleep"]
    assert (sleep["status"], sleep["error_details"]) == ("failure", "transport_failure")
    assert sleep["release"] == "legacy"
    kinds = [type(e).__name__ for e in feed_events(service, user, "oura", "sleep")]
    assert "PullRetrying" not in kinds


# -- the connection's error and paused states --------------------------------------------


def test_a_broken_grant_puts_the_connection_in_error_until_it_is_connected_again(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p7")["user_id"]
        connect(
            client,
            team,
            user,
            "fitbit",
            demo_failures={"activity": {"code": "token_refresh_failed", "times": None}},
        )
        service.jobs.run_due_pulls()
        item = provider_status(client, team, user)
        assert item["status"] == "error"
        details = item["error_details"]
        assert details["error_type"] == "token_refresh_failed"
        assert datetime.fromisoformat(details["errored_at"]) == T0
        activity = pulls_of(client, team, user, "fitbit")["pulled"]["activity"]
        assert (activity["status"], activity["error_details"]) == (
            "failure",
            "non_retriable_error",
        )
        # The connection is listed, and a second connect repairs it with fresh pulls.
        connect(client, team, user, "fitbit")
        assert provider_status(client, team, user)["status"] == "connected"
        assert provider_status(client, team, user)["error_details"] is None
        assert pulls_of(client, team, user, "fitbit")["pulled"]["activity"]["status"] == (
            "scheduled"
        )
        service.jobs.run_due_pulls()
        assert pulls_of(client, team, user, "fitbit")["pulled"]["activity"]["status"] == ("success")
    assert feed(service, user, "fitbit", "activity").pull_number == 2


def test_a_connection_pauses_when_ingestion_ends_and_resumes_when_it_is_moved_on(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p8", ingestion_end="2026-03-12")["user_id"]
        connect(client, team, user, "freestyle_libre")
        service.jobs.run_due_pulls()
    with freeze_time(T0 + timedelta(days=3)):
        service.jobs.sync_connected_feeds()
        assert provider_status(client, team, user)["status"] == "paused"
        events = feed_events(service, user, "freestyle_libre", "glucose")
        # Synced up to the end of ingestion only.
        synced = [e for e in events if isinstance(e, ResourceFeed.DailySynced)]
        assert all(d <= date(2026, 3, 12) for e in synced for d in e.created_days)
        patched = client.patch(
            f"/v2/user/{user}", json={"ingestion_end": None}, headers=team.headers
        )
        assert patched.status_code in (200, 204), patched.text
        service.jobs.sync_connected_feeds()
        assert provider_status(client, team, user)["status"] == "connected"


def test_pulls_of_a_deregistered_connection_fail_and_store_nothing(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p9")["user_id"]
        connect(client, team, user, "freestyle_libre")
        assert client.delete(f"/v2/user/{user}/freestyle_libre", headers=team.headers).json() == {
            "success": True
        }
        service.jobs.run_due_pulls()
    glucose = feed(service, user, "freestyle_libre", "glucose")
    assert (glucose.status, glucose.error_code) == ("failure", "non_retriable_error")
    assert service.health_data.count(UUID(user)) == 0


# -- workers: takeover and races ------------------------------------------------------------


def test_a_pull_whose_worker_died_is_taken_over_after_its_lease(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p10")["user_id"]
        connect(client, team, user, "freestyle_libre")
        glucose = feed(service, user, "freestyle_libre", "glucose")
        glucose.start_attempt(CommandContext.system("test:dead-worker"), T0)
        service.ledger.save(glucose)  # ... and the worker dies here
        assert service.jobs.run_due_pulls() == 0
    lease = service.settings.pull_lease
    with freeze_time(T0 + lease - timedelta(seconds=1)):
        assert service.jobs.run_due_pulls() == 0
    with freeze_time(T0 + lease):
        assert service.jobs.run_due_pulls() == 1
    kinds = [type(e).__name__ for e in feed_events(service, user, "freestyle_libre", "glucose")]
    assert kinds == ["Created", "PullScheduled", "PullStarted", "PullStarted", "PullSucceeded"]


def test_two_workers_on_one_pull_record_one_attempt_and_one_success(
    service: Service, client: TestClient, team: Team
) -> None:
    user = create_user(client, team, "p11")["user_id"]
    connect(client, team, user, "freestyle_libre")
    feed_id = feed(service, user, "freestyle_libre", "glucose").id
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def work() -> None:
        barrier.wait()
        results.append(service.pulls.run(feed_id))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kinds = [type(e).__name__ for e in feed_events(service, user, "freestyle_libre", "glucose")]
    assert kinds.count("PullStarted") == 1
    assert kinds.count("PullSucceeded") == 1
    assert "success" in results


# -- the daily sync ---------------------------------------------------------------------------


def test_the_daily_sync_records_new_days_as_created_and_grown_days_as_updated(
    service: Service, client: TestClient, team: Team
) -> None:
    with freeze_time(T0):
        user = create_user(client, team, "p12")["user_id"]
        connect(client, team, user, "freestyle_libre")
        service.jobs.run_due_pulls()
        assert service.jobs.sync_connected_feeds() == 0  # not due yet
    with freeze_time(T0 + timedelta(days=1)):
        assert service.jobs.sync_connected_feeds() == 1
        assert service.jobs.sync_connected_feeds() == 0  # synced: due again in a day
    synced = feed_events(service, user, "freestyle_libre", "glucose")[-1]
    assert isinstance(synced, ResourceFeed.DailySynced)
    # T0's afternoon arrived after the pull (updated), and the next day is new (created).
    assert synced.updated_days == [T0.date()]
    assert synced.created_days == [T0.date() + timedelta(days=1)]
    resources = client.get(
        "/v2/introspect/resources", params={"user_id": user}, headers=team.headers
    ).json()["data"][0]["provider"]["freestyle_libre"]
    glucose = resources["glucose"]
    assert glucose["status"] == "active"
    assert glucose["pull_status"] == "success"
    assert glucose["newest_data"] == (T0.date() + timedelta(days=1)).isoformat()
    assert glucose["oldest_data"] == (T0.date() - timedelta(days=30)).isoformat()
    assert glucose["last_attempt"]["status"] == "success"
    assert datetime.fromisoformat(glucose["last_attempt"]["timestamp"]) == T0 + timedelta(days=1)


# -- erasure ---------------------------------------------------------------------------------


def test_erasure_removes_the_pulled_data_and_the_feeds_but_not_their_history(
    service: Service, client: TestClient, team: Team
) -> None:
    ctx = CommandContext.system("test:erase")
    with freeze_time(T0):
        user = create_user(client, team, "p13")["user_id"]
        connect(client, team, user, "oura")
        service.jobs.run_due_pulls()
        assert service.health_data.count(UUID(user)) > 0
        # Its id, while the user's key can derive it (after the erasure nobody can).
        feed_id = feed(service, user, "oura", "sleep").id
        assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    with freeze_time(T0 + timedelta(days=7)):
        assert service.users.erase_user(ctx, UUID(user))
    assert service.health_data.count(UUID(user)) == 0
    events = list(service.ledger.events.get(feed_id))
    assert isinstance(events[-1], ResourceFeed.PullSucceeded)
    with pytest.raises(Exception) as raised:
        service.health_data.store(UUID(user), "oura", {"sleep": {T0.date(): {"x": 1}}})
    assert type(raised.value).__name__ == "UserDataGone"
    assert service.health_data.count(UUID(user)) == 0


# -- introspection paging and bad input -------------------------------------------------------


def test_introspection_pages_by_user_with_cursors_bound_to_the_filters(
    service: Service, client: TestClient, team: Team
) -> None:
    users = []
    for n in range(3):
        users.append(create_user(client, team, f"page-{n}")["user_id"])
        connect(client, team, users[-1], "freestyle_libre")
    url = "/v2/introspect/historical_pull"
    first = client.get(url, params={"user_limit": 2}, headers=team.headers).json()
    assert len(first["data"]) == 2 and first["next_cursor"]
    second = client.get(
        url, params={"user_limit": 2, "next_cursor": first["next_cursor"]}, headers=team.headers
    ).json()
    assert second["next_cursor"] is None
    seen = [item["user_id"] for item in first["data"] + second["data"]]
    assert sorted(seen) == sorted(users)
    # The same cursor is refused by another listing, other filters, or once altered.
    cursor = first["next_cursor"]
    for params, path in (
        ({"user_limit": 3, "next_cursor": cursor}, url),
        ({"user_limit": 2, "provider": "oura", "next_cursor": cursor}, url),
        ({"user_limit": 2, "next_cursor": cursor}, "/v2/introspect/resources"),
        ({"user_limit": 2, "next_cursor": cursor[:-1] + ("A" if cursor[-1] != "A" else "B")}, url),
        ({"user_limit": 2, "next_cursor": "not-a-cursor"}, url),
    ):
        answer = client.get(path, params=params, headers=team.headers)
        assert answer.status_code == 400, (params, path)
        assert answer.json()["detail"]["error_type"] == "INVALID_CURSOR"
    # A user's providers come in slug order, whatever order they were connected in.
    both = create_user(client, team, "both")["user_id"]
    connect(client, team, both, "oura")
    connect(client, team, both, "freestyle_libre")
    (item,) = client.get(url, params={"user_id": both}, headers=team.headers).json()["data"]
    assert list(item["provider"]) == ["freestyle_libre", "oura"]


def test_introspection_refuses_bad_filters_and_hides_other_teams(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    user = create_user(client, team, "intro-bad")["user_id"]
    connect(client, team, user, "freestyle_libre")
    for path in ("/v2/introspect/historical_pull", "/v2/introspect/resources"):
        unknown = client.get(path, params={"provider": "nokia"}, headers=team.headers)
        assert unknown.status_code == 422
        assert unknown.json()["detail"][0]["loc"] == ["query", "provider"]
        for limit in (0, 101, "x"):
            bad = client.get(path, params={"user_limit": limit}, headers=team.headers)
            assert bad.status_code == 422
        assert client.get(path, params={"user_id": "nope"}, headers=team.headers).status_code == (
            422
        )
        foreign = client.get(path, params={"user_id": user}, headers=other_team.headers)
        assert foreign.status_code == 404
        assert client.get(path, headers=other_team.headers).json() == {
            "data": [],
            "next_cursor": None,
        }
        assert client.get(path).status_code == 401


@pytest.mark.parametrize(
    "failures",
    [
        {"blood_pressure": {"code": "provider_unavailable"}},  # not an oura resource
        {"sleep": {"code": "retry_quota_exhausted"}},  # an outcome, not a cause
        {"sleep": {"code": "no_such_code"}},
        {"sleep": {"code": "provider_unavailable", "times": 0}},
        {"sleep": {"code": "provider_unavailable", "extra": 1}},
        {"sleep": "provider_unavailable"},
    ],
)
def test_bad_demo_failures_are_refused_and_connect_nothing(
    service: Service, client: TestClient, team: Team, failures: dict[str, Any]
) -> None:
    user = create_user(client, team, "bad-failures")["user_id"]
    answer = client.post(
        "/v2/link/connect/demo",
        json={"user_id": user, "provider": "oura", "demo_failures": failures},
        headers=team.headers,
    )
    assert answer.status_code == 422, answer.text
    assert client.get(f"/v2/user/providers/{user}", headers=team.headers).json() == {
        "providers": []
    }
    assert service.pull_queries.pending_count() == 0
