"""The contract under hostile input (issue #17), on SQLite and PostgreSQL.

- Control characters (Unicode category C) in any free-text field of either API are a 422
  in the pydantic shape that records nothing: on PostgreSQL a NUL used to be a 500.
- Malformed JSON, however it is malformed, is the same 422 (never a 400 for some).
- A 405 names, in `Allow`, every method its path is served with.
- Both OpenAPI documents declare their security schemes apart, and the error answers
  (400, 401, 403, 404, 409, 422) with the error bodies.

Slow clients are in tests/e2e/test_slow_clients.py."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from healthledger.domain.context import CommandContext
from httpx import Response

REDACTED = "[redacted]"
# Paths, filled with the ids of what the `apis` fixture creates.
ORG = "/v1/org/{org}"
TEAM = ORG + "/team/{team}"
WEBHOOK = TEAM + "/sandbox/webhook"
# NUL, BEL, ESC (as in a terminal colour code), DEL, a C1 control, a direction override
# (format), a lone surrogate (sent as the JSON escape \ud800), private use.
CONTROL_CHARACTERS = ["\x00", "\x07", "\x1b[31m", "\x7f", "\x85", "\u202e", "\ud800", "\ue000"]
DEMOGRAPHICS = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada@example.com",
    "phone_number": "+44 20 7946 0000",
    "gender": "female",
    "dob": "1980-12-10",
    "address": {
        "first_line": "12 St James's Sq",
        "zip_code": "SW1Y 4JH",
        "state": "London",
        "city": "London",
    },
    "medical_proxy": {
        "first_name": "Mary",
        "last_name": "Somerville",
        "phone_number": "+44 20 7946 0001",
        "address": {
            "first_line": "1 Chelsea Rd",
            "zip_code": "SW3 1AA",
            "state": "London",
            "city": "London",
        },
    },
}
BRAND = {
    "logo_url": "https://acme.example/logo.png",
    "brand_information": {
        "company_name": "Acme",
        "company_website": "https://acme.example",
        "support_contact": "+1 555 0100",
        "company_address": "1 Main St, Springfield",
    },
}


@dataclass
class Apis:
    service: Service
    team_api: TestClient
    management_api: TestClient
    org_id: UUID
    team_id: UUID
    team_key: str
    management_key: str
    ids: dict[str, str]

    def call(self, api: str, method: str, path: str, **kwargs: Any) -> Response:
        if api == "team":
            client, headers = self.team_api, {"x-service-api-key": self.team_key}
        else:
            client, headers = self.management_api, {"X-Management-Key": self.management_key}
        headers.update(kwargs.pop("headers", {}))
        return client.request(method, path.format(**self.ids), headers=headers, **kwargs)


@pytest.fixture
def apis(service: Service) -> Iterator[Apis]:
    boot = service.bootstrap()
    assert boot is not None
    service.teams.set_feature(CommandContext.system("test"), boot.team_id, "demographics", True)
    with (
        TestClient(create_team_api(service), raise_server_exceptions=False) as team_api,
        TestClient(create_management_api(service), raise_server_exceptions=False) as management,
    ):
        apis = Apis(
            service,
            team_api,
            management,
            boot.org_id,
            boot.team_id,
            boot.team_api_key.plain,
            boot.management_key.plain,
            {"org": str(boot.org_id), "team": str(boot.team_id)},
        )
        user = apis.call("team", "POST", "/v2/user", json={"client_user_id": "steady"})
        apis.ids["user"] = user.json()["user_id"]
        key = apis.call(
            "management",
            "POST",
            ORG + "/management_key",
            json={"label": "a key", "role": "org_admin"},
        )
        apis.ids["key"] = key.json()["id"]
        endpoint = apis.call(
            "management",
            "POST",
            WEBHOOK,
            json={"url": "https://receiver.example/hook"},
        )
        apis.ids["endpoint"] = endpoint.json()["id"]
        prepared = apis.call(
            "management", "POST", ORG + "/team_custom_credentials/{team}/oura/prepare"
        )
        assert prepared.status_code == 200, prepared.text
        yield apis


def placed(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A deep copy of `body` with `value` at `path`."""
    copied = copy.deepcopy(body)
    here: Any = copied
    for step in path[:-1]:
        here = here[step]
    here[path[-1]] = value
    return copied


def send_json(apis: Apis, api: str, method: str, path: str, body: Any) -> Response:
    # json.dumps escapes every non-ASCII character: a lone surrogate goes as "\ud800".
    return apis.call(
        api, method, path, content=json.dumps(body), headers={"content-type": "application/json"}
    )


# -- control characters ------------------------------------------------------------------

FREE_TEXT_FIELDS = [
    # (api, method, path, a valid body, where the text goes)
    *[
        ("team", "PATCH", "/v2/user/{user}/info", DEMOGRAPHICS, path)
        for path in [
            ("first_name",),
            ("last_name",),
            ("gender",),
            ("email",),
            ("phone_number",),
            ("address", "first_line"),
            ("address", "second_line"),
            ("address", "zip_code"),
            ("address", "state"),
            ("address", "city"),
            ("medical_proxy", "first_name"),
            ("medical_proxy", "last_name"),
            ("medical_proxy", "phone_number"),
            ("medical_proxy", "address", "city"),
        ]
    ],
    ("team", "POST", "/v2/user", {"client_user_id": "fresh"}, ("client_user_id",)),
    ("team", "PATCH", "/v2/user/{user}", {"client_user_id": "moved"}, ("client_user_id",)),
    (
        "team",
        "POST",
        "/v2/link/token",
        {"user_id": "{user}", "redirect_url": "https://a.example/done"},
        ("redirect_url",),
    ),
    ("team", "POST", "/v2/link/token", {"user_id": "{user}", "provider": "oura"}, ("provider",)),
    (
        "team",
        "POST",
        "/v2/link/token",
        {"user_id": "{user}", "filter_on_providers": ["oura"]},
        ("filter_on_providers", 0),
    ),
    ("management", "PATCH", ORG, {"name": "Org"}, ("name",)),
    ("management", "POST", ORG + "/team", {"name": "Team", "region": "us"}, ("name",)),
    ("management", "PATCH", TEAM, {"name": "Team"}, ("name",)),
    *[
        ("management", "PATCH", TEAM, {"sandbox": BRAND}, ("sandbox", *path))
        for path in [
            ("logo_url",),
            ("brand_information", "company_name"),
            ("brand_information", "company_website"),
            ("brand_information", "support_contact"),
            ("brand_information", "company_address"),
        ]
    ],
    (
        "management",
        "POST",
        ORG + "/management_key",
        {"label": "k", "role": "org_admin"},
        ("label",),
    ),
    ("management", "PATCH", ORG + "/management_key/{key}", {"label": "k"}, ("label",)),
    *[
        (
            "management",
            "PUT",
            ORG + "/team_custom_credentials/{team}/oura",
            {"client_id": "id", "client_secret": "secret"},
            (name,),
        )
        for name in ("client_id", "client_secret")
    ],
    *[
        (
            "management",
            "POST",
            WEBHOOK,
            {"url": "https://r.example/h", "filter_types": ["daily.data.*"]},
            path,
        )
        for path in [("url",), ("description",), ("filter_types", 0)]
    ],
    *[
        ("management", "PATCH", WEBHOOK + "/{endpoint}", {"url": "https://r.example/h"}, (name,))
        for name in ("url", "description")
    ],
]


def _field_id(case: tuple[Any, ...]) -> str:
    _, method, path, _, where = case
    return f"{method} {path.rsplit('}', 1)[-1] or path} {'.'.join(map(str, where))}"


def test_control_characters_in_free_text_are_422_and_record_nothing(apis: Apis) -> None:
    """Every field of FREE_TEXT_FIELDS, against one service: the refusals of all the cases
    first (each checked to record nothing), then each case's ordinary body, which writes."""
    bodies: list[dict[str, Any]] = []
    for case in FREE_TEXT_FIELDS:
        case_id = _field_id(case)
        api, method, path, body, where = case
        body = json.loads(json.dumps(body).replace("{user}", apis.ids["user"]))
        bodies.append(body)
        events = apis.service.recorder.max_notification_id()
        for character in CONTROL_CHARACTERS:
            is_url = isinstance(where[-1], str) and where[-1].endswith(("url", "website"))
            value = f"https://a.example/x{character}y" if is_url else f"a{character}b"
            response = send_json(apis, api, method, path, placed(body, where, value))
            assert response.status_code == 422, (case_id, repr(character), response.text)
            detail = response.json()["detail"]
            assert ["body", *where] in [error["loc"] for error in detail], (case_id, detail)
            assert all(error["input"] == REDACTED for error in detail), (case_id, detail)
        assert apis.service.recorder.max_notification_id() == events, (
            case_id,
            "an event was recorded",
        )
    # The same body with ordinary text goes through. (These write: they come after every
    # refusal, and no case's body conflicts with another's.)
    for case, body in zip(FREE_TEXT_FIELDS, bodies, strict=True):
        case_id = _field_id(case)
        api, method, path, _, _ = case
        answer = send_json(apis, api, method, path, body)
        assert answer.status_code in (200, 204), (case_id, answer.text)


def test_free_text_takes_any_printable_text_and_multiline_fields_take_line_breaks(
    apis: Apis,
) -> None:
    name = "Équipe 東京 — O\u2019Brien & Søn ✓ 🩺\u00a0Ltd"
    created = apis.call("management", "POST", ORG + "/team", json={"name": name, "region": "eu"})
    assert created.status_code == 200, created.text
    assert created.json()["name"] == name
    described = "Production receiver.\nOwned by the data team:\tops@example.com\r\n"
    endpoint = apis.call(
        "management", "POST", WEBHOOK, json={"url": "https://r.example/h", "description": described}
    )
    assert endpoint.status_code == 200, endpoint.text
    assert endpoint.json()["description"] == described
    address = "1 Main St\nSpringfield\tIL"
    brand = placed(BRAND, ("brand_information", "company_address"), address)
    team = apis.call("management", "PATCH", TEAM, json={"sandbox": brand})
    assert team.status_code == 200, team.text
    assert team.json()["settings"]["sandbox"]["brand_information"]["company_address"] == address
    # A line break is not text on a line of its own.
    for single_line in (
        {"name": "Team\nTwo"},
        {"sandbox": placed(BRAND, ("brand_information", "company_name"), "A\tB")},
    ):
        refused = apis.call("management", "PATCH", TEAM, json=single_line)
        assert refused.status_code == 422, refused.text


def test_a_url_with_control_characters_is_refused_not_altered(apis: Apis) -> None:
    # Parsed as it came, https://a.example/x\ty would have been stored as .../xy.
    response = apis.call(
        "team",
        "POST",
        "/v2/link/token",
        json={"user_id": apis.ids["user"], "redirect_url": "https://a.example/x\ty"},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "redirect_url"]


# -- malformed bodies --------------------------------------------------------------------

MALFORMED = [
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="arrays-100000-deep"),
    pytest.param(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, id="objects-100000-deep"),
    pytest.param(b'{"name": ' + b"9" * 5000 + b"}", id="integer-5000-digits"),
    pytest.param(b'{"name": -' + b"1" * 4301 + b"}", id="integer-4301-digits"),
    pytest.param(b'{"name": "\xff\xfe"}', id="not-utf-8"),
    pytest.param(b'{"name": "a",}', id="trailing-comma"),
    pytest.param(b"{name}", id="garbage"),
]


def test_every_malformed_body_is_the_same_422(apis: Apis) -> None:
    events = apis.service.recorder.max_notification_id()
    for case in MALFORMED:
        [body] = case.values
        for api, method, path in [
            ("team", "POST", "/v2/user"),
            ("team", "POST", "/v2/link/token/isValid"),
            ("management", "POST", ORG + "/team"),
            ("management", "PATCH", WEBHOOK + "/{endpoint}"),
        ]:
            response = apis.call(
                api, method, path, content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 422, (case.id, path, response.text)
            [error] = response.json()["detail"]
            assert error["type"] == "json_invalid" and error["loc"][0] == "body", (case.id, path)
            assert error["input"] == REDACTED, (case.id, path)
    assert apis.service.recorder.max_notification_id() == events


def test_deep_json_that_parses_is_a_validation_error(apis: Apis) -> None:
    nested: Any = "leaf"
    for _ in range(500):
        nested = {"a": nested}
    for body in (
        {"client_user_id": nested},
        {"user_id": apis.ids["user"], "provider": "oura", "demo_failures": {"sleep": nested}},
    ):
        path = "/v2/user" if "client_user_id" in body else "/v2/link/connect/demo"
        response = apis.call("team", "POST", path, json=body)
        assert response.status_code == 422, response.text


def test_every_operation_with_a_body_answers_malformed_json_with_422(apis: Apis) -> None:
    """Routers added later are held to it too: the body is read before the key is."""
    for api in ("team", "management"):
        client = apis.team_api if api == "team" else apis.management_api
        for template, operations in client.get("/openapi.json").json()["paths"].items():
            for method, operation in operations.items():
                if "application/json" not in operation.get("requestBody", {}).get("content", {}):
                    continue  # no JSON body (a file upload: its own tests refuse bad ones)
                response = client.request(
                    method.upper(),
                    concrete(template),
                    content=b"[" * 100_000,
                    headers={"content-type": "application/json"},
                )
                assert response.status_code == 422, (method, template, response.text)
                assert response.json()["detail"][0]["type"] == "json_invalid"


# -- 405 ---------------------------------------------------------------------------------

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
FILLERS = {
    "env": "sandbox",
    "region": "us",
    "provider": "oura",
    "feature": "demographics",
    "client_user_id": "crm-42",
    "lab_id": "1",  # the catalog's labs are numbered
}


def concrete(template: str) -> str:
    """The template with each parameter filled with a value of its kind."""
    return re.sub(r"\{(\w+)\}", lambda m: FILLERS.get(m.group(1), str(uuid4())), template)


def served_methods(document: dict[str, Any], path: str) -> set[str]:
    """The methods the document gives the resource at `path`: those of the templates it
    matches (ids are UUIDs) with the fewest parameters."""
    by_parameters: dict[int, set[str]] = {}
    for template, operations in document["paths"].items():
        pattern = re.sub(
            r"\{(\w+)\}",
            lambda m: (
                "[0-9]+"
                if m.group(1) == "lab_id"
                else "[0-9a-f-]{36}"
                if m.group(1).endswith("id") and m.group(1) != "client_user_id"
                else "[^/]+"
            ),
            template,
        )
        if re.fullmatch(pattern, path):
            methods = by_parameters.setdefault(template.count("{"), set())
            methods.update(method.upper() for method in operations)
    return by_parameters[min(by_parameters)]


@pytest.mark.parametrize("api", ["team", "management"])
def test_a_405_allows_every_method_of_its_path(apis: Apis, api: str) -> None:
    client = apis.team_api if api == "team" else apis.management_api
    document = client.get("/openapi.json").json()
    several = 0
    for template in document["paths"]:
        path = concrete(template)
        served = served_methods(document, path)
        several += len(served) > 1
        refused = next(m for m in ("PUT", "PATCH", "POST", "DELETE", "GET") if m not in served)
        response = client.request(refused, path)
        assert response.status_code == 405, (refused, path)
        assert response.json() == {"detail": "Method Not Allowed"}
        assert response.headers["allow"] == ", ".join(m for m in METHODS if m in served), path
    assert several >= 2  # the case the fix is about: paths served with several methods


def test_the_allow_header_of_paths_with_several_methods(apis: Apis) -> None:
    user = f"/v2/user/{apis.ids['user']}"
    assert apis.team_api.put("/v2/user").headers["allow"] == "GET, POST"
    assert apis.team_api.put(user).headers["allow"] == "GET, PATCH, DELETE"
    # /info is PATCH; that DELETE takes it for the {provider} of a deregistration does not
    # make it a method of the resource.
    assert apis.team_api.get(f"{user}/info").headers["allow"] == "PATCH"
    team = f"/v1/org/{apis.org_id}/team/{apis.team_id}"
    assert apis.management_api.put(team).headers["allow"] == "GET, PATCH, DELETE"


# -- the OpenAPI documents ---------------------------------------------------------------


def documents(apis: Apis) -> dict[str, dict[str, Any]]:
    return {
        "team": apis.team_api.get("/openapi.json").json(),
        "management": apis.management_api.get("/openapi.json").json(),
    }


def test_the_management_document_declares_both_key_headers_as_two_schemes(apis: Apis) -> None:
    document = documents(apis)["management"]
    schemes = document["components"]["securitySchemes"]
    headers = {
        name: (scheme["type"], scheme["in"], scheme["name"]) for name, scheme in schemes.items()
    }
    assert sorted(headers.values()) == [
        ("apiKey", "header", "X-Management-Key"),
        ("apiKey", "header", "X-Service-Org-Key"),
    ]
    legacy = next(name for name, h in headers.items() if h[2] == "X-Service-Org-Key")
    assert "eprecated" in schemes[legacy]["description"]
    # Either header authenticates every operation: two alternative requirements.
    for operations in document["paths"].values():
        for operation in operations.values():
            requirements = [list(requirement) for requirement in operation["security"]]
            assert sorted(requirements) == sorted([name] for name in schemes)


def test_the_team_document_declares_our_key_header_and_the_official_clients(apis: Apis) -> None:
    document = documents(apis)["team"]
    schemes = document["components"]["securitySchemes"]
    keys = {name: s for name, s in schemes.items() if s["type"] == "apiKey"}
    by_header = {scheme["name"]: name for name, scheme in keys.items()}
    assert sorted(by_header) == ["x-service-api-key", "x-vital-api-key", "x-vital-link-token"]
    # A team's link widget calls with the link token alone (ADR 0038): its own scheme.
    link_token = by_header.pop("x-vital-link-token")
    keys.pop(link_token)
    with_link_token = 0
    # The one other scheme: a mobile SDK's sign-in token, a bearer token (issue 34).
    bearers = {name for name, s in schemes.items() if s["type"] == "http"}
    assert bearers == {"SdkSignInToken"} and schemes["SdkSignInToken"]["scheme"] == "bearer"
    # Either header authenticates every operation that takes a key: two alternatives; the
    # uploads of a user's data take the user's sign-in token as a third.
    with_sign_in = 0
    for operations in document["paths"].values():
        for operation in operations.values():
            if operation.get("security"):
                requirements = sorted(list(r) for r in operation["security"])
                if requirements == [[link_token]]:
                    with_link_token += 1
                    continue
                if ["SdkSignInToken"] in requirements:
                    with_sign_in += 1
                    requirements.remove(["SdkSignInToken"])
                assert requirements == sorted([name] for name in keys)
    assert with_sign_in == 2  # the Apple Health upload and its status
    assert with_link_token == 8  # link/state, providers, the OAuth link, five sign-in steps


def test_the_official_clients_header_carries_the_same_key_under_the_same_rules(
    apis: Apis,
) -> None:
    def users(headers: dict[str, str]) -> Response:
        return apis.team_api.get("/v2/user", headers=headers)

    key = apis.team_key
    listed = users({"x-vital-api-key": key})
    assert listed.status_code == 200, listed.text
    assert listed.json() == users({"x-service-api-key": key}).json()
    # The same key in both headers is one key.
    assert users({"x-vital-api-key": key, "x-service-api-key": key}).status_code == 200
    # A wrong or a management key in the client's header is refused as in ours.
    assert users({"x-vital-api-key": key[:-2] + "zz"}).status_code == 401
    refused = users({"x-vital-api-key": apis.management_key})
    assert refused.status_code == 401
    assert "management key" in refused.json()["detail"]
    # Two different keys: which was meant is not guessed, and neither is echoed.
    both = users({"x-vital-api-key": key, "x-service-api-key": key[:-2] + "zz"})
    assert both.status_code == 401
    assert "Two different API keys" in both.json()["detail"]
    assert key not in both.text and key[:-2] not in both.text


def error_schema(document: dict[str, Any], response: dict[str, Any]) -> str:
    ref = response["content"]["application/json"]["schema"]["$ref"]
    return ref.rsplit("/", 1)[-1]


def test_every_error_answer_is_declared_with_its_body(apis: Apis) -> None:
    for api, document in documents(apis).items():
        for template, operations in document["paths"].items():
            for method, operation in operations.items():
                responses = operation["responses"]
                where = (api, method, template)
                assert "422" in responses, where
                if operation.get("security"):
                    assert "401" in responses, where
                if "{" in template:
                    assert "404" in responses, where
                for status, response in responses.items():
                    if status.startswith("4"):
                        expected = "ValidationErrors" if status == "422" else "ErrorBody"
                        assert error_schema(document, response) == expected, (where, status)
        schemas = document["components"]["schemas"]
        assert set(schemas["ErrorBody"]["required"]) == {"detail"}
        assert "HTTPValidationError" not in schemas  # ours is declared instead


def declared(document: dict[str, Any], method: str, template: str, status: int) -> bool:
    return str(status) in document["paths"][template][method.lower()]["responses"]


def test_the_error_statuses_that_happen_are_the_declared_ones(apis: Apis) -> None:
    docs = documents(apis)
    user = apis.ids["user"]
    team_key_body = {
        "label": "bound",
        "role": "team_admin",
        "team_role_bindings": [{"team_id": str(apis.team_id)}],
    }
    bound_key = apis.call("management", "POST", ORG + "/management_key", json=team_key_body)
    bound = {"X-Management-Key": bound_key.json()["key"]}
    org = f"/v1/org/{apis.org_id}"
    apis.service.teams.set_feature(
        CommandContext.system("test"), apis.team_id, "demographics", False
    )
    demo = {"user_id": user, "provider": "oura"}
    assert apis.call("team", "POST", "/v2/link/connect/demo", json=demo).status_code == 200
    cases = [
        ("team", apis.team_api.get("/v2/user"), "GET", "/v2/user", 401),
        (
            "team",
            apis.call("team", "PATCH", f"/v2/user/{user}", json={}),
            "PATCH",
            "/v2/user/{user_id}",
            400,
        ),
        (
            "team",
            apis.call("team", "GET", f"/v2/user/{user}/info/latest"),
            "GET",
            "/v2/user/{user_id}/info/latest",
            403,
        ),
        ("team", apis.call("team", "GET", f"/v2/user/{uuid4()}"), "GET", "/v2/user/{user_id}", 404),
        (
            "team",
            apis.call("team", "POST", "/v2/link/connect/demo", json=demo),
            "POST",
            "/v2/link/connect/demo",
            409,
        ),
        (
            "team",
            apis.call("team", "GET", "/v2/introspect/resources", params={"next_cursor": "forged"}),
            "GET",
            "/v2/introspect/resources",
            400,
        ),
        ("management", apis.management_api.get(org), "GET", "/v1/org/{org_id}", 401),
        ("management", apis.management_api.get(org, headers=bound), "GET", "/v1/org/{org_id}", 403),
        (
            "management",
            apis.call("management", "PATCH", TEAM, json={}),
            "PATCH",
            "/v1/org/{org_id}/team/{team_id}",
            400,
        ),
        (
            "management",
            apis.call("management", "GET", ORG + f"/team/{uuid4()}"),
            "GET",
            "/v1/org/{org_id}/team/{team_id}",
            404,
        ),
        (
            "management",
            apis.call(
                "management",
                "PUT",
                ORG + "/team_custom_credentials/{team}/polar",
                json={"client_id": "i", "client_secret": "s"},
            ),
            "PUT",
            "/v1/org/{org_id}/team_custom_credentials/{team_id}/{provider}",
            409,
        ),
        (
            "management",
            apis.call("management", "GET", ORG + "/team", params={"next_cursor": "forged"}),
            "GET",
            "/v1/org/{org_id}/team",
            400,
        ),
    ]
    for api, response, method, template, status in cases:
        assert response.status_code == status, (template, response.text)
        assert declared(docs[api], method, template, status), (api, method, template, status)
