"""Rotating the master key: `healthledger keys rotate-master` and the scheduler rewrap
every data key under a new key and destroy the old one; processes holding the old key
take the new one; a key from the environment or a secrets manager is handed to the
operator; a rotation a crash cut short is settled at the next start."""

from __future__ import annotations

import base64
import stat
import sys
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from cryptography.exceptions import InvalidTag
from freezegun import freeze_time
from healthledger.adapters.cli import main
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.persistence.engine.schema import user_data_keys
from healthledger.adapters.persistence.keys import key_store as key_store_module
from healthledger.adapters.persistence.keys.key_store import MasterKey
from healthledger.adapters.persistence.keys.master_key import (
    FileKeySource,
    MasterKeyError,
    master_key_id,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy import select

from tests.conftest import Team

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def private_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default key directory (`default_key_directory()`), used where a test sets no key
    # file, is the test's own: never the home directory of whoever runs the tests.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


OLD_KEY = bytes(range(32))


def file_key(path: Path) -> bytes:
    return base64.b64decode(path.read_text())


def wrapped_keys(service: Service) -> dict[UUID, bytes]:
    with service.db.read() as conn:
        rows = conn.execute(select(user_data_keys.c.user_id, user_data_keys.c.wrapped_key))
        return {row.user_id: bytes(row.wrapped_key) for row in rows}


def make_users(service: Service, team_id: UUID, ctx: CommandContext, count: int) -> list[UUID]:
    return [
        service.users.create_user(
            ctx, team_id, client_user_id=f"r-{uuid4()}", fallback_birth_date=date(1980, 1, 1 + n)
        ).id
        for n in range(count)
    ]


def birth_date_of(service: Service, user_id: UUID) -> Any:
    user: Any = service.ledger.find(user_id)
    return service.key_store.open(user_id, user.sealed_birth_date[0])


def sleep_id(service: Service, user_id: UUID) -> UUID:
    """A summary id of the user's (keyed by its key: ADR 0057)."""
    cipher = service.key_store.cipher(user_id)
    assert cipher is not None and cipher.summary_ids.keyed
    return cipher.summary_ids.summary("oura", "sleep", date(2026, 3, 1), "2026-03-01")


def cli(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY_FILE", str(settings.master_key_file))


# -- the command ------------------------------------------------------------------------------


def test_rotate_master_rewraps_every_data_key_and_replaces_the_key_file(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    users = make_users(service, team.team_id, ctx, 5)
    before = wrapped_keys(service)
    ids_before = {u: sleep_id(service, u) for u in users}
    old = file_key(settings.master_key_file)
    # Rewrapped two at a time: the batches are exercised.
    monkeypatch.setattr(key_store_module, "REWRAP_BATCH", 2)
    cli(monkeypatch, settings)

    assert main(["keys", "rotate-master"]) == 0
    out = capsys.readouterr().out
    assert f"{len(before)} data key(s) rewrapped" in out and "old key was overwritten" in out

    new = file_key(settings.master_key_file)
    assert new != old and len(new) == 32
    assert stat.S_IMODE(settings.master_key_file.stat().st_mode) == 0o600
    assert not FileKeySource(settings.master_key_file).staged_path.exists()
    (rotation,) = service.key_store.rotations()
    assert rotation.keys_rewrapped == len(before)
    assert rotation.master_key_id == master_key_id(new) and master_key_id(new) in out
    after = wrapped_keys(service)
    assert after.keys() == before.keys()
    old_master, new_master = MasterKey.of(old), MasterKey.of(new)
    for owner, wrapped in after.items():
        assert wrapped != before[owner]
        # The same data key, wrapped anew: opens with the new key only.
        assert new_master.unwrap(owner, wrapped) == old_master.unwrap(owner, before[owner])
        with pytest.raises(InvalidTag):
            old_master.unwrap(owner, wrapped)

    # `service` still holds the old key: it takes the new one at its first read, and
    # stores new data keys under it.
    assert service.key_store.master.key_id == master_key_id(old)
    assert birth_date_of(service, users[0]) == "1980-01-01"
    assert service.key_store.master.key_id == master_key_id(new)
    (added,) = make_users(service, team.team_id, ctx, 1)
    fresh = build_service(settings)
    try:
        assert birth_date_of(fresh, added) == "1980-01-01"
        assert all(birth_date_of(fresh, u) is not None for u in users)
        # The rewrapped keys keep their format: the users' summary ids do not change.
        assert {u: sleep_id(fresh, u) for u in users} == ids_before
    finally:
        fresh.close()


def test_a_process_that_missed_a_rotation_never_stores_a_key_under_the_old_master_key(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    make_users(service, team.team_id, ctx, 1)
    other = build_service(settings)
    try:
        rotation = other.key_store.rotate_master_key()
        assert rotation is not None
        # `service` has read nothing since: its first act is to store a new data key.
        assert service.key_store.master.key_id != rotation.master_key_id
        (user_id,) = make_users(service, team.team_id, ctx, 1)
        assert service.key_store.master.key_id == rotation.master_key_id
        assert birth_date_of(other, user_id) == "1980-01-01"
        wrapped = wrapped_keys(other)[user_id]
        MasterKey.of(file_key(settings.master_key_file)).unwrap(user_id, wrapped)
    finally:
        other.close()


def test_a_key_from_the_environment_is_handed_to_the_operator(
    settings: Settings,
    ctx: CommandContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY", base64.b64encode(OLD_KEY).decode())
    service = build_service(Settings())
    try:
        created = service.bootstrap()
        assert created is not None
        users = make_users(service, created.team_id, ctx, 2)
    finally:
        service.close()
    before = wrapped_keys(service)

    # It cannot be written: the command says where the new key must go.
    assert main(["keys", "rotate-master"]) == 2
    assert "--new-key-file" in capsys.readouterr().err
    taken = tmp_path / "taken.key"
    taken.write_text("something the operator keeps\n")
    assert main(["keys", "rotate-master", "--new-key-file", str(taken)]) == 1
    assert "exists" in capsys.readouterr().err
    assert taken.read_text() == "something the operator keeps\n"
    probe = build_service(Settings())
    try:
        assert probe.key_store.rotations() == [] and wrapped_keys(probe) == before
    finally:
        probe.close()

    handed = tmp_path / "handover" / "new-master.key"
    assert main(["keys", "rotate-master", "--new-key-file", str(handed)]) == 0
    out = capsys.readouterr().out
    assert "HEALTHLEDGER_MASTER_KEY" in out and "Restart" in out and str(handed) in out
    assert stat.S_IMODE(handed.stat().st_mode) == 0o600
    new = file_key(handed)

    # The old value no longer starts the service; the new one does, and opens everything.
    with pytest.raises(MasterKeyError, match=f"wrapped by master key {master_key_id(new)}"):
        build_service(Settings())
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY", base64.b64encode(new).decode())
    service = build_service(Settings())
    try:
        assert [birth_date_of(service, u) for u in users] == ["1980-01-01", "1980-01-02"]
    finally:
        service.close()


def test_new_key_file_is_refused_for_the_key_file_source(
    settings: Settings,
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli(monkeypatch, settings)
    assert main(["keys", "rotate-master", "--new-key-file", str(tmp_path / "k")]) == 2
    assert "replaces itself" in capsys.readouterr().err
    assert service.key_store.rotations() == []


def test_a_running_process_reloads_from_the_secrets_manager_once_the_operator_stored_it(
    settings: Settings, ctx: CommandContext, tmp_path: Path
) -> None:
    secret = tmp_path / "secrets-manager" / "value"
    secret.parent.mkdir()
    secret.write_text(base64.b64encode(OLD_KEY).decode())
    client = tmp_path / "client.py"
    client.write_text(f"print(open({str(secret)!r}).read())")
    by_command = settings.model_copy(update={"master_key_command": f"{sys.executable} {client}"})
    running = build_service(by_command)
    rotator = build_service(by_command)
    try:
        created = running.bootstrap()
        assert created is not None
        (user_id,) = make_users(running, created.team_id, ctx, 1)
        handed = tmp_path / "new.key"
        assert rotator.key_store.source is not None
        rotator.key_store.source.new_key_file = handed  # type: ignore[attr-defined]
        rotator.key_store.rotate_master_key()
        # Until the operator stores the new key, the old process cannot open anything,
        # and says why.
        with pytest.raises(MasterKeyError, match="does not give"):
            birth_date_of(running, user_id)
        secret.write_text(handed.read_text())
        assert birth_date_of(running, user_id) == "1980-01-01"
    finally:
        running.close()
        rotator.close()


# -- a rotation cut short ---------------------------------------------------------------------


def test_a_rotation_that_fails_before_its_commit_leaves_the_old_key(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (user_id,) = make_users(service, team.team_id, ctx, 1)
    old = file_key(settings.master_key_file)
    before = wrapped_keys(service)

    def failing_rewrap(*_args: Any) -> int:
        raise RuntimeError("the database went away mid-rotation")

    monkeypatch.setattr(service.key_store, "_rewrap", failing_rewrap)
    with pytest.raises(RuntimeError, match="went away"):
        service.key_store.rotate_master_key()
    assert file_key(settings.master_key_file) == old
    assert not FileKeySource(settings.master_key_file).staged_path.exists()
    assert service.key_store.rotations() == [] and wrapped_keys(service) == before
    assert birth_date_of(service, user_id) == "1980-01-01"


def test_a_rotation_cut_short_after_its_commit_is_finished_at_the_next_start(
    settings: Settings,
    service: Service,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (user_id,) = make_users(service, team.team_id, ctx, 1)
    old = file_key(settings.master_key_file)
    source = service.key_store.source
    assert isinstance(source, FileKeySource)

    def crash() -> None:
        raise SystemExit("killed between the commit and the key file's replacement")

    monkeypatch.setattr(source, "commit_staged", crash)
    with pytest.raises(SystemExit):
        service.key_store.rotate_master_key()
    (rotation,) = service.key_store.rotations()
    assert file_key(settings.master_key_file) == old  # not replaced yet
    assert master_key_id(file_key(source.staged_path)) == rotation.master_key_id

    # Another process meanwhile finds the new key staged; a new start puts it in place.
    restarted = build_service(settings)
    try:
        assert birth_date_of(restarted, user_id) == "1980-01-01"
        assert master_key_id(file_key(settings.master_key_file)) == rotation.master_key_id
        assert not source.staged_path.exists()
    finally:
        restarted.close()


def test_a_staged_key_no_rotation_committed_is_discarded_at_start(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    (user_id,) = make_users(service, team.team_id, ctx, 1)
    old = file_key(settings.master_key_file)
    staged = FileKeySource(settings.master_key_file).staged_path
    staged.write_text(base64.b64encode(bytes(32)).decode())
    staged.chmod(0o600)
    restarted = build_service(settings)
    try:
        assert not staged.exists() and file_key(settings.master_key_file) == old
        assert birth_date_of(restarted, user_id) == "1980-01-01"
    finally:
        restarted.close()


# -- the scheduler ----------------------------------------------------------------------------


def test_the_scheduler_rotates_when_an_interval_has_passed_since_the_last_rotation(
    settings: Settings, team: Team, ctx: CommandContext
) -> None:
    weekly = settings.model_copy(update={"master_key_rotation_interval": timedelta(days=7)})
    first, second = build_service(weekly), build_service(weekly)
    try:
        with freeze_time(T0):
            users = make_users(first, team.team_id, ctx, 3)
            keys = len(wrapped_keys(first))
        with freeze_time(T0 + timedelta(days=6, hours=23)):
            assert first.jobs.rotate_master_key() == 0  # the oldest key is not a week old
        with freeze_time(T0 + timedelta(days=7)):
            assert first.jobs.rotate_master_key() == keys
            assert second.jobs.rotate_master_key() == 0  # done by the first
        with freeze_time(T0 + timedelta(days=13)):
            assert second.jobs.rotate_master_key() == 0
        with freeze_time(T0 + timedelta(days=14)):
            assert second.jobs.rotate_master_key() == keys  # it took the new key first
        rotations = first.key_store.rotations()
        assert [r.rotated_at for r in rotations] == [
            T0 + timedelta(days=7),
            T0 + timedelta(days=14),
        ]
        assert [birth_date_of(first, u) for u in users] == [
            "1980-01-01",
            "1980-01-02",
            "1980-01-03",
        ]
    finally:
        first.close()
        second.close()


def test_two_processes_due_at_once_rotate_once(
    settings: Settings, team: Team, ctx: CommandContext
) -> None:
    daily = settings.model_copy(update={"master_key_rotation_interval": timedelta(days=1)})
    services = [build_service(daily) for _ in range(3)]
    try:
        make_users(services[0], team.team_id, ctx, 2)
        results: list[int] = []
        start = threading.Barrier(len(services))

        def rotate(service: Service) -> None:
            start.wait()
            results.append(service.jobs.rotate_master_key())

        later = datetime.now(UTC) + timedelta(days=2)
        for service in services:
            service.key_store.clock = lambda: later
        threads = [threading.Thread(target=rotate, args=(s,)) for s in services]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # One rewrapped the keys; the others found the rotation done.
        assert len(results) == 3 and results.count(0) == 2 and max(results) > 0
        (rotation,) = services[0].key_store.rotations()
        assert rotation.master_key_id == master_key_id(file_key(settings.master_key_file))
    finally:
        for service in services:
            service.close()


def test_with_a_key_from_the_environment_the_scheduler_says_it_cannot_rotate(
    settings: Settings,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("HEALTHLEDGER_MASTER_KEY", base64.b64encode(OLD_KEY).decode())
    service = build_service(Settings(database_url=settings.database_url))
    try:
        created = service.bootstrap()
        assert created is not None
        with freeze_time(T0):
            make_users(service, created.team_id, ctx, 1)
        with freeze_time(T0 + timedelta(days=8)), caplog.at_level("WARNING"):
            assert service.jobs.rotate_master_key() == 0
        assert "cannot write" in caplog.text and "HEALTHLEDGER_MASTER_KEY" in caplog.text
        assert service.key_store.rotations() == []
    finally:
        service.close()


def test_the_rotation_job_is_scheduled_only_with_an_interval(settings: Settings) -> None:
    for interval, scheduled in ((timedelta(days=7), True), (None, False)):
        service = build_service(
            settings.model_copy(update={"master_key_rotation_interval": interval})
        )
        scheduler = start_scheduler(service)
        try:
            job = scheduler.get_job("master-key-rotation")
            assert (job is not None) == scheduled
            if job is not None:  # looks hourly whether the weekly rotation is due
                assert job.trigger.interval == timedelta(hours=1)
        finally:
            scheduler.shutdown()
            service.close()


def test_a_cursor_handed_out_before_a_rotation_pages_after_it_in_any_process(
    settings: Settings, service: Service, team: Team, ctx: CommandContext
) -> None:
    # Paging cursors are signed with a key of their own. Derived from the master key, a
    # weekly rotation would break every cursor in flight, and cursors of a process that
    # reloaded the key would not page in one that had not: derived from the signing key,
    # which is not rotated, they survive.
    from fastapi.testclient import TestClient
    from healthledger.adapters.http.team_api import create_team_api

    (user_id,) = make_users(service, team.team_id, ctx, 1)
    service.users.update_user(ctx, team.team_id, user_id, {"fallback_time_zone": "Europe/Paris"})
    url = f"/v2/audit/user/{user_id}"
    with TestClient(create_team_api(service)) as before:
        first = before.get(url, params={"limit": 1}, headers=team.headers).json()
    assert first["next_cursor"]

    assert service.key_store.rotate_master_key() is not None
    restarted = build_service(settings)
    try:
        for answering in (service, restarted):
            with TestClient(create_team_api(answering)) as after:
                page = after.get(
                    url,
                    params={"limit": 1, "next_cursor": first["next_cursor"]},
                    headers=team.headers,
                )
            assert page.status_code == 200, page.text
            assert page.json()["data"] != first["data"]
    finally:
        restarted.close()
