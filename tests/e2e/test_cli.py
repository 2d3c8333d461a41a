"""The command line: audit (history and --as-of), rebuild, keys, features, erase-due."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.keys import team_api_key_id

from tests.conftest import Team, create_user

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))


@pytest.fixture
def team(service: Service) -> Team:
    """The first-run team, made before the instants the tests travel to (an --as-of
    before the team existed is refused)."""
    with freeze_time(T0 - timedelta(days=60)):
        created = service.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def test_audit_prints_history_and_state_as_of(
    service: Service, team: Team, ctx: CommandContext, capsys: pytest.CaptureFixture[str]
) -> None:
    with freeze_time(T0):
        user = service.users.create_user(
            ctx, team.team_id, client_user_id="aud", fallback_time_zone="UTC"
        )
    with freeze_time(T0 + timedelta(days=1)):
        service.users.update_user(ctx, team.team_id, user.id, {"fallback_time_zone": "Asia/Tokyo"})
    with freeze_time(T0 + timedelta(days=2)):
        service.users.delete_user(ctx, team.team_id, user.id)

    assert main(["audit", str(user.id)]) == 0
    out = capsys.readouterr().out.splitlines()
    # The user's events, and its claim's: the audit takes in every stream the user owns.
    assert [line.split()[2] for line in out] == [
        "ClientUserIdClaim.Created",
        "User.Created",
        "User.SettingsChanged",
        "User.Deleted",
        "ClientUserIdClaim.Released",
    ]
    # The zone is sealed in the event (revision 0042): the history shows it so; the state
    # as of an instant shows it by value.
    assert "sealed_fallback_time_zone=<personal data: sealed>" in out[2]
    assert "Asia/Tokyo" not in out[2] and "actor=test:actor" in out[2]

    assert main(["audit", str(user.id), "--as-of", "2026-03-01T18:00:00Z", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["status"] == "active" and state["fallback_time_zone"] == "UTC"
    assert state["version"] == 1

    assert main(["audit", str(user.id), "--as-of", "2026-03-02T18:00:00Z", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fallback_time_zone"] == "Asia/Tokyo"

    assert main(["audit", str(user.id), "--as-of", "2026-02-01T00:00:00Z"]) == 1
    assert main(["audit", "00000000-0000-0000-0000-000000000000"]) == 1


def test_audit_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as bad_id:
        main(["audit", "not-a-uuid"])
    assert bad_id.value.code == 2
    with pytest.raises(SystemExit) as naive:
        main(["audit", "00000000-0000-0000-0000-000000000000", "--as-of", "2026-03-01T12:00"])
    assert naive.value.code == 2
    assert "offset" in capsys.readouterr().err


def test_rebuild_recreates_read_models_and_the_api_answers_the_same(
    service: Service, team: Team, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = create_user(
        client, team, "kept", fallback_time_zone="Europe/Rome", fallback_birth_date="1990-01-01"
    )
    gone = create_user(client, team, "gone")
    assert client.delete(f"/v2/user/{gone['user_id']}", headers=team.headers).status_code == 200
    before = [
        client.get("/v2/user", headers=team.headers).json(),
        client.get(f"/v2/user/{kept['user_id']}", headers=team.headers).json(),
        client.get(f"/v2/user/{gone['user_id']}", headers=team.headers).json(),
        client.get("/v2/user/resolve/kept", headers=team.headers).json(),
    ]
    assert main(["rebuild"]) == 0
    printed = capsys.readouterr()
    assert "rebuilt the read models from" in printed.out
    assert "100%" in last_bar(printed.err), printed.err
    after = [
        client.get("/v2/user", headers=team.headers).json(),
        client.get(f"/v2/user/{kept['user_id']}", headers=team.headers).json(),
        client.get(f"/v2/user/{gone['user_id']}", headers=team.headers).json(),
        client.get("/v2/user/resolve/kept", headers=team.headers).json(),
    ]
    assert after == before
    # The team key still works (its read model was rebuilt too) and writes go on.
    create_user(client, team, "after-rebuild")


def last_bar(err: str) -> str:
    """The last state of a tqdm bar (it redraws itself with carriage returns)."""
    return err.replace("\r", "\n").strip().splitlines()[-1]


def test_audit_into_a_pipe_closed_early_stops_quietly(
    service: Service,
    team: Team,
    client: TestClient,
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`healthledger audit --json | head`: no BrokenPipeError traceback (issue 34)."""
    user = create_user(client, team, "long-history")["user_id"]
    for index in range(400):
        zone = ("UTC", "Europe/Rome")[index % 2]
        patched = client.patch(
            f"/v2/user/{user}", json={"fallback_time_zone": zone}, headers=team.headers
        )
        assert patched.status_code == 204, patched.text
    assert main(["audit", user, "--json"]) == 0
    # Far more than a pipe holds (64 KiB): the writer is still writing when the reader goes.
    assert len(capsys.readouterr().out) > 2 * 65536
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": settings.database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(settings.master_key_file),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "healthledger.adapters.cli", "audit", user, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(100).startswith(b"[")  # as `head -c 100` reads
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_keys_create_prints_a_working_key_once(
    service: Service, team: Team, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "create", "--team", str(team.team_id)]) == 0
    plain = capsys.readouterr().out.splitlines()[-1]
    key_id = team_api_key_id(plain)
    assert key_id is not None
    assert client.get("/v2/user", headers={"x-service-api-key": plain}).status_code == 200
    # Only the hash is stored: the plain text is nowhere in the log.
    assert plain.encode() not in b"".join(
        n.state for n in service.recorder.select_notifications(1, 1000)
    )
    assert main(["keys", "create", "--team", "00000000-0000-0000-0000-000000000000"]) == 1


def test_features_switch_the_closed_beta_on_and_off(team: Team, client: TestClient) -> None:
    user = create_user(client, team, "beta")
    path = f"/v2/user/{user['user_id']}/info/latest"
    assert client.get(path, headers=team.headers).status_code == 403
    assert main(["features", "enable", "demographics", "--team", str(team.team_id)]) == 0
    assert client.get(path, headers=team.headers).status_code == 404  # enabled, none recorded
    assert main(["features", "disable", "demographics", "--team", str(team.team_id)]) == 0
    assert client.get(path, headers=team.headers).status_code == 403


def test_bad_settings_are_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_GRACE_PERIOD", "soon")
    assert main(["erase-due"]) == 2
    assert "HEALTHLEDGER_GRACE_PERIOD" in capsys.readouterr().err


def test_a_database_that_cannot_be_used_is_said_in_a_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A SQLite file in a directory that does not exist (a typo in the path).
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", f"sqlite:///{tmp_path}/missing/ledger.db")
    assert main(["verify"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "healthledger: the database cannot be used: OperationalError (SQLITE_CANTOPEN): "
        "unable to open database file"
    ]


def test_a_database_url_of_another_kind_is_a_setting_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for url in ("not a url", "mysql://healthledger:s3cret-pw@db.example/ledger"):
        monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", url)
        assert main(["verify"]) == 2
        err = capsys.readouterr().err
        assert "setting HEALTHLEDGER_DATABASE_URL: " in err and "SQLite or PostgreSQL URL" in err
        assert "s3cret-pw" not in err  # never echoed: a URL may hold a password


def test_a_replay_into_a_directory_that_does_not_exist_is_refused(
    team: Team, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "missing" / "replay.db"
    assert main(["replay", "--until", "2026-03-01T12:00:00Z", "--into", str(target)]) == 1
    assert f"healthledger: {target.parent} is not a directory: make it first" in (
        capsys.readouterr().err
    )
    assert not target.parent.exists()


def test_unknown_settings_are_warned_of_naming_the_closest(
    team: Team, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_PORT", "9999")
    monkeypatch.setenv("HEALTHLEDGER_GRACE_PERIUD", "sealed-value-7")
    monkeypatch.setenv("HEALTHLEDGER_TEST_POSTGRES_URL", "postgresql://tests-only")
    assert main(["erase-due"]) == 0  # a warning, not a stop
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert lines == [
        "healthledger: warning: HEALTHLEDGER_GRACE_PERIUD is not a setting and is ignored; "
        "did you mean HEALTHLEDGER_GRACE_PERIOD?",
        "healthledger: warning: HEALTHLEDGER_PORT is not a setting and is ignored; did you "
        "mean HEALTHLEDGER_LINK_PORT or HEALTHLEDGER_MANAGEMENT_API_PORT or "
        "HEALTHLEDGER_TEAM_API_PORT?",
    ]
    # Names only: a value may be a secret.
    assert not any("sealed-value-7" in line or "9999" in line for line in lines)


def test_grace_period_setting_accepts_seconds_and_iso() -> None:
    assert Settings(grace_period="3600").grace_period == timedelta(hours=1)  # type: ignore[arg-type]
    assert Settings(grace_period="P7D").grace_period == timedelta(days=7)  # type: ignore[arg-type]


def test_keys_create_for_an_org_prints_a_working_management_key(
    service: Service, team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    from healthledger.adapters.http.management_api import create_management_api
    from healthledger.domain.teams.directory import DEFAULT_ORG_ID

    assert main(["keys", "create", "--org", str(DEFAULT_ORG_ID)]) == 0
    plain = capsys.readouterr().out.splitlines()[-1]
    assert plain.startswith("hlm_")
    with TestClient(create_management_api(service)) as management:
        answer = management.get(f"/v1/org/{DEFAULT_ORG_ID}", headers={"X-Management-Key": plain})
    assert answer.status_code == 200
    assert main(["keys", "create", "--org", "00000000-0000-0000-0000-000000000000"]) == 1


def test_webhooks_replay_queues_an_endpoints_deliveries_again(
    service: Service, team: Team, ctx: CommandContext, capsys: pytest.CaptureFixture[str]
) -> None:
    from healthledger.adapters.persistence.engine.schema import webhook_deliveries
    from sqlalchemy import select

    created = service.webhooks.create(ctx, team.team_id, "sandbox", url="https://hooks.example/in")
    with freeze_time(T0):
        user = service.users.create_user(ctx, team.team_id, client_user_id="cli-hooks")
        service.connections.connect_demo(ctx, team.team_id, user.id, "freestyle_libre", ["glucose"])
        service.jobs.run_due_pulls()
        service.dispatcher.follow()  # two deliveries queued, never sent (no sender ran)
    with service.db.read() as conn:
        rows = conn.execute(select(webhook_deliveries.c.delivery_id)).scalars().all()
    assert len(rows) == 2
    assert main(["webhooks", "replay", str(created.id), "--since", "2026-03-01T00:00Z"]) == 0
    assert capsys.readouterr().out.strip() == "queued 2 deliveries again"
    for delivery_id in rows:
        assert type(list(service.ledger.events.get(delivery_id))[-1]).__name__ == "Replayed"
    assert main(["webhooks", "replay", str(created.id), "--since", "2026-03-02T00:00Z"]) == 0
    assert capsys.readouterr().out.strip() == "queued 0 deliveries again"
    assert (
        main(
            [
                "webhooks",
                "replay",
                "00000000-0000-0000-0000-000000000000",
                "--since",
                "2026-03-01T00:00Z",
            ]
        )
        == 1
    )
    assert "no webhook endpoint" in capsys.readouterr().err
