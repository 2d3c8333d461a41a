"""Webhook endpoints over the management API (gaps.md Webhooks and Management API): create,
list, get, update, delete, read and rotate the signing secret; bad input is a clear JSON
error that changes nothing. Who may call what is in test_management_permissions.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.persistence.engine.schema import webhook_endpoints
from healthledger.adapters.settings import Settings
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.webhooks.endpoints import ENDPOINT_GONE, WebhookEndpoint
from httpx import Response
from sqlalchemy import select

from tests.recorded import logged_events

VIEW_FIELDS = {
    "id",
    "team_id",
    "environment",
    "url",
    "description",
    "filter_types",
    "disabled",
    "disabled_reason",
    "created_on",
    "updated_at",
}
NOT_FOUND = {"detail": "Webhook endpoint not found."}
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class Org:
    service: Service
    api: TestClient
    org_id: UUID
    team_id: UUID
    key: str

    def base(self, env: str = "sandbox", team_id: UUID | None = None) -> str:
        return f"/v1/org/{self.org_id}/team/{team_id or self.team_id}/{env}/webhook"

    def call(self, method: str, path: str = "", env: str = "sandbox", **kw: Any) -> Response:
        team_id = kw.pop("team_id", None)
        headers = {"X-Management-Key": self.key, **kw.pop("headers", {})}
        return self.api.request(method, self.base(env, team_id) + path, headers=headers, **kw)

    def create(self, env: str = "sandbox", **body: Any) -> dict[str, Any]:
        response = self.call("POST", env=env, json={"url": "https://receiver.example/h", **body})
        assert response.status_code == 200, response.text
        return response.json()

    def secret(self, endpoint_id: str, env: str = "sandbox") -> dict[str, Any]:
        response = self.call("GET", f"/{endpoint_id}/secret", env=env)
        assert response.status_code == 200, response.text
        return response.json()

    def log_position(self) -> int | None:
        return self.service.recorder.max_notification_id()

    def event_log(self) -> bytes:
        return b"".join(n.state for n in self.service.recorder.select_notifications(1, 100_000))

    def events(self, aggregate_id: Any) -> list[tuple[str, str]]:
        return [
            (type(e).__qualname__, e.actor)
            for e in logged_events(self.service.ledger, UUID(str(aggregate_id)))
        ]


def _org(service: Service) -> Iterator[Org]:
    boot = service.bootstrap()
    assert boot is not None
    with TestClient(create_management_api(service), raise_server_exceptions=False) as api:
        yield Org(service, api, boot.org_id, boot.team_id, boot.management_key.plain)


@pytest.fixture
def org(service: Service) -> Iterator[Org]:
    yield from _org(service)


# -- create, list, get, update, delete ------------------------------------------------------


def test_an_endpoint_is_created_listed_read_updated_and_deleted(org: Org) -> None:
    created = org.create(description="Production receiver", filter_types=["daily.data.*"])
    assert set(created) == VIEW_FIELDS
    assert created["url"] == "https://receiver.example/h"
    assert created["environment"] == "sandbox"
    assert created["team_id"] == str(org.team_id)
    assert created["filter_types"] == ["daily.data.*"]
    assert (created["disabled"], created["disabled_reason"]) == (False, None)
    endpoint_id = created["id"]

    listed = org.call("GET").json()
    assert listed == {"webhook_endpoints": [created]}
    assert org.call("GET", f"/{endpoint_id}").json() == created

    patched = org.call(
        "PATCH",
        f"/{endpoint_id}",
        json={
            "url": "http://receiver.example:9000/new",
            "description": "",
            "filter_types": ["provider.connection.created", "daily.data.sleep.created"],
        },
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["url"] == "http://receiver.example:9000/new"
    assert body["description"] == ""
    assert body["filter_types"] == ["daily.data.sleep.created", "provider.connection.created"]
    assert body["created_on"] == created["created_on"]

    deleted = org.call("DELETE", f"/{endpoint_id}")
    assert (deleted.status_code, deleted.json()) == (200, {"success": True})
    assert org.call("GET", f"/{endpoint_id}").json() == NOT_FOUND
    assert org.call("GET").json() == {"webhook_endpoints": []}
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/secret")):
        response = org.call(method, f"/{endpoint_id}{path}", json={"description": "x"})
        assert (response.status_code, response.json()) == (404, NOT_FOUND), (method, path)
    rotate = org.call("POST", f"/{endpoint_id}/secret/rotate")
    assert (rotate.status_code, rotate.json()) == (404, NOT_FOUND)

    actor = f"management_key:{org.service.team_queries.management_keys(org.org_id)[0]['id']}"
    assert org.events(endpoint_id) == [
        ("WebhookEndpoint.Created", actor),
        ("WebhookEndpoint.Updated", actor),
        ("WebhookEndpoint.Deleted", actor),
    ]


def test_events_carry_the_request_id_and_the_changed_fields_only(org: Org) -> None:
    endpoint = org.create(description="one")
    response = org.call(
        "PATCH",
        f"/{endpoint['id']}",
        json={"description": "two", "url": endpoint["url"]},
        headers={"x-request-id": "req-webhook-patch"},
    )
    assert response.status_code == 200
    *_, updated = org.service.ledger.events.get(UUID(endpoint["id"]))
    assert isinstance(updated, WebhookEndpoint.Updated)
    assert updated.request_id == "req-webhook-patch"
    assert updated.changes == {"description": "two"}
    # The same patch again changes nothing and records nothing.
    before = org.log_position()
    again = org.call("PATCH", f"/{endpoint['id']}", json={"description": "two"})
    assert again.status_code == 200 and org.log_position() == before


def test_environments_are_separate(org: Org) -> None:
    sandbox = org.create("sandbox")
    production = org.create("production", url="https://prod.receiver.example/h")
    assert [e["id"] for e in org.call("GET", env="sandbox").json()["webhook_endpoints"]] == [
        sandbox["id"]
    ]
    assert [e["id"] for e in org.call("GET", env="production").json()["webhook_endpoints"]] == [
        production["id"]
    ]
    # An endpoint is not found under the other environment.
    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/secret")):
        response = org.call(method, f"/{sandbox['id']}{path}", env="production")
        assert (response.status_code, response.json()) == (404, NOT_FOUND)
    unknown_env = org.call("GET", env="staging")
    assert unknown_env.status_code == 422
    assert unknown_env.json()["detail"][0]["loc"] == ["path", "env"]


def test_another_teams_endpoint_is_not_found_under_this_team(org: Org) -> None:
    ctx = CommandContext.system("test:setup")
    other_team = org.service.teams.create_team(ctx, org.org_id, "Other", "us")
    response = org.call("POST", team_id=other_team, json={"url": "https://other.example/h"})
    assert response.status_code == 200
    theirs = response.json()
    before = org.log_position()
    for method, path in (
        ("GET", ""),
        ("PATCH", ""),
        ("DELETE", ""),
        ("GET", "/secret"),
        ("POST", "/secret/rotate"),
    ):
        kwargs: dict[str, Any] = {"json": {"description": "hijacked"}} if method == "PATCH" else {}
        response = org.call(method, f"/{theirs['id']}{path}", **kwargs)
        assert (response.status_code, response.json()) == (404, NOT_FOUND), (method, path)
    assert org.log_position() == before
    assert org.call("GET").json() == {"webhook_endpoints": []}


def test_disable_and_enable_record_a_reason(org: Org) -> None:
    endpoint = org.create(disabled=True)
    assert (endpoint["disabled"], endpoint["disabled_reason"]) == (True, "management_request")
    enabled = org.call("PATCH", f"/{endpoint['id']}", json={"disabled": False}).json()
    assert (enabled["disabled"], enabled["disabled_reason"]) == (False, None)

    # The dispatcher disables an endpoint that answers 410 as the system actor.
    ctx = CommandContext.system(SCHEDULER)
    org.service.webhooks.disable(ctx, UUID(endpoint["id"]), ENDPOINT_GONE)
    shown = org.call("GET", f"/{endpoint['id']}").json()
    assert (shown["disabled"], shown["disabled_reason"]) == (True, ENDPOINT_GONE)
    *_, disabled = org.service.ledger.events.get(UUID(endpoint["id"]))
    assert isinstance(disabled, WebhookEndpoint.Disabled)
    assert (disabled.actor, disabled.reason) == (SCHEDULER, ENDPOINT_GONE)
    # Disabling a disabled endpoint records nothing.
    before = org.log_position()
    org.service.webhooks.disable(ctx, UUID(endpoint["id"]), ENDPOINT_GONE)
    assert org.log_position() == before
    assert org.service.webhooks.disable(ctx, uuid4(), ENDPOINT_GONE) is None


def test_filters_pick_the_endpoints_an_event_goes_to(org: Org) -> None:
    everything = org.create()
    daily = org.create(filter_types=["daily.data.*"])
    sleep = org.create(filter_types=["daily.data.sleep.created", "historical.*"])
    org.create(filter_types=["provider.*"], disabled=True)
    org.create("production")

    def receivers(event_type: str) -> set[str]:
        found = org.service.webhook_queries.subscribed_endpoints(org.team_id, "sandbox", event_type)
        return {str(e) for e in found}

    assert receivers("daily.data.sleep.created") == {everything["id"], daily["id"], sleep["id"]}
    assert receivers("daily.data.steps.updated") == {everything["id"], daily["id"]}
    assert receivers("historical.data.sleep_cycle.created") == {everything["id"], sleep["id"]}
    # Disabled endpoints receive nothing.
    assert receivers("provider.connection.created") == {everything["id"]}
    # Resetting the filters (null) subscribes to every type again.
    reset = org.call("PATCH", f"/{daily['id']}", json={"filter_types": None}).json()
    assert reset["filter_types"] == []
    assert daily["id"] in receivers("provider.connection.error")


def test_filter_entries_are_exact_types_or_prefixes_and_are_deduplicated(org: Org) -> None:
    endpoint = org.create(
        filter_types=[
            "daily.data.sleep_cycle.created",
            "historical.timeseries.hypnogram.created",
            "daily.*",
            "daily.*",
            "provider.connection.error",
        ]
    )
    assert endpoint["filter_types"] == [
        "daily.*",
        "daily.data.sleep_cycle.created",
        "historical.timeseries.hypnogram.created",
        "provider.connection.error",
    ]


# -- bad input: a clear JSON error, nothing changed -------------------------------------------


# (url, message): refused on create and on update alike.
BAD_URLS: list[tuple[str, str]] = [
    ("ftp://receiver.example/h", "url must be an absolute http or https URL with a host."),
    ("receiver.example/h", "url must be an absolute http or https URL with a host."),
    ("https://", "url must be an absolute http or https URL with a host."),
    ("https://receiver.example:99999/h", "url must be an absolute http or https URL"),
    ("javascript:alert(1)", "url must be an absolute http or https URL with a host."),
    ("https://receiver.example/a b", "url must not contain spaces or control characters."),
    ("http://127.0.0.1:8000/hook", "url points at this service itself"),
    ("http://localhost:8001/hook", "url points at this service itself"),
    ("http://[::1]:8002/", "url points at this service itself"),
    ("https://api.ledger.example/hook", "url points at this service itself"),
    ("http://LINK.ledger.example:8443/x", "url points at this service itself"),
    # Other spellings of this host (issue 30): the tests allow loopback, not these ports.
    ("http://127.1:8000/hook", "url points at this service itself"),
    ("http://[::ffff:127.0.0.1]:8001/hook", "url points at this service itself"),
    ("http://0x7f000001:8002/hook", "url points at this service itself"),
    # Ranges the tests do not allow: refused as by default.
    ("http://169.254.169.254/latest/meta-data/", "url points at a link-local address"),
    ("http://[::ffff:10.0.0.1]/hook", "url points at a private address"),
    ("https://192.168.1.20/hook", "url points at a private address"),
    ("http://[fd00::1]/hook", "url points at a private address"),
]


def test_bad_urls_are_refused_and_change_nothing(settings: Settings) -> None:
    own = settings.model_copy(
        update={
            "public_base_url": "https://api.ledger.example",
            "link_url": "http://link.ledger.example:8443",
        }
    )
    service = build_service(own)
    try:
        for org in _org(service):
            # Refusals change nothing: every url against the one endpoint, each checked
            # against the log position before the first.
            endpoint = org.create()
            before = org.log_position()
            for url, message in BAD_URLS:
                case = url
                created = org.call("POST", json={"url": url})
                patched = org.call("PATCH", f"/{endpoint['id']}", json={"url": url})
                for response in (created, patched):
                    assert response.status_code == 422, (case, response.text)
                    errors = response.json()["detail"]
                    assert len(errors) == 1, (case, errors)
                    (error,) = errors
                    assert error["loc"] == ["body", "url"], (case, error)
                    assert error["msg"].startswith(message), (case, error)
                    assert error["input"] == "[redacted]", (case, error)
                assert org.log_position() == before, case
                url_now = org.call("GET", f"/{endpoint['id']}").json()["url"]
                assert url_now == endpoint["url"], case
    finally:
        service.close()


def test_a_receiver_on_another_port_of_this_host_is_allowed(org: Org) -> None:
    endpoint = org.create(url="http://127.0.0.1:9911/receiver")
    assert endpoint["url"] == "http://127.0.0.1:9911/receiver"


# (filter_types, message): refused on create and on update alike.
UNKNOWN_FILTER_TYPES: list[tuple[list[str], str]] = [
    (["daily.data.sleep.creatd"], "'daily.data.sleep.creatd' is not a known event type."),
    (["daily.dat.*"], "'daily.dat.*' matches no known event type."),
    (["daily.data.hypnogram.created"], "is not a known event type."),
    (["daily.data."], "is neither an event type nor a prefix ending in '.*'"),
    (["*"], "is neither an event type nor a prefix"),
    (["Daily.Data.*"], "is neither an event type nor a prefix"),
    (["provider.connection.created", "nope"], "'nope' is not a known event type."),
]


def test_unknown_filter_types_are_refused_and_change_nothing(org: Org) -> None:
    # Refusals change nothing: every case against the one endpoint, each checked against
    # the log position before the first.
    endpoint = org.create(filter_types=["daily.data.*"])
    before = org.log_position()
    for filter_types, message in UNKNOWN_FILTER_TYPES:
        case = filter_types
        created = org.call(
            "POST", json={"url": "https://r.example/h", "filter_types": filter_types}
        )
        patched = org.call("PATCH", f"/{endpoint['id']}", json={"filter_types": filter_types})
        for response in (created, patched):
            assert response.status_code == 422, (case, response.text)
            errors = response.json()["detail"]
            assert len(errors) == 1, (case, errors)
            (error,) = errors
            assert error["loc"] == ["body", "filter_types"], (case, error)
            assert message in error["msg"], (case, error)
        assert org.log_position() == before, case
        kept = org.call("GET", f"/{endpoint['id']}").json()["filter_types"]
        assert kept == ["daily.data.*"], case


# (body, loc): each refused with the one error at loc.
MALFORMED_CREATE_BODIES: list[tuple[dict[str, Any], list[Any]]] = [
    ({"url": "https://r.example/h", "description": "x" * 501}, ["body", "description"]),
    ({"url": "https://r.example/" + "x" * 2048}, ["body", "url"]),
    ({"url": "https://r.example/h", "filter_types": "daily.data.*"}, ["body", "filter_types"]),
    ({"url": "https://r.example/h", "filter_types": [""]}, ["body", "filter_types", 0]),
    ({"url": "https://r.example/h", "secret": "whsec_mine"}, ["body", "secret"]),
    ({"description": "no url"}, ["body", "url"]),
    ({"url": "https://r.example/h", "disabled": "sometimes"}, ["body", "disabled"]),
]


def test_malformed_create_bodies_are_422_and_change_nothing(org: Org) -> None:
    # Refusals change nothing: every body against the one service, each checked against
    # the log position before the first.
    before = org.log_position()
    for body, loc in MALFORMED_CREATE_BODIES:
        case = body
        response = org.call("POST", json=body)
        assert response.status_code == 422, (case, response.text)
        assert [e["loc"] for e in response.json()["detail"]] == [loc], (case, response.text)
        assert org.log_position() == before, case
        assert org.call("GET").json() == {"webhook_endpoints": []}, case


def test_malformed_patches_are_refused_and_change_nothing(org: Org) -> None:
    endpoint = org.create(description="kept")
    before = org.log_position()
    empty = org.call("PATCH", f"/{endpoint['id']}", json={})
    assert (empty.status_code, empty.json()) == (
        400,
        {"detail": "The patch is empty: send at least one field to change."},
    )
    null_url = org.call("PATCH", f"/{endpoint['id']}", json={"url": None})
    assert null_url.status_code == 422
    assert "url cannot be null" in null_url.json()["detail"][0]["msg"]
    # One bad field refuses the whole patch: the good one is not applied either.
    mixed = org.call(
        "PATCH",
        f"/{endpoint['id']}",
        json={"description": "changed", "filter_types": ["no.such.type"]},
    )
    assert mixed.status_code == 422
    assert org.log_position() == before
    assert org.call("GET", f"/{endpoint['id']}").json()["description"] == "kept"


def test_unknown_and_malformed_endpoint_ids(org: Org) -> None:
    unknown = org.call("GET", f"/{uuid4()}")
    assert (unknown.status_code, unknown.json()) == (404, NOT_FOUND)
    malformed = org.call("GET", "/not-a-uuid")
    assert malformed.status_code == 422
    assert malformed.json()["detail"][0]["loc"] == ["path", "endpoint_id"]
    # A team of the organization that is not there.
    missing_team = org.call("GET", team_id=uuid4())
    assert (missing_team.status_code, missing_team.json()) == (404, {"detail": "Team not found."})


# -- the signing secret ---------------------------------------------------------------------


def _secret_bytes(secret: str) -> bytes:
    assert secret.startswith("whsec_")
    return base64.b64decode(secret.removeprefix("whsec_"), validate=True)


def test_each_endpoint_has_its_own_secret_readable_by_the_management_api(org: Org) -> None:
    first, second = org.create(), org.create()
    secret = org.secret(first["id"])
    assert set(secret) == {"secret", "previous_secret_expires_at"}
    assert len(_secret_bytes(secret["secret"])) >= 24
    assert secret["previous_secret_expires_at"] is None
    assert org.secret(first["id"]) == secret  # reading changes nothing
    assert org.secret(second["id"])["secret"] != secret["secret"]
    # No view of an endpoint carries it.
    listed = org.call("GET").text + org.call("GET", f"/{first['id']}").text
    assert secret["secret"] not in listed and "secret" not in listed


def test_secrets_rest_only_sealed(org: Org) -> None:
    endpoint = org.create()
    first = org.secret(endpoint["id"])["secret"]
    second = org.call("POST", f"/{endpoint['id']}/secret/rotate").json()["secret"]
    with org.service.db.read() as conn:
        row = conn.execute(
            select(webhook_endpoints).where(webhook_endpoints.c.endpoint_id == UUID(endpoint["id"]))
        ).one()
    stored = f"{row.sealed_secret} {row.sealed_previous_secret}"
    log = org.event_log()
    for secret in (first, second):
        assert secret not in stored
        assert secret.encode() not in log
        assert secret.removeprefix("whsec_").encode() not in log
    assert row.sealed_secret.startswith("v1.") and row.sealed_previous_secret.startswith("v1.")


def test_rotation_keeps_the_previous_secret_in_force_for_24_hours(settings: Settings) -> None:
    with freeze_time(T0) as clock:
        service = build_service(settings)
        try:
            for org in _org(service):
                endpoint = org.create()
                endpoint_id = UUID(endpoint["id"])
                old = org.secret(endpoint["id"])["secret"]
                assert service.webhooks.signing_secrets(endpoint_id) == [old]

                clock.move_to(T0 + timedelta(hours=1))
                rotated = org.call("POST", f"/{endpoint['id']}/secret/rotate")
                assert rotated.status_code == 200
                new = rotated.json()["secret"]
                assert new != old and len(_secret_bytes(new)) >= 24
                expires = T0 + timedelta(hours=25)
                assert rotated.json()["previous_secret_expires_at"] == (
                    expires.isoformat().replace("+00:00", "Z")
                )
                assert org.secret(endpoint["id"]) == rotated.json()
                assert service.webhooks.signing_secrets(endpoint_id) == [new, old]

                clock.move_to(expires - timedelta(microseconds=1))
                assert service.webhooks.signing_secrets(endpoint_id) == [new, old]
                clock.move_to(expires)
                assert service.webhooks.signing_secrets(endpoint_id) == [new]
                assert org.secret(endpoint["id"]) == {
                    "secret": new,
                    "previous_secret_expires_at": None,
                }
                assert [e for e, _ in org.events(endpoint_id)] == [
                    "WebhookEndpoint.Created",
                    "WebhookEndpoint.SecretRotated",
                ]
        finally:
            service.close()


def test_a_second_rotation_drops_the_first_secret_at_once(org: Org) -> None:
    endpoint = org.create()
    endpoint_id = UUID(endpoint["id"])
    first = org.secret(endpoint["id"])["secret"]
    second = org.call("POST", f"/{endpoint['id']}/secret/rotate").json()["secret"]
    third = org.call("POST", f"/{endpoint['id']}/secret/rotate").json()["secret"]
    assert org.service.webhooks.signing_secrets(endpoint_id) == [third, second]
    assert first not in org.service.webhooks.signing_secrets(endpoint_id)


def test_a_deleted_endpoint_or_team_signs_nothing_any_more(org: Org) -> None:
    ctx = CommandContext.system("test:setup")
    team_id = org.service.teams.create_team(ctx, org.org_id, "Short-lived", "eu")
    response = org.call("POST", team_id=team_id, json={"url": "https://r.example/h"})
    endpoint_id = UUID(response.json()["id"])
    assert len(org.service.webhooks.signing_secrets(endpoint_id)) == 1
    org.service.teams.delete_team(ctx, org.org_id, team_id)
    # The team's data key went with it: its secrets cannot be opened, and its endpoints
    # are gone from every read.
    assert org.service.webhooks.signing_secrets(endpoint_id) == []
    assert org.service.webhook_queries.endpoint(endpoint_id) is None
    assert (
        org.service.webhook_queries.subscribed_endpoints(
            team_id, "sandbox", "daily.data.sleep.created"
        )
        == []
    )
    gone = org.call("GET", team_id=team_id)
    assert (gone.status_code, gone.json()) == (404, {"detail": "Team not found."})

    kept = org.create()
    org.call("DELETE", f"/{kept['id']}")
    assert org.service.webhooks.signing_secrets(UUID(kept["id"])) == []


def test_the_read_model_rebuilds_to_the_same_views(org: Org) -> None:
    endpoint = org.create(filter_types=["daily.*"], description="before")
    org.call("PATCH", f"/{endpoint['id']}", json={"description": "after", "disabled": True})
    org.call("POST", f"/{endpoint['id']}/secret/rotate")
    gone = org.create()
    org.call("DELETE", f"/{gone['id']}")
    views = org.call("GET").json()
    secret = org.secret(endpoint["id"])
    service = org.service
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    assert org.call("GET").json() == views
    assert org.secret(endpoint["id"]) == secret
    assert len(views["webhook_endpoints"]) == 1


# -- time travel ------------------------------------------------------------------------------


def test_as_of_lists_and_reads_the_endpoints_as_they_were(org: Org) -> None:
    """The list and each endpoint of both environments, recorded after each change (an
    update, a disable, a rotation, deletions), answered again by `as_of`: an endpoint
    deleted since is listed as it was (found in the log, not the read model); one not
    created yet or deleted by then is a 404. The secret does not travel (a 422)."""
    made: list[tuple[str, str]] = []
    recorded: list[tuple[datetime, dict[str, Any]]] = []

    def record() -> None:
        answers: dict[str, Any] = {}
        for env in ("sandbox", "production"):
            answers[env] = org.call("GET", env=env).json()
        for endpoint_id, env in made:
            response = org.call("GET", f"/{endpoint_id}", env=env)
            answers[endpoint_id] = (response.status_code, response.json())
        recorded.append((datetime.now(UTC), answers))

    start = datetime.now(UTC) + timedelta(days=1)  # after the team's creation
    with freeze_time(start) as frozen:
        record()
        changes = [
            lambda: made.append((org.create(description="first")["id"], "sandbox")),
            lambda: made.append((org.create("production")["id"], "production")),
            lambda: made.append((org.create(filter_types=["daily.data.*"])["id"], "sandbox")),
            lambda: org.call("PATCH", f"/{made[0][0]}", json={"description": "changed"}),
            lambda: org.call("PATCH", f"/{made[2][0]}", json={"disabled": True}),
            lambda: org.call("POST", f"/{made[0][0]}/secret/rotate"),
            lambda: org.call("DELETE", f"/{made[1][0]}", env="production"),
            lambda: org.call("DELETE", f"/{made[0][0]}"),
        ]
        for change in changes:
            frozen.tick(timedelta(minutes=10))
            change()
            record()
        frozen.tick(timedelta(minutes=10))
        assert org.call("GET").json()["webhook_endpoints"] == [recorded[-1][1][made[2][0]][1]]
        for instant, answers in recorded:
            at = {"as_of": instant.isoformat()}
            for env in ("sandbox", "production"):
                past = org.call("GET", env=env, params=at)
                assert past.status_code == 200 and past.json() == answers[env], (instant, env)
            for endpoint_id, env in made:
                past = org.call("GET", f"/{endpoint_id}", env=env, params=at)
                expected = answers.get(endpoint_id, (404, NOT_FOUND))
                assert (past.status_code, past.json()) == expected, (instant, endpoint_id)
        # Under the other environment's path: not found, as now.
        wrong = org.call("GET", f"/{made[2][0]}", env="production", params=at)
        assert (wrong.status_code, wrong.json()) == (404, NOT_FOUND)
        # The listing at an instant when two endpoints lived, one deleted since.
        assert [e["id"] for e in recorded[4][1]["sandbox"]["webhook_endpoints"]] == [
            made[0][0],
            made[2][0],
        ]
        secret = org.call("GET", f"/{made[2][0]}/secret", params=at)
        assert secret.status_code == 422
        assert "does not travel" in secret.json()["detail"][0]["msg"]
