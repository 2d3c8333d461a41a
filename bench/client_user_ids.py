"""What sealing the client_user_id costs a create, on SQLite, no HTTP.

Every create now seals the client_user_id with a new data key of the user, names its
claim by the team's keyed digest, and projects the clear value opened with that key
(docs/adr/0017-client-user-id-digest.md). Three sides, timed in alternating blocks in one
process on one database, so that they meet the same disk and machine:

- `create`: the service's create, the new key stored in the transaction of the user's
  events (one durable commit);
- `key first`: the same create through a vault that stores the key on its own first, as
  a vault without `KeepsNewKeys` does (two durable commits): what keeping the key for the
  events' transaction saves;
- `old team`: a create in a team made before digests, which also looks for the value's
  claim made before digests (one more read).

It prints ms per create, write commits per create, and each side's ratio to `create`.

    /work/main/.venv/bin/python bench/client_user_ids.py [--n 1000] [--block 100]
"""

from __future__ import annotations

import argparse
import copy
import gc
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.teams.directory import TeamDirectory
from healthledger.domain.users.lifecycle import UserLifecycle

CTX = CommandContext(actor="bench:client_user_ids", request_id="bench")


class KeyStoredFirst:
    """The service's vault without `new_key`: a create's key is stored on its own."""

    def __init__(self, vault: PersonalDataVault) -> None:
        self.vault = vault

    def seal(self, user_id: UUID, value: Any) -> str:
        return self.vault.seal(user_id, value)

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        return self.vault.open(user_id, sealed)

    def has_key(self, user_id: UUID) -> bool:
        return self.vault.has_key(user_id)

    def discard(self, user_id: UUID) -> None:
        self.vault.discard(user_id)


@dataclass
class Side:
    name: str
    # What one timed step does (a create; its user is not kept).
    run: Callable[[int], object]
    seconds: float = 0.0
    commits: int = 0


class CommitCounter:
    """Counts the COMMITs of the service's one writer connection (SQLite)."""

    def __init__(self, service: Service) -> None:
        with service.db.write() as conn:
            driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        self.driver = driver
        self.count = 0

    def counting(self, run: Callable[[], object]) -> int:
        self.count = 0
        self.driver.set_trace_callback(self._statement)
        try:
            run()
        finally:
            self.driver.set_trace_callback(None)
        return self.count

    def _statement(self, sql: str) -> None:
        if sql == "COMMIT":
            self.count += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="timed creates per side")
    parser.add_argument("--block", type=int, default=100, help="creates per turn of a side")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as tmp:
        directory = Path(tmp)
        (directory / "keys").mkdir(mode=0o700)
        service = build_service(
            Settings(
                database_url=f"sqlite:///{directory / 'ledger.db'}",
                master_key_file=directory / "keys" / "master.key",
            )
        )
        try:
            return run(service, args.n, args.block)
        finally:
            service.close()


def run(service: Service, n: int, block: int) -> int:
    boot = service.bootstrap()
    assert boot is not None
    # A team made without a vault has no secret: its first create makes one that says
    # the team may hold claims made before digests (as a team created before them).
    old_team = TeamDirectory(service.ledger, service.clock).create_team(
        CTX, boot.org_id, "Old team", "us"
    )
    # The service's use case, through the vault without `new_key` (all else shared).
    key_first = copy.copy(service.users)
    key_first.vault = KeyStoredFirst(service.key_store)
    tag = uuid.uuid4().hex[:8]

    def creating(users: UserLifecycle, team_id: UUID, name: str) -> Callable[[int], object]:
        return lambda i: users.create_user(CTX, team_id, client_user_id=f"{tag}-{name}-{i}")

    sides = [
        Side("create", creating(service.users, boot.team_id, "new")),
        Side("key first", creating(key_first, boot.team_id, "first")),
        Side("old team", creating(service.users, old_team, "old")),
    ]
    counter = CommitCounter(service)
    for side in sides:
        for i in range(-50, 0):  # warm-up, untimed (the old team's secret is made here)
            side.run(i)
        side.commits = counter.counting(partial(side.run, -100))
    gc.collect()
    gc.disable()
    try:
        for number, first in enumerate(range(0, n, block)):
            indexes = range(first, min(first + block, n))
            shift = number % len(sides)
            for side in sides[shift:] + sides[:shift]:
                start = time.perf_counter()
                for i in indexes:
                    side.run(i)
                side.seconds += time.perf_counter() - start
            gc.enable()
            gc.collect()
            gc.disable()
    finally:
        gc.enable()
    print(f"client_user_id sealing: N={n} creates per side, sqlite {sqlite3.sqlite_version}\n")
    print(f"{'side':<10} {'ms/create':>10} {'commits':>8} {'vs create':>10}")
    base = sides[0].seconds
    for side in sides:
        print(
            f"{side.name:<10} {1000 * side.seconds / n:>10.3f} {side.commits:>8} "
            f"{side.seconds / base:>10.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
