"""Team API users: the happy paths and the rules of spec 2.1, 2.3, 3.1, 4 and 7 and of
gaps.md (Conventions, Users), exercised over HTTP."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext
from httpx import Response

from tests.conftest import Team, create_user

UTC_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|\+00:00)$")
GENERATED_REQUEST_ID = re.compile(r"^req-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")
RESOLVED_USER_KEYS = {
    "user_id",
    "team_id",
    "client_user_id",
    "created_on",
    "connected_sources",
    "fallback_time_zone",
    "fallback_birth_date",
    "ingestion_start",
    "ingestion_end",
}
SCHEDULED = "scheduled for deletion"
USER_NOT_FOUND = {"detail": "User not found."}
NOT_DELETED = {"detail": "User is not scheduled for deletion: there is nothing to undo."}
DEMOGRAPHICS: dict[str, Any] = {
    "first_name": "Grace",
    "last_name": "Hopper",
    "email": "grace.hopper@example.org",
    "phone_number": "+1 555 010 1906",
    "gender": "female",
    "dob": "1956-12-09",
    "address": {
        "first_line": "1 Navy Yard",
        "second_line": None,
        "zip_code": "20374",
        "state": "DC",
        "city": "Washington",
    },
}
DEMOGRAPHICS_OPTIONAL_NULLS: dict[str, Any] = {
    "medical_proxy": None,
    "race": None,
    "ethnicity": None,
    "sexual_orientation": None,
    "gender_identity": None,
}


def parse_utc(value: str) -> datetime:
    assert UTC_TIMESTAMP.match(value), value
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert parsed.utcoffset() == timedelta(0)
    return parsed


def get_user(client: TestClient, team: Team, user_id: str) -> Response:
    return client.get(f"/v2/user/{user_id}", headers=team.headers)


def resolve(client: TestClient, team: Team, client_user_id: str) -> Response:
    return client.get(f"/v2/user/resolve/{client_user_id}", headers=team.headers)


def delete(client: TestClient, team: Team, user_id: str) -> Response:
    return client.delete(f"/v2/user/{user_id}", headers=team.headers)


def undo(client: TestClient, team: Team, **params: str) -> Response:
    return client.post("/v2/user/undo_delete", params=params, headers=team.headers)


def patch(client: TestClient, team: Team, user_id: str, body: Any) -> Response:
    return client.patch(f"/v2/user/{user_id}", json=body, headers=team.headers)


def list_ids(client: TestClient, team: Team, **params: int) -> tuple[list[str], dict[str, Any]]:
    response = client.get("/v2/user", params=params, headers=team.headers)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"users", "total", "offset", "limit"}
    return [u["user_id"] for u in body["users"]], body


def assert_scheduled_for_deletion(response: Response) -> None:
    assert response.status_code == 404, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and SCHEDULED in detail.lower()


def enable_demographics(service: Service, team: Team) -> None:
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "demographics", True)


# -- create -----------------------------------------------------------------------------


def test_create_returns_the_full_resolved_user(client: TestClient, team: Team) -> None:
    before = datetime.now(UTC)
    response = client.post(
        "/v2/user",
        json={
            "client_user_id": "patient-0001",
            "fallback_time_zone": "Europe/Berlin",
            "fallback_birth_date": "1990-01-02",
            "ingestion_start": "2024-01-01",
            "ingestion_end": "2024-12-31",
        },
        headers=team.headers,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == RESOLVED_USER_KEYS
    assert str(uuid.UUID(body["user_id"])) == body["user_id"]
    assert body["team_id"] == str(team.team_id)
    assert body["client_user_id"] == "patient-0001"
    created_on = parse_utc(body["created_on"])
    assert before - timedelta(seconds=1) <= created_on <= datetime.now(UTC) + timedelta(seconds=1)
    assert body["connected_sources"] == []
    time_zone = body["fallback_time_zone"]
    assert set(time_zone) == {"id", "source_slug", "updated_at"}
    assert time_zone["id"] == "Europe/Berlin"
    assert time_zone["source_slug"] == "manual"
    assert abs(parse_utc(time_zone["updated_at"]) - created_on) < timedelta(seconds=1)
    birth_date = body["fallback_birth_date"]
    assert set(birth_date) == {"value", "source_slug", "updated_at"}
    assert birth_date["value"] == "1990-01-02"
    assert birth_date["source_slug"] == "manual"
    assert abs(parse_utc(birth_date["updated_at"]) - created_on) < timedelta(seconds=1)
    assert body["ingestion_start"] == "2024-01-01"
    assert body["ingestion_end"] == "2024-12-31"

    # The same object is what a read returns.
    assert get_user(client, team, body["user_id"]).json() == body
    assert resolve(client, team, "patient-0001").json() == body


def test_create_with_only_a_client_user_id_has_null_fallbacks(
    client: TestClient, team: Team
) -> None:
    body = create_user(client, team, "bare")
    assert set(body) == RESOLVED_USER_KEYS
    assert body["connected_sources"] == []
    assert body["fallback_time_zone"] is None
    assert body["fallback_birth_date"] is None
    assert body["ingestion_start"] is None
    assert body["ingestion_end"] is None


def test_duplicate_client_user_id_is_400_naming_the_holder(
    service: Service, client: TestClient, team: Team, other_team: Team
) -> None:
    first = create_user(client, team, "dup-1")
    events = service.recorder.max_notification_id()

    response = client.post(
        "/v2/user",
        json={"client_user_id": "dup-1", "fallback_time_zone": "UTC"},
        headers=team.headers,
    )

    assert response.status_code == 400
    assert response.json() == {
        "detail": {
            "error_type": "INVALID_REQUEST",
            "error_message": "Client user id already exists.",
            "user_id": first["user_id"],
            "created_on": first["created_on"],
        }
    }
    assert service.recorder.max_notification_id() == events
    assert get_user(client, team, first["user_id"]).json() == first
    _, listing = list_ids(client, team)
    assert listing["total"] == 1
    # client_user_id is unique within a team only.
    assert create_user(client, other_team, "dup-1")["team_id"] == str(other_team.team_id)


# -- list -------------------------------------------------------------------------------


def test_list_pages_through_the_teams_live_users(
    client: TestClient, team: Team, other_team: Team
) -> None:
    created = [create_user(client, team, f"page-{n}")["user_id"] for n in range(5)]
    create_user(client, other_team, "elsewhere")

    ids, body = list_ids(client, team)
    assert body["total"] == 5 and body["offset"] == 0 and body["limit"] == 100
    assert ids == created  # oldest first

    pages = []
    for offset in (0, 2, 4):
        page, body = list_ids(client, team, offset=offset, limit=2)
        assert (body["total"], body["offset"], body["limit"]) == (5, offset, 2)
        pages.append(page)
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [i for p in pages for i in p] == created

    ids, body = list_ids(client, team, offset=5, limit=2)
    assert ids == [] and body["total"] == 5
    ids, body = list_ids(client, team, limit=1)
    assert ids == created[:1]
    ids, body = list_ids(client, team, limit=500)
    assert ids == created and body["limit"] == 500


@pytest.mark.parametrize("limit", [0, -1, 501])
def test_list_limit_out_of_bounds_is_422(client: TestClient, team: Team, limit: int) -> None:
    response = client.get("/v2/user", params={"limit": limit}, headers=team.headers)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["query", "limit"]
    assert error["type"] == ("less_than_equal" if limit > 500 else "greater_than_equal")


def test_list_excludes_users_pending_erasure(client: TestClient, team: Team) -> None:
    keep = create_user(client, team, "keep")["user_id"]
    gone = create_user(client, team, "gone")["user_id"]
    assert delete(client, team, gone).json() == {"success": True}

    ids, body = list_ids(client, team)
    assert ids == [keep] and body["total"] == 1

    assert undo(client, team, user_id=gone).json() == {"success": True}
    ids, body = list_ids(client, team)
    assert ids == [keep, gone] and body["total"] == 2


# -- get, resolve, patch ----------------------------------------------------------------


def test_get_and_resolve_an_unknown_user_is_404(client: TestClient, team: Team) -> None:
    assert get_user(client, team, str(uuid.uuid4())).json() == USER_NOT_FOUND
    response = resolve(client, team, "nobody")
    assert response.status_code == 404 and response.json() == USER_NOT_FOUND


def test_patch_changes_are_visible(client: TestClient, team: Team) -> None:
    user = create_user(client, team, "before", fallback_time_zone="UTC")
    user_id = user["user_id"]

    response = patch(
        client,
        team,
        user_id,
        {
            "client_user_id": "after",
            "fallback_time_zone": "America/New_York",
            "fallback_birth_date": "1975-07-08",
            "ingestion_start": "2023-03-01",
            "ingestion_end": "2023-09-30",
        },
    )
    assert response.status_code == 204
    assert response.content == b""

    now = get_user(client, team, user_id).json()
    assert now["client_user_id"] == "after"
    assert now["fallback_time_zone"]["id"] == "America/New_York"
    assert now["fallback_time_zone"]["source_slug"] == "manual"
    assert parse_utc(now["fallback_time_zone"]["updated_at"]) > parse_utc(user["created_on"])
    assert now["fallback_birth_date"]["value"] == "1975-07-08"
    assert now["fallback_birth_date"]["source_slug"] == "manual"
    assert (now["ingestion_start"], now["ingestion_end"]) == ("2023-03-01", "2023-09-30")
    assert (now["user_id"], now["created_on"]) == (user_id, user["created_on"])

    assert resolve(client, team, "after").json() == now
    assert resolve(client, team, "before").status_code == 404
    # The old client_user_id is free again.
    assert create_user(client, team, "before")["user_id"] != user_id

    # Fields not sent stay as they are.
    assert patch(client, team, user_id, {"ingestion_end": "2023-12-31"}).status_code == 204
    later = get_user(client, team, user_id).json()
    assert later == {**now, "ingestion_end": "2023-12-31"}


def test_patch_to_a_client_user_id_in_use_is_409(
    service: Service, client: TestClient, team: Team
) -> None:
    create_user(client, team, "taken")
    mine = create_user(client, team, "mine")
    events = service.recorder.max_notification_id()

    response = patch(client, team, mine["user_id"], {"client_user_id": "taken"})

    assert response.status_code == 409
    assert isinstance(response.json()["detail"], str)
    assert service.recorder.max_notification_id() == events
    assert get_user(client, team, mine["user_id"]).json() == mine
    # Sending the user's own client_user_id is not a conflict.
    assert patch(client, team, mine["user_id"], {"client_user_id": "mine"}).status_code == 204


def test_patch_null_clears_fallbacks_and_bounds(client: TestClient, team: Team) -> None:
    user = create_user(
        client,
        team,
        "clear-me",
        fallback_time_zone="Asia/Tokyo",
        fallback_birth_date="1988-02-29",
        ingestion_start="2024-01-01",
        ingestion_end="2024-06-30",
    )
    assert patch(client, team, user["user_id"], {"fallback_time_zone": None}).status_code == 204
    now = get_user(client, team, user["user_id"]).json()
    assert now == {**user, "fallback_time_zone": None}

    response = patch(
        client,
        team,
        user["user_id"],
        {"fallback_birth_date": None, "ingestion_start": None, "ingestion_end": None},
    )
    assert response.status_code == 204
    assert get_user(client, team, user["user_id"]).json() == {
        **user,
        "fallback_time_zone": None,
        "fallback_birth_date": None,
        "ingestion_start": None,
        "ingestion_end": None,
    }


# -- delete and undo --------------------------------------------------------------------


def test_delete_puts_the_user_in_pending_erasure(client: TestClient, team: Team) -> None:
    user = create_user(client, team, "to-delete")
    user_id = user["user_id"]

    response = delete(client, team, user_id)
    assert response.status_code == 200
    assert response.json() == {"success": True}

    assert_scheduled_for_deletion(get_user(client, team, user_id))
    assert_scheduled_for_deletion(resolve(client, team, "to-delete"))
    assert_scheduled_for_deletion(delete(client, team, user_id))
    assert_scheduled_for_deletion(patch(client, team, user_id, {"fallback_time_zone": "UTC"}))


def test_delete_releases_the_client_user_id_at_once(client: TestClient, team: Team) -> None:
    old = create_user(client, team, "reused")
    assert delete(client, team, old["user_id"]).json() == {"success": True}

    new = create_user(client, team, "reused")

    assert new["user_id"] != old["user_id"]
    assert resolve(client, team, "reused").json() == new
    assert_scheduled_for_deletion(get_user(client, team, old["user_id"]))


@pytest.mark.parametrize("by", ["user_id", "client_user_id"])
def test_undo_restores_the_user(client: TestClient, team: Team, by: str) -> None:
    user = create_user(client, team, "undo-me", fallback_time_zone="Europe/Paris")
    assert delete(client, team, user["user_id"]).json() == {"success": True}

    response = undo(client, team, **{by: user[by]})

    assert response.status_code == 200
    assert response.json() == {"success": True}
    assert get_user(client, team, user["user_id"]).json() == user
    assert resolve(client, team, "undo-me").json() == user
    # Active again: it can be deleted again, and undoing an active user is refused.
    assert undo(client, team, user_id=user["user_id"]).json() == NOT_DELETED


def test_undo_is_refused_while_another_live_user_holds_the_client_user_id(
    service: Service, client: TestClient, team: Team
) -> None:
    old = create_user(client, team, "contested")
    assert delete(client, team, old["user_id"]).json() == {"success": True}
    new = create_user(client, team, "contested")
    events = service.recorder.max_notification_id()

    by_id = undo(client, team, user_id=old["user_id"])
    by_client_id = undo(client, team, client_user_id="contested")

    for response in (by_id, by_client_id):
        assert response.status_code == 409, response.text
        assert isinstance(response.json()["detail"], str)
    # Nothing changes but the record of each refusal on the user's own stream (the
    # deletion report lists them): a User.DeletionUndoRefused event each, nothing else.
    assert events is not None
    assert service.recorder.max_notification_id() == events + 2
    refused = list(service.ledger.events.get(uuid.UUID(old["user_id"])))[-2:]
    assert [(type(e).__name__, getattr(e, "reason", None)) for e in refused] == [
        ("DeletionUndoRefused", "client_user_id_in_use")
    ] * 2
    assert_scheduled_for_deletion(get_user(client, team, old["user_id"]))
    assert resolve(client, team, "contested").json() == new

    # Once the holder lets go of it, the undo goes through.
    assert patch(client, team, new["user_id"], {"client_user_id": "moved"}).status_code == 204
    assert undo(client, team, user_id=old["user_id"]).json() == {"success": True}
    assert resolve(client, team, "contested").json() == old


def test_undo_on_an_active_user_is_400(client: TestClient, team: Team) -> None:
    user = create_user(client, team, "active")
    response = undo(client, team, user_id=user["user_id"])
    assert response.status_code == 400
    assert response.json() == NOT_DELETED
    response = undo(client, team, client_user_id="active")
    assert response.status_code == 404  # no user of that id is pending erasure
    assert response.json() == USER_NOT_FOUND


@pytest.mark.parametrize("send", ["neither", "both"])
def test_undo_needs_exactly_one_parameter(client: TestClient, team: Team, send: str) -> None:
    user = create_user(client, team, "both")
    assert delete(client, team, user["user_id"]).status_code == 200
    params = {"user_id": user["user_id"], "client_user_id": "both"} if send == "both" else {}

    response = undo(client, team, **params)

    assert response.status_code == 400
    assert response.json() == {
        "detail": "Send exactly one of the query parameters user_id or client_user_id."
    }
    assert_scheduled_for_deletion(get_user(client, team, user["user_id"]))


# -- another team's users ---------------------------------------------------------------

CrossTeamCall = Callable[[TestClient, Team, dict[str, Any]], Response]
CROSS_TEAM_CALLS: dict[str, CrossTeamCall] = {
    "get": lambda c, t, u: get_user(c, t, u["user_id"]),
    "patch": lambda c, t, u: patch(c, t, u["user_id"], {"fallback_time_zone": "UTC"}),
    "delete": lambda c, t, u: delete(c, t, u["user_id"]),
    "resolve": lambda c, t, u: resolve(c, t, u["client_user_id"]),
    "info": lambda c, t, u: c.get(f"/v2/user/{u['user_id']}/info/latest", headers=t.headers),
    "patch_info": lambda c, t, u: c.patch(
        f"/v2/user/{u['user_id']}/info", json=DEMOGRAPHICS, headers=t.headers
    ),
}


@pytest.mark.parametrize("call", sorted(CROSS_TEAM_CALLS))
def test_another_teams_user_is_404(
    service: Service, client: TestClient, team: Team, other_team: Team, call: str
) -> None:
    enable_demographics(service, team)
    enable_demographics(service, other_team)
    theirs = create_user(client, other_team, "theirs", fallback_time_zone="Europe/Rome")
    events = service.recorder.max_notification_id()

    response = CROSS_TEAM_CALLS[call](client, team, theirs)

    assert response.status_code == 404, response.text
    assert response.json() == USER_NOT_FOUND  # nothing says that the user exists
    assert service.recorder.max_notification_id() == events
    assert get_user(client, other_team, theirs["user_id"]).json() == theirs


@pytest.mark.parametrize("by", ["user_id", "client_user_id"])
def test_undo_of_another_teams_user_is_404(
    service: Service, client: TestClient, team: Team, other_team: Team, by: str
) -> None:
    theirs = create_user(client, other_team, "theirs-deleted")
    assert delete(client, other_team, theirs["user_id"]).json() == {"success": True}
    events = service.recorder.max_notification_id()

    response = undo(client, team, **{by: theirs[by]})

    assert response.status_code == 404
    assert response.json() == USER_NOT_FOUND
    assert service.recorder.max_notification_id() == events
    assert_scheduled_for_deletion(get_user(client, other_team, theirs["user_id"]))
    assert undo(client, other_team, **{by: theirs[by]}).json() == {"success": True}


# -- demographics (closed beta) ---------------------------------------------------------


def test_demographics_need_the_closed_beta_switch(
    service: Service, client: TestClient, team: Team
) -> None:
    user_id = create_user(client, team, "no-beta")["user_id"]
    events = service.recorder.max_notification_id()

    for response in (
        client.get(f"/v2/user/{user_id}/info/latest", headers=team.headers),
        client.patch(f"/v2/user/{user_id}/info", json=DEMOGRAPHICS, headers=team.headers),
    ):
        assert response.status_code == 403
        detail = response.json()["detail"]
        assert set(detail) == {"error_type", "error_message"}
        assert detail["error_type"] == "FEATURE_NOT_ENABLED"
        assert "demographics" in detail["error_message"]
    assert service.recorder.max_notification_id() == events


def test_demographics_are_recorded_validated_and_merged(
    service: Service, client: TestClient, team: Team
) -> None:
    enable_demographics(service, team)
    user_id = create_user(client, team, "with-info")["user_id"]
    latest = f"/v2/user/{user_id}/info/latest"
    info = f"/v2/user/{user_id}/info"

    response = client.get(latest, headers=team.headers)
    assert response.status_code == 404
    assert response.json() == {"detail": "No demographics recorded for this user."}

    # A first patch must leave the record complete.
    events = service.recorder.max_notification_id()
    response = client.patch(info, json={"first_name": "Grace"}, headers=team.headers)
    assert response.status_code == 422
    missing = {tuple(e["loc"]) for e in response.json()["detail"] if e["type"] == "missing"}
    assert missing == {
        ("body", name)
        for name in ("last_name", "email", "phone_number", "gender", "dob", "address")
    }
    assert "Grace" not in response.text
    assert service.recorder.max_notification_id() == events
    assert client.get(latest, headers=team.headers).status_code == 404

    response = client.patch(info, json=DEMOGRAPHICS, headers=team.headers)
    assert response.status_code == 200, response.text
    # The address is answered in the spec's spelling and the official client's too: `zip`,
    # and `country` ("" when none was sent; docs/compatibility.md).
    answered_address = {**DEMOGRAPHICS["address"], "zip": "20374", "country": ""}
    full = {**DEMOGRAPHICS, **DEMOGRAPHICS_OPTIONAL_NULLS, "address": answered_address}
    assert response.json() == full
    assert client.get(latest, headers=team.headers).json() == full

    # A later partial patch merges into what is recorded.
    response = client.patch(
        info, json={"last_name": "Murray", "race": "white_caucasian"}, headers=team.headers
    )
    assert response.status_code == 200, response.text
    merged = {**full, "last_name": "Murray", "race": "white_caucasian"}
    assert response.json() == merged
    assert client.get(latest, headers=team.headers).json() == merged

    # Demographics go with the user's deletion.
    assert delete(client, team, user_id).status_code == 200
    assert_scheduled_for_deletion(client.get(latest, headers=team.headers))


# -- request id, OpenAPI ----------------------------------------------------------------


def test_every_response_carries_a_request_id(client: TestClient, team: Team) -> None:
    generated = client.get("/v2/user", headers=team.headers)
    assert GENERATED_REQUEST_ID.match(generated.headers["x-request-id"])
    unauthorized = client.get("/v2/user")
    assert unauthorized.status_code == 401
    assert GENERATED_REQUEST_ID.match(unauthorized.headers["x-request-id"])
    assert unauthorized.headers["x-request-id"] != generated.headers["x-request-id"]

    given = "trace-42.abc:DEF_9"
    echoed = client.get("/v2/user", headers={**team.headers, "x-request-id": given})
    assert echoed.headers["x-request-id"] == given
    failed = client.post("/v2/user", json={}, headers={**team.headers, "x-request-id": given})
    assert failed.status_code == 422
    assert failed.headers["x-request-id"] == given

    for insane in ("has spaces", "x" * 129, "new\\line"):
        replaced = client.get("/v2/user", headers={**team.headers, "x-request-id": insane})
        assert GENERATED_REQUEST_ID.match(replaced.headers["x-request-id"]), insane


def test_openapi_lists_the_user_paths_and_the_key_scheme(client: TestClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    paths = document["paths"]
    expected = {
        "/v2/user": {"get", "post"},
        "/v2/user/{user_id}": {"get", "patch", "delete"},
        "/v2/user/resolve/{client_user_id}": {"get"},
        "/v2/user/undo_delete": {"post"},
        "/v2/user/{user_id}/info": {"patch"},
        "/v2/user/{user_id}/info/latest": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path

    schemes = document["components"]["securitySchemes"]
    [(name, scheme)] = [(n, s) for n, s in schemes.items() if s.get("name") == "x-service-api-key"]
    assert scheme["type"] == "apiKey" and scheme["in"] == "header"
    for path, methods in expected.items():
        for method in methods:
            assert {name: []} in paths[path][method]["security"], (method, path)

    docs = client.get("/docs")
    assert docs.status_code == 200
    assert docs.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in docs.text


# -- personal data never in error bodies ------------------------------------------------


@pytest.mark.parametrize("personal", ["jane.roe@example.com", "+1 555 123 4567", "(555) 123-4567"])
def test_personal_data_as_client_user_id_is_refused_without_echo(
    service: Service, client: TestClient, team: Team, personal: str
) -> None:
    user = create_user(client, team, "plain-id")
    events = service.recorder.max_notification_id()

    created = client.post("/v2/user", json={"client_user_id": personal}, headers=team.headers)
    patched = patch(client, team, user["user_id"], {"client_user_id": personal})

    for response in (created, patched):
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body", "client_user_id"]
        assert error["input"] == "[redacted]"
        assert personal not in response.text
    assert service.recorder.max_notification_id() == events
    assert get_user(client, team, user["user_id"]).json() == user


def test_an_erased_users_data_is_in_no_error_body(
    service: Service, client: TestClient, team: Team
) -> None:
    enable_demographics(service, team)
    start = datetime.now(UTC)
    with freeze_time(start):
        user = create_user(client, team, "erased-0042", fallback_birth_date="1961-04-12")
        info = client.patch(
            f"/v2/user/{user['user_id']}/info", json=DEMOGRAPHICS, headers=team.headers
        )
        assert info.status_code == 200
        assert delete(client, team, user["user_id"]).status_code == 200
    with freeze_time(start + timedelta(days=8)):
        assert service.users.erase_user(CommandContext.system("test"), uuid.UUID(user["user_id"]))
        responses = [
            get_user(client, team, user["user_id"]),
            resolve(client, team, "erased-0042"),
            delete(client, team, user["user_id"]),
            patch(client, team, user["user_id"], {"fallback_time_zone": "UTC"}),
            client.get(f"/v2/user/{user['user_id']}/info/latest", headers=team.headers),
            undo(client, team, user_id=user["user_id"]),
            undo(client, team, client_user_id="erased-0042"),
        ]
    for response in responses:
        assert response.status_code == 404, response.text
        assert response.json() == USER_NOT_FOUND
        for personal in ("1961-04-12", "Hopper", "grace.hopper", "Navy Yard"):
            assert personal not in response.text
    # Gone for good, so the client_user_id can serve a new user.
    assert create_user(client, team, "erased-0042")["user_id"] != user["user_id"]
