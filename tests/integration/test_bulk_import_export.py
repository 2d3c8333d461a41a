"""Bulk export and import of makers' grants (adapters/http/bulk_operations.py) against
the fake Oura (a real HTTP server on localhost), on SQLite and PostgreSQL: a grant made by
a person's OAuth sign-in is exported to the team, imported for another user, kept sealed
there and reads the person's data; an export is recorded as a job naming whose grants
left; users not the team's fail; a non-OAuth provider is a 422."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_oura import FakeOura, running_fake_oura
from healthledger.adapters.settings import Settings

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.oauth_browser import (
    API,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    signed_in_user,
)
from tests.integration.stored_text import stored_text
from tests.stream_ids import stream_of_connection


@pytest.fixture
def oura(clock: Clock) -> Iterator[FakeOura]:
    with running_fake_oura(FakeOura(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def svc(settings: Settings, oura: FakeOura, clock: Clock) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": oura.base,
            "oura_api_url": oura.base,
            "oura_history_days": 3,
            "oauth_clients": {"oura": SERVICE},
        }
    )
    built = build_service(configured, clock=clock)
    yield built
    built.close()


@pytest.fixture
def home(svc: Service) -> Team:
    created = svc.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


def test_a_grant_exported_then_imported_for_another_user_reads_the_persons_data(
    svc: Service, api: TestClient, home: Team, browser: Browser
) -> None:
    signed_in = signed_in_user(api, home, browser, "oura")
    exported = api.post(
        "/v2/link/bulk_export", json={"provider": "oura"}, headers=home.headers
    ).json()
    [recipe] = exported["data"]
    assert recipe["user_id"] == str(signed_in) and exported["next_token"] is None
    stored = svc.provider_tokens.current(stream_of_connection(svc, signed_in, "oura"))
    assert stored is not None and recipe["access_token"] == stored.tokens.access_token
    # The export is a job of the team's: whose grants left, and when.
    [job] = api.get("/v2/link/bulk_op", headers=home.headers).json()["data"]
    assert (job["type"], job["status"], job["processed"]) == ("link_bulk_export", "success", 1)

    other = api.post("/v2/user", json={"client_user_id": "moved"}, headers=home.headers)
    moved = uuid.UUID(other.json()["user_id"])
    stranger = uuid.uuid4()
    imported = api.post(
        "/v2/link/bulk_import",
        json={
            "provider": "oura",
            "connections": [
                {**recipe, "user_id": str(moved)},
                {**recipe, "user_id": str(stranger)},
            ],
        },
        headers=home.headers,
    )
    assert imported.status_code == 200, imported.text
    assert imported.json() == {
        "user_ids_imported": [str(moved)],
        "user_ids_failed": [str(stranger)],
    }
    kept = svc.provider_tokens.current(stream_of_connection(svc, moved, "oura"))
    assert kept is not None and kept.tokens.access_token == recipe["access_token"]
    assert kept.client_id == SERVICE_CLIENT
    # Sealed: neither token is anywhere in the database in clear.
    text = stored_text(svc)
    assert recipe["access_token"] not in text and recipe["refresh_token"] not in text
    assert svc.jobs.run_due_pulls() > 0
    assert reads.feed(svc, moved, "oura", "sleep").status == "success"
    assert reads.provider_status(api, home, moved)["status"] == "connected"


def test_bad_imports_and_exports_are_refused(svc: Service, api: TestClient, home: Team) -> None:
    user = api.post("/v2/user", json={"client_user_id": "x"}, headers=home.headers).json()
    recipe: dict[str, Any] = {
        "user_id": user["user_id"],
        "access_token": "tok-secret-1",
        "refresh_token": "r",
        "provider_id": "p",
        "expires_at": 2_000_000_000,
    }
    for body in (
        {"provider": "freestyle_libre", "connections": [recipe]},  # not OAuth
        {"provider": "oura", "connections": []},
        {"provider": "oura", "connections": [{**recipe, "access_token": ""}]},
        {"provider": "oura", "connections": [{**recipe, "expires_at": -1}]},
    ):
        refused = api.post("/v2/link/bulk_import", json=body, headers=home.headers)
        assert refused.status_code == 422, body
        assert "tok-secret-1" not in refused.text
    # Nothing to export: no job recorded.
    empty = api.post("/v2/link/bulk_export", json={"provider": "oura"}, headers=home.headers)
    assert empty.json() == {"data": [], "next_token": None}
    assert api.get("/v2/link/bulk_op", headers=home.headers).json()["data"] == []
