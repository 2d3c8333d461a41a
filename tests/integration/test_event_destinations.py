"""Event destinations over the management API (issue 35): create, list, get (and as of an
instant), update, rotate the secret, pause, resume, delete; the secret is write-only and
sealed with the team's key; bad input is a clear JSON error that records nothing; another
team's destination is a 404. The routing rule (longest prefix wins) is in
tests/unit/test_event_destination_routes.py; publishing to real brokers in
tests/e2e/test_event_destinations.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from httpx import Response

from tests.clocks import Clock
from tests.recorded import logged_events

NOT_FOUND = {"detail": "Event destination not found."}
SECRET = "s3cret-broker-password-7f1e"
RABBIT = {
    "kind": "rabbitmq",
    "connection": {"host": "127.0.0.1", "port": 5999, "username": "hl", "exchange": "events"},
    "secret": SECRET,
    "routes": [
        {"prefix": "daily.data.", "target": "health.daily"},
        {"prefix": "daily.data.sleep", "target": "health.sleep"},
        {"prefix": "user.", "target": "health.users"},
    ],
}
VIEW_FIELDS = {
    "id",
    "team_id",
    "environment",
    "kind",
    "description",
    "connection",
    "has_secret",
    "routes",
    "paused",
    "paused_reason",
    "created_on",
    "updated_at",
}


@dataclass
class Org:
    service: Service
    api: TestClient
    org_id: UUID
    team_id: UUID
    key: str
    clock: Clock

    def call(self, method: str, path: str = "", env: str = "sandbox", **kw: Any) -> Response:
        team_id = kw.pop("team_id", None) or self.team_id
        base = f"/v1/org/{self.org_id}/team/{team_id}/{env}/event_destination"
        headers = {"X-Management-Key": self.key}
        return self.api.request(method, base + path, headers=headers, **kw)

    def create(self, **body: Any) -> dict[str, Any]:
        response = self.call("POST", json={**RABBIT, **body})
        assert response.status_code == 200, response.text
        return response.json()

    def log_bytes(self) -> bytes:
        return b"".join(n.state for n in self.service.recorder.select_notifications(1, 100_000))


@pytest.fixture
def org(settings: Settings) -> Iterator[Org]:
    clock = Clock(datetime(2026, 6, 1, 12, 0, tzinfo=UTC))
    service = build_service(settings, clock=clock)
    boot = service.bootstrap()
    assert boot is not None
    with TestClient(create_management_api(service), raise_server_exceptions=False) as api:
        yield Org(service, api, boot.org_id, boot.team_id, boot.management_key.plain, clock)
    service.close()


def test_a_destination_is_created_listed_read_updated_paused_and_deleted(org: Org) -> None:
    created = org.create(description="Warehouse")
    assert set(created) == VIEW_FIELDS
    assert created["kind"] == "rabbitmq"
    assert created["has_secret"] is True
    assert created["connection"]["exchange"] == "events"
    assert SECRET not in str(created)
    assert (created["paused"], created["paused_reason"]) == (False, None)
    destination_id = created["id"]
    assert org.call("GET").json() == {"event_destinations": [created]}
    assert org.call("GET", f"/{destination_id}").json() == created

    org.clock.advance(timedelta(minutes=1))
    patched = org.call(
        "PATCH",
        f"/{destination_id}",
        json={"routes": [{"prefix": "labtest.", "target": "labs"}], "description": ""},
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["routes"] == [{"prefix": "labtest.", "target": "labs"}]
    assert patched.json()["created_on"] == created["created_on"]

    paused = org.call("POST", f"/{destination_id}/pause").json()
    assert (paused["paused"], paused["paused_reason"]) == (True, "management_request")
    resumed = org.call("POST", f"/{destination_id}/resume").json()
    assert (resumed["paused"], resumed["paused_reason"]) == (False, None)

    assert org.call("DELETE", f"/{destination_id}").json() == {"success": True}
    assert org.call("GET").json() == {"event_destinations": []}
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/pause")):
        response = org.call(method, f"/{destination_id}{path}", json={"description": "x"})
        assert (response.status_code, response.json()) == (404, NOT_FOUND), (method, path)
    names = [type(e).__qualname__ for e in logged_events(org.service.ledger, UUID(destination_id))]
    assert names == [
        "EventDestination.Created",
        "EventDestination.Updated",
        "EventDestination.Paused",
        "EventDestination.Resumed",
        "EventDestination.Deleted",
    ]


def test_the_secret_is_write_only_sealed_and_rotated(org: Org) -> None:
    created = org.create()
    destination_id = created["id"]
    # Never in clear at rest (the log), never answered.
    assert SECRET.encode() not in org.log_bytes()
    target = org.service.event_destinations.target(UUID(destination_id))
    assert target is not None and target.secret == SECRET
    rotated = org.call("PATCH", f"/{destination_id}", json={"secret": "another-one-2"})
    assert rotated.status_code == 200 and "another-one-2" not in rotated.text
    target = org.service.event_destinations.target(UUID(destination_id))
    assert target is not None and target.secret == "another-one-2"
    assert target.version > 1  # the publisher connects again with it
    removed = org.call("PATCH", f"/{destination_id}", json={"secret": None}).json()
    assert removed["has_secret"] is False
    target = org.service.event_destinations.target(UUID(destination_id))
    assert target is not None and target.secret is None


def test_bad_input_is_a_clear_error_that_records_nothing(org: Org) -> None:
    before = org.service.recorder.max_notification_id()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"kind": "kafka"}, "kind"),
        ({"routes": []}, "routes"),
        ({"routes": [{"prefix": "nope.", "target": "x"}]}, "routes"),
        ({"routes": [{"prefix": "user.", "target": "a b"}]}, "routes"),
        (
            {"routes": [{"prefix": "user.", "target": "a"}, {"prefix": "user.", "target": "b"}]},
            "routes",
        ),
        ({"connection": {"host": "127.0.0.1"}}, "connection"),  # no exchange
        ({"connection": {"host": "127.0.0.1", "exchange": "e", "stream": "s"}}, "connection"),
        ({"connection": {"host": "bad host", "exchange": "e"}}, "connection"),
        ({"connection": {"host": "10.1.2.3", "exchange": "e"}}, "connection"),
        ({"connection": {"host": "127.0.0.1", "port": 70000, "exchange": "e"}}, "connection"),
        ({"secret": ""}, "secret"),
        ({"kind": "nats", "connection": {"host": "127.0.0.1", "exchange": "e"}}, "connection"),
        (
            {
                "kind": "nats",
                "connection": {"host": "127.0.0.1"},
                "routes": [{"prefix": "user.", "target": "a.*"}],
            },
            "routes",
        ),
        ({"unknown": 1}, "unknown"),
    ]
    for body, field in cases:
        response = org.call("POST", json={**RABBIT, **body})
        assert response.status_code == 422, (body, response.text)
        detail = response.json()["detail"]
        assert field in str(detail), (body, detail)
        assert SECRET not in response.text
    assert org.service.recorder.max_notification_id() == before
    destination_id = org.create()["id"]
    empty = org.call("PATCH", f"/{destination_id}", json={})
    assert empty.status_code == 400
    for path in ("/not-a-uuid", "/00000000-0000-0000-0000-000000000000"):
        assert org.call("GET", path).status_code in (404, 422)
    assert org.call("POST", env="staging", json=RABBIT).status_code in (404, 422)


def test_another_teams_destination_is_a_404(org: Org) -> None:
    destination_id = org.create()["id"]
    other = org.service.teams.create_team(
        CommandContext.system("test:setup"), org.org_id, name="Other", region="us"
    )
    assert isinstance(other, UUID)
    for method, path, body in (
        ("GET", "", None),
        ("PATCH", "", {"description": "x"}),
        ("DELETE", "", None),
        ("POST", "/test", {}),
        ("POST", "/pause", None),
    ):
        response = org.call(method, f"/{destination_id}{path}", team_id=other, json=body)
        assert (response.status_code, response.json()) == (404, NOT_FOUND), (method, path)
    production = org.call("GET", f"/{destination_id}", env="production")
    assert (production.status_code, production.json()) == (404, NOT_FOUND)


def test_reads_as_of_an_instant_answer_the_destinations_as_they_were(org: Org) -> None:
    org.clock.advance(timedelta(hours=1))  # the team exists before the destination
    created = org.create()
    destination_id = created["id"]
    first = org.clock()
    org.clock.advance(timedelta(hours=1))
    org.call("PATCH", f"/{destination_id}", json={"description": "later"})
    org.clock.advance(timedelta(hours=1))
    org.call("DELETE", f"/{destination_id}")
    as_of = {"as_of": (first + timedelta(minutes=1)).isoformat()}
    assert org.call("GET", params=as_of).json() == {"event_destinations": [created]}
    assert org.call("GET", f"/{destination_id}", params=as_of).json() == created
    before = {"as_of": (first - timedelta(minutes=1)).isoformat()}
    assert org.call("GET", f"/{destination_id}", params=before).status_code == 404
    assert org.call("GET", params=before).json() == {"event_destinations": []}
