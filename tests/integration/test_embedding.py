"""The embedded facade (adapters/embedded.py, docs/embedding.md): the documented example
runs as written, the facade answers what the HTTP API answers, raises the domain errors,
and starts and stops its scheduler."""

from __future__ import annotations

import re
import shutil
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from healthledger.adapters.compliance.audit import history
from healthledger.adapters.composition import build_service
from healthledger.adapters.embedded import EMBEDDED, FeatureNotEnabled, HealthLedger
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.operations.schemas import ResolvedUser, Success, UserList
from healthledger.adapters.operations.users import UndoParametersError
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdTaken,
    DemographicsNotFound,
    InvalidRequest,
    TeamNotFound,
    UserNotFound,
    UserScheduledForDeletion,
)
from pydantic import ValidationError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

DOC = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"

DEMOGRAPHICS: dict[str, Any] = {
    "first_name": "Grace",
    "last_name": "Hopper",
    "email": "grace@example.org",
    "phone_number": "+1 202 555 0100",
    "gender": "female",
    "dob": "1906-12-09",
    "address": {
        "first_line": "1 Navy Yard",
        "zip_code": "20374",
        "state": "DC",
        "city": "Washington",
    },
}


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)


@pytest.fixture
def ledger(database_url: str, tmp_path: Path) -> Iterator[HealthLedger]:
    with HealthLedger.open(
        database_url, master_key_file=tmp_path / "master.key", run_scheduler=False
    ) as opened:
        yield opened


def test_the_documented_example_runs_as_written(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    blocks = python_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "docs/embedding.md lost its example"
    # The example reads the service's own settings for where to keep its data.
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(tmp_path / "master.key"))
    namespace: dict[str, Any] = {"__name__": "embedding_example"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "team API key (shown once): hlk_" in out
    assert "recorded Ada Lovelace 1985-12-10" in out
    assert "deleted: User is scheduled for deletion" in out
    assert "erased: User not found." in out
    assert "0 live users" in out
    # It ran on the database it was pointed at, and what it erased stays erased there.
    with HealthLedger.open(
        database_url, master_key_file=tmp_path / "master.key", run_scheduler=False
    ) as again:
        assert again.bootstrap is None
        with pytest.raises(UserNotFound):
            again.get_user_by_client_user_id("patient-0042")
        events = [entry.event for entry in history(again.service, namespace["user"].user_id)]
        assert events[-1] == "User.Erased"


def test_the_facade_answers_what_the_api_answers(ledger: HealthLedger) -> None:
    assert ledger.bootstrap is not None
    headers = {"x-service-api-key": ledger.bootstrap.team_api_key.plain}
    ledger.set_feature("demographics")
    with TestClient(create_team_api(ledger.service), raise_server_exceptions=False) as client:
        user = ledger.create_user(
            "answer-1", fallback_time_zone="Europe/Paris", ingestion_start="2026-01-01"
        )
        assert isinstance(user, ResolvedUser)
        api = client.get(f"/v2/user/{user.user_id}", headers=headers)
        assert api.status_code == 200
        assert ledger.get_user(user.user_id).model_dump(mode="json") == api.json()
        assert user.model_dump(mode="json") == api.json()
        resolved = client.get("/v2/user/resolve/answer-1", headers=headers).json()
        assert ledger.get_user_by_client_user_id("answer-1").model_dump(mode="json") == resolved

        page = ledger.list_users(offset=0, limit=10)
        assert isinstance(page, UserList)
        assert (
            page.model_dump(mode="json") == client.get("/v2/user?limit=10", headers=headers).json()
        )

        recorded = ledger.upsert_demographics(user.user_id, DEMOGRAPHICS)
        latest = client.get(f"/v2/user/{user.user_id}/info/latest", headers=headers).json()
        assert recorded.model_dump(mode="json") == latest
        assert ledger.latest_demographics(user.user_id).model_dump(mode="json") == latest

        ledger.update_user(user.user_id, client_user_id="answer-2", fallback_time_zone=None)
        changed = ledger.get_user(user.user_id)
        assert (changed.client_user_id, changed.fallback_time_zone) == ("answer-2", None)
        assert (
            changed.model_dump(mode="json")
            == client.get(f"/v2/user/{user.user_id}", headers=headers).json()
        )


def test_connections_through_the_facade(ledger: HealthLedger) -> None:
    user = ledger.create_user("connected-1")
    connected = ledger.connect_demo(user.user_id, "oura")
    assert connected.success and "Oura" in connected.detail
    providers = ledger.connected_providers(user.user_id).providers
    assert [p.slug for p in providers] == ["oura"]
    assert [s.source.slug for s in ledger.get_user(user.user_id).connected_sources] == ["oura"]
    assert ledger.deregister_provider(user.user_id, "oura") == Success(success=True)
    assert ledger.connected_providers(user.user_id).providers == []
    with pytest.raises(InvalidRequest) as unknown:
        ledger.connect_demo(user.user_id, "no_such_provider")
    assert unknown.value.field == "provider"
    with pytest.raises(InvalidRequest) as failures:
        ledger.connect_demo(
            user.user_id, "oura", demo_failures={"glucose": {"code": "provider_unavailable"}}
        )
    assert failures.value.field == "demo_failures"


def test_the_facade_raises_the_domain_errors(ledger: HealthLedger) -> None:
    user = ledger.create_user("errors-1")
    with pytest.raises(UserNotFound):
        ledger.get_user(uuid.uuid4())
    with pytest.raises(ClientUserIdTaken) as taken:
        ledger.create_user("errors-1")
    assert taken.value.user_id == user.user_id
    with pytest.raises(ValidationError):
        ledger.create_user("errors-2", fallback_time_zone="Mars/Olympus_Mons")
    with pytest.raises(ValidationError):
        ledger.update_user(user.user_id, nickname="x")
    with pytest.raises(FeatureNotEnabled):
        ledger.upsert_demographics(user.user_id, DEMOGRAPHICS)
    ledger.set_feature("demographics")
    with pytest.raises(DemographicsNotFound):
        ledger.latest_demographics(user.user_id)
    with pytest.raises(ValidationError):
        ledger.upsert_demographics(user.user_id, {"first_name": "Only"})  # incomplete
    with pytest.raises(UndoParametersError):
        ledger.undo_delete()
    with pytest.raises(UndoParametersError):
        ledger.undo_delete(user.user_id, client_user_id="errors-1")
    with pytest.raises(InvalidRequest):
        ledger.list_users(limit=0)

    ledger.delete_user(user.user_id)
    with pytest.raises(UserScheduledForDeletion):
        ledger.get_user(user.user_id)
    assert ledger.undo_delete(client_user_id="errors-1") == Success(success=True)
    assert ledger.get_user(user.user_id).user_id == user.user_id


def test_teams_views_and_actors(ledger: HealthLedger) -> None:
    user = ledger.create_user("team-1")
    ctx = CommandContext.system("test:setup")
    org_id = ledger.service.teams.create_organization(ctx, "Other org")
    other_team = ledger.service.teams.create_team(ctx, org_id, "Other team", "eu")
    other = ledger.for_team(other_team)
    # Another team's user does not exist for it (404 in the API, never 403).
    with pytest.raises(UserNotFound):
        other.get_user(user.user_id)
    assert other.list_users().total == 0
    other.close()  # a view does not close the service it shares
    assert ledger.get_user(user.user_id).user_id == user.user_id
    with pytest.raises(TeamNotFound):
        ledger.for_team(uuid.uuid4())

    ledger.acting_as("app:nurse-station", "req-ward-7").delete_user(user.user_id)
    created, *_, deleted = history(ledger.service, user.user_id)
    assert created.actor == EMBEDDED and created.request_id.startswith("emb-")
    assert (deleted.actor, deleted.request_id) == ("app:nurse-station", "req-ward-7")


def test_open_refuses_unknown_settings_and_teams(database_url: str, tmp_path: Path) -> None:
    key = tmp_path / "master.key"
    with pytest.raises(TypeError, match="grace_periode"):
        HealthLedger.open(database_url, master_key_file=key, grace_periode=1)
    with pytest.raises(ValueError, match="sandbox, production"):
        HealthLedger.open(database_url, master_key_file=key, environment="staging")
    with pytest.raises(TeamNotFound):
        HealthLedger.open(database_url, master_key_file=key, team_id=uuid.uuid4())


def test_the_scheduler_runs_with_the_ledger_and_erases_what_is_due(
    database_url: str, tmp_path: Path
) -> None:
    with HealthLedger.open(
        database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=0.5,
        erasure_sweep_interval=0.1,
    ) as ledger:
        scheduler = ledger.scheduler
        assert scheduler is not None and scheduler.running
        user = ledger.create_user("scheduled-1")
        ledger.delete_user(user.user_id)
        deadline = time.monotonic() + 15
        while True:
            try:
                ledger.get_user(user.user_id)
            except UserScheduledForDeletion:
                pass  # in its grace period, or due and not swept yet
            except UserNotFound:
                break  # erased by the scheduler: nobody called a sweep
            assert time.monotonic() < deadline, "the scheduler did not erase the user"
            time.sleep(0.05)
        with pytest.raises(UserNotFound):
            ledger.undo_delete(user.user_id)
        assert ledger.sweep_erasures() == 0  # nothing left to do
    assert not scheduler.running


def test_apps_of_two_services_in_one_process_each_answer_from_their_own(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """Both APIs' routes are built once per process and shared by every app made from
    them (adapters/http/service_dependency.py): an app must still answer from the service
    it was made for, as a backend embedding one service per tenant expects."""
    services = []
    for name in ("a", "b"):
        path = tmp_path / name / "database" / "ledger.db"
        path.parent.mkdir(parents=True)
        shutil.copyfile(sqlite_template, path)
        settings = Settings(database_url=f"sqlite:///{path}", master_key_file=tmp_path / name / "k")
        services.append(build_service(settings))
    try:
        booted = [b for b in (service.bootstrap() for service in services) if b is not None]
        assert len(booted) == 2
        team = [{"x-service-api-key": b.team_api_key.plain} for b in booted]
        management = [{"X-Management-Key": b.management_key.plain} for b in booted]
        with (
            TestClient(create_team_api(services[0])) as a,
            TestClient(create_team_api(services[1])) as b,
            TestClient(create_management_api(services[0])) as a_management,
            TestClient(create_management_api(services[1])) as b_management,
        ):
            made = a.post("/v2/user", json={"client_user_id": "only-in-a"}, headers=team[0])
            assert made.status_code == 200, made.text
            user_id = made.json()["user_id"]
            assert a.get(f"/v2/user/{user_id}", headers=team[0]).status_code == 200
            assert b.get(f"/v2/user/{user_id}", headers=team[1]).status_code == 404
            assert b.get("/v2/user", headers=team[0]).status_code == 401
            assert [u["user_id"] for u in a.get("/v2/user", headers=team[0]).json()["users"]] == [
                user_id
            ]
            assert b.get("/v2/user", headers=team[1]).json()["users"] == []
            org = f"/v1/org/{booted[1].org_id}"
            assert b_management.get(org, headers=management[1]).status_code == 200
            assert b_management.get(org, headers=management[0]).status_code == 401
            assert a_management.get(org, headers=management[1]).status_code == 401
    finally:
        for service in services:
            service.close()
