"""The management API's permission matrix (spec 5; gaps.md Conventions and Management API).

Every management endpoint against every kind of caller. A refused cell must leave the event
log untouched, so the refused cells of an endpoint share one service and organization (one
test per endpoint, each refusal checked against the log as it was before it); each cell
that succeeds gets a fresh service and organization of its own, so a mutating cell never
sees another cell's writes, and must append to the log unless it only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.domain.context import CommandContext

# -- the callers --------------------------------------------------------------------------

CALLERS = (
    "org_key",  # org_admin key of the target team's organization
    "bound_key",  # team_admin key bound to the target team
    "other_team_key",  # team_admin key bound to another team of the same organization
    "revoked_key",  # an org_admin key of the organization, revoked
    "team_api_key",  # the target team's team API key, sent in X-Management-Key
    "no_key",  # no key header at all
    "foreign_org_key",  # org_admin key of another organization
)

# A key of the wrong kind: the management API issue asks for a 401 whose detail names the
# expected key kind (more specific than gaps.md's general 403 line, so it wins).
WRONG_KIND = 401

# -- the matrix ---------------------------------------------------------------------------
# Expected status per endpoint and caller. Columns in CALLERS order: org key, bound key,
# other team's key, revoked key, team API key, no key, foreign organization's key.
#   endpoint (under /v1/org/{org_id})                    org  bnd  oth  rev  api key     non  frn
MATRIX: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "GET    /":                                         (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "PATCH  /":                                         (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "GET    /team":                                     (200, 200, 200, 401, WRONG_KIND, 401, 404),
    "POST   /team":                                     (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "GET    /team/{t}":                                 (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "PATCH  /team/{t}":                                 (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "DELETE /team/{t}":                                 (200, 403, 404, 401, WRONG_KIND, 401, 404),
    "GET    /team/{t}/features":                        (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "PUT    /team/{t}/features/{f}":                    (200, 403, 404, 401, WRONG_KIND, 401, 404),
    "DELETE /team/{t}/features/{f}":                    (200, 403, 404, 401, WRONG_KIND, 401, 404),
    "GET    /management_key":                           (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "POST   /management_key":                           (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "PATCH  /management_key/{key}":                     (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "DELETE /management_key/{key}":                     (200, 403, 403, 401, WRONG_KIND, 401, 404),
    "GET    /team_api_keys/{env}/{region}":             (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "POST   /team_api_keys/{env}/{region}":             (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "DELETE /team_api_keys/{env}/{region}/{key}":       (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "GET    /team_custom_credentials/{t}":              (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "POST   /team_custom_credentials/{t}/{p}/prepare":  (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "PUT    /team_custom_credentials/{t}/{p}":          (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "DELETE /team_custom_credentials/{t}/{p}":          (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "GET    /team/{t}/{env}/webhook":                   (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "POST   /team/{t}/{env}/webhook":                   (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "GET    /team/{t}/{env}/webhook/{w}":               (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "PATCH  /team/{t}/{env}/webhook/{w}":               (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "DELETE /team/{t}/{env}/webhook/{w}":               (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "GET    /team/{t}/{env}/webhook/{w}/secret":        (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "POST   /team/{t}/{env}/webhook/{w}/secret/rotate": (200, 200, 404, 401, WRONG_KIND, 401, 404),
    "POST   /team/{t}/{env}/webhook/{w}/replay":        (200, 200, 404, 401, WRONG_KIND, 401, 404),
}  # fmt: skip

TEAM_FIELDS = {"id", "name", "created_on", "region", "org_id", "settings", "features"}
KEY_FIELDS = frozenset({"id", "label", "role", "team_role_bindings", "created_on"})
WEBHOOK_FIELDS = frozenset(
    {
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
)
SECRET_FIELDS = frozenset({"secret", "previous_secret_expires_at"})


@dataclass(frozen=True)
class Call:
    """One request; path and body are formatted with the World's fields."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    fields: frozenset[str] = frozenset()  # the top-level fields of a success body


REQUESTS: dict[str, Call] = {
    "GET    /": Call("GET", "", fields=frozenset({"id", "name", "created_on"})),
    "PATCH  /": Call(
        "PATCH", "", {"name": "Renamed org"}, fields=frozenset({"id", "name", "created_on"})
    ),
    "GET    /team": Call("GET", "/team", fields=frozenset({"teams", "next_cursor"})),
    "POST   /team": Call(
        "POST", "/team", {"name": "New team", "region": "eu"}, fields=frozenset(TEAM_FIELDS)
    ),
    "GET    /team/{t}": Call("GET", "/team/{target}", fields=frozenset(TEAM_FIELDS)),
    "PATCH  /team/{t}": Call(
        "PATCH", "/team/{target}", {"name": "Renamed team"}, fields=frozenset(TEAM_FIELDS)
    ),
    "DELETE /team/{t}": Call(
        "DELETE", "/team/{target}", fields=frozenset({"success", "deleted_users"})
    ),
    "GET    /team/{t}/features": Call(
        "GET", "/team/{target}/features", fields=frozenset({"enabled", "available"})
    ),
    "PUT    /team/{t}/features/{f}": Call(
        "PUT", "/team/{target}/features/portal_url", fields=frozenset({"enabled"})
    ),
    "DELETE /team/{t}/features/{f}": Call(
        "DELETE", "/team/{target}/features/demographics", fields=frozenset({"enabled"})
    ),
    "GET    /management_key": Call("GET", "/management_key", fields=frozenset({"management_keys"})),
    "POST   /management_key": Call(
        "POST",
        "/management_key",
        {"label": "made in the matrix", "role": "org_admin"},
        fields=frozenset({*KEY_FIELDS, "key"}),
    ),
    "PATCH  /management_key/{key}": Call(
        "PATCH", "/management_key/{spare_key}", {"label": "relabelled"}, fields=KEY_FIELDS
    ),
    "DELETE /management_key/{key}": Call(
        "DELETE", "/management_key/{spare_key}", fields=frozenset({"success"})
    ),
    "GET    /team_api_keys/{env}/{region}": Call(
        "GET",
        "/team_api_keys/sandbox/us",
        params={"team_id": "{target}"},
        fields=frozenset({"team_api_keys"}),
    ),
    "POST   /team_api_keys/{env}/{region}": Call(
        "POST",
        "/team_api_keys/sandbox/us",
        {"team_id": "{target}"},
        fields=frozenset({"id", "team_id", "environment", "region", "key"}),
    ),
    "DELETE /team_api_keys/{env}/{region}/{key}": Call(
        "DELETE",
        "/team_api_keys/sandbox/us/{spare_api_key}",
        params={"team_id": "{target}"},
        fields=frozenset({"success"}),
    ),
    "GET    /team_custom_credentials/{t}": Call(
        "GET", "/team_custom_credentials/{target}", fields=frozenset({"credentials"})
    ),
    "POST   /team_custom_credentials/{t}/{p}/prepare": Call(
        "POST",
        "/team_custom_credentials/{target}/fitbit/prepare",
        fields=frozenset({"provider", "status", "redirect_uri"}),
    ),
    "PUT    /team_custom_credentials/{t}/{p}": Call(
        "PUT",
        "/team_custom_credentials/{target}/oura",
        {"client_id": "matrix-client", "client_secret": "matrix-secret"},
        fields=frozenset({"provider", "status", "client_id", "has_client_secret", "updated_at"}),
    ),
    "DELETE /team_custom_credentials/{t}/{p}": Call(
        "DELETE", "/team_custom_credentials/{target}/oura", fields=frozenset({"success"})
    ),
    "GET    /team/{t}/{env}/webhook": Call(
        "GET", "/team/{target}/sandbox/webhook", fields=frozenset({"webhook_endpoints"})
    ),
    "POST   /team/{t}/{env}/webhook": Call(
        "POST",
        "/team/{target}/sandbox/webhook",
        {"url": "https://matrix.example/hook"},
        fields=WEBHOOK_FIELDS,
    ),
    "GET    /team/{t}/{env}/webhook/{w}": Call(
        "GET", "/team/{target}/sandbox/webhook/{webhook}", fields=WEBHOOK_FIELDS
    ),
    "PATCH  /team/{t}/{env}/webhook/{w}": Call(
        "PATCH",
        "/team/{target}/sandbox/webhook/{webhook}",
        {"description": "patched in the matrix"},
        fields=WEBHOOK_FIELDS,
    ),
    "DELETE /team/{t}/{env}/webhook/{w}": Call(
        "DELETE", "/team/{target}/sandbox/webhook/{webhook}", fields=frozenset({"success"})
    ),
    "GET    /team/{t}/{env}/webhook/{w}/secret": Call(
        "GET", "/team/{target}/sandbox/webhook/{webhook}/secret", fields=SECRET_FIELDS
    ),
    "POST   /team/{t}/{env}/webhook/{w}/secret/rotate": Call(
        "POST", "/team/{target}/sandbox/webhook/{webhook}/secret/rotate", fields=SECRET_FIELDS
    ),
    "POST   /team/{t}/{env}/webhook/{w}/replay": Call(
        "POST",
        "/team/{target}/sandbox/webhook/{webhook}/replay",
        {"since": "2026-01-01T00:00:00Z"},
        fields=frozenset({"replayed"}),
    ),
}


@dataclass(frozen=True)
class World:
    """An organization with two teams and every kind of key, plus another organization."""

    service: Service
    client: TestClient
    org_id: UUID
    target: UUID  # region us; demographics enabled; oura credentials prepared
    other: UUID
    keys: dict[str, str | None]  # caller name -> key text sent in X-Management-Key
    spare_key: UUID  # a team_admin key (bound to `other`) to relabel or revoke
    spare_api_key: UUID  # a sandbox team API key of `target` to revoke
    webhook: UUID  # a sandbox webhook endpoint of `target`

    def format(self, text: str) -> str:
        return text.format(
            target=self.target,
            other=self.other,
            spare_key=self.spare_key,
            spare_api_key=self.spare_api_key,
            webhook=self.webhook,
        )

    def headers(self, caller: str) -> dict[str, str]:
        key = self.keys[caller]
        return {} if key is None else {"X-Management-Key": key}

    def send(self, call: Call, caller: str) -> Any:
        body = call.body and {k: self.format(v) for k, v in call.body.items()}
        params = call.params and {k: self.format(v) for k, v in call.params.items()}
        return self.client.request(
            call.method,
            f"/v1/org/{self.org_id}{self.format(call.path)}",
            json=body,
            params=params,
            headers=self.headers(caller),
        )


@pytest.fixture
def world(service: Service) -> Iterator[World]:
    boot = service.bootstrap()
    assert boot is not None
    ctx = CommandContext.system("test:setup")
    directory = service.teams
    org_id, target = boot.org_id, boot.team_id
    other = directory.create_team(ctx, org_id, "Other team", "us")

    def management_key(org: UUID, role: str, teams: list[UUID], label: str) -> Any:
        return directory.issue_management_key(ctx, org, role=role, team_ids=teams, label=label)

    bound = management_key(org_id, "team_admin", [target], "bound to target")
    other_bound = management_key(org_id, "team_admin", [other], "bound to other")
    revoked = management_key(org_id, "org_admin", [], "revoked")
    directory.revoke_management_key(ctx, org_id, revoked.key_id)
    spare = management_key(org_id, "team_admin", [other], "spare")
    spare_api = directory.issue_team_api_key(ctx, target, "sandbox", "us", org_id)
    directory.prepare_credentials(ctx, target, "oura", org_id)
    directory.set_feature(ctx, target, "demographics", True, org_id)
    webhook = service.webhooks.create(ctx, target, "sandbox", url="https://matrix.example/h")
    foreign_org = directory.create_organization(ctx, "Foreign org")
    directory.create_team(ctx, foreign_org, "Foreign team", "us")
    foreign = management_key(foreign_org, "org_admin", [], "foreign")
    keys: dict[str, str | None] = {
        "org_key": boot.management_key.plain,
        "bound_key": bound.plain,
        "other_team_key": other_bound.plain,
        "revoked_key": revoked.plain,
        "team_api_key": boot.team_api_key.plain,
        "no_key": None,
        "foreign_org_key": foreign.plain,
    }
    assert set(keys) == set(CALLERS)
    with TestClient(create_management_api(service), raise_server_exceptions=False) as client:
        yield World(
            service,
            client,
            org_id,
            target,
            other,
            keys,
            spare.key_id,
            spare_api.key_id,
            webhook.id,
        )


def _cells() -> Iterator[Any]:
    """Per endpoint: its refused callers in one test, then each allowed caller alone."""
    assert set(MATRIX) == set(REQUESTS), "every endpoint needs a request and a row"
    for endpoint, row in MATRIX.items():
        name = " ".join(endpoint.split())
        cells = list(zip(CALLERS, row, strict=True))
        refused = tuple(cell for cell in cells if cell[1] != 200)
        assert refused, endpoint
        yield pytest.param(endpoint, refused, id=f"{name}|refused")
        for caller, status in cells:
            if status == 200:
                yield pytest.param(endpoint, ((caller, status),), id=f"{name}|{caller}")


def _error_detail(endpoint: str, caller: str, status: int) -> str | None:
    """The exact `detail` of a refusal, where it is fixed; None: any non-empty string."""
    if caller == "no_key":
        return "Missing management key: send it in the X-Management-Key header."
    if caller == "revoked_key":
        return "Invalid management key."
    if caller == "foreign_org_key":
        return "Organization not found."
    if status == 404:
        return "Team not found."
    if status == 403 and caller != "team_api_key":
        return (
            "A team management key cannot reach organization-level resources or actions; "
            "use an org management key."
        )
    return None


@pytest.mark.parametrize(("endpoint", "cells"), list(_cells()))
def test_permission_matrix(world: World, endpoint: str, cells: tuple[tuple[str, int], ...]) -> None:
    call = REQUESTS[endpoint]
    for caller, expected in cells:
        log_before = world.service.recorder.max_notification_id()
        response = world.send(call, caller)
        where = f"{endpoint} as {caller}"

        assert response.status_code == expected, (where, response.text)
        assert response.headers["content-type"] == "application/json", where
        body = response.json()
        log_after = world.service.recorder.max_notification_id()
        if expected != 200:
            assert set(body) == {"detail"}, where
            assert isinstance(body["detail"], str) and body["detail"], where
            detail = _error_detail(endpoint, caller, expected)
            if detail is not None:
                assert body["detail"] == detail, where
            if caller == "team_api_key":
                assert "management key" in body["detail"], where
            assert log_after == log_before, f"a refused request changed the ledger: {where}"
            continue
        assert set(body) == call.fields, where
        if call.method == "GET" or body.get("replayed") == 0:  # nothing read or replayed
            assert log_after == log_before, where
        else:
            assert log_after is not None and log_before is not None, where
            assert log_after > log_before, where


def test_team_api_key_is_refused_with_a_detail_naming_the_expected_key_kind(
    world: World,
) -> None:
    """The refusal says which key is expected."""
    response = world.client.get(f"/v1/org/{world.org_id}", headers=world.headers("team_api_key"))
    assert response.status_code in (401, 403)
    assert response.json() == {
        "detail": "This is a team API key: the management API expects a management key in "
        "the X-Management-Key header."
    }


@pytest.mark.parametrize(
    ("caller", "visible"),
    [("org_key", {"target", "other"}), ("bound_key", {"target"}), ("other_team_key", {"other"})],
)
def test_team_list_shows_only_the_teams_a_key_reaches(
    world: World, caller: str, visible: set[str]
) -> None:
    response = world.client.get(f"/v1/org/{world.org_id}/team", headers=world.headers(caller))
    assert response.status_code == 200
    body = response.json()
    assert body["next_cursor"] is None
    names = {str(world.target): "target", str(world.other): "other"}
    assert {names[team["id"]] for team in body["teams"]} == visible
    assert len(body["teams"]) == len(visible)
    assert all(team["org_id"] == str(world.org_id) for team in body["teams"])


def test_a_bound_key_cannot_use_its_team_to_reach_another_teams_api_keys(world: World) -> None:
    """The team in the query (or body) is checked, not only the team of the key."""
    headers = world.headers("bound_key")
    base = f"/v1/org/{world.org_id}/team_api_keys/sandbox/us"
    other_key = world.service.teams.issue_team_api_key(
        CommandContext.system("test:setup"), world.other, "sandbox", "us", world.org_id
    )
    created = world.client.post(base, json={"team_id": str(world.other)}, headers=headers)
    listed = world.client.get(base, params={"team_id": str(world.other)}, headers=headers)
    # Naming its own team with another team's key id: that key is not found under it.
    revoked = world.client.delete(
        f"{base}/{other_key.key_id}", params={"team_id": str(world.target)}, headers=headers
    )
    assert (created.status_code, listed.status_code, revoked.status_code) == (404, 404, 404)
    record = world.service.team_queries.api_key(other_key.key_id)
    assert record is not None and record.revoked is False


def test_a_bound_key_cannot_use_its_team_to_reach_another_teams_webhook(world: World) -> None:
    """The endpoint must belong to the team in the path, not only the path to the key."""
    ctx = CommandContext.system("test:setup")
    theirs = world.service.webhooks.create(ctx, world.other, "sandbox", url="https://o.example/h")
    headers = world.headers("bound_key")
    base = f"/v1/org/{world.org_id}/team/{world.target}/sandbox/webhook/{theirs.id}"
    before = world.service.recorder.max_notification_id()
    answers = [
        world.client.get(base, headers=headers),
        world.client.get(f"{base}/secret", headers=headers),
        world.client.post(f"{base}/secret/rotate", headers=headers),
        world.client.patch(base, json={"disabled": True}, headers=headers),
        world.client.delete(base, headers=headers),
    ]
    assert [(r.status_code, r.json()) for r in answers] == [
        (404, {"detail": "Webhook endpoint not found."})
    ] * 5
    assert world.service.recorder.max_notification_id() == before
    assert "whsec_" not in "".join(r.text for r in answers)
