"""`Ledger.find_many` at versions (reads as of an instant load a page's streams at once):
each aggregate as `Ledger.find` rebuilds it at that version, snapshots before and after
the version included, on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID, uuid4

import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

CTX = CommandContext.system("test:find-many")


@pytest.fixture
def snapshotting(settings: Settings) -> Iterator[Service]:
    # A snapshot every other event: a stream has snapshots before and after most versions.
    built = build_service(settings.model_copy(update={"user_snapshot_interval": 2}))
    yield built
    built.close()


def test_find_many_at_versions_rebuilds_each_stream_as_find_does(snapshotting: Service) -> None:
    service = snapshotting
    boot = service.bootstrap()
    assert boot is not None
    users: list[UUID] = []
    for n in range(3):
        user = service.users.create_user(CTX, boot.team_id, client_user_id=f"fm-{n}")
        for _ in range(n + 2):  # deleted and restored: two events a turn
            service.users.delete_user(CTX, boot.team_id, user.id)
            service.users.undo_deletion(CTX, boot.team_id, user.id)
        users.append(user.id)
    latest = {user_id: service.ledger.find(user_id) for user_id in users}
    assert all(found is not None and found.version >= 5 for found in latest.values())
    for step in range(1, 10):
        versions = {user_id: min(step, found.version) for user_id, found in latest.items() if found}
        if step % 3 == 0:
            del versions[users[0]]  # one read at its latest
        loaded = service.ledger.find_many([*users, uuid4()], versions)
        assert set(loaded) == set(users)  # a stream that does not exist is left out
        for user_id in users:
            expected = service.ledger.find(user_id, version=versions.get(user_id))
            assert expected is not None
            assert loaded[user_id].version == expected.version, (step, user_id)
            assert vars(loaded[user_id]) == vars(expected), (step, user_id)
