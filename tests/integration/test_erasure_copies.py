"""Erasure against copies: after an erasure no copy of the erased user's wrapped data key
opens. On SQLite the files themselves are searched (the database, its `-wal` and `-shm`):
every window the size of a wrapped key, at every offset, is tried with the master key and
the user's associated data. Where files cannot be scrubbed (PostgreSQL's WAL, replicas,
backups), the next master key rotation is the horizon: a wrapped key copied before the
erasure no longer opens with any key that exists."""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from uuid import UUID

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.schema import user_data_keys
from healthledger.adapters.persistence.keys.key_store import data_key_aad
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy import select

from tests.conftest import Team
from tests.integration.populated import DEMOGRAPHICS

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# nonce (12) + the AES-256 data key (32, and a user's key since ADR 0057 its format byte
# before it) + the GCM tag (16)
WRAPPED_KEY_SIZES = (60, 61)


def master_key(settings: Settings) -> bytes:
    return base64.b64decode(settings.master_key_file.read_text())


def database_files(service: Service) -> dict[str, bytes]:
    """The bytes of the SQLite database and its -wal and -shm files, as a copy of the
    database's directory (a backup, a snapshot) would take them, the service running."""
    path = service.db.sqlite_file
    assert path is not None
    found = {}
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            found[file.name] = file.read_bytes()
    return found


def unwrappable(files: dict[str, bytes], key: bytes, user_ids: list[UUID]) -> set[UUID]:
    """The users whose wrapped data key is somewhere in `files`: every window of the size
    of a wrapped key (of either format), at every offset, tried with the master key and
    each user's AAD."""
    master = AESGCM(key)
    aads = {user_id: data_key_aad(user_id) for user_id in user_ids}
    found: set[UUID] = set()
    for content in files.values():
        view = memoryview(content)
        for size in WRAPPED_KEY_SIZES:
            for offset in range(len(content) - size + 1):
                window = view[offset : offset + size]
                nonce, sealed = bytes(window[:12]), bytes(window[12:])
                for user_id, aad in aads.items():
                    try:
                        master.decrypt(nonce, sealed, aad)
                    except InvalidTag:
                        continue
                    found.add(user_id)
    return found


def users_to_erase(service: Service, team: Team, ctx: CommandContext, count: int) -> list[UUID]:
    ids = []
    with freeze_time(T0):
        for n in range(count):
            user = service.users.create_user(
                ctx, team.team_id, client_user_id=f"gone-{n}", fallback_birth_date=date(1970, 1, 2)
            )
            service.users.record_demographics(ctx, team.team_id, user.id, DEMOGRAPHICS)
            service.users.delete_user(ctx, team.team_id, user.id)
            ids.append(user.id)
    return ids


@pytest.fixture
def sqlite_only(service: Service) -> None:
    if not service.db.is_sqlite:
        pytest.skip("the files of a PostgreSQL server are out of the service's reach")


@pytest.mark.usefixtures("sqlite_only")
def test_no_wrapped_key_of_an_erased_user_is_left_in_the_sqlite_files(
    service: Service, settings: Settings, team: Team, ctx: CommandContext
) -> None:
    erased = users_to_erase(service, team, ctx, 3)
    live = service.users.create_user(
        ctx, team.team_id, client_user_id="stays", fallback_birth_date=date(1981, 2, 3)
    ).id
    key = master_key(settings)
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 3

    files = database_files(service)
    assert set(files) == {"ledger.db", "ledger.db-wal", "ledger.db-shm"}
    assert files["ledger.db-wal"] == b""  # checkpointed and truncated
    # None of the erased users' keys opens anywhere; the live user's still does, found by
    # the same scan.
    assert unwrappable(files, key, [*erased, live]) == {live}


@pytest.mark.usefixtures("sqlite_only")
def test_without_the_checkpoint_the_wal_would_still_hold_the_erased_keys(
    service: Service,
    settings: Settings,
    team: Team,
    ctx: CommandContext,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The threat the checkpoint answers is real, and the scan finds it: secure_delete
    overwrote the rows in the database file, but the WAL keeps the pages as they were."""
    erased = users_to_erase(service, team, ctx, 2)
    sweep = service.jobs.sweep_erasures
    assert isinstance(sweep, partial)
    without_checkpoint = replace(sweep.args[0], vacuum_key_store=lambda: True)
    monkeypatch.setattr(
        service,
        "jobs",
        replace(service.jobs, sweep_erasures=partial(sweep.func, without_checkpoint)),
    )
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 2
    files = database_files(service)
    assert unwrappable({"wal": files["ledger.db-wal"]}, master_key(settings), erased) == set(erased)
    assert unwrappable({"db": files["ledger.db"]}, master_key(settings), erased) == set()


def test_after_the_next_rotation_a_copy_of_an_erased_users_key_opens_with_no_key(
    service: Service, settings: Settings, team: Team, ctx: CommandContext
) -> None:
    """PostgreSQL's WAL, a replica or a backup keeps the wrapped key row after the erasure
    (here: a copy read before it). The rotation that follows is the erasure's horizon."""
    (user_id,) = users_to_erase(service, team, ctx, 1)
    with service.db.read() as conn:
        copied = bytes(
            conn.execute(
                select(user_data_keys.c.wrapped_key).where(user_data_keys.c.user_id == user_id)
            ).scalar_one()
        )
    old_master = master_key(settings)
    with freeze_time(T0 + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
    assert not service.key_store.has_key(user_id)
    # Until the rotation, the copy plus the master key would open the user's data again.
    AESGCM(old_master).decrypt(copied[:12], copied[12:], data_key_aad(user_id))

    with freeze_time(T0 + timedelta(days=9)):
        rotation = service.key_store.rotate_master_key()
    assert rotation is not None and rotation.rotated_at > T0 + timedelta(days=8)
    assert service.key_store.rotations()[-1] == rotation  # the deletion report's horizon
    new_master = master_key(settings)
    assert new_master != old_master
    with pytest.raises(InvalidTag):
        AESGCM(new_master).decrypt(copied[:12], copied[12:], data_key_aad(user_id))
    # The old key is gone from its file: no key that still exists opens the copy.
    assert base64.b64encode(old_master) not in settings.master_key_file.read_bytes()
