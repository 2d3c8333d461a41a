"""Bad input that must get a clear error and change nothing.

Each case asserts the exact status gaps.md gives it (422 validation in the pydantic shape,
400, 401, 404), that no event was recorded (the ledger's last notification id is the
same before and after), and where a user is involved that its resolved state is the same.
Body inputs are never echoed in a 422 (their `input` is "[redacted]")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext
from healthledger.domain.keys import TEAM_API_KEY, new_key, team_api_key_id
from httpx import Response

from tests.conftest import Team, create_user

REDACTED = "[redacted]"
MISSING = object()  # a field left out of the body
ERROR_KEYS = {"type", "loc", "msg", "input"}


@pytest.fixture
def user(client: TestClient, team: Team) -> dict[str, Any]:
    return create_user(
        client,
        team,
        "steady-user",
        fallback_time_zone="Europe/Berlin",
        fallback_birth_date="1980-05-06",
        ingestion_start="2024-01-01",
        ingestion_end="2024-06-30",
    )


@contextmanager
def nothing_changes(
    service: Service, client: TestClient, team: Team, *user_ids: str, recorded: int = 0
) -> Iterator[None]:
    """No event is recorded inside the block (but `recorded`: the record of a refused
    undo, which changes no state), and each user reads the same after it."""

    def states() -> list[tuple[int, Any]]:
        responses = [client.get(f"/v2/user/{u}", headers=team.headers) for u in user_ids]
        return [(r.status_code, r.json()) for r in responses]

    events = service.recorder.max_notification_id()
    before = states()
    yield
    assert service.recorder.max_notification_id() == (events or 0) + recorded, "an event"
    assert states() == before


def validation_error(
    response: Response, loc: list[Any], error_type: str | None = None, *, secret: Any = None
) -> dict[str, Any]:
    """Assert a 422 in the pydantic shape holding an error at `loc`; return that error."""
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"detail"}
    detail = body["detail"]
    assert isinstance(detail, list) and detail
    for error in detail:
        assert set(error) == ERROR_KEYS, error
        assert isinstance(error["type"], str) and error["type"]
        assert isinstance(error["msg"], str) and error["msg"]
        assert isinstance(error["loc"], list) and error["loc"]
        assert error["loc"][0] in ("body", "query", "path", "header")
        if error["loc"][0] == "body":
            assert error["input"] == REDACTED
    matching = [e for e in detail if e["loc"] == loc]
    assert matching, f"no error at {loc}: {detail}"
    if error_type is not None:
        assert matching[0]["type"] == error_type, matching
    if isinstance(secret, str) and secret.strip():
        assert secret not in response.text
    return matching[0]


@contextmanager
def case_named(case_id: str) -> Iterator[None]:
    """Put `case_id` at the head of the message of an assertion failing in the block (the
    helpers' own assertions do not know which case of a loop they are checking)."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"[{case_id}] {error}") from error


def body_with(field: str, value: Any, **base: Any) -> dict[str, Any]:
    return base if value is MISSING else {**base, field: value}


def enable_demographics(service: Service, team: Team) -> None:
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "demographics", True)


def backend(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.params["database_url"])


# -- malformed ids in paths -------------------------------------------------------------

ROUTES_WITH_A_USER_ID = [
    ("GET", "/v2/user/{}"),
    ("PATCH", "/v2/user/{}"),
    ("DELETE", "/v2/user/{}"),
    ("GET", "/v2/user/{}/info/latest"),
    ("PATCH", "/v2/user/{}/info"),
]
MALFORMED_IDS = [
    "not-a-uuid",
    "12345",
    "00000000-0000-0000-0000-00000000000g",
    "0000000-0000-0000-0000-000000000000",
    "1' OR '1'='1",
    "null",
]


def test_a_malformed_user_id_in_the_path_is_a_422_naming_it(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    enable_demographics(service, team)
    bodies = {"/v2/user/{}": {"fallback_time_zone": "UTC"}, "/v2/user/{}/info": {"gender": "x"}}
    candidates = [*MALFORMED_IDS, user["user_id"] + "0", user["user_id"][:-1]]
    with nothing_changes(service, client, team, user["user_id"]):
        for method, template in ROUTES_WITH_A_USER_ID:
            json = bodies.get(template) if method == "PATCH" else None
            for bad in candidates:
                case_id = f"{method} {template.format(bad)}"
                response = client.request(
                    method, template.format(bad), json=json, headers=team.headers
                )
                # gaps.md allows 404 or 422; a 422 names the parameter (issue 34).
                assert response.status_code == 422, (case_id, response.text)
                with case_named(case_id):
                    problem = validation_error(response, ["path", "user_id"])
                assert problem["type"] == "uuid_parsing", case_id
                assert problem["input"] == bad, case_id


@pytest.mark.parametrize(
    ("method", "path", "parameter"),
    [
        ("GET", "/v3/order/not-an-order", "order_id"),
        ("POST", "/v3/order/12345/cancel", "order_id"),
        ("GET", "/v3/lab_tests/xyz/markers", "lab_test_id"),
    ],
)
def test_other_malformed_ids_in_the_path_are_422s_naming_them(
    client: TestClient, team: Team, method: str, path: str, parameter: str
) -> None:
    response = client.request(method, path, headers=team.headers)
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["path", parameter]
    assert problem["type"] == "uuid_parsing"


def test_a_wrong_path_is_still_a_404(client: TestClient, team: Team) -> None:
    for path in ("/v2/users-typo/not-a-uuid", "/v2/user/not-a-uuid/nothing/here"):
        response = client.get(path, headers=team.headers)
        assert response.status_code == 404, (path, response.text)
        assert response.json() == {"detail": "Not Found"}


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_undo_delete_is_not_captured_by_the_user_id_routes(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], method: str
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.request(method, "/v2/user/undo_delete", headers=team.headers)
        for path in ("/v2/user/undo_delete/info/latest", "/v2/user/undo_delete/info"):
            other = client.request(method, path, headers=team.headers)
            # "undo_delete" in the place of a user id: a malformed id where such a route
            # exists for the method, never a capture by the literal route.
            if other.status_code == 422:
                assert other.json()["detail"][0]["loc"] == ["path", "user_id"], other.text
            else:
                assert other.status_code in (404, 405), other.text
    # 405: the literal route exists, for POST only; never a uuid_parsing 422 of {user_id}.
    assert response.status_code in (404, 405), response.text
    expected = {404: "Not Found", 405: "Method Not Allowed"}[response.status_code]
    assert response.json() == {"detail": expected}


# -- client_user_id ---------------------------------------------------------------------

BAD_CLIENT_USER_IDS = [
    pytest.param(MISSING, "missing", id="missing"),
    pytest.param(None, "string_type", id="null"),
    pytest.param(12345, "string_type", id="number"),
    pytest.param("", "string_too_short", id="empty"),
    pytest.param("   ", "value_error", id="spaces"),
    pytest.param("\t\n", "value_error", id="whitespace"),
    pytest.param("x" * 256, "string_too_long", id="256-chars"),
    pytest.param("jane.doe@example.com", "value_error", id="email"),
    pytest.param("crm-jane.doe@example.co.uk-7", "value_error", id="embedded-email"),
    pytest.param("+1 555 123 4567", "value_error", id="phone-intl"),
    pytest.param("(555) 123-4567", "value_error", id="phone-us"),
    pytest.param("+15551234567", "value_error", id="phone-e164"),
    pytest.param("555.123.4567", "value_error", id="phone-dots"),
]


def test_create_with_a_bad_client_user_id_is_422(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    for case in BAD_CLIENT_USER_IDS:
        value, error_type = case.values
        assert error_type is None or isinstance(error_type, str)
        with case_named(str(case.id)):
            body = body_with("client_user_id", value, fallback_time_zone="UTC")
            with nothing_changes(service, client, team, user["user_id"]):
                response = client.post("/v2/user", json=body, headers=team.headers)
            validation_error(response, ["body", "client_user_id"], error_type, secret=value)
            listed = client.get("/v2/user", headers=team.headers).json()
            assert listed["total"] == 1, (case.id, listed)


def test_patch_to_a_bad_client_user_id_is_422(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    for case in [p for p in BAD_CLIENT_USER_IDS if p.id not in ("missing", "null")]:
        value, error_type = case.values
        assert error_type is None or isinstance(error_type, str)
        with case_named(str(case.id)):
            with nothing_changes(service, client, team, user["user_id"]):
                response = client.patch(
                    f"/v2/user/{user['user_id']}",
                    json={"client_user_id": value},
                    headers=team.headers,
                )
            validation_error(response, ["body", "client_user_id"], error_type, secret=value)


def test_patch_cannot_remove_the_client_user_id(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.patch(
            f"/v2/user/{user['user_id']}", json={"client_user_id": None}, headers=team.headers
        )
    error = validation_error(response, ["body"], "value_error")
    assert "client_user_id" in error["msg"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("y" * 255, id="255-chars"),
        pytest.param("1234567890", id="digits"),
        pytest.param("42", id="short-digits"),
        pytest.param("crm:user-42.b_c~d", id="punctuated"),
        pytest.param("ünïcödé-ид-42", id="unicode"),
    ],
)
def test_acceptable_client_user_ids(client: TestClient, team: Team, value: str) -> None:
    created = create_user(client, team, value)
    assert created["client_user_id"] == value
    resolved = client.get(f"/v2/user/resolve/{value}", headers=team.headers)
    assert resolved.status_code == 200
    assert resolved.json() == created


def test_a_client_user_id_with_a_slash_is_refused_or_resolvable(
    client: TestClient, team: Team
) -> None:
    value = "crm:user/42-b"
    created = client.post("/v2/user", json={"client_user_id": value}, headers=team.headers)
    if created.status_code == 422:  # refusing it is as good as serving it
        validation_error(created, ["body", "client_user_id"], secret=value)
        return
    assert created.status_code == 200, created.text
    for path in (f"/v2/user/resolve/{value}", "/v2/user/resolve/crm:user%2F42-b"):
        resolved = client.get(path, headers=team.headers)
        assert resolved.status_code == 200, (path, resolved.text)
        assert resolved.json() == created.json()


def test_a_control_character_in_client_user_id_is_422(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.post("/v2/user", json={"client_user_id": "a\x00b"}, headers=team.headers)
        validation_error(response, ["body", "client_user_id"])


def test_a_control_character_in_a_client_user_id_lookup_is_not_a_500(
    request: pytest.FixtureRequest,
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        resolved = client.get("/v2/user/resolve/a%00b", headers=team.headers)
        undone = client.post(
            "/v2/user/undo_delete", params={"client_user_id": "a\x00b"}, headers=team.headers
        )
    for response in (resolved, undone):
        assert response.status_code in (404, 422), response.text


# -- unknown fields ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nickname", "Jo"),
        ("email", "jo.smith@example.com"),
        ("user_id", "7b7c6a8e-33a4-4c8f-a3a1-0f3e0e9f3b1a"),
        ("team_id", "7b7c6a8e-33a4-4c8f-a3a1-0f3e0e9f3b1a"),
        ("created_on", "2024-01-01T00:00:00Z"),
    ],
)
def test_unknown_body_fields_are_422(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
    field: str,
    value: str,
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        created = client.post(
            "/v2/user", json={"client_user_id": "fresh", field: value}, headers=team.headers
        )
        patched = client.patch(
            f"/v2/user/{user['user_id']}",
            json={"fallback_time_zone": "UTC", field: value},
            headers=team.headers,
        )
    for response in (created, patched):
        validation_error(response, ["body", field], "extra_forbidden", secret=value)


def test_unknown_demographics_fields_are_422(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    enable_demographics(service, team)
    info = f"/v2/user/{user['user_id']}/info"
    address = {"first_line": "1 Elm St", "zip_code": "10001", "state": "NY", "city": "NYC"}
    with nothing_changes(service, client, team, user["user_id"]):
        top = client.patch(info, json={"favourite_colour": "teal"}, headers=team.headers)
        nested = client.patch(
            info, json={"address": {**address, "county": "New York"}}, headers=team.headers
        )
    validation_error(top, ["body", "favourite_colour"], "extra_forbidden", secret="teal")
    # (`country` and `zip` are accepted: the official client sends them, compatibility.md.)
    validation_error(nested, ["body", "address", "county"], "extra_forbidden")
    latest = client.get(f"{info}/latest", headers=team.headers)
    assert latest.status_code == 404


# -- time zones and dates ---------------------------------------------------------------

BAD_TIME_ZONES = [
    pytest.param("Mars/Olympus", "value_error", id="mars"),
    pytest.param("utc+2", "value_error", id="utc+2"),
    pytest.param("GMT+2:00", "value_error", id="gmt-offset"),
    pytest.param("europe/berlin", "value_error", id="lower-case"),
    pytest.param("Europe/Berlin ", "value_error", id="trailing-space"),
    pytest.param("", "value_error", id="empty"),
    pytest.param("A/" + "b" * 63, "string_too_long", id="65-chars"),
    pytest.param(2, "string_type", id="number"),
]


def test_an_invalid_iana_time_zone_is_422(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    for operation in ["create", "patch"]:
        for case in BAD_TIME_ZONES:
            value, error_type = case.values
            assert error_type is None or isinstance(error_type, str)
            with case_named(f"{operation}-{case.id}"):
                with nothing_changes(service, client, team, user["user_id"]):
                    if operation == "create":
                        response = client.post(
                            "/v2/user",
                            json={"client_user_id": "tz", "fallback_time_zone": value},
                            headers=team.headers,
                        )
                    else:
                        response = client.patch(
                            f"/v2/user/{user['user_id']}",
                            json={"fallback_time_zone": value},
                            headers=team.headers,
                        )
                validation_error(response, ["body", "fallback_time_zone"], error_type)


def test_an_invalid_time_zone_is_not_echoed(
    client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    response = client.patch(
        f"/v2/user/{user['user_id']}",
        json={"fallback_time_zone": "Pacific/Atlantis"},
        headers=team.headers,
    )
    validation_error(response, ["body", "fallback_time_zone"], secret="Pacific/Atlantis")


BAD_DATES = [
    pytest.param("2023-02-30", id="feb-30"),
    pytest.param("2024-13-01", id="month-13"),
    pytest.param("2023-1-5", id="unpadded"),
    pytest.param("01/02/2023", id="slashes"),
    pytest.param("2023-01-05T10:00:00", id="datetime"),
    pytest.param("", id="empty"),
    pytest.param(20230101, id="number"),
    pytest.param(1672531200, id="unix-time"),
    pytest.param(True, id="boolean"),
]


def test_an_impossible_date_is_422(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        for operation in ["create", "patch"]:
            for field in ["fallback_birth_date", "ingestion_start", "ingestion_end"]:
                for case in BAD_DATES:
                    [value] = case.values
                    with case_named(f"{operation}-{field}-{case.id}"):
                        if operation == "create":
                            response = client.post(
                                "/v2/user",
                                json={"client_user_id": "dated", field: value},
                                headers=team.headers,
                            )
                        else:
                            response = client.patch(
                                f"/v2/user/{user['user_id']}",
                                json={field: value},
                                headers=team.headers,
                            )
                        validation_error(
                            response, ["body", field], secret=str(value) if value else None
                        )


@pytest.mark.parametrize(
    "value",
    [
        # Resolved when the test runs (a date at collection is today after midnight).
        pytest.param("tomorrow", id="tomorrow"),
        pytest.param("2999-01-01", id="far-future"),
        pytest.param("1899-12-31", id="before-1900"),
    ],
)
def test_an_unreal_birth_date_is_422(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], value: str
) -> None:
    if value == "tomorrow":
        value = (date.today() + timedelta(days=1)).isoformat()
    with nothing_changes(service, client, team, user["user_id"]):
        created = client.post(
            "/v2/user",
            json={"client_user_id": "born", "fallback_birth_date": value},
            headers=team.headers,
        )
        patched = client.patch(
            f"/v2/user/{user['user_id']}",
            json={"fallback_birth_date": value},
            headers=team.headers,
        )
    for response in (created, patched):
        validation_error(response, ["body", "fallback_birth_date"], "value_error", secret=value)


INVERTED = "ingestion_start must not be after ingestion_end."


def test_ingestion_start_after_end_on_create_is_422(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.post(
            "/v2/user",
            json={
                "client_user_id": "bounded",
                "ingestion_start": "2024-02-01",
                "ingestion_end": "2024-01-31",
            },
            headers=team.headers,
        )
    error = validation_error(response, ["body"], "value_error")
    assert INVERTED in error["msg"]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"ingestion_start": "2024-07-01"}, id="start-after-stored-end"),
        pytest.param({"ingestion_end": "2023-12-31"}, id="end-before-stored-start"),
        pytest.param(
            {"ingestion_start": "2024-03-02", "ingestion_end": "2024-03-01"}, id="both-inverted"
        ),
        pytest.param(
            {"ingestion_start": "2025-01-01", "fallback_time_zone": "UTC"}, id="with-another-field"
        ),
    ],
)
def test_ingestion_bounds_on_patch_are_checked_against_the_stored_ones(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
    change: dict[str, str],
) -> None:
    assert (user["ingestion_start"], user["ingestion_end"]) == ("2024-01-01", "2024-06-30")
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.patch(f"/v2/user/{user['user_id']}", json=change, headers=team.headers)
    # Both bounds in the patch: the model's check (loc body); one bound: the stored other
    # bound is used (loc body.ingestion_start).
    both = {"ingestion_start", "ingestion_end"} <= set(change)
    loc = ["body"] if both else ["body", "ingestion_start"]
    error = validation_error(response, loc, "value_error", secret="2024-07-01")
    assert INVERTED in error["msg"]


# -- undo -------------------------------------------------------------------------------

EXACTLY_ONE = {"detail": "Send exactly one of the query parameters user_id or client_user_id."}


@pytest.mark.parametrize("send", ["neither", "both"])
def test_undo_with_both_or_neither_parameter_is_400(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], send: str
) -> None:
    assert client.delete(f"/v2/user/{user['user_id']}", headers=team.headers).status_code == 200
    params = {"user_id": user["user_id"], "client_user_id": user["client_user_id"]}
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.post(
            "/v2/user/undo_delete", params=params if send == "both" else {}, headers=team.headers
        )
    assert response.status_code == 400
    assert response.json() == EXACTLY_ONE


@pytest.mark.parametrize("bad", ["abc", "", "12345678-1234-1234-1234-12345678901z", "null"])
def test_undo_with_a_malformed_user_id_is_422(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], bad: str
) -> None:
    assert client.delete(f"/v2/user/{user['user_id']}", headers=team.headers).status_code == 200
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.post(
            "/v2/user/undo_delete", params={"user_id": bad}, headers=team.headers
        )
    error = validation_error(response, ["query", "user_id"], "uuid_parsing")
    assert error["input"] == bad  # query inputs are the caller's own, and kept


def test_undo_with_an_overlong_client_user_id_is_422(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        response = client.post(
            "/v2/user/undo_delete", params={"client_user_id": "z" * 256}, headers=team.headers
        )
    validation_error(response, ["query", "client_user_id"], "string_too_long")


def test_undo_of_an_unknown_user_is_404(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    with nothing_changes(service, client, team, user["user_id"]):
        by_id = client.post(
            "/v2/user/undo_delete",
            params={"user_id": "7b7c6a8e-33a4-4c8f-a3a1-0f3e0e9f3b1a"},
            headers=team.headers,
        )
        by_client_id = client.post(
            "/v2/user/undo_delete", params={"client_user_id": "nobody"}, headers=team.headers
        )
    for response in (by_id, by_client_id):
        assert response.status_code == 404
        assert response.json() == {"detail": "User not found."}


GRACE_ENDED = {"detail": "User not found: its deletion grace period has ended."}


@pytest.mark.parametrize("by", ["user_id", "client_user_id"])
def test_undo_after_the_grace_period_is_404(
    service: Service, client: TestClient, team: Team, by: str
) -> None:
    start = datetime.now(UTC)
    with freeze_time(start):
        late = create_user(client, team, "too-late")
        in_time = create_user(client, team, "just-in-time")
        for gone in (late, in_time):
            response = client.delete(f"/v2/user/{gone['user_id']}", headers=team.headers)
            assert response.status_code == 200

    # One second before the end it still works; from the end on it does not.
    with freeze_time(start + timedelta(days=7) - timedelta(seconds=1)):
        response = client.post(
            "/v2/user/undo_delete", params={by: in_time[by]}, headers=team.headers
        )
        assert response.json() == {"success": True}
    for moment in (start + timedelta(days=7), start + timedelta(days=30)):
        with (
            freeze_time(moment),
            nothing_changes(service, client, team, late["user_id"], in_time["user_id"], recorded=1),
        ):
            response = client.post(
                "/v2/user/undo_delete", params={by: late[by]}, headers=team.headers
            )
        assert response.status_code == 404
        # The refusal is recorded on the user's stream, for its deletion report.
        last = list(service.ledger.events.get(UUID(late["user_id"])))[-1]
        assert (type(last).__name__, getattr(last, "reason", None)) == (
            "DeletionUndoRefused",
            "grace_period_ended",
        )
        assert response.json() == GRACE_ENDED


def test_deleting_twice_is_404(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    first = client.delete(f"/v2/user/{user['user_id']}", headers=team.headers)
    assert first.json() == {"success": True}
    with nothing_changes(service, client, team, user["user_id"]):
        second = client.delete(f"/v2/user/{user['user_id']}", headers=team.headers)
    assert second.status_code == 404
    assert "scheduled for deletion" in second.json()["detail"]


# -- empty patches ----------------------------------------------------------------------

EMPTY_PATCH = {"detail": "The patch is empty: send at least one field to change."}


def test_an_empty_patch_is_400(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    enable_demographics(service, team)
    with nothing_changes(service, client, team, user["user_id"]):
        plain = client.patch(f"/v2/user/{user['user_id']}", json={}, headers=team.headers)
        info = client.patch(f"/v2/user/{user['user_id']}/info", json={}, headers=team.headers)
    for response in (plain, info):
        assert response.status_code == 400
        assert response.json() == EMPTY_PATCH


# -- API keys ---------------------------------------------------------------------------

MISSING_KEY = "Missing API key: send the team API key in the x-service-api-key header."


def _key_variants(team_key: str) -> dict[str, str | None]:
    key_id = team_api_key_id(team_key)
    assert key_id is not None
    other_secret = new_key(TEAM_API_KEY)[1].split("_", 2)[2]
    return {
        "missing": None,
        "empty": "",
        "unknown": new_key(TEAM_API_KEY)[1],
        "wrong-secret": f"hlk_{key_id.hex}_{other_secret}",
        "garbage": "not-a-key",
        "truncated": team_key[:-1],
        "extended": team_key + "x",
        "bearer": f"Bearer {team_key}",
        "upper-case": team_key.upper(),
        "revoked": team_key,
    }


BAD_KEY_VARIANTS = [
    "missing",
    "empty",
    "unknown",
    "wrong-secret",
    "garbage",
    "truncated",
    "extended",
    "bearer",
    "upper-case",
    "revoked",
]


def test_a_bad_api_key_is_401(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    ctx = CommandContext.system("test")
    admin = Team(team.team_id, service.teams.issue_team_api_key(ctx, team.team_id).plain)
    keys = _key_variants(team.key)
    user_id = user["user_id"]
    # "revoked" revokes the team's key: it goes last, the other variants are about that key
    # while it is valid.
    for variant in sorted(BAD_KEY_VARIANTS, key=lambda v: v == "revoked"):
        key = keys[variant]
        if variant == "revoked":
            key_id = team_api_key_id(team.key)
            assert key_id is not None
            service.teams.revoke_team_api_key(ctx, key_id)
        headers = {} if key is None else {"x-service-api-key": key}

        with case_named(variant), nothing_changes(service, client, admin, user_id):
            responses = [
                client.get("/v2/user", headers=headers),
                client.get(f"/v2/user/{user_id}", headers=headers),
                client.post("/v2/user", json={"client_user_id": "intruder"}, headers=headers),
                client.patch(f"/v2/user/{user_id}", json={"ingestion_end": None}, headers=headers),
                client.delete(f"/v2/user/{user_id}", headers=headers),
                client.post("/v2/user/undo_delete", params={"user_id": user_id}, headers=headers),
            ]
        for response in responses:
            where = (variant, str(response.request.url))
            assert response.status_code == 401, (*where, response.text)
            detail = response.json()["detail"]
            assert isinstance(detail, str), where
            if variant in ("missing", "empty"):
                assert detail == MISSING_KEY, where
            else:
                assert detail.startswith("Invalid API key"), (*where, detail)
            if key:
                assert key not in response.text, where
        listed = client.get("/v2/user", headers=admin.headers).json()
        assert listed["total"] == 1, (variant, listed)


# -- bodies that are not a JSON object --------------------------------------------------

NOT_AN_OBJECT = [
    pytest.param(b"not json", "application/json", "json_invalid", id="garbage-as-json"),
    pytest.param(b'{"client_user_id": "a",}', "application/json", "json_invalid", id="comma"),
    pytest.param(b"not json", None, "model_attributes_type", id="garbage-untyped"),
    pytest.param(b"not json", "text/plain", "model_attributes_type", id="garbage-text"),
    pytest.param(
        b"client_user_id=abc",
        "application/x-www-form-urlencoded",
        "model_attributes_type",
        id="form",
    ),
    pytest.param(
        b'[{"client_user_id": "in-array"}]', "application/json", "model_attributes_type", id="array"
    ),
    pytest.param(b'"client_user_id"', "application/json", "model_attributes_type", id="string"),
    pytest.param(b"null", "application/json", "model_attributes_type", id="null"),
    pytest.param(b"", "application/json", "missing", id="empty-json"),
    pytest.param(b"", None, "missing", id="empty-untyped"),
]


def test_a_body_that_is_not_a_json_object_is_422(
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
) -> None:
    enable_demographics(service, team)
    for target in ["create", "patch", "patch_info"]:
        method, path = {
            "create": ("POST", "/v2/user"),
            "patch": ("PATCH", f"/v2/user/{user['user_id']}"),
            "patch_info": ("PATCH", f"/v2/user/{user['user_id']}/info"),
        }[target]
        for case in NOT_AN_OBJECT:
            content, content_type, error_type = case.values
            assert error_type is None or isinstance(error_type, str)
            case_id = f"{target}-{case.id}"
            headers = {**team.headers, **({"content-type": content_type} if content_type else {})}
            with case_named(case_id):
                with nothing_changes(service, client, team, user["user_id"]):
                    response = client.request(method, path, content=content, headers=headers)
                error = validation_error(response, response.json()["detail"][0]["loc"], error_type)
            assert error["loc"][0] == "body", (case_id, error)
            if error_type != "json_invalid":
                assert error["loc"] == ["body"], (case_id, error)
            assert b"in-array" not in response.content, case_id


# -- query parameters of the list --------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "loc", "error_type"),
    [
        ({"offset": "-1"}, ["query", "offset"], "greater_than_equal"),
        ({"offset": "first"}, ["query", "offset"], "int_parsing"),
        ({"limit": "0"}, ["query", "limit"], "greater_than_equal"),
        ({"limit": "501"}, ["query", "limit"], "less_than_equal"),
        ({"limit": "1.5"}, ["query", "limit"], "int_parsing"),
    ],
)
def test_bad_list_parameters_are_422(
    service: Service,
    client: TestClient,
    team: Team,
    params: dict[str, str],
    loc: list[str],
    error_type: str,
) -> None:
    response = client.get("/v2/user", params=params, headers=team.headers)
    error = validation_error(response, loc, error_type)
    assert error["input"] == next(iter(params.values()))


def test_an_offset_beyond_any_integer_column_is_422(client: TestClient, team: Team) -> None:
    response = client.get("/v2/user", params={"offset": str(2**63)}, headers=team.headers)
    validation_error(response, ["query", "offset"])
