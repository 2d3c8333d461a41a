"""The management API's behaviour (spec 2.12, endpoint 13, 5, 8, 9; gaps.md Conventions and
Management API), over HTTP. Who may call what is in test_management_permissions.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.cursors import CursorCodec
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import custom_credentials, pending_erasures
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.keys import hash_key
from httpx import Response
from sqlalchemy import select

from tests.recorded import logged_events

TEAM_FIELDS = {"id", "name", "created_on", "region", "org_id", "settings", "features"}
KEY_FIELDS = {"id", "label", "role", "team_role_bindings", "created_on"}
EMPTY_SETTINGS = {"logo_url": None, "brand_information": None}
INVALID_CURSOR = {
    "detail": {
        "error_type": "INVALID_CURSOR",
        "error_message": "next_cursor is not a cursor this listing issued.",
    }
}
TEAM_NOT_FOUND = {"detail": "Team not found."}
KEY_NOT_FOUND = {"detail": "Key not found."}
INVALID_KEY = {"detail": "Invalid management key."}
BRAND = {
    "company_name": "Acme Health",
    "company_website": "https://acme.example/about",
    "support_email": "support@acme.example",
    "support_contact": "+1 555 0100",
    "company_address": "1 Main St, Springfield",
    "brand_color": "#1A2b3C",
}


@dataclass
class Org:
    """The bootstrapped organization: its org key, its first team (us) and that team's key."""

    service: Service
    api: TestClient
    team_api: TestClient
    org_id: UUID
    team_id: UUID
    team_key: str
    key: str
    key_id: UUID

    def url(self, path: str = "") -> str:
        return f"/v1/org/{self.org_id}{path}"

    def call(self, method: str, path: str = "", key: str | None = None, **kwargs: Any) -> Response:
        headers = {"X-Management-Key": key or self.key, **kwargs.pop("headers", {})}
        return self.api.request(method, self.url(path), headers=headers, **kwargs)

    def create_team(self, name: str, region: str = "us", **body: Any) -> dict[str, Any]:
        response = self.call("POST", "/team", json={"name": name, "region": region, **body})
        assert response.status_code == 200, response.text
        return response.json()

    def create_key(
        self, role: str = "org_admin", teams: Sequence[Any] = (), label: str = "a key"
    ) -> dict[str, Any]:
        body = {
            "label": label,
            "role": role,
            "team_role_bindings": [{"team_id": str(t)} for t in teams],
        }
        response = self.call("POST", "/management_key", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def create_user(self, client_user_id: str, key: str | None = None) -> str:
        response = self.team_api.post(
            "/v2/user",
            json={"client_user_id": client_user_id},
            headers={"x-service-api-key": key or self.team_key},
        )
        assert response.status_code == 200, response.text
        return response.json()["user_id"]

    def team_api_status(self, key: str) -> int:
        return self.team_api.get("/v2/user", headers={"x-service-api-key": key}).status_code

    def event_log(self) -> bytes:
        return b"".join(n.state for n in self.service.recorder.select_notifications(1, 100_000))

    def events(self, aggregate_id: Any) -> list[tuple[str, str, str]]:
        """(event class, actor, request id) of each event of the aggregate, in order."""
        return [
            (type(e).__qualname__, e.actor, e.request_id)
            for e in logged_events(self.service.ledger, UUID(str(aggregate_id)))
        ]


def _org(service: Service) -> Iterator[Org]:
    boot = service.bootstrap()
    assert boot is not None
    with (
        TestClient(create_management_api(service), raise_server_exceptions=False) as api,
        TestClient(create_team_api(service), raise_server_exceptions=False) as team_api,
    ):
        yield Org(
            service,
            api,
            team_api,
            boot.org_id,
            boot.team_id,
            boot.team_api_key.plain,
            boot.management_key.plain,
            boot.management_key.key_id,
        )


@pytest.fixture
def org(service: Service) -> Iterator[Org]:
    yield from _org(service)


@pytest.fixture
def small_org(settings: Settings) -> Iterator[Org]:
    """An organization on a service that accepts request bodies up to 2048 bytes."""
    service = build_service(settings.model_copy(update={"max_body_bytes": 2048}))
    try:
        yield from _org(service)
    finally:
        service.close()


def _validation(response: Response, case: object = None) -> list[dict[str, Any]]:
    """The 422's errors; `case` names the case in a failure's message."""
    assert response.status_code == 422, (case, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail, (case, detail)
    for error in detail:
        assert set(error) == {"type", "loc", "msg", "input"}, (case, error)
    return detail


def _locs(response: Response, case: object = None) -> list[list[Any]]:
    return [error["loc"] for error in _validation(response, case)]


# -- the organization ------------------------------------------------------------------------


def test_get_and_rename_the_organization(org: Org) -> None:
    got = org.call("GET")
    assert got.status_code == 200
    assert set(got.json()) == {"id", "name", "created_on"}
    assert got.json()["id"] == str(org.org_id)
    assert got.json()["name"] == "Default organization"

    patched = org.call("PATCH", json={"name": "Acme Health Inc."})
    assert patched.status_code == 200
    assert patched.json() == {**got.json(), "name": "Acme Health Inc."}
    assert org.call("GET").json()["name"] == "Acme Health Inc."


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, ["body", "name"]),
        ({"name": ""}, ["body", "name"]),
        ({"name": "x" * 256}, ["body", "name"]),
        ({"name": "x", "surprise": 1}, ["body", "surprise"]),
    ],
)
def test_organization_patch_is_validated(org: Org, body: dict[str, Any], loc: list[str]) -> None:
    assert _locs(org.call("PATCH", json=body)) == [loc]
    assert org.call("GET").json()["name"] == "Default organization"


# -- teams -------------------------------------------------------------------------------------


def test_create_a_team_with_settings_per_environment(org: Org) -> None:
    sandbox = {"logo_url": "https://cdn.acme.example/logo.png", "brand_information": BRAND}
    production = {"logo_url": "https://cdn.acme.example/prod.png", "brand_information": None}
    created = org.call(
        "POST",
        "/team",
        json={"name": "Acme EU", "region": "eu", "sandbox": sandbox, "production": production},
    )
    assert created.status_code == 200, created.text
    team = created.json()
    assert set(team) == TEAM_FIELDS
    UUID(team["id"])
    assert (team["name"], team["region"], team["org_id"]) == ("Acme EU", "eu", str(org.org_id))
    assert team["features"] == []
    assert team["created_on"].endswith(("Z", "+00:00"))
    assert team["settings"] == {"sandbox": sandbox, "production": production}
    assert org.call("GET", f"/team/{team['id']}").json() == team


def test_a_team_takes_its_settings_as_its_answers_hold_them(org: Org) -> None:
    """Under `settings` (the answers' form) as well as at the top level (issue 34): an
    answer's settings can be sent back as they are."""
    sandbox = {"logo_url": "https://cdn.acme.example/logo.png", "brand_information": BRAND}
    team = org.create_team("Nested", "us", settings={"sandbox": sandbox})
    assert team["settings"] == {"sandbox": sandbox, "production": EMPTY_SETTINGS}
    copy = org.create_team("Copy", "eu", settings=team["settings"])
    assert copy["settings"] == team["settings"]
    production = {"logo_url": "https://cdn.acme.example/p.png", "brand_information": None}
    patched = org.call(
        "PATCH", f"/team/{copy['id']}", json={"settings": {"production": production}}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["settings"] == {"sandbox": sandbox, "production": production}
    # Both forms at once, for different environments.
    both = org.create_team("Both", "us", sandbox=sandbox, settings={"production": production})
    assert both["settings"] == {"sandbox": sandbox, "production": production}


def test_an_environment_given_in_both_places_is_a_422_and_changes_nothing(org: Org) -> None:
    team = org.create_team("Once", "us")
    sandbox = {"logo_url": "https://cdn.acme.example/logo.png", "brand_information": None}
    twice = {"sandbox": sandbox, "settings": {"sandbox": sandbox}}
    before = org.service.recorder.max_notification_id()
    for method, path, body in (
        ("POST", "/team", {"name": "Twice", "region": "us", **twice}),
        ("PATCH", f"/team/{team['id']}", twice),
    ):
        detail = _validation(org.call(method, path, json=body))
        assert [e["loc"] for e in detail] == [["body"]], detail
        assert "sandbox is given twice" in detail[0]["msg"]
    bad = {"settings": {"sandbox": {"brand_information": {"company_name": "No logo"}}}}
    assert _locs(org.call("PATCH", f"/team/{team['id']}", json=bad)) == [
        ["body", "settings", "sandbox"]
    ]
    unknown = {"settings": {"staging": sandbox}}
    assert _locs(org.call("PATCH", f"/team/{team['id']}", json=unknown)) == [
        ["body", "settings", "staging"]
    ]
    empty = org.call("PATCH", f"/team/{team['id']}", json={"settings": {}})
    assert empty.status_code == 400, empty.text
    assert org.service.recorder.max_notification_id() == before
    assert org.call("GET", f"/team/{team['id']}").json() == team


def test_a_team_created_without_settings_has_empty_ones(org: Org) -> None:
    team = org.create_team("Bare", "us")
    assert team["settings"] == {"sandbox": EMPTY_SETTINGS, "production": EMPTY_SETTINGS}


def test_logo_url_is_required_when_a_company_name_is_set(org: Org) -> None:
    body = {"name": "No logo", "region": "us", "production": {"brand_information": BRAND}}
    detail = _validation(org.call("POST", "/team", json=body))
    assert [(e["loc"], e["type"]) for e in detail] == [(["body", "production"], "value_error")]
    assert "logo_url is required" in detail[0]["msg"]
    # Brand information without a company name needs no logo.
    without_name = {**BRAND, "company_name": None}
    org.create_team("Fine", "us", production={"brand_information": without_name})


BAD_BRAND_COLORS = ["red", "#12345", "#1234567", "#GG0000", "123456", "#12 345"]


def test_brand_color_must_be_a_hex_rgb(org: Org) -> None:
    # Refusals: every color against the one organization.
    for color in BAD_BRAND_COLORS:
        case = color
        settings = {"brand_information": {"brand_color": color}}
        response = org.call(
            "POST", "/team", json={"name": "x", "region": "us", "sandbox": settings}
        )
        locs = _locs(response, case)
        assert locs == [["body", "sandbox", "brand_information", "brand_color"]], (case, locs)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("support_email", "not an e-mail"),
        ("company_website", "javascript:alert(1)"),
        ("company_name", ""),
        ("surprise", "x"),
    ],
)
def test_brand_information_fields_are_validated(org: Org, field: str, value: str) -> None:
    settings = {"logo_url": "https://cdn.acme.example/l.png", "brand_information": {field: value}}
    response = org.call("POST", "/team", json={"name": "x", "region": "us", "sandbox": settings})
    assert _locs(response) == [["body", "sandbox", "brand_information", field]]


@pytest.mark.parametrize("region", ["asia", "US", "", None, "us,eu"])
def test_team_region_is_us_or_eu(org: Org, region: str | None) -> None:
    response = org.call("POST", "/team", json={"name": "Nowhere", "region": region})
    assert _locs(response) == [["body", "region"]]
    assert org.call("GET", "/team").json()["teams"] == [
        org.call("GET", f"/team/{org.team_id}").json()
    ]


def test_team_names_need_not_be_unique(org: Org) -> None:
    first = org.create_team("Twins", "us")
    second = org.create_team("Twins", "eu")
    assert first["id"] != second["id"]
    listed = org.call("GET", "/team", params={"search_query": "Twins"}).json()["teams"]
    assert [t["id"] for t in listed] == [first["id"], second["id"]]


def test_patch_a_team_name_and_one_environment(org: Org) -> None:
    sandbox = {"logo_url": "https://cdn.acme.example/logo.png", "brand_information": BRAND}
    team = org.create_team("Before", "eu", sandbox=sandbox)
    production = {"logo_url": "https://cdn.acme.example/p.png", "brand_information": None}
    patched = org.call(
        "PATCH", f"/team/{team['id']}", json={"name": "After", "production": production}
    )
    assert patched.status_code == 200, patched.text
    expected = {
        **team,
        "name": "After",
        "settings": {"sandbox": sandbox, "production": production},
    }
    assert patched.json() == expected
    assert org.call("GET", f"/team/{team['id']}").json() == expected


def test_patch_only_the_settings_of_a_team(org: Org) -> None:
    """Team update accepts brand information (spec 4, known additions) without a rename."""
    team = org.create_team("Keeps its name", "us")
    sandbox = {"logo_url": "https://cdn.acme.example/l.png", "brand_information": BRAND}
    patched = org.call("PATCH", f"/team/{team['id']}", json={"sandbox": sandbox})
    assert patched.status_code == 200, patched.text
    assert patched.json()["name"] == "Keeps its name"
    assert patched.json()["settings"] == {"sandbox": sandbox, "production": EMPTY_SETTINGS}


def test_patch_a_team_with_invalid_settings_changes_nothing(org: Org) -> None:
    team = org.create_team("Stable", "us")
    body = {"name": "Changed", "sandbox": {"brand_information": {"company_name": "No logo"}}}
    assert _locs(org.call("PATCH", f"/team/{team['id']}", json=body)) == [["body", "sandbox"]]
    assert org.call("GET", f"/team/{team['id']}").json() == team


def test_an_empty_patch_is_a_clear_400(org: Org) -> None:
    """Like the team API's empty user patch (gaps.md Users): 400 with a plain detail."""
    team = org.create_team("Untouched", "us")
    before = org.service.recorder.max_notification_id()
    for path in (f"/team/{team['id']}", f"/management_key/{org.key_id}"):
        response = org.call("PATCH", path, json={})
        assert (response.status_code, response.json()) == (
            400,
            {"detail": "The patch is empty: send at least one field to change."},
        )
    assert org.call("GET", f"/team/{team['id']}").json() == team
    assert org.service.recorder.max_notification_id() == before


def test_unknown_team_is_404(org: Org) -> None:
    for method in ("GET", "PATCH", "DELETE"):
        response = org.call(method, f"/team/{uuid4()}", json={"name": "x"})
        assert (response.status_code, response.json()) == (404, TEAM_NOT_FOUND)


# -- listing teams (endpoint 13) ---------------------------------------------------------------


def _page(org: Org, key: str | None = None, **params: Any) -> Response:
    return org.call("GET", "/team", key=key, params=params)


def _all_pages(org: Org, **params: Any) -> tuple[list[str], list[int]]:
    ids: list[str] = []
    sizes: list[int] = []
    cursor = None
    for _ in range(50):
        response = _page(org, **params, **({"next_cursor": cursor} if cursor else {}))
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"teams", "next_cursor"}
        ids += [team["id"] for team in body["teams"]]
        sizes.append(len(body["teams"]))
        cursor = body["next_cursor"]
        if cursor is None:
            return ids, sizes
    raise AssertionError("the cursor never ran out")


def test_team_list_shape(org: Org) -> None:
    """Spec 2.12: teams and next_cursor, both required; a team has id, name, created_on,
    region."""
    body = _page(org).json()
    assert body["next_cursor"] is None
    [team] = body["teams"]
    assert set(team) == TEAM_FIELDS
    assert (team["id"], team["name"], team["region"]) == (str(org.team_id), "Default team", "us")


def test_next_cursor_pages_through_every_team_exactly_once(org: Org) -> None:
    for n in range(11):
        org.create_team(f"Team {n:02}", "eu" if n % 2 == 0 else "us")
    everything = _page(org, limit=100).json()["teams"]
    assert len(everything) == 12
    ids, sizes = _all_pages(org, limit=4)
    assert sizes == [4, 4, 4]  # no empty last page
    assert ids == [team["id"] for team in everything]
    assert len(set(ids)) == 12

    eu_ids, eu_sizes = _all_pages(org, limit=4, region="eu")
    assert eu_sizes == [4, 2]
    assert eu_ids == [team["id"] for team in everything if team["region"] == "eu"]

    found, found_sizes = _all_pages(org, limit=1, search_query="team 0")
    assert found_sizes == [1] * 10
    assert found == [t["id"] for t in everything if t["name"].startswith("Team 0")]


def test_region_may_repeat(org: Org) -> None:
    eu = org.create_team("In Europe", "eu")
    both = _page(org, region=["us", "eu"]).json()["teams"]
    assert [t["id"] for t in both] == [str(org.team_id), eu["id"]]
    assert [t["id"] for t in _page(org, region="eu").json()["teams"]] == [eu["id"]]
    assert [t["id"] for t in _page(org, region=["us"]).json()["teams"]] == [str(org.team_id)]
    assert _locs(_page(org, region=["us", "asia"])) == [["query", "region", 1]]


PUNCTUATED = "Ann\u2019s (R&D) / Lab: 1 | 2, 'x' a_b-c"


# (query, expected): the names of the teams found, in order.
SEARCHES: list[tuple[str, list[str]]] = [
    ("Zürich", ["Zürich Lab"]),
    ("ZÜRICH", ["Zürich Lab"]),
    ("rich l", ["Zürich Lab"]),
    (PUNCTUATED, [PUNCTUATED]),
    *[(char, [PUNCTUATED]) for char in "(),/:'|&_-\u2019"],
    ("Lab", ["Zürich Lab", PUNCTUATED]),
    ("", ["Default team", "Zürich Lab", PUNCTUATED, "Plain 100"]),
    ("x" * 80, []),
]


def test_search_query_matches_names_with_the_allowed_characters(org: Org) -> None:
    for name in ("Zürich Lab", PUNCTUATED, "Plain 100"):
        org.create_team(name, "eu")
    # Read-only searches: every query against the same teams.
    for query, expected in SEARCHES:
        case = query
        response = _page(org, search_query=query)
        assert response.status_code == 200, (case, response.text)
        names = [team["name"] for team in response.json()["teams"]]
        assert names == expected, (case, names)


REFUSED_QUERIES = ["<", ";", "%", "a>b", '"', "*", "a\nb", "tab\t", "x" * 81]


def test_search_query_refuses_other_characters_and_length(org: Org) -> None:
    # Read-only refusals: every query against the one organization.
    for query in REFUSED_QUERIES:
        case = query
        locs = _locs(_page(org, search_query=query), case)
        assert locs == [["query", "search_query"]], (case, locs)


def _split(cursor: str) -> tuple[str, str]:
    body, _, signature = cursor.partition(".")
    return body, signature


def _decoded(cursor: str) -> dict[str, Any]:
    body = _split(cursor)[0]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


@pytest.fixture
def cursor(org: Org) -> str:
    for n in range(4):
        org.create_team(f"Paged {n}", "us")
    token = _page(org, limit=2).json()["next_cursor"]
    assert isinstance(token, str)
    assert _page(org, limit=2, next_cursor=token).status_code == 200
    return token


def _flip(text: str, index: int) -> str:
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1 :]


def test_tampered_cursors_are_400(org: Org, cursor: str) -> None:
    body, signature = _split(cursor)
    tampered = [
        f"{_flip(body, len(body) // 2)}.{signature}",
        f"{body}.{_flip(signature, 0)}",
        f"{body}.",
        body,
        f".{signature}",
        "not-a-cursor",
        ".",
        cursor + "x",
    ]
    for token in tampered:
        response = _page(org, limit=2, next_cursor=token)
        assert (response.status_code, response.json()) == (400, INVALID_CURSOR), token


def test_forged_cursors_are_400(org: Org, cursor: str) -> None:
    content = _decoded(cursor)
    # The same content, signed with another secret (another deployment's cursor)...
    foreign = CursorCodec(b"another deployment's secret....!").encode(content["p"], content["s"])
    # ...or hand-made, pointing at the start of the list.
    payload = {**content, "p": {**content["p"], "c": "2000-01-01T00:00:00+00:00"}}
    raw = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    for token in (foreign, f"{raw}.{_split(cursor)[1]}", f"{raw}.AAAAAAAAAAAAAAAAAAAAAAAA"):
        response = _page(org, limit=2, next_cursor=token)
        assert (response.status_code, response.json()) == (400, INVALID_CURSOR)


def test_a_cursor_from_another_listing_is_400(org: Org, cursor: str) -> None:
    """A cursor is bound to its filters, its limit and the key that listed."""
    other_key = org.create_key("org_admin", label="another org key")["key"]
    listings: list[tuple[str | None, dict[str, Any]]] = [
        (None, {"limit": 3}),
        (None, {"limit": 2, "region": "us"}),
        (None, {"limit": 2, "search_query": "Paged"}),
        (other_key, {"limit": 2}),
    ]
    for key, params in listings:
        response = _page(org, key=key, next_cursor=cursor, **params)
        assert (response.status_code, response.json()) == (400, INVALID_CURSOR), params


def test_a_non_ascii_cursor_is_400(org: Org, cursor: str) -> None:
    response = _page(org, limit=2, next_cursor=f"{_split(cursor)[0]}.é")
    assert (response.status_code, response.json()) == (400, INVALID_CURSOR)


# -- deleting a team ---------------------------------------------------------------------------


def test_deleting_a_team_deletes_its_users_and_stops_its_keys(org: Org) -> None:
    users = [org.create_user(f"member-{n}") for n in range(2)]
    gone = org.create_user("already-deleted")
    deleted_before = org.team_api.delete(
        f"/v2/user/{gone}", headers={"x-service-api-key": org.team_key}
    )
    assert deleted_before.status_code == 200
    extra = org.call("POST", "/team_api_keys/production/us", json={"team_id": str(org.team_id)})
    extra_key = extra.json()["key"]
    assert org.team_api_status(extra_key) == 200
    bound = org.create_key("team_admin", [org.team_id])["key"]

    response = org.call("DELETE", f"/team/{org.team_id}")
    assert (response.status_code, response.json()) == (
        200,
        {"success": True, "deleted_users": 2},
    )

    for user_id in [*users, gone]:
        assert org.service.user_queries.status(UUID(user_id)) == "pending_erasure"
        assert org.service.users.load(org.team_id, UUID(user_id)).status == "pending_erasure"
    with org.service.db.read() as conn:
        due = set(conn.execute(select(pending_erasures.c.user_id)).scalars())
    assert due == {UUID(u) for u in [*users, gone]}

    assert org.team_api_status(org.team_key) == 401
    assert org.team_api_status(extra_key) == 401
    assert _page(org).json() == {"teams": [], "next_cursor": None}
    team_paths = [
        ("GET", f"/team/{org.team_id}"),
        ("DELETE", f"/team/{org.team_id}"),
        ("GET", f"/team/{org.team_id}/features"),
        ("PUT", f"/team/{org.team_id}/features/demographics"),
        ("GET", f"/team_custom_credentials/{org.team_id}"),
        ("POST", f"/team_custom_credentials/{org.team_id}/oura/prepare"),
    ]
    for method, path in team_paths:
        response = org.call(method, path)
        assert (response.status_code, response.json()) == (404, TEAM_NOT_FOUND), path
    for key in (org.key, bound):
        listed = org.call(
            "GET", "/team_api_keys/production/us", key, params={"team_id": str(org.team_id)}
        )
        assert (listed.status_code, listed.json()) == (404, TEAM_NOT_FOUND)
    # The team key bound only to it still authenticates and sees nothing.
    assert _page(org, key=bound).json() == {"teams": [], "next_cursor": None}


# -- management keys ---------------------------------------------------------------------------


def test_a_created_management_key_is_shown_once_and_works(org: Org) -> None:
    created = org.call("POST", "/management_key", json={"label": "ci", "role": "org_admin"})
    assert created.status_code == 200, created.text
    body = created.json()
    assert set(body) == {*KEY_FIELDS, "key"}
    assert (body["label"], body["role"], body["team_role_bindings"]) == ("ci", "org_admin", [])
    plain = body["key"]
    assert plain.startswith("hlm_")

    listed = org.call("GET", "/management_key")
    assert listed.status_code == 200
    keys = listed.json()["management_keys"]
    assert [k["id"] for k in keys] == [str(org.key_id), body["id"]]
    assert all(set(k) == KEY_FIELDS for k in keys)
    assert {k: v for k, v in body.items() if k != "key"} in keys
    assert plain not in listed.text
    assert hash_key(plain) not in listed.text

    assert org.call("GET", key=plain).status_code == 200


def test_only_hashes_of_keys_are_stored(org: Org) -> None:
    management = org.create_key("team_admin", [org.team_id])["key"]
    team_api = org.call("POST", "/team_api_keys/sandbox/us", json={"team_id": str(org.team_id)})
    plains = [org.key, org.team_key, management, team_api.json()["key"]]
    log = org.event_log()
    for plain in plains:
        assert plain.encode() not in log
        secret = plain.split("_", 2)[2]  # hl?_<key id>_<secret>
        assert secret.encode() not in log
        assert hash_key(plain).encode() in log


# (body, loc); a "TEAM" binding stands for the organization's team.
BAD_MANAGEMENT_KEYS: list[tuple[dict[str, Any], list[str]]] = [
        ({"label": "t", "role": "team_admin"}, ["body", "team_role_bindings"]),
        ({"label": "t", "role": "team_admin", "team_role_bindings": []},
         ["body", "team_role_bindings"]),
        ({"label": "t", "role": "org_admin", "team_role_bindings": "TEAM"},
         ["body", "team_role_bindings"]),
        ({"label": "t", "role": "root"}, ["body", "role"]),
        ({"label": "", "role": "org_admin"}, ["body", "label"]),
        ({"role": "org_admin"}, ["body", "label"]),
]  # fmt: skip


def test_management_key_roles_and_bindings_are_validated(org: Org) -> None:
    # Refusals create no key: every case against the one organization, each checked
    # against its one key.
    for body, loc in BAD_MANAGEMENT_KEYS:
        case = body
        if body.get("team_role_bindings") == "TEAM":
            body = {**body, "team_role_bindings": [{"team_id": str(org.team_id)}]}
        locs = _locs(org.call("POST", "/management_key", json=body), case)
        assert locs == [loc], (case, locs)
        keys = org.call("GET", "/management_key").json()["management_keys"]
        assert len(keys) == 1, (case, keys)


def test_binding_a_team_outside_the_organization_is_422(org: Org) -> None:
    ctx = CommandContext.system("test:setup")
    other_org = org.service.teams.create_organization(ctx, "Other org")
    foreign_team = org.service.teams.create_team(ctx, other_org, "Their team", "us")
    for team_id in (foreign_team, uuid4()):
        body = {
            "label": "sneaky",
            "role": "team_admin",
            "team_role_bindings": [{"team_id": str(org.team_id)}, {"team_id": str(team_id)}],
        }
        detail = _validation(org.call("POST", "/management_key", json=body))
        assert [e["loc"] for e in detail] == [["body", "team_role_bindings"]]
        assert "not in this organization" in detail[0]["msg"]
    assert len(org.call("GET", "/management_key").json()["management_keys"]) == 1


def test_a_key_bound_to_two_teams_reaches_both_and_only_them(org: Org) -> None:
    second = org.create_team("Second", "eu")
    third = org.create_team("Third", "us")
    created = org.create_key("team_admin", [org.team_id, second["id"]], label="two teams")
    assert {b["team_id"] for b in created["team_role_bindings"]} == {
        str(org.team_id),
        second["id"],
    }
    key = created["key"]
    for team_id in (org.team_id, second["id"]):
        assert org.call("GET", f"/team/{team_id}", key).status_code == 200
    assert org.call("GET", f"/team/{third['id']}", key).json() == TEAM_NOT_FOUND
    listed = [t["id"] for t in _page(org, key=key).json()["teams"]]
    assert listed == [str(org.team_id), second["id"]]


def test_patch_relabels_and_rebinds_a_key(org: Org) -> None:
    second = org.create_team("Second", "eu")
    created = org.create_key("team_admin", [org.team_id], label="before")
    key, key_id = created.pop("key"), created["id"]

    relabelled = org.call("PATCH", f"/management_key/{key_id}", json={"label": "after"})
    assert relabelled.status_code == 200, relabelled.text
    assert relabelled.json() == {**created, "label": "after"}

    both = {"label": "after", "team_role_bindings": [{"team_id": second["id"]}]}
    rebound = org.call("PATCH", f"/management_key/{key_id}", json=both)
    assert rebound.status_code == 200, rebound.text
    assert rebound.json()["team_role_bindings"] == [{"team_id": second["id"]}]
    # Effective at once.
    assert org.call("GET", f"/team/{org.team_id}", key).json() == TEAM_NOT_FOUND
    assert org.call("GET", f"/team/{second['id']}", key).status_code == 200
    listed = {k["id"]: k for k in org.call("GET", "/management_key").json()["management_keys"]}
    assert listed[key_id] == rebound.json()


def test_patch_rebinds_a_key_without_a_label(org: Org) -> None:
    second = org.create_team("Second", "eu")
    created = org.create_key("team_admin", [org.team_id], label="kept")
    body = {"team_role_bindings": [{"team_id": str(org.team_id)}, {"team_id": second["id"]}]}
    rebound = org.call("PATCH", f"/management_key/{created['id']}", json=body)
    assert rebound.status_code == 200, rebound.text
    assert rebound.json()["label"] == "kept"
    assert {b["team_id"] for b in rebound.json()["team_role_bindings"]} == {
        str(org.team_id),
        second["id"],
    }


def test_patch_keeps_the_role_rules(org: Org) -> None:
    team_key = org.create_key("team_admin", [org.team_id])
    for key_id, bindings in [
        (org.key_id, [{"team_id": str(org.team_id)}]),  # an org key gets no bindings
        (team_key["id"], []),  # a team key keeps at least one
        (team_key["id"], [{"team_id": str(uuid4())}]),  # only this organization's teams
    ]:
        body = {"label": "x", "team_role_bindings": bindings}
        response = org.call("PATCH", f"/management_key/{key_id}", json=body)
        assert _locs(response) == [["body", "team_role_bindings"]]
    listed = org.call("GET", "/management_key").json()["management_keys"]
    assert [k["label"] for k in listed] == ["first-run org key", "a key"]


def test_unknown_or_foreign_management_key_is_404(org: Org) -> None:
    ctx = CommandContext.system("test:setup")
    other_org = org.service.teams.create_organization(ctx, "Other org")
    foreign = org.service.teams.issue_management_key(
        ctx, other_org, role="org_admin", team_ids=[], label="theirs"
    )
    for key_id in (uuid4(), foreign.key_id):
        patched = org.call("PATCH", f"/management_key/{key_id}", json={"label": "mine"})
        deleted = org.call("DELETE", f"/management_key/{key_id}")
        assert (patched.status_code, patched.json()) == (404, KEY_NOT_FOUND)
        assert (deleted.status_code, deleted.json()) == (404, KEY_NOT_FOUND)
    record = org.service.team_queries.management_key(foreign.key_id)
    assert record is not None and record.revoked is False


def test_revoking_a_management_key_rejects_it_at_once(org: Org) -> None:
    created = org.create_key("org_admin", label="short-lived")
    plain = created["key"]
    assert org.call("GET", key=plain).status_code == 200

    revoked = org.call("DELETE", f"/management_key/{created['id']}")
    assert (revoked.status_code, revoked.json()) == (200, {"success": True})
    response = org.call("GET", key=plain)
    assert (response.status_code, response.json()) == (401, INVALID_KEY)
    listed = org.call("GET", "/management_key").json()["management_keys"]
    assert [k["id"] for k in listed] == [str(org.key_id)]
    # A revoked key can be neither relabelled nor revoked again; never a 500.
    patched = org.call("PATCH", f"/management_key/{created['id']}", json={"label": "zombie"})
    assert (patched.status_code, patched.json()) == (404, KEY_NOT_FOUND)


def test_a_key_can_revoke_itself(org: Org) -> None:
    response = org.call("DELETE", f"/management_key/{org.key_id}")
    assert (response.status_code, response.json()) == (200, {"success": True})
    assert org.call("GET").json() == INVALID_KEY


# -- team API keys -----------------------------------------------------------------------------


def _team_api_keys(org: Org, env: str, region: str, team_id: Any = None) -> list[dict]:
    response = org.call(
        "GET", f"/team_api_keys/{env}/{region}", params={"team_id": str(team_id or org.team_id)}
    )
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"team_api_keys"}
    return response.json()["team_api_keys"]


def test_team_api_keys_per_environment_and_region(org: Org) -> None:
    [bootstrap_key] = _team_api_keys(org, "sandbox", "us")
    assert set(bootstrap_key) == {"id", "team_id", "environment", "region", "created_on"}
    assert _team_api_keys(org, "production", "us") == []

    created = org.call("POST", "/team_api_keys/production/us", json={"team_id": str(org.team_id)})
    assert created.status_code == 200, created.text
    body = created.json()
    assert set(body) == {"id", "team_id", "environment", "region", "key"}
    assert (body["team_id"], body["environment"], body["region"]) == (
        str(org.team_id),
        "production",
        "us",
    )
    assert body["key"].startswith("hlk_")
    assert org.team_api_status(body["key"]) == 200

    [listed] = _team_api_keys(org, "production", "us")
    assert listed["id"] == body["id"]
    assert "key" not in listed
    assert [k["id"] for k in _team_api_keys(org, "sandbox", "us")] == [bootstrap_key["id"]]
    # An eu team's keys live in eu.
    eu = org.create_team("Europe", "eu")
    eu_key = org.call("POST", "/team_api_keys/sandbox/eu", json={"team_id": eu["id"]})
    assert eu_key.status_code == 200
    assert [k["id"] for k in _team_api_keys(org, "sandbox", "eu", eu["id"])] == [
        eu_key.json()["id"]
    ]


def test_as_of_lists_the_team_api_keys_as_they_were(org: Org) -> None:
    """Each environment's keys, recorded after each issue and revocation, answered again
    by `as_of`: a key revoked since is listed while it was in force (its read model row
    is kept; its state comes from the log); never a key's text or hash."""
    recorded: list[tuple[datetime, dict[str, list[dict]]]] = []

    def record() -> None:
        keys = {env: _team_api_keys(org, env, "us") for env in ("sandbox", "production")}
        recorded.append((datetime.now(UTC), keys))

    def issue(env: str) -> str:
        response = org.call("POST", f"/team_api_keys/{env}/us", json={"team_id": str(org.team_id)})
        assert response.status_code == 200, response.text
        key_id: str = response.json()["id"]
        return key_id

    def revoke(env: str, key_id: str) -> None:
        path = f"/team_api_keys/{env}/us/{key_id}"
        response = org.call("DELETE", path, params={"team_id": str(org.team_id)})
        assert response.status_code == 200, response.text

    start = datetime.now(UTC) + timedelta(days=1)  # after the team's creation
    with freeze_time(start) as frozen:
        record()
        made: list[str] = []
        for change in (
            lambda: made.append(issue("production")),
            lambda: made.append(issue("sandbox")),
            lambda: revoke("production", made[0]),
            lambda: made.append(issue("production")),
            lambda: revoke("sandbox", made[1]),
        ):
            frozen.tick(timedelta(minutes=10))
            change()
            record()
        frozen.tick(timedelta(minutes=10))
        assert [k["id"] for k in recorded[2][1]["production"]] == [made[0]]
        for instant, keys in recorded:
            for env in ("sandbox", "production"):
                past = org.call(
                    "GET",
                    f"/team_api_keys/{env}/us",
                    params={"team_id": str(org.team_id), "as_of": instant.isoformat()},
                )
                assert past.status_code == 200, past.text
                assert past.json() == {"team_api_keys": keys[env]}, (instant, env)


def test_as_of_lists_the_management_keys_as_they_were(org: Org) -> None:
    """The organization's keys, recorded after each issue, relabel, rebinding and
    revocation, answered again by `as_of` (a key revoked since listed while in force,
    with its label and bindings as then); never a key's text."""
    recorded: list[tuple[datetime, Any]] = []

    def record() -> None:
        response = org.call("GET", "/management_key")
        assert response.status_code == 200, response.text
        recorded.append((datetime.now(UTC), response.json()))

    def patch(key_id: str, body: dict[str, Any]) -> None:
        response = org.call("PATCH", f"/management_key/{key_id}", json=body)
        assert response.status_code == 200, response.text

    start = datetime.now(UTC) + timedelta(days=1)  # after the organization's creation
    with freeze_time(start) as frozen:
        record()
        other = org.create_team("Other")
        made: list[str] = []
        for change in (
            lambda: made.append(org.create_key("team_admin", [org.team_id], "ci")["id"]),
            lambda: made.append(org.create_key(label="ops")["id"]),
            lambda: patch(made[0], {"label": "ci-2"}),
            lambda: patch(made[0], {"team_role_bindings": [{"team_id": other["id"]}]}),
            lambda: org.call("DELETE", f"/management_key/{made[0]}"),
        ):
            frozen.tick(timedelta(minutes=10))
            change()
            record()
        frozen.tick(timedelta(minutes=10))
        assert made[0] not in json.dumps(recorded[-1][1])
        for instant, answer in recorded:
            past = org.call("GET", "/management_key", params={"as_of": instant.isoformat()})
            assert past.status_code == 200, past.text
            assert past.json() == answer, instant


def test_as_of_lists_and_reads_the_teams_as_they_were(org: Org) -> None:
    """The teams listing (filters and the first page's cursor included) and each team,
    recorded after each creation, rename, feature switch and deletion, answered again
    by `as_of`: a team deleted since is listed and read as it was; one not created yet
    or deleted by then is a 404."""
    queries: list[dict[str, Any]] = [{}, {"limit": 1}, {"region": "eu"}, {"search_query": "alp"}]
    made: list[str] = []
    recorded: list[tuple[datetime, list[Any], dict[str, tuple[int, Any]]]] = []

    def record() -> None:
        lists = []
        for query in queries:
            response = org.call("GET", "/team", params=query)
            assert response.status_code == 200, response.text
            lists.append(response.json())
        each = {}
        for team_id in made:
            response = org.call("GET", f"/team/{team_id}")
            each[team_id] = (response.status_code, response.json())
        recorded.append((datetime.now(UTC), lists, each))

    def ok(response: Response) -> None:
        assert response.status_code == 200, response.text

    start = datetime.now(UTC) + timedelta(days=1)  # after the organization's creation
    with freeze_time(start) as frozen:
        record()
        for change in (
            lambda: made.append(org.create_team("Alpha")["id"]),
            lambda: made.append(org.create_team("Beta", "eu")["id"]),
            lambda: ok(org.call("PATCH", f"/team/{made[0]}", json={"name": "Alpine"})),
            lambda: ok(org.call("PUT", f"/team/{made[1]}/features/demographics")),
            lambda: ok(org.call("DELETE", f"/team/{made[1]}")),
        ):
            frozen.tick(timedelta(minutes=10))
            change()
            record()
        frozen.tick(timedelta(minutes=10))
        assert recorded[-1][2][made[1]] == (404, TEAM_NOT_FOUND)
        for instant, lists, each in recorded:
            at = {"as_of": instant.isoformat()}
            for query, answer in zip(queries, lists, strict=True):
                past = org.call("GET", "/team", params={**query, **at})
                assert past.status_code == 200 and past.json() == answer, (instant, query)
            for team_id in made:
                past = org.call("GET", f"/team/{team_id}", params=at)
                if team_id in each:
                    assert (past.status_code, past.json()) == each[team_id], (instant, team_id)
                elif team_id == made[0]:  # a live team's route: before it existed, a 422
                    assert "before the team existed" in past.json()["detail"][0]["msg"]
                else:  # deleted since: the instant is held to the organization's creation
                    assert (past.status_code, past.json()) == (404, TEAM_NOT_FOUND), instant
        # The first page's cursor, followed as of the instant, gives the rest as then.
        instant, lists, _ = recorded[4]
        at = {"as_of": instant.isoformat()}
        cursor = lists[1]["next_cursor"]
        rest = org.call("GET", "/team", params={"limit": 50, **at}).json()["teams"][1:2]
        second = org.call("GET", "/team", params={"limit": 1, "next_cursor": cursor, **at})
        assert second.status_code == 200 and second.json()["teams"] == rest


def test_as_of_reads_the_organization_and_the_features_as_they_were(org: Org) -> None:
    """The organization and the team's closed-beta switches, recorded after each rename
    and switch, answered again by `as_of`."""
    recorded: list[tuple[datetime, Any, Any]] = []

    def record() -> None:
        named = org.call("GET")
        features = org.call("GET", f"/team/{org.team_id}/features")
        assert named.status_code == features.status_code == 200
        recorded.append((datetime.now(UTC), named.json(), features.json()))

    def ok(response: Response) -> None:
        assert response.status_code == 200, response.text

    start = datetime.now(UTC) + timedelta(days=1)  # after the organization's creation
    with freeze_time(start) as frozen:
        record()
        for change in (
            lambda: ok(org.call("PATCH", json={"name": "Renamed org"})),
            lambda: ok(org.call("PUT", f"/team/{org.team_id}/features/demographics")),
            lambda: ok(org.call("PATCH", json={"name": "Renamed again"})),
            lambda: ok(org.call("DELETE", f"/team/{org.team_id}/features/demographics")),
        ):
            frozen.tick(timedelta(minutes=10))
            change()
            record()
        frozen.tick(timedelta(minutes=10))
        assert recorded[2][2]["enabled"] == ["demographics"] and recorded[-1][2]["enabled"] == []
        for instant, named, features in recorded:
            at = {"as_of": instant.isoformat()}
            assert org.call("GET", params=at).json() == named, instant
            past = org.call("GET", f"/team/{org.team_id}/features", params=at)
            assert past.json() == features, instant


def test_a_team_api_key_outside_the_teams_region_is_422(org: Org) -> None:
    response = org.call("POST", "/team_api_keys/sandbox/eu", json={"team_id": str(org.team_id)})
    detail = _validation(response)
    assert [e["loc"] for e in detail] == [["path", "region"]]
    assert "us" in detail[0]["msg"]
    assert len(_team_api_keys(org, "sandbox", "us")) == 1


@pytest.mark.parametrize(
    ("path", "loc"),
    [
        ("/team_api_keys/staging/us", ["path", "env"]),
        ("/team_api_keys/sandbox/asia", ["path", "region"]),
    ],
)
def test_team_api_key_environment_and_region_are_validated(
    org: Org, path: str, loc: list[str]
) -> None:
    assert _locs(org.call("POST", path, json={"team_id": str(org.team_id)})) == [loc]
    assert _locs(org.call("GET", path, params={"team_id": str(org.team_id)})) == [loc]


def test_revoking_a_team_api_key_rejects_it_at_once(org: Org) -> None:
    created = org.call("POST", "/team_api_keys/sandbox/us", json={"team_id": str(org.team_id)})
    key_id, plain = created.json()["id"], created.json()["key"]
    assert org.team_api_status(plain) == 200
    params = {"team_id": str(org.team_id)}

    revoked = org.call("DELETE", f"/team_api_keys/sandbox/us/{key_id}", params=params)
    assert (revoked.status_code, revoked.json()) == (200, {"success": True})
    response = org.team_api.get("/v2/user", headers={"x-service-api-key": plain})
    assert (response.status_code, response.json()) == (401, {"detail": "Invalid API key."})
    assert org.team_api_status(org.team_key) == 200  # the other key still works
    assert key_id not in [k["id"] for k in _team_api_keys(org, "sandbox", "us")]

    unknown = org.call("DELETE", f"/team_api_keys/sandbox/us/{uuid4()}", params=params)
    assert (unknown.status_code, unknown.json()) == (404, KEY_NOT_FOUND)


def test_a_team_api_key_is_revoked_only_under_its_own_team_environment_and_region(
    org: Org,
) -> None:
    [key] = _team_api_keys(org, "sandbox", "us")
    other = org.create_team("Other", "us")
    for path, team_id in [
        (f"/team_api_keys/sandbox/us/{key['id']}", other["id"]),
        (f"/team_api_keys/production/us/{key['id']}", str(org.team_id)),
        (f"/team_api_keys/sandbox/us/{org.key_id}", str(org.team_id)),  # a management key id
    ]:
        response = org.call("DELETE", path, params={"team_id": team_id})
        assert (response.status_code, response.json()) == (404, KEY_NOT_FOUND), path
    assert org.team_api_status(org.team_key) == 200
    assert org.call("GET").status_code == 200


def test_the_team_api_refusal_of_a_management_key_names_the_key_kind(org: Org) -> None:
    response = org.team_api.get("/v2/user", headers={"x-service-api-key": org.key})
    assert response.status_code == 401
    assert response.json() == {
        "detail": "This is a management key: the team API expects a team API key in the "
        "x-service-api-key header."
    }


# -- closed-beta switches ----------------------------------------------------------------------


def test_feature_switches_toggle_the_closed_beta_demographics(org: Org) -> None:
    user_id = org.create_user("beta-tester")
    path = f"/v2/user/{user_id}/info/latest"
    headers = {"x-service-api-key": org.team_key}

    def demographics() -> Response:
        return org.team_api.get(path, headers=headers)

    off = demographics()
    assert off.status_code == 403
    assert off.json()["detail"]["error_type"] == "FEATURE_NOT_ENABLED"
    features = f"/team/{org.team_id}/features"
    assert org.call("GET", features).json() == {
        "enabled": [],
        "available": ["demographics", "portal_url", "aggregate_query"],
    }

    on = org.call("PUT", f"{features}/demographics")
    assert (on.status_code, on.json()) == (200, {"enabled": ["demographics"]})
    assert demographics().status_code == 404  # enabled; nothing recorded yet
    assert org.call("PUT", f"{features}/portal_url").json() == {
        "enabled": ["demographics", "portal_url"]
    }
    assert org.call("GET", f"/team/{org.team_id}").json()["features"] == [
        "demographics",
        "portal_url",
    ]

    off_again = org.call("DELETE", f"{features}/demographics")
    assert (off_again.status_code, off_again.json()) == (200, {"enabled": ["portal_url"]})
    assert demographics().status_code == 403
    assert _locs(org.call("PUT", f"{features}/teleportation")) == [["path", "feature"]]


# -- custom credentials ------------------------------------------------------------------------

SECRET = "s3cr3t-Value-that-must-never-leave"


def test_as_of_lists_the_custom_credentials_as_they_were(org: Org) -> None:
    """The team's custom credentials, recorded after each prepare, set, delete and
    prepare again, answered again by `as_of`; never a secret."""
    base = f"/team_custom_credentials/{org.team_id}"
    recorded: list[tuple[datetime, Any]] = []

    def record() -> None:
        response = org.call("GET", base)
        assert response.status_code == 200, response.text
        recorded.append((datetime.now(UTC), response.json()))

    def ok(response: Response) -> None:
        assert response.status_code == 200, response.text

    body = {"client_id": "oura-client-42", "client_secret": SECRET}
    start = datetime.now(UTC) + timedelta(days=1)  # after the team's creation
    with freeze_time(start) as frozen:
        record()
        for change in (
            lambda: ok(org.call("POST", f"{base}/oura/prepare")),
            lambda: ok(org.call("POST", f"{base}/withings/prepare")),
            lambda: ok(org.call("PUT", f"{base}/oura", json=body)),
            lambda: ok(org.call("DELETE", f"{base}/withings")),
            lambda: ok(org.call("POST", f"{base}/oura/prepare")),
        ):
            frozen.tick(timedelta(minutes=10))
            change()
            record()
        frozen.tick(timedelta(minutes=10))
        assert recorded[3][1]["credentials"][0]["has_client_secret"] is True
        for instant, answer in recorded:
            past = org.call("GET", base, params={"as_of": instant.isoformat()})
            assert past.status_code == 200 and past.json() == answer, instant
            assert SECRET not in past.text


def test_custom_credentials_prepare_set_list_delete(org: Org) -> None:
    base = f"/team_custom_credentials/{org.team_id}"
    assert org.call("GET", base).json() == {"credentials": []}

    prepared = org.call("POST", f"{base}/oura/prepare")
    assert prepared.status_code == 200, prepared.text
    assert prepared.json() == {
        "provider": "oura",
        "status": "prepared",
        "redirect_uri": "http://127.0.0.1:8000/v2/link/oauth/callback/oura",
    }
    [entry] = org.call("GET", base).json()["credentials"]
    assert {k: v for k, v in entry.items() if k != "updated_at"} == {
        "provider": "oura",
        "status": "prepared",
        "client_id": None,
        "has_client_secret": False,
    }

    body = {"client_id": "oura-client-42", "client_secret": SECRET}
    put = org.call("PUT", f"{base}/oura", json=body)
    assert put.status_code == 200, put.text
    assert set(put.json()) == {"provider", "status", "client_id", "has_client_secret", "updated_at"}
    expected = {
        "provider": "oura",
        "status": "set",
        "client_id": "oura-client-42",
        "has_client_secret": True,
    }
    assert {k: v for k, v in put.json().items() if k != "updated_at"} == expected
    assert SECRET not in put.text

    listed = org.call("GET", base)
    assert listed.json() == {"credentials": [put.json()]}
    assert SECRET not in listed.text
    # The secret is sealed: not in clear in the event log nor in the read model.
    assert SECRET.encode() not in org.event_log()
    with org.service.db.read() as conn:
        rows = conn.execute(select(custom_credentials)).all()
    assert rows and SECRET not in repr(rows)

    deleted = org.call("DELETE", f"{base}/oura")
    assert (deleted.status_code, deleted.json()) == (200, {"success": True})
    assert org.call("GET", base).json() == {"credentials": []}
    again = org.call("DELETE", f"{base}/oura")
    assert again.status_code == 404
    assert isinstance(again.json()["detail"], str)
    # Deleted credentials must be prepared again before they are set.
    assert org.call("PUT", f"{base}/oura", json=body).status_code == 409
    assert org.call("POST", f"{base}/oura/prepare").status_code == 200
    assert org.call("PUT", f"{base}/oura", json=body).status_code == 200


def test_setting_credentials_before_preparing_is_409(org: Org) -> None:
    base = f"/team_custom_credentials/{org.team_id}"
    response = org.call("PUT", f"{base}/fitbit", json={"client_id": "a", "client_secret": "b"})
    assert response.status_code == 409
    assert response.json() == {
        "detail": "Prepare the custom credentials for this provider before setting them."
    }
    assert org.call("GET", base).json() == {"credentials": []}


def test_an_unknown_provider_slug_is_422(org: Org) -> None:
    base = f"/team_custom_credentials/{org.team_id}/not_a_provider"
    for method, path, body in [
        ("POST", f"{base}/prepare", None),
        ("PUT", base, {"client_id": "a", "client_secret": "b"}),
        ("DELETE", base, None),
    ]:
        assert _locs(org.call(method, path, json=body)) == [["path", "provider"]], method


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"client_id": "a"}, ["body", "client_secret"]),
        ({"client_id": "", "client_secret": "b"}, ["body", "client_id"]),
        ({"client_id": "a", "client_secret": ""}, ["body", "client_secret"]),
        ({"client_id": "a", "client_secret": "b", "scope": "all"}, ["body", "scope"]),
    ],
)
def test_credentials_body_is_validated(org: Org, body: dict[str, Any], loc: list[str]) -> None:
    org.call("POST", f"/team_custom_credentials/{org.team_id}/oura/prepare")
    response = org.call("PUT", f"/team_custom_credentials/{org.team_id}/oura", json=body)
    assert _locs(response) == [loc]


# -- headers -----------------------------------------------------------------------------------


def test_the_legacy_header_works_and_is_answered_with_deprecation(org: Org) -> None:
    legacy = {"X-Service-Org-Key": org.key}
    got = org.api.get(org.url(), headers=legacy)
    assert got.status_code == 200
    assert got.json()["id"] == str(org.org_id)
    assert got.headers["deprecation"] == "true"
    assert 'rel="deprecation"' in got.headers["link"]

    created = org.api.post(
        org.url("/team"), json={"name": "Legacy", "region": "eu"}, headers=legacy
    )
    assert created.status_code == 200
    assert created.headers["deprecation"] == "true"
    assert "link" in created.headers

    refused = org.api.get(org.url(), headers={"X-Service-Org-Key": "hlm_nonsense"})
    assert (refused.status_code, refused.json()) == (401, INVALID_KEY)
    assert refused.headers["deprecation"] == "true"


def test_the_preferred_header_gets_no_deprecation(org: Org) -> None:
    for headers in (
        {"X-Management-Key": org.key},
        {"X-Management-Key": org.key, "X-Service-Org-Key": org.key},
    ):
        response = org.api.get(org.url(), headers=headers)
        assert response.status_code == 200
        assert "deprecation" not in response.headers
        assert "link" not in response.headers


# -- the audit trail ---------------------------------------------------------------------------


def test_every_administrative_act_is_audited_with_its_key(org: Org) -> None:
    by_org = f"management_key:{org.key_id}"

    def act(rid: str, method: str, path: str = "", key: str | None = None, **kw: Any) -> Any:
        response = org.call(method, path, key, headers={"x-request-id": rid}, **kw)
        assert response.status_code == 200, response.text
        return response.json()

    act("r-org", "PATCH", json={"name": "Audited org"})
    sandbox = {"logo_url": "https://cdn.acme.example/l.png", "brand_information": BRAND}
    team = act(
        "r-team", "POST", "/team", json={"name": "Audited", "region": "eu", "sandbox": sandbox}
    )
    act("r-rename", "PATCH", f"/team/{team['id']}", json={"name": "Audited 2"})
    act("r-beta", "PUT", f"/team/{team['id']}/features/demographics")
    bound = act(
        "r-mkey",
        "POST",
        "/management_key",
        json={"label": "t", "role": "team_admin", "team_role_bindings": [{"team_id": team["id"]}]},
    )
    by_team = f"management_key:{bound['id']}"
    # The team key's acts on its team.
    act("r-t-rename", "PATCH", f"/team/{team['id']}", bound["key"], json={"name": "Audited 3"})
    api_key = act(
        "r-t-key", "POST", "/team_api_keys/sandbox/eu", bound["key"], json={"team_id": team["id"]}
    )
    creds = f"/team_custom_credentials/{team['id']}/oura"
    act("r-t-prep", "POST", f"{creds}/prepare", bound["key"])
    act("r-t-set", "PUT", creds, bound["key"], json={"client_id": "c", "client_secret": "s"})
    act("r-t-del", "DELETE", creds, bound["key"])
    user_id = org.create_user("audited-user", api_key["key"])
    act(
        "r-t-revoke",
        "DELETE",
        f"/team_api_keys/sandbox/eu/{api_key['id']}",
        bound["key"],
        params={"team_id": team["id"]},
    )
    act("r-relabel", "PATCH", f"/management_key/{bound['id']}", json={"label": "t2"})
    act("r-team-del", "DELETE", f"/team/{team['id']}")
    act("r-mkey-del", "DELETE", f"/management_key/{bound['id']}")

    assert org.events(org.org_id)[1:] == [("Organization.Renamed", by_org, "r-org")]
    assert org.events(team["id"]) == [
        ("Team.Created", by_org, "r-team"),
        ("Team.SettingsChanged", by_org, "r-team"),
        # The team's client_user_id secret, made with the team (sealed: never shown).
        ("Team.ClientUserIdSecretCreated", by_org, "r-team"),
        ("Team.Renamed", by_org, "r-rename"),
        ("Team.FeatureEnabled", by_org, "r-beta"),
        ("Team.Renamed", by_team, "r-t-rename"),
        ("Team.Deleted", by_org, "r-team-del"),
    ]
    assert org.events(bound["id"]) == [
        ("ManagementKey.Created", by_org, "r-mkey"),
        ("ManagementKey.Relabeled", by_org, "r-relabel"),
        ("ManagementKey.Revoked", by_org, "r-mkey-del"),
    ]
    assert org.events(api_key["id"]) == [
        ("TeamApiKey.Created", by_team, "r-t-key"),
        ("TeamApiKey.Revoked", by_team, "r-t-revoke"),
    ]
    from healthledger.domain.teams.custom_credentials import CustomCredentials

    assert org.events(CustomCredentials.id_for(UUID(team["id"]), "oura")) == [
        ("CustomCredentials.Created", by_team, "r-t-prep"),
        ("CustomCredentials.Set", by_team, "r-t-set"),
        ("CustomCredentials.Deleted", by_team, "r-t-del"),
    ]
    user_events = org.events(user_id)
    assert user_events[0][:2] == ("User.Created", f"team_api_key:{api_key['id']}")
    assert user_events[-1] == ("User.Deleted", by_org, "r-team-del")
    # Reads record nothing.
    before = org.service.recorder.max_notification_id()
    for path in ("", "/team", "/management_key", f"/team/{org.team_id}/features"):
        act("r-read", "GET", path)
    assert org.service.recorder.max_notification_id() == before


# -- request limits and bad input --------------------------------------------------------------


def _settings_of_size(address_chars: int) -> dict[str, Any]:
    brand = {"company_address": "a" * address_chars}
    return {"logo_url": "https://cdn.acme.example/l.png", "brand_information": brand}


def test_a_body_over_the_limit_is_413_json(small_org: Org) -> None:
    fits = {"name": "Fits", "region": "us", "sandbox": _settings_of_size(1000)}
    assert len(json.dumps(fits)) < 2048
    assert small_org.call("POST", "/team", json=fits).status_code == 200

    too_big = {**fits, "production": _settings_of_size(1000)}
    assert len(json.dumps(too_big)) > 2048
    for headers in ({"X-Management-Key": small_org.key}, {}):
        response = small_org.api.post(small_org.url("/team"), json=too_big, headers=headers)
        assert response.status_code == 413
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {"detail": "Request body larger than 2048 bytes."}
    assert len(_page(small_org).json()["teams"]) == 2


def test_a_streamed_body_over_the_limit_is_413_json(small_org: Org) -> None:
    raw = json.dumps({"name": "x", "region": "us", "sandbox": _settings_of_size(3000)}).encode()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(raw), 1000):
            yield raw[start : start + 1000]

    response = small_org.api.post(
        small_org.url("/team"),
        content=chunks(),
        headers={"X-Management-Key": small_org.key, "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json() == {"detail": "Request body larger than 2048 bytes."}


@pytest.mark.parametrize(
    ("content", "content_type", "error_type"),
    [
        (b"not json", "application/json", "json_invalid"),
        (b'{"name": "x", "region": ', "application/json", "json_invalid"),
        (b"name=x&region=us", "application/x-www-form-urlencoded", "model_attributes_type"),
        (b'["x", "us"]', "application/json", "model_attributes_type"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_422(
    org: Org, content: bytes, content_type: str, error_type: str
) -> None:
    response = org.call("POST", "/team", content=content, headers={"content-type": content_type})
    detail = _validation(response)
    assert detail[0]["type"] == error_type
    assert detail[0]["loc"][0] == "body"
    assert len(_page(org).json()["teams"]) == 1


# (method, path, body): each with a "surprise" field added.
UNKNOWN_FIELD_CALLS: list[tuple[str, str, dict[str, str]]] = [
    ("PATCH", "", {"name": "x"}),
    ("POST", "/team", {"name": "x", "region": "us"}),
    ("PATCH", "/team/{team}", {"name": "x"}),
    ("POST", "/management_key", {"label": "x", "role": "org_admin"}),
    ("PATCH", "/management_key/{key}", {"label": "x"}),
    ("POST", "/team_api_keys/sandbox/us", {"team_id": "{team}"}),
    ("PUT", "/team_custom_credentials/{team}/oura", {"client_id": "a", "client_secret": "b"}),
]


def test_unknown_body_fields_are_422(org: Org) -> None:
    org.call("POST", f"/team_custom_credentials/{org.team_id}/oura/prepare")
    # Refusals change nothing: every call against the one organization, each checked
    # against the log position before the first.
    before = org.service.recorder.max_notification_id()
    for method, template, fields in UNKNOWN_FIELD_CALLS:
        case = (method, template)
        path = template.format(team=org.team_id, key=org.key_id)
        body = {k: v.format(team=org.team_id) for k, v in fields.items()}
        response = org.call(method, path, json={**body, "surprise": True})
        errors = [(e["type"], e["loc"]) for e in _validation(response, case)]
        assert errors == [("extra_forbidden", ["body", "surprise"])], (case, errors)
        assert org.service.recorder.max_notification_id() == before, case


# (method, path, loc): each a 422 naming the malformed id.
MALFORMED_IDS: list[tuple[str, str, list[str]]] = [
        ("GET", "/v1/org/not-a-uuid", ["path", "org_id"]),
        ("GET", "/v1/org/not-a-uuid/team", ["path", "org_id"]),
        ("GET", "{base}/team/not-a-uuid", ["path", "team_id"]),
        ("GET", "{base}/team/1234", ["path", "team_id"]),
        ("PATCH", "{base}/team/not-a-uuid", ["path", "team_id"]),
        ("DELETE", "{base}/team/not-a-uuid", ["path", "team_id"]),
        ("GET", "{base}/team/not-a-uuid/features", ["path", "team_id"]),
        ("PUT", "{base}/team/not-a-uuid/features/demographics", ["path", "team_id"]),
        ("PATCH", "{base}/management_key/not-a-uuid", ["path", "key_id"]),
        ("DELETE", "{base}/management_key/not-a-uuid", ["path", "key_id"]),
        ("GET", "{base}/team_api_keys/sandbox/us?team_id=not-a-uuid", ["query", "team_id"]),
        ("GET", "{base}/team_api_keys/sandbox/us", ["query", "team_id"]),
        ("DELETE", "{base}/team_api_keys/sandbox/us/not-a-uuid?team_id={team}", ["path", "key_id"]),
        ("GET", "{base}/team_custom_credentials/not-a-uuid", ["path", "team_id"]),
        ("POST", "{base}/team_custom_credentials/not-a-uuid/oura/prepare", ["path", "team_id"]),
        ("DELETE", "{base}/team_custom_credentials/not-a-uuid/oura", ["path", "team_id"]),
]  # fmt: skip


def test_malformed_ids_are_422_never_500(org: Org) -> None:
    # Refusals: every call against the one organization.
    for method, path, loc in MALFORMED_IDS:
        case = (method, path)
        url = path.format(base=org.url(), team=org.team_id)
        body = {"name": "x", "label": "x"} if method == "PATCH" else None
        response = org.api.request(method, url, json=body, headers={"X-Management-Key": org.key})
        locs = _locs(response, case)
        assert loc in locs, (case, locs)


def test_malformed_ids_in_bodies_are_422(org: Org) -> None:
    tak = org.call("POST", "/team_api_keys/sandbox/us", json={"team_id": "not-a-uuid"})
    assert _locs(tak) == [["body", "team_id"]]
    body = {"label": "x", "role": "team_admin", "team_role_bindings": [{"team_id": "nope"}]}
    mkey = org.call("POST", "/management_key", json=body)
    assert _locs(mkey) == [["body", "team_role_bindings", 0, "team_id"]]


def test_limit_is_bounded(org: Org) -> None:
    assert _locs(_page(org, limit=0)) == [["query", "limit"]]
    assert _locs(_page(org, limit=101)) == [["query", "limit"]]
    assert _locs(_page(org, next_cursor="x" * 513)) == [["query", "next_cursor"]]
    assert _page(org, limit=100).status_code == 200
