"""What a process keeps of the team API keys it verified (ADR 0042), without a database:
kept only while listening, never a revoked one, never a read that raced a change, and
forgotten by a commit that revokes a key or deletes a team."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID, uuid4

from healthledger.adapters.persistence.queries.verified_keys import VerifiedKeys
from healthledger.domain.teams.teams import Team, TeamApiKey


@dataclass(frozen=True)
class Record:
    key_id: UUID
    revoked: bool = False


class Table:
    """The keys' table: counts its reads; `during_read` runs inside one (a change that
    commits while a lookup reads)."""

    def __init__(self) -> None:
        self.rows: dict[UUID, Record] = {}
        self.reads = 0
        self.during_read: list[object] = []

    def read(self, key_id: UUID) -> Record | None:
        self.reads += 1
        while self.during_read:
            change = self.during_read.pop()
            assert callable(change)
            change()
        return self.rows.get(key_id)


def test_nothing_is_kept_until_the_listener_listens() -> None:
    table, key = Table(), uuid4()
    table.rows[key] = Record(key)
    keys = VerifiedKeys(table.read)
    keys.lookup(key)
    keys.lookup(key)
    assert table.reads == 2 and keys.hits == 0
    keys.set_listening(True)
    keys.lookup(key)
    keys.lookup(key)
    assert table.reads == 3 and keys.hits == 1
    # The listener lost its connection: back to the table, and what was kept is gone.
    keys.set_listening(False)
    table.rows[key] = Record(key, revoked=True)
    assert keys.lookup(key) == Record(key, revoked=True)


def test_revoked_and_unknown_keys_are_never_kept() -> None:
    table, revoked, unknown = Table(), uuid4(), uuid4()
    table.rows[revoked] = Record(revoked, revoked=True)
    keys = VerifiedKeys(table.read)
    keys.set_listening(True)
    for _ in range(2):
        assert keys.lookup(revoked) == Record(revoked, revoked=True)
        assert keys.lookup(unknown) is None
    assert table.reads == 4 and keys.hits == 0
    # A key issued since is found at once.
    table.rows[unknown] = Record(unknown)
    assert keys.lookup(unknown) == Record(unknown)


def test_a_read_that_raced_a_change_is_not_kept() -> None:
    table, key = Table(), uuid4()
    table.rows[key] = Record(key)
    keys = VerifiedKeys(table.read)
    keys.set_listening(True)
    # The revocation commits (and is heard) while the lookup's read is on its way back
    # with the row as it was: that answer is given once, not kept.
    table.during_read.append(keys.forget_all)
    assert keys.lookup(key) == Record(key)
    table.rows[key] = Record(key, revoked=True)
    assert keys.lookup(key) == Record(key, revoked=True)


def test_a_commit_that_revokes_a_key_or_deletes_a_team_forgets_everything() -> None:
    table, key = Table(), uuid4()
    table.rows[key] = Record(key)
    keys = VerifiedKeys(table.read)
    keys.set_listening(True)
    on_commit = keys.forget_after((TeamApiKey.Revoked, Team.Deleted))
    keys.lookup(key)
    on_commit([object()])  # a commit of anything else
    keys.lookup(key)
    assert (table.reads, keys.hits) == (1, 1)
    for change in (TeamApiKey.Revoked, Team.Deleted):
        on_commit([object.__new__(change)])
        keys.lookup(key)
    assert (table.reads, keys.hits) == (3, 1)
