"""The provider catalog: the shipped data (gaps.md, Provider catalog) and
`GET /v2/providers` (spec 2.6, endpoint 7 and rule 6; gaps.md Conventions).

The lists below are copied from the spec on purpose, not imported from the code, so that
a change of the data or of the code's enumerations cannot quietly redefine what is right.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from healthledger.adapters.composition import Service
from healthledger.adapters.http import providers
from healthledger.adapters.http.errors import install_error_handlers
from healthledger.adapters.http.requests import RequestIdMiddleware
from healthledger.adapters.reference import (
    ReferenceDataError,
    parse_provider_catalog,
    provider_catalog,
    provider_slugs,
    source_types,
)

from tests.conftest import Team

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

# gaps.md, Provider catalog.
GAPS_SLUGS = [
    "oura", "fitbit", "garmin", "whoop", "whoop_v2", "strava", "renpho", "peloton", "wahoo",
    "zwift", "freestyle_libre", "freestyle_libre_ble", "abbott_libreview", "tandem_source",
    "eight_sleep", "withings", "apple_health_kit", "manual", "ihealth", "google_fit",
    "google_health", "beurer_api", "beurer_ble", "omron", "omron_ble", "onetouch_ble",
    "accuchek_ble", "contour_ble", "dexcom", "dexcom_v3", "hammerhead", "my_fitness_pal",
    "my_fitness_pal_v2", "health_connect", "samsung_health", "polar", "cronometer", "kardia",
    "ultrahuman", "map_my_fitness", "runkeeper",
]  # fmt: skip
GAPS_SOURCE_TYPES = {"app", "ble", "device", "lab", "provider"}

# Spec 2.6.
SPEC_FIELDS = {"name", "slug", "description", "logo", "auth_type", "supported_resources"}
SPEC_AUTH_TYPES = {"oauth", "team_oauth", "sdk", "password", "email", "app"}
SPEC_RESOURCES = {
    "profile", "activity", "sleep", "body", "workouts", "workout_stream", "connection",
    "order", "result", "match_review", "appointment", "glucose", "heartrate", "hrv", "ige",
    "igg", "blood_oxygen", "blood_pressure", "cholesterol", "device", "device_legacy",
    "weight", "fat", "body_temperature", "body_temperature_delta", "meal", "water",
    "caffeine", "mindfulness_minutes", "steps", "calories_active", "distance",
    "floors_climbed", "respiratory_rate", "vo2_max", "calories_basal", "stress_level",
    "menstrual_cycle", "sleep_cycle", "electrocardiogram", "electrocardiogram_voltage",
    "afib_burden", "heart_rate_alert", "stand_hour", "stand_duration", "sleep_apnea_alert",
    "sleep_breathing_disturbance", "wheelchair_push", "forced_expiratory_volume_1",
    "forced_vital_capacity", "peak_expiratory_flow_rate", "inhaler_usage", "fall",
    "uv_exposure", "daylight_exposure", "handwashing", "basal_body_temperature",
    "heart_rate_recovery_one_minute", "body_mass_index", "lean_body_mass",
    "waist_circumference", "workout_distance", "workout_swimming_stroke", "workout_duration",
    "insulin_injection", "carbohydrates", "note", "sleep_stream", "hypnogram",
}  # fmt: skip

# Providers that the demo adapter of a later issue simulates offline.
DEMO_SLUGS = {"oura", "fitbit", "apple_health_kit", "freestyle_libre", "withings"}

PATHS = ["/v2/providers", "/v2/providers/"]
USED_SOURCE_TYPES = sorted({entry.source_type for entry in provider_catalog()})


@pytest.fixture
def providers_client(service: Service) -> Iterator[TestClient]:
    """Only this router, wired as the team API wires its routers."""
    app = FastAPI()
    app.state.service = service
    install_error_handlers(app)
    app.include_router(providers.router)
    app.add_middleware(RequestIdMiddleware)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def _get(client: TestClient, team: Team, path: str = "/v2/providers", **params: str) -> Any:
    response = client.get(path, params=params, headers=team.headers, follow_redirects=False)
    assert response.status_code == 200, response.text
    return response.json()


# -- the shipped data -----------------------------------------------------------------------


def test_catalog_holds_exactly_the_gaps_slugs() -> None:
    slugs = [entry.slug for entry in provider_catalog()]
    assert len(GAPS_SLUGS) == 41
    assert sorted(slugs) == sorted(GAPS_SLUGS)
    assert provider_slugs() == frozenset(GAPS_SLUGS)


def test_catalog_entries_hold_spec_values() -> None:
    for entry in provider_catalog():
        assert entry.name.strip() and entry.description.strip(), entry.slug
        assert entry.auth_type in SPEC_AUTH_TYPES, entry.slug
        assert entry.source_type in GAPS_SOURCE_TYPES, entry.slug
        assert entry.supported_resources, entry.slug
        assert set(entry.supported_resources) <= SPEC_RESOURCES, entry.slug
        assert len(set(entry.supported_resources)) == len(entry.supported_resources), entry.slug
        assert entry.logo == f"https://storage.healthledger.dev/providers/{entry.slug}.png"
    names = [entry.name for entry in provider_catalog()]
    assert len(set(names)) == len(names), "display names must tell providers apart"


def test_catalog_kinds_follow_the_integration() -> None:
    by_slug = {entry.slug: entry for entry in provider_catalog()}
    for slug, entry in by_slug.items():
        if slug.endswith("_ble"):
            assert (entry.auth_type, entry.source_type) == ("sdk", "ble"), slug
    for slug in ("apple_health_kit", "health_connect", "samsung_health"):
        assert (by_slug[slug].auth_type, by_slug[slug].source_type) == ("sdk", "app")
    assert (by_slug["manual"].auth_type, by_slug["manual"].source_type) == ("app", "app")
    assert by_slug["freestyle_libre"].supported_resources == ("glucose",)
    assert by_slug["dexcom"].name == "Dexcom G6 & Older"


def test_source_types_are_the_gaps_values() -> None:
    assert set(source_types()) == GAPS_SOURCE_TYPES


def test_demo_providers_are_marked() -> None:
    demo = {entry.slug for entry in provider_catalog() if entry.demo}
    assert demo >= DEMO_SLUGS


def _catalog_text(**changes: Any) -> str:
    entry = {
        "slug": "oura",
        "name": "Oura",
        "description": "A ring.",
        "logo": "https://storage.healthledger.dev/providers/oura.png",
        "auth_type": "oauth",
        "source_type": "device",
        "supported_resources": ["sleep"],
        **changes,
    }
    return json.dumps({"providers": [entry]})


def test_a_valid_catalog_text_parses() -> None:
    (entry,) = parse_provider_catalog(_catalog_text(), "test.json")
    assert (entry.slug, entry.demo, entry.logo) == ("oura", False, entry.logo)


@pytest.mark.parametrize(
    "changes",
    [
        {"auth_type": "magic"},
        {"source_type": "cloud"},
        {"supported_resources": ["sleep", "naps"]},
        {"name": ""},
        {"logo": "http://insecure.example/logo.png"},
        {"colour": "red"},
    ],
)
def test_a_broken_catalog_fails_loudly_naming_the_file(changes: dict[str, Any]) -> None:
    with pytest.raises(ReferenceDataError, match=r"^test\.json is not a valid provider catalog"):
        parse_provider_catalog(_catalog_text(**changes), "test.json")


def test_a_duplicate_slug_or_bad_json_fails_loudly() -> None:
    twice = json.loads(_catalog_text())
    twice["providers"] *= 2
    with pytest.raises(ReferenceDataError, match="'oura' twice"):
        parse_provider_catalog(json.dumps(twice), "test.json")
    with pytest.raises(ReferenceDataError, match="not valid JSON"):
        parse_provider_catalog("{", "test.json")


# -- GET /v2/providers ----------------------------------------------------------------------


def test_lists_every_provider_with_exactly_the_spec_fields(
    providers_client: TestClient, team: Team
) -> None:
    body = _get(providers_client, team)
    assert isinstance(body, list)
    assert sorted(item["slug"] for item in body) == sorted(GAPS_SLUGS)
    for item in body:
        # `source_type` and `demo` are ours: never emitted.
        assert set(item) == SPEC_FIELDS, item["slug"]
        assert item["auth_type"] in SPEC_AUTH_TYPES
        assert set(item["supported_resources"]) <= SPEC_RESOURCES
        assert isinstance(item["logo"], str) and item["logo"].startswith("https://")
    by_slug = {entry.slug: entry for entry in provider_catalog()}
    for item in body:
        entry = by_slug[item["slug"]]
        assert item["name"] == entry.name
        assert item["supported_resources"] == list(entry.supported_resources)


def test_sorted_by_name(providers_client: TestClient, team: Team) -> None:
    names = [item["name"] for item in _get(providers_client, team)]
    assert names == sorted(names, key=str.casefold)


def test_trailing_slash_answers_the_same_without_redirect(
    providers_client: TestClient, team: Team
) -> None:
    answers = []
    for path in PATHS:
        response = providers_client.get(path, headers=team.headers, follow_redirects=False)
        assert response.status_code == 200, (path, response.text)
        assert response.headers["content-type"] == "application/json"
        answers.append(response.content)
    assert answers[0] == answers[1]


@pytest.mark.parametrize("source_type", USED_SOURCE_TYPES)
@pytest.mark.parametrize("path", PATHS)
def test_source_type_filters(
    providers_client: TestClient, team: Team, path: str, source_type: str
) -> None:
    body = _get(providers_client, team, path, source_type=source_type)
    expected = {entry.slug for entry in provider_catalog() if entry.source_type == source_type}
    assert body, source_type
    assert {item["slug"] for item in body} == expected
    assert len(body) < len(GAPS_SLUGS)
    names = [item["name"] for item in body]
    assert names == sorted(names, key=str.casefold)


def test_every_kind_of_the_catalog_is_used() -> None:
    # `lab` is a known kind with no provider in the catalog (labs are served elsewhere).
    assert set(USED_SOURCE_TYPES) == GAPS_SOURCE_TYPES - {"lab"}


def test_a_known_kind_without_providers_is_an_empty_list(
    providers_client: TestClient, team: Team
) -> None:
    assert _get(providers_client, team, source_type="lab") == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("value", ["cloud", "BLE", ""])
def test_unknown_source_type_is_422(
    providers_client: TestClient, team: Team, path: str, value: str
) -> None:
    response = providers_client.get(
        path, params={"source_type": value}, headers=team.headers, follow_redirects=False
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert set(error) == {"type", "loc", "msg", "input"}
    assert error["loc"] == ["query", "source_type"]
    assert error["input"] == value


@pytest.mark.parametrize("path", PATHS)
def test_team_api_key_required(providers_client: TestClient, team: Team, path: str) -> None:
    missing = providers_client.get(path, follow_redirects=False)
    assert missing.status_code == 401
    assert "Missing API key" in missing.json()["detail"]
    wrong = providers_client.get(
        path, headers={"x-service-api-key": team.key[:-4] + "0000"}, follow_redirects=False
    )
    assert wrong.status_code == 401
    assert wrong.headers["x-request-id"]


def test_documented_once_in_openapi(providers_client: TestClient) -> None:
    schema = providers_client.get("/openapi.json").json()
    assert "/v2/providers/" not in schema["paths"]
    operation = schema["paths"]["/v2/providers"]["get"]
    (parameter,) = [p for p in operation["parameters"] if p["name"] == "source_type"]
    assert parameter["in"] == "query" and not parameter.get("required", False)
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["type"] == "array"
    assert ok["items"]["$ref"].endswith("/ProviderCatalogEntry")
    entry = schema["components"]["schemas"]["ProviderCatalogEntry"]
    assert set(entry["properties"]) == SPEC_FIELDS
    assert set(entry["required"]) >= {"name", "slug", "description", "logo"}
