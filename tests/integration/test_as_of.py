"""`as_of` on every GET of both APIs (issue 29 §3, adapters/http/as_of.py), on both
databases: each GET declares it in the OpenAPI documents, a read that travels answers as
of the instant (test_time_travel.py and the tests named in TRAVELS hold the answers), and
every other refuses any `as_of` with a 422 that says so, never a present-day answer. A bad
instant (unparseable, in the future, before the team existed) is the same 422 everywhere."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.compliance.time_travel import FUTURE, NOT_TRAVELLING
from healthledger.adapters.composition import Service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.summaries import LISTS as SUMMARY_LISTS
from healthledger.adapters.http.team_api import create_team_api

# GETs where time travel makes no sense, with the reason.
EXEMPT: dict[tuple[str, str], str] = {
    # A team's link widget reads with the link token alone (ADR 0038): what the link
    # allows now, never the team's records of a past instant.
    **{
        ("team", path): "the link token's reads of what the link allows now"
        for path in (
            "/v2/link/state",
            "/v2/link/providers",
            "/v2/link/provider/oauth/{oauth_provider}",
        )
    },
    ("team", "/makers/{provider}/webhook"): (
        "a maker's subscription handshake (it echoes the maker's challenge), not a read of "
        "anything we hold"
    ),
}
# GETs not yet given `as_of`, with the reason: none.
PENDING: dict[tuple[str, str], str] = {}

# The GETs that travel in time, and the tests that hold their answers by `as_of`.
TRAVELS: dict[tuple[str, str], str] = {
    ("team", "/v2/link/bulk_op"): "test_bulk_operations.py",
    ("team", "/v2/user"): "test_time_travel.py",
    ("team", "/v2/user/resolve/{client_user_id}"): "test_time_travel.py",
    ("team", "/v2/user/{user_id}"): "test_time_travel.py",
    ("team", "/v2/user/{user_id}/info/latest"): "test_time_travel.py",
    ("team", "/v2/user/providers/{user_id}"): "test_time_travel.py",
    ("team", "/v2/introspect/historical_pull"): "test_time_travel.py",
    ("team", "/v2/introspect/resources"): "test_time_travel.py",
    ("team", "/v3/order/{order_id}"): "test_orders.py",
    ("team", "/v2/team/source/priorities"): "test_source_priorities.py",
    ("team", "/v2/user/{user_id}/device"): "test_user_devices.py",
    ("team", "/v2/user/{user_id}/device/{device_id}"): "test_user_devices.py",
    (
        "team",
        "/v2/user/{user_id}/import/apple_health/{import_id}",
    ): "test_apple_health_import.py",
    ("team", "/v3/orders"): "test_orders.py",
    ("team", "/lab_report/v1/parser/job/{job_id}"): "test_lab_report_parser.py",
    ("team", "/orders"): "test_orders.py",
    ("team", "/v2/team/{team_id}"): "test_team_settings.py",
    ("team", "/v2/team/users/search"): "test_team_settings.py",
    ("team", "/v3/order/{order_id}/result"): "test_orders.py",
    ("team", "/v3/order_transaction/{transaction_id}"): "test_order_transactions.py",
    ("team", "/v3/order_transaction/{transaction_id}/result"): "test_order_transactions.py",
    ("team", "/v3/order/{order_id}/tracking"): "test_order_tracking.py",
    ("team", "/v3/unmatched_result/{raw_result_id}"): "test_unmatched_results.py",
    ("team", "/v3/order/{order_id}/psc/appointment"): "test_appointments.py",
    ("team", "/v3/order/{order_id}/phlebotomy/appointment"): "test_appointments.py",
    ("team", "/v3/lab_tests"): "test_lab_tests.py",
    ("team", "/v3/lab_tests/{lab_test_id}"): "test_lab_tests.py",
    ("team", "/v3/lab_tests/{lab_test_id}/markers"): "test_lab_tests.py",
    ("team", "/v2/timeseries/{user_id}/{resource}"): "test_health_data_as_of.py",
    ("team", "/v2/timeseries/{user_id}/{resource}/grouped"): "test_health_data_as_of.py",
    ("team", "/v2/summary/profile/{user_id}"): "test_health_data_as_of.py",
    ("team", "/v2/timeseries/sleep/{sleep_id}/stream"): "test_session_streams.py",
    ("team", "/v2/timeseries/workouts/{workout_id}/stream"): "test_session_streams.py",
    **{
        ("team", f"/v2/timeseries/{{user_id}}/cholesterol/{fraction}"): "test_cholesterol.py"
        for fraction in ("total", "ldl", "hdl", "triglycerides")
    },
    **{
        ("team", f"/v2/summary/{resource}/{{user_id}}"): "test_health_data_as_of.py"
        for resource in SUMMARY_LISTS
    },
    (
        "management",
        "/v1/org/{org_id}/team_api_keys/{env}/{region}",
    ): "test_management_api.py",
    ("management", "/v1/org/{org_id}/management_key"): "test_management_api.py",
    ("management", "/v1/org/{org_id}/team"): "test_management_api.py",
    ("management", "/v1/org/{org_id}/team/{team_id}"): "test_management_api.py",
    ("management", "/v1/org/{org_id}"): "test_management_api.py",
    ("management", "/v1/org/{org_id}/team/{team_id}/features"): "test_management_api.py",
    (
        "management",
        "/v1/org/{org_id}/team_custom_credentials/{team_id}",
    ): "test_management_api.py",
    (
        "management",
        "/v1/org/{org_id}/team/{team_id}/{env}/webhook",
    ): "test_webhook_endpoints.py",
    (
        "management",
        "/v1/org/{org_id}/team/{team_id}/{env}/webhook/{endpoint_id}",
    ): "test_webhook_endpoints.py",
    (
        "management",
        "/v1/org/{org_id}/team/{team_id}/{env}/event_destination",
    ): "test_event_destinations.py",
    (
        "management",
        "/v1/org/{org_id}/team/{team_id}/{env}/event_destination/{destination_id}",
    ): "test_event_destinations.py",
}

_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@dataclass
class Apps:
    service: Service
    team: TestClient
    management: TestClient
    org_id: UUID
    team_id: UUID
    team_headers: dict[str, str]
    management_headers: dict[str, str]

    def client(self, api: str) -> TestClient:
        return self.team if api == "team" else self.management

    def headers(self, api: str) -> dict[str, str]:
        return self.team_headers if api == "team" else self.management_headers


@pytest.fixture
def apps(service: Service) -> Iterator[Apps]:
    created = service.bootstrap()
    assert created is not None
    with (
        TestClient(create_team_api(service), raise_server_exceptions=False) as team,
        TestClient(create_management_api(service), raise_server_exceptions=False) as management,
    ):
        yield Apps(
            service,
            team,
            management,
            created.org_id,
            created.team_id,
            {"x-service-api-key": created.team_api_key.plain},
            {"X-Management-Key": created.management_key.plain},
        )


def gets(apps: Apps) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every GET operation of both documents: (api, path template, operation)."""
    for api in ("team", "management"):
        doc = apps.client(api).app.openapi()  # type: ignore[attr-defined]
        for path, item in doc["paths"].items():
            for method, operation in item.items():
                if method in _METHODS and method == "get":
                    yield api, path, operation


def concrete(apps: Apps, path: str) -> str:
    """The template with a value of the right shape in each parameter (the caller's own
    organization and team, so that the route's checks find them)."""
    values = {
        "org_id": str(apps.org_id),
        "team_id": str(apps.team_id),
        "env": "sandbox",
        "region": "us",
        "resource": "heartrate",
        "client_user_id": "someone",
        "lab_id": "1",  # the catalog's labs are numbered
    }
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), str(uuid4())), path)


def as_of_problem(response: Any) -> str:
    assert response.status_code == 422, response.text
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["query", "as_of"], problem
    message: str = problem["msg"]
    return message


def test_every_get_of_both_apis_declares_as_of_and_its_422(apps: Apps) -> None:
    problems = []
    seen = 0
    for api, path, operation in gets(apps):
        seen += 1
        if (api, path) in EXEMPT or (api, path) in PENDING:
            continue
        declared = [p for p in operation.get("parameters", []) if p["name"] == "as_of"]
        if [p["in"] for p in declared] != ["query"]:
            problems.append(f"{api} GET {path}: no as_of query parameter")
        if "422" not in operation.get("responses", {}):
            problems.append(f"{api} GET {path}: no 422 response")
    assert seen > 30, "the walk found too few GETs: it is broken"
    assert problems == []
    # Every entry of the lists names a GET that exists.
    paths = {(api, path) for api, path, _ in gets(apps)}
    assert set(EXEMPT) | set(TRAVELS) | set(PENDING) <= paths


def test_every_get_that_does_not_travel_refuses_as_of(apps: Apps) -> None:
    now = apps.service.clock().isoformat()
    refused = 0
    for api, path, _ in gets(apps):
        if (api, path) in TRAVELS or (api, path) in EXEMPT or (api, path) in PENDING:
            continue
        response = apps.client(api).get(
            concrete(apps, path), params={"as_of": now}, headers=apps.headers(api)
        )
        assert as_of_problem(response) == NOT_TRAVELLING, (api, path)
        refused += 1
        # Without a key: the key's 401 first, as without as_of.
        response = apps.client(api).get(concrete(apps, path), params={"as_of": now})
        assert response.status_code == 401, (api, path)
    # The reads that do not travel yet: 19 when this was written, 10 once the summaries
    # and timeseries travelled.
    assert refused > 5


@pytest.mark.parametrize(
    ("api", "path"),
    [
        ("team", "/v2/user/{user_id}"),  # travels
        ("team", "/v2/introspect/historical_pull"),  # travels
        ("team", "/v2/user"),  # travels
        ("team", "/v3/orders"),  # travels
        ("team", "/v3/lab_tests/labs"),  # does not travel
        ("team", "/v2/summary/sleep/{user_id}"),  # travels
        ("management", "/v1/org/{org_id}/team/{team_id}"),
        ("management", "/v1/org/{org_id}"),
    ],
)
def test_a_bad_instant_is_the_same_422_on_every_read(apps: Apps, api: str, path: str) -> None:
    client, headers, url = apps.client(api), apps.headers(api), concrete(apps, path)
    params = {"start_date": "2026-01-01"} if "summary" in path else {}

    def problem(value: str) -> str:
        response = client.get(url, params={**params, "as_of": value}, headers=headers)
        return as_of_problem(response)

    for value in ("garbage", "2026-03-10", "2026-03-10T12:00:00", "1773144000"):
        assert any(word in problem(value) for word in ("ISO 8601", "offset")), value
    now = apps.service.clock()
    assert problem((now + timedelta(minutes=1)).isoformat()) == FUTURE
    began = apps.service.team_queries.team(apps.team_id)
    assert began is not None
    before = problem((began["created_on"] - timedelta(seconds=1)).isoformat())
    what = "organization" if path == "/v1/org/{org_id}" else "team"
    assert before.startswith(f"as_of is before the {what} existed"), before
