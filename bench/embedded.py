"""Embedded benchmark: user lifecycle commands per second on SQLite, no HTTP.

Runs N create, N delete and N undo commands through `build_service(...).users`, one command
per transaction as the service does, and compares each with raw `sqlite3` writing the same
number of rows per transaction with the same durability (WAL, synchronous=FULL,
secure_delete=ON), measured in the same process on the same disk. The target is at least
70% of the raw figure. It prints a report; `--check` makes a missed target exit 1.

    /work/venv/bin/python bench/embedded.py [--n 2000] [--warmup 200] [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/embedded.py` puts bench/ first on sys.path, where bench/http_api.py would
# shadow the standard library's `http` package for any library that imports it (urllib,
# httpx, starlette...). Drop it before any other import.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import gc
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from sqlalchemy import Connection, event

TARGET = 0.70
KINDS = ("create", "delete", "undo")

# The raw baseline's rows have the width of an event row: a 32-char uuid hex (as the
# service stores a Uuid on SQLite), a version, a topic, a state blob of about the size of
# a User.Created event (~300-350 bytes) and a timestamp text.
_TOPIC = "healthledger:User.Created.v1"
_STATE = os.urandom(300)


@dataclass
class WriteCounter:
    """Counts write transactions and rows changed on the service's writer engine.

    Rows are read from sqlite3's `total_changes` (rows inserted, updated or deleted on one
    connection since it opened) at BEGIN and again at COMMIT of every transaction, on the
    connection that ran it. Because both readings are taken on the same DBAPI connection,
    the count is right whichever pooled connection the transaction used, and it counts
    UPDATEs and DELETEs as well as INSERTs (a before/after row count per table would see an
    UPDATE as nothing and an INSERT plus a DELETE as nothing). The reader engine does not
    write, and every write goes through `Database.write()` on the writer engine.
    """

    transactions: int = 0
    rows: int = 0
    _at_begin: dict[int, int] = field(default_factory=dict)

    def attach(self, service: Service) -> None:
        engine = service.db.writer
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)

    def reset(self) -> None:
        self.transactions = 0
        self.rows = 0

    @staticmethod
    def _total_changes(conn: Connection) -> int:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        return driver.total_changes

    def _begin(self, conn: Connection) -> None:
        self._at_begin[id(conn)] = self._total_changes(conn)

    def _commit(self, conn: Connection) -> None:
        # The "commit" event fires before the COMMIT itself, after every statement ran.
        self.transactions += 1
        self.rows += self._total_changes(conn) - self._at_begin.pop(id(conn))

    def _rollback(self, conn: Connection) -> None:
        self._at_begin.pop(id(conn), None)


@dataclass
class Result:
    kind: str
    commands: int
    seconds: float
    transactions: int
    rows: int
    # CPU time of the process over the timed run: wall time minus this is time spent
    # waiting, mostly for fsync, which shows whether a gap is CPU or I/O.
    cpu_seconds: float
    # Rows in the event table when the timed run started (the raw side is filled to match).
    rows_before: int = 0

    @property
    def per_second(self) -> float:
        return self.commands / self.seconds

    @property
    def wall_ms(self) -> float:
        return 1000 * self.seconds / self.commands

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_seconds / self.commands

    @property
    def rows_per_command(self) -> float:
        return self.rows / self.commands

    @property
    def transactions_per_command(self) -> float:
        return self.transactions / self.commands


# -- the service -----------------------------------------------------------------------


def _new_service(directory: Path, name: str) -> tuple[Service, uuid.UUID]:
    settings = Settings(
        database_url=f"sqlite:///{directory / f'{name}.db'}",
        master_key_file=directory / f"{name}.master.key",
    )
    service = build_service(settings)
    boot = service.bootstrap()
    assert boot is not None, "a fresh database bootstraps"
    return service, boot.team_id


def _timed(
    kind: str, service: Service, counter: WriteCounter, run: Callable[[int], None], n: int
) -> Result:
    with service.db.read() as conn:
        rows_before = conn.exec_driver_sql("SELECT count(*) FROM stored_events").scalar_one()
    # A collection during one run and not the other would be noise, not a difference in
    # the code; collect first so every timed run starts from the same heap state.
    gc.collect()
    counter.reset()
    cpu_start = time.process_time()
    start = time.perf_counter()
    for i in range(n):
        run(i)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    return Result(kind, n, seconds, counter.transactions, counter.rows, cpu_seconds, rows_before)


def bench_service(kind: str, directory: Path, n: int, warmup: int) -> Result:
    """N commands of `kind` on a fresh SQLite file, after `warmup` untimed ones."""
    service, team_id = _new_service(directory, f"service-{kind}")
    counter = WriteCounter()
    counter.attach(service)
    users = service.users
    ctx = CommandContext(actor="bench:embedded", request_id="bench")
    prefix = uuid.uuid4().hex[:8]
    try:

        def create(i: int) -> None:
            users.create_user(ctx, team_id, client_user_id=f"{prefix}-{kind}-{i}")

        def setup_users(count: int, tag: str) -> list[uuid.UUID]:
            return [
                users.create_user(ctx, team_id, client_user_id=f"{prefix}-{tag}-{i}").id
                for i in range(count)
            ]

        if kind == "create":
            for i in range(warmup):
                users.create_user(ctx, team_id, client_user_id=f"{prefix}-warm-{i}")
            return _timed(kind, service, counter, create, n)

        # delete and undo need users (and undo needs deleted ones): made untimed first.
        warm_ids = setup_users(warmup, "warm")
        ids = setup_users(n, "timed")
        if kind == "delete":
            for user_id in warm_ids:
                users.delete_user(ctx, team_id, user_id)
            return _timed(
                kind, service, counter, lambda i: users.delete_user(ctx, team_id, ids[i]), n
            )
        for user_id in warm_ids + ids:
            users.delete_user(ctx, team_id, user_id)
        for user_id in warm_ids:
            users.undo_deletion(ctx, team_id, user_id)
        return _timed(
            kind, service, counter, lambda i: users.undo_deletion(ctx, team_id, ids[i]), n
        )
    finally:
        service.close()


# -- the raw sqlite3 baseline ------------------------------------------------------------


def _raw_connection(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; BEGIN IMMEDIATE is sent explicitly,
    # exactly as the service's writer engine does.
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
        conn.execute(f"PRAGMA {pragma}")
    # The same keys and indexes as stored_events, so each row costs the same B-tree work.
    conn.executescript(
        """
        CREATE TABLE events (
            notification_id INTEGER PRIMARY KEY AUTOINCREMENT,
            originator_id CHAR(32) NOT NULL,
            originator_version INTEGER NOT NULL,
            topic TEXT NOT NULL,
            state BLOB NOT NULL,
            timestamp DATETIME NOT NULL,
            UNIQUE (originator_id, originator_version)
        );
        CREATE INDEX ix_events_originator_time ON events (originator_id, timestamp);
        """
    )
    return conn


_INSERT = (
    "INSERT INTO events (originator_id, originator_version, topic, state, timestamp) "
    "VALUES (?, ?, ?, ?, ?)"
)


def _raw_rows(count: int) -> list[tuple[Any, ...]]:
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ")
    return [(uuid.uuid4().hex, 1, _TOPIC, _STATE, now) for _ in range(count)]


def bench_raw(
    kind: str, directory: Path, n: int, warmup: int, rows_per_txn: int, prefill: int
) -> Result:
    """N transactions of `rows_per_txn` inserts each with plain sqlite3.

    The file is first filled, untimed, with as many rows as the service's event table
    held when its timed run started, so both write into B-trees of the same size.
    """
    conn = _raw_connection(directory / f"raw-{kind}.db")
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_INSERT, _raw_rows(prefill))
        conn.execute("COMMIT")

        # Values are generated inside the loop (a fresh uuid per row), as the service
        # generates its ids and timestamps inside each command.
        def one_transaction() -> None:
            conn.execute("BEGIN IMMEDIATE")
            for row in _raw_rows(rows_per_txn):
                conn.execute(_INSERT, row)
            conn.execute("COMMIT")

        for _ in range(warmup):
            one_transaction()
        gc.collect()
        changes_before = conn.total_changes
        cpu_start = time.process_time()
        start = time.perf_counter()
        for _ in range(n):
            one_transaction()
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        rows = conn.total_changes - changes_before
        return Result(kind, n, seconds, n, rows, cpu_seconds, prefill)
    finally:
        conn.close()


# -- report ------------------------------------------------------------------------------


def report(pairs: Sequence[tuple[Result, Result]]) -> bool:
    header = (
        f"{'command':<8} {'rows/txn':>8} {'txns/cmd':>8} {'service cmds/s':>15} "
        f"{'raw txns/s':>11} {'ratio':>7} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    all_met = True
    for service, raw in pairs:
        ratio = service.per_second / raw.per_second
        met = ratio >= TARGET
        all_met &= met
        print(
            f"{service.kind:<8} {service.rows_per_command:>8.2f} "
            f"{service.transactions_per_command:>8.2f} {service.per_second:>15.0f} "
            f"{raw.per_second:>11.0f} {ratio:>7.1%} {TARGET:>7.0%}  {'PASS' if met else 'MISS'}"
        )
    # Where the time goes: per command (service) and per transaction (raw), wall and CPU.
    print(
        f"\n{'command':<8} {'service ms wall':>15} {'service ms CPU':>14} "
        f"{'raw ms wall':>11} {'raw ms CPU':>10}"
    )
    for service, raw in pairs:
        print(
            f"{service.kind:<8} {service.wall_ms:>15.3f} {service.cpu_ms:>14.3f} "
            f"{raw.wall_ms:>11.3f} {raw.cpu_ms:>10.3f}"
        )
    return all_met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Embedded create/delete/undo commands per second vs raw sqlite3."
    )
    parser.add_argument("--n", type=int, default=2000, help="timed commands per kind")
    parser.add_argument("--warmup", type=int, default=200, help="untimed commands first")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args(argv)
    if args.n < 1 or args.warmup < 0:
        parser.error("--n must be at least 1 and --warmup at least 0")

    print(
        f"embedded benchmark: N={args.n} per command kind, warm-up {args.warmup}, "
        f"sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    pairs: list[tuple[Result, Result]] = []
    # One temp dir on the same file system for both sides, so both pay the same fsync.
    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as tmp:
        directory = Path(tmp)
        print(f"files in {directory}\n")
        for kind in args.kinds:
            service = bench_service(kind, directory, args.n, args.warmup)
            if service.transactions != service.commands:
                print(
                    f"note: {kind} used {service.transactions} write transactions for "
                    f"{service.commands} commands; the raw side does one per command"
                )
            # Whole rows per transaction; the service's count is the same for every command
            # of a kind, so this is exact (rounded only if it ever is not).
            rows_per_txn = max(1, round(service.rows / service.transactions))
            raw = bench_raw(
                kind,
                directory,
                args.n,
                args.warmup,
                rows_per_txn,
                service.rows_before,
            )
            pairs.append((service, raw))
    all_met = report(pairs)
    # Another busy process on the machine makes the figures noise: say so next to them.
    print(f"\nload average after the run: {os.getloadavg()[0]:.2f}")
    if args.check and not all_met:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
