"""The embedded facade (adapters/embedded.py, docs/embedding.md): the documented example
runs as written, the facade answers what the HTTP API answers, raises the domain errors,
and starts and stops its scheduler."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
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
from healthledger.domain.connections.summaries import json_default
from healthledger.domain.context import CommandContext
from healthledger.domain.errors import (
    ClientUserIdTaken,
    DemographicsNotFound,
    InvalidRequest,
    TeamNotFound,
    UserNotFound,
    UserScheduledForDeletion,
)
from healthledger.domain.labs.orders import OrderNotFound
from healthledger.scheduler.runner import Jobs
from pydantic import ValidationError

from tests.clocks import Clock
from tests.integration.test_orders import ADDRESS, PATIENT, WELLNESS

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


def test_user_ids_as_text_are_read_and_malformed_ones_are_invalid_requests(
    ledger: HealthLedger,
) -> None:
    """A user id's text works where its UUID does; anything else is the API's 422 as
    `InvalidRequest` naming user_id, never a database error (issue 34)."""
    user = ledger.create_user("text-ids")
    text = str(user.user_id)
    assert ledger.get_user(text) == ledger.get_user(user.user_id)
    ledger.update_user(text.upper(), fallback_time_zone="UTC")
    zone = ledger.get_user(user.user_id).fallback_time_zone
    assert zone is not None and zone.id == "UTC"
    assert ledger.connect_demo(text, "oura").success
    assert [p.slug for p in ledger.connected_providers(text).providers] == ["oura"]
    malformed: list[Any] = ["not-a-uuid", "", text + "0", "1' OR '1'='1", 42, None]
    for bad in malformed:
        calls: list[Callable[[Any], object]] = [
            ledger.get_user,
            lambda bad: ledger.update_user(bad, fallback_time_zone="UTC"),
            ledger.delete_user,
            ledger.latest_demographics,
            ledger.connected_providers,
            lambda bad: ledger.connect_demo(bad, "oura"),
            lambda bad: ledger.deregister_provider(bad, "oura"),
        ]
        for call in calls:
            with pytest.raises(InvalidRequest) as refused:
                call(bad)
            assert (refused.value.field, refused.value.location) == ("user_id", "path")
    assert ledger.delete_user(text) == Success(success=True)
    assert ledger.undo_delete(text) == Success(success=True)


def test_every_scheduler_job_can_be_run_through_the_facade(ledger: HealthLedger) -> None:
    """With run_scheduler=False, the application runs each of the scheduler's jobs: the
    facade offers every one (docs/embedding.md lists them)."""
    offered = {name for name in dir(ledger) if not name.startswith("_")}
    wanted = {
        field.name
        for field in dataclasses.fields(Jobs)
        # Not jobs: what tells the scheduler when a commit gives work, and what an outage is.
        if field.name not in ("makes_head_signing_due", "gives_webhooks_work", "unavailable")
    }
    assert wanted <= offered, wanted - offered
    documented = DOC.read_text()
    assert all(f"`{name}()`" in documented for name in wanted), documented
    user = ledger.create_user("jobs-1")
    assert ledger.sign_chain_head() == 1  # the head moved: signed
    assert ledger.sign_chain_head() == 0  # and not again until it moves
    ledger.connect_demo(user.user_id, "oura")
    assert ledger.run_due_pulls() >= 1
    assert ledger.deregister_provider(user.user_id, "oura") == Success(success=True)
    assert ledger.revoke_grants() == 0  # a demo device holds no grant at a maker
    assert ledger.run_due_imports() == 0
    assert ledger.run_due_bulk_operations() == 0  # none was started
    assert ledger.run_due_continuous_queries() == 0  # none is registered
    assert ledger.progress_lab_orders() == 0


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


def test_the_facade_reads_what_the_api_reads(database_url: str, tmp_path: Path) -> None:
    """Summaries, orders, the audit and the deletion report (issue 34): the facade answers
    what the team API answers for the same user, and the same errors."""
    clock = Clock()
    with HealthLedger.open(
        database_url, master_key_file=tmp_path / "master.key", run_scheduler=False, clock=clock
    ) as ledger:
        facade_reads(ledger, clock)


def facade_reads(ledger: HealthLedger, clock: Clock) -> None:
    user = ledger.create_user("reads-1")
    ledger.connect_demo(user.user_id, "oura")
    ledger.run_due_pulls()
    assert ledger.bootstrap is not None
    headers = {"x-service-api-key": ledger.bootstrap.team_api_key.plain}
    with TestClient(create_team_api(ledger.service)) as api:
        today = ledger.service.clock().date()
        start = (today - timedelta(days=6)).isoformat()
        pulls = api.get(
            "/v2/introspect/historical_pull", params={"user_id": str(user.user_id)}, headers=headers
        ).json()["data"][0]
        assert ledger.historical_pulls(str(user.user_id)).model_dump(mode="json") == pulls
        assert pulls["provider"]["oura"]["pulled"], "the pulls are there"
        through_api = api.get(
            f"/v2/summary/sleep/{user.user_id}",
            params={"start_date": start, "end_date": today.isoformat()},
            headers=headers,
        ).json()["sleep"]
        assert through_api, "the demo nights were pulled"
        assert json_of(ledger.summaries(str(user.user_id), "sleep", start, today)) == through_api
        heart = api.get(
            f"/v2/timeseries/{user.user_id}/heartrate",
            params={"start_date": str(today - timedelta(days=1)), "end_date": str(today)},
            headers=headers,
        ).json()
        assert heart, "the demo heart rate was pulled"
        assert (
            ledger.timeseries(user.user_id, "heartrate", today - timedelta(days=1), today) == heart
        )
        placed = api.post(
            "/v3/order",
            json={
                "user_id": str(user.user_id),
                "lab_test_id": WELLNESS,
                "patient_details": PATIENT,
                "patient_address": ADDRESS,
            },
            headers=headers,
        )
        assert placed.status_code == 200, placed.text
        order_id = placed.json()["id"]
        got = api.get(f"/v3/order/{order_id}", headers=headers).json()
    assert ledger.get_order(order_id).model_dump(mode="json") == got
    assert [o.id for o in ledger.list_orders(user.user_id)] == [order_id]
    assert ledger.list_orders(uuid.uuid4()) == []
    with pytest.raises(OrderNotFound):
        ledger.get_order(uuid.uuid4())
    for bad in (
        lambda: ledger.summaries(user.user_id, "nonsense", start),
        lambda: ledger.timeseries(user.user_id, "nonsense", start),
        lambda: ledger.timeseries(user.user_id, "heartrate", start, provider="nobody"),
        lambda: ledger.summaries(user.user_id, "sleep", start, provider="nobody"),
        lambda: ledger.summaries(user.user_id, "sleep", today, start),  # end before start
        lambda: ledger.get_order("not-an-order"),
        lambda: ledger.list_orders(size=0),
    ):
        with pytest.raises(InvalidRequest):
            bad()

    events = {entry.event for entry in ledger.audit(user.user_id)}
    assert {"User.Created", "Connection.Created", "Order.Created"} <= events
    with pytest.raises(UserNotFound):
        ledger.audit(uuid.uuid4())
    with pytest.raises(UserNotFound):
        ledger.historical_pulls(uuid.uuid4())
    ledger.delete_user(user.user_id)
    clock.advance(timedelta(days=8))
    assert ledger.sweep_erasures() == 1
    assert ledger.sign_chain_head() == 1
    report = ledger.deletion_report(user.user_id)
    assert report["user"]["user_id"] == str(user.user_id) and report["signature"]["value"]


def json_of(value: Any) -> Any:
    """A value as the API's JSON has it (its serialization of the same objects)."""
    return json.loads(json.dumps(value, default=json_default))


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
