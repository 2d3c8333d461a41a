"""Fixtures shared by every test: the same tests run on a SQLite file and, when
HEALTHLEDGER_TEST_POSTGRES_URL is set (CI sets it), on PostgreSQL in a fresh schema."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

POSTGRES_URL = os.environ.get("HEALTHLEDGER_TEST_POSTGRES_URL")
BACKENDS = ["sqlite", *(["postgres"] if POSTGRES_URL else [])]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    assert POSTGRES_URL is not None
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{separator}options={quote(f'-csearch_path={schema}')}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    admin.dispose()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
    )


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    built = build_service(settings)
    yield built
    built.close()


@dataclass
class Team:
    team_id: uuid.UUID
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"x-service-api-key": self.key}


@pytest.fixture
def team(service: Service) -> Team:
    created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


@pytest.fixture
def other_team(service: Service, team: Team) -> Team:
    ctx = CommandContext.system("test:setup")
    org_id = service.teams.create_organization(ctx, "Other org")
    team_id = service.teams.create_team(ctx, org_id, "Other team", "eu")
    issued = service.teams.issue_team_api_key(ctx, team_id)
    return Team(team_id, issued.plain)


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    from healthledger.adapters.http.team_api import create_team_api

    with TestClient(create_team_api(service), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def ctx() -> CommandContext:
    return CommandContext(actor="test:actor", request_id="req-test")


def create_user(client: TestClient, team: Team, client_user_id: str, **fields: Any) -> dict:
    response = client.post(
        "/v2/user", json={"client_user_id": client_user_id, **fields}, headers=team.headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The folder is the scope: `pytest -m unit` runs the domain tests that need no database.
    for item in items:
        scope = item.path.parent.name
        if scope in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, scope))
