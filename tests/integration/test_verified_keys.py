"""A team API key revoked, or its team deleted, stops working in every process of the
service (ADR 0042): at once in the process that committed it, and in the others when the
database's notification reaches them (PostgreSQL, where each process keeps the keys it
verified); SQLite reads the key on every request. A second `build_service` on the same
database and master key is the other process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from uuid import UUID

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.conftest import Team

# Generous for a loaded machine: a notification arrives in milliseconds.
WITHIN_SECONDS = 10.0
CTX = CommandContext.system("test:keys")


@pytest.fixture
def other_process(settings: Settings, service: Service) -> Iterator[Service]:
    built = build_service(settings)
    yield built
    built.close()


@pytest.fixture
def api(service: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(service), raise_server_exceptions=False) as client:
        yield client


def status(api: TestClient, team: Team) -> int:
    return api.get("/v2/user", headers=team.headers).status_code


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WITHIN_SECONDS
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def listening(service: Service) -> bool:
    keys = service.team_queries.verified_keys
    return keys is not None and keys.listening


def wait_listening(service: Service) -> None:
    if not service.db.is_sqlite:
        assert eventually(lambda: listening(service)), "the key listener never listened"


def key_id_of(service: Service, team: Team) -> UUID:
    (key,) = service.team_queries.team_api_keys(team.team_id, "sandbox")
    key_id: UUID = key["id"]
    return key_id


def test_a_key_revoked_in_another_process_is_refused_here(
    service: Service, other_process: Service, team: Team, api: TestClient
) -> None:
    wait_listening(service)
    assert status(api, team) == status(api, team) == 200
    keys = service.team_queries.verified_keys
    if service.db.is_sqlite:
        assert keys is None  # read from the file every time
    else:
        # The second request was answered from what the first verified.
        assert keys is not None and keys.hits >= 1
    other_process.teams.revoke_team_api_key(CTX, key_id_of(service, team))
    assert eventually(lambda: status(api, team) == 401)
    # And it stays refused (nothing stale was kept again).
    assert [status(api, team) for _ in range(3)] == [401] * 3


def test_a_key_revoked_here_is_refused_by_the_next_request(
    service: Service, team: Team, api: TestClient
) -> None:
    wait_listening(service)
    keys = service.team_queries.verified_keys
    if keys is not None:
        # The listener stopped (its notification never comes): only the commit listener
        # of this process can make it forget.
        assert service.changes is not None
        service.changes.close()
        assert eventually(lambda: not keys.listening)
        keys.set_listening(True)
    assert status(api, team) == status(api, team) == 200
    assert keys is None or keys.hits >= 1
    service.teams.revoke_team_api_key(CTX, key_id_of(service, team))
    # No wait: the commit itself made this process forget the key.
    assert status(api, team) == 401


def test_a_team_deleted_in_another_process_takes_its_keys_with_it_here(
    service: Service, other_process: Service, team: Team, other_team: Team, api: TestClient
) -> None:
    wait_listening(service)
    assert status(api, team) == status(api, other_team) == 200
    rendered = service.team_queries.team(other_team.team_id)
    assert rendered is not None
    org_id = rendered["org_id"]
    other_process.teams.delete_team(CTX, org_id, other_team.team_id)
    assert eventually(lambda: status(api, other_team) == 401)
    assert status(api, team) == 200


def test_a_listener_cut_off_listens_again_and_still_hears_revocations(
    service: Service, other_process: Service, team: Team, other_team: Team, api: TestClient
) -> None:
    if service.db.is_sqlite:
        pytest.skip("SQLite keeps no keys: nothing to listen for")
    wait_listening(service)
    changes = service.changes
    assert changes is not None
    cut = changes.backend_pid()
    assert cut is not None
    with service.db.writer.connect() as conn:
        assert conn.execute(sa.select(sa.func.pg_terminate_backend(cut))).scalar() is True
    # A new connection listens (the old one's end forgot whatever was kept).
    assert eventually(lambda: changes.backend_pid() not in (None, cut) and listening(service))
    assert status(api, team) == status(api, team) == 200
    assert status(api, other_team) == 200
    other_process.teams.revoke_team_api_key(CTX, key_id_of(service, other_team))
    assert eventually(lambda: status(api, other_team) == 401)
    assert status(api, team) == 200
