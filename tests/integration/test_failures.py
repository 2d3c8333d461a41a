"""How the service fails: unexpected errors, a lost master key, leftovers of failed writes."""

from __future__ import annotations

import logging
from datetime import date, timedelta

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import user_data_keys
from healthledger.adapters.persistence.keys.master_key import MasterKeyError
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import ClientUserIdTaken
from healthledger.domain.users.user import User
from sqlalchemy import func, select

from tests.conftest import Team


def key_rows(service: Service) -> int:
    with service.db.read() as conn:
        return conn.execute(select(func.count()).select_from(user_data_keys)).scalar_one()


def test_an_unexpected_error_is_a_json_500_with_the_request_id_and_no_message_logged(
    service: Service,
    team: Team,
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("jane.doe@example.org leaked into an exception")

    monkeypatch.setattr(service.user_queries, "list_users", broken)
    with caplog.at_level(logging.ERROR):
        response = client.get("/v2/user", headers={**team.headers, "x-request-id": "req-500"})
    assert response.status_code == 500
    assert response.json() == {"detail": "Internal error.", "request_id": "req-500"}
    assert response.headers["x-request-id"] == "req-500"
    assert "RuntimeError" in caplog.text and "req-500" in caplog.text
    assert "jane.doe" not in caplog.text


def test_a_missing_master_key_is_refused_once_data_keys_exist(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    service.users.create_user(
        ctx, team.team_id, client_user_id="k", fallback_birth_date=date(1990, 1, 1)
    )
    moved = settings.model_copy(update={"master_key_file": settings.master_key_file.with_name("x")})
    with pytest.raises(MasterKeyError, match="HEALTHLEDGER_MASTER_KEY_FILE"):
        build_service(moved)
    assert not moved.master_key_file.exists()


def test_a_refused_create_leaves_no_orphan_data_key(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    service.users.create_user(ctx, team.team_id, client_user_id="dup")
    before = key_rows(service)
    with pytest.raises(ClientUserIdTaken):
        service.users.create_user(
            ctx, team.team_id, client_user_id="dup", fallback_birth_date=date(1990, 1, 1)
        )
    assert key_rows(service) == before


def test_erased_says_only_what_it_removed(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    with freeze_time("2026-03-01T12:00:00Z"):
        user = service.users.create_user(ctx, team.team_id, client_user_id="plain")
        service.users.delete_user(ctx, team.team_id, user.id)
    with freeze_time("2026-03-01T12:00:00Z") as frozen:
        frozen.tick(timedelta(days=8))
        assert service.users.erase_user(ctx, user.id)
    erased = list(service.ledger.events.get(user.id))[-1]
    assert isinstance(erased, User.Erased)
    # Its only personal data was its client_user_id (sealed with its key): no snapshot
    # to remove.
    # `removed` names only the places that had rows; `checked` counts every place.
    assert erased.removed == [
        "user_data_key",
        "read_model:users",
        "read_model:pending_erasures",
    ]
    assert erased.checked == {
        "user_data_key": 1,
        "snapshots": 0,
        "read_model:users": 1,
        "read_model:pending_erasures": 1,
        "read_model:connections": 0,
        "read_model:resource_feeds": 0,
        "read_model:link_tokens": 0,
        "read_model:orders": 0,
        "health_data": 0,
        "session_index": 0,
        "raw_payloads": 0,
        "provider_tokens": 0,
        "continuous_queries": 0,
        "continuous_query_tasks": 0,
        "lab_report_uploads": 0,
        "webhook_deliveries:queued": 0,
    }
