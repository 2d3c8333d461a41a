"""Embedded benchmark: user lifecycle commands per second on SQLite, no HTTP.

Runs N create, N delete and N undo commands through `build_service(...).users`, one command
per transaction as the service does, and compares each with raw `sqlite3` writing the same
number of rows per transaction with the same durability (WAL, synchronous=FULL,
secure_delete=ON), measured in the same process on the same disk, the two sides taking
turns of `--block` commands so that both meet the same disk and machine. The target is at
least 65% of the raw figure. It prints a report; `--check` makes a missed target exit 1.

    /work/venv/bin/python bench/embedded.py [--n 2000] [--warmup 200] [--block 100] [--check]
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.keys.key_store import UserCipher, new_data_key
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.client_user_ids import client_user_id_digest
from healthledger.domain.users.user import ClientUserIdClaim, User
from support import Clocks

TARGET = 0.65
KINDS = ("create", "delete", "undo")

# The raw baseline's rows have the width of an event row: a 32-char uuid hex (as the
# service stores a Uuid on SQLite), a version, a topic, a state blob of about the size of
# a User.Created event (~300-350 bytes) and a timestamp text.
_TOPIC = "healthledger:User.Created.v1"
_STATE = os.urandom(300)


@dataclass
class WriteCounter:
    """Counts write transactions and rows changed on the service's writer connection.

    The writer (one sqlite3 connection, `Database.writer`) begins every write with
    `BEGIN IMMEDIATE` (SQLAlchemy's "begin" event) and ends it with `COMMIT` or
    `ROLLBACK` (sqlite3's own, called by SQLAlchemy), so sqlite3's trace callback sees
    each one. At each, it reads sqlite3's `total_changes`
    (rows inserted, updated or deleted on that connection since it opened): the
    difference is the transaction's rows, UPDATEs and DELETEs included (a before/after
    row count per table would see an UPDATE as nothing and an INSERT plus a DELETE as
    nothing). The reader connections do not write.

    The callback runs on every statement of the writer (about a microsecond each), so it
    counts only while attached: during the warm-up, which runs the same code as the timed
    commands. The timed run's rows come from `total_changes` alone (`rows_since`).
    """

    transactions: int = 0
    rows: int = 0
    _at_begin: int | None = None
    _driver: sqlite3.Connection | None = None

    def attach(self, service: Service) -> None:
        with service.db.write() as conn:  # opens the writer connection
            driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        self._driver = driver
        driver.set_trace_callback(self._statement)

    def detach(self) -> None:
        assert self._driver is not None
        self._driver.set_trace_callback(None)

    def total_changes(self) -> int:
        assert self._driver is not None
        return self._driver.total_changes

    def _statement(self, sql: str) -> None:
        driver = self._driver
        assert driver is not None
        if sql == "BEGIN IMMEDIATE":
            self._at_begin = driver.total_changes
        elif sql == "COMMIT" and self._at_begin is not None:
            self.transactions += 1
            self.rows += driver.total_changes - self._at_begin
            self._at_begin = None
        elif sql == "ROLLBACK":
            self._at_begin = None


@dataclass
class Result:
    kind: str
    commands: int
    seconds: float
    # Write transactions over `counted` commands (the service's warm-up, see WriteCounter).
    transactions: int
    counted: int
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
        return self.transactions / self.counted


# -- the service -----------------------------------------------------------------------


def _new_service(directory: Path, name: str) -> tuple[Service, uuid.UUID]:
    settings = Settings(
        database_url=f"sqlite:///{directory / f'{name}.db'}",
        master_key_file=directory / "keys" / f"{name}.master.key",
    )
    service = build_service(settings)
    boot = service.bootstrap()
    assert boot is not None, "a fresh database bootstraps"
    return service, boot.team_id


@dataclass
class ServiceSide:
    """A service on a fresh SQLite file, warmed up, with N commands of a kind ready."""

    service: Service
    counter: WriteCounter
    run: Callable[[int], None]
    rows_per_txn: int
    rows_before: int


def service_side(kind: str, directory: Path, n: int, warmup: int) -> ServiceSide:
    """The users a kind needs are made untimed (delete needs users, undo deleted ones);
    `warmup` commands of the kind run untimed and tell the rows a transaction writes."""
    service, team_id = _new_service(directory, f"service-{kind}")
    counter = WriteCounter()
    counter.attach(service)
    users = service.users
    ctx = CommandContext(actor="bench:embedded", request_id="bench")
    prefix = uuid.uuid4().hex[:8]

    def setup_users(count: int, tag: str) -> list[uuid.UUID]:
        return [
            users.create_user(ctx, team_id, client_user_id=f"{prefix}-{tag}-{i}").id
            for i in range(count)
        ]

    run: Callable[[int], None]
    if kind == "create":

        def warm() -> None:
            setup_users(warmup, "warm")

        def run(i: int) -> None:
            users.create_user(ctx, team_id, client_user_id=f"{prefix}-{kind}-{i}")

    else:
        warm_ids = setup_users(warmup, "warm")
        ids = setup_users(n, "timed")
        if kind == "delete":

            def warm() -> None:
                for user_id in warm_ids:
                    users.delete_user(ctx, team_id, user_id)

            def run(i: int) -> None:
                users.delete_user(ctx, team_id, ids[i])

        else:
            for user_id in warm_ids + ids:
                users.delete_user(ctx, team_id, user_id)

            def warm() -> None:
                for user_id in warm_ids:
                    users.undo_deletion(ctx, team_id, user_id)

            def run(i: int) -> None:
                users.undo_deletion(ctx, team_id, ids[i])

    counter.transactions = counter.rows = 0
    warm()
    counter.detach()
    # Every command of a kind writes the same rows; the raw side writes as many.
    rows_per_txn = max(1, round(counter.rows / max(counter.transactions, 1)))
    with service.db.read() as conn:
        rows_before = conn.exec_driver_sql("SELECT count(*) FROM stored_events").scalar_one()
    return ServiceSide(service, counter, run, rows_per_txn, rows_before)


# -- the raw sqlite3 baseline ------------------------------------------------------------


def _raw_connection(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; BEGIN IMMEDIATE is sent explicitly,
    # exactly as the service's writer does.
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


def raw_side(
    kind: str, directory: Path, warmup: int, rows_per_txn: int, prefill: int
) -> tuple[sqlite3.Connection, Callable[[int], None]]:
    """Plain sqlite3 writing `rows_per_txn` rows a transaction; the file is first filled,
    untimed, with as many rows as the service's event table holds, so both write into
    B-trees of the same size."""
    conn = _raw_connection(directory / f"raw-{kind}.db")
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(_INSERT, _raw_rows(prefill))
    conn.execute("COMMIT")

    # Values are generated inside the loop (a fresh uuid per row), as the service
    # generates its ids and timestamps inside each command.
    def one_transaction(_i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        for row in _raw_rows(rows_per_txn):
            conn.execute(_INSERT, row)
        conn.execute("COMMIT")

    for i in range(warmup):
        one_transaction(i)
    return conn, one_transaction


_FLOOR_EVENT = (
    "INSERT INTO stored_events (originator_id, originator_version, topic, state, timestamp) "
    "VALUES (?, ?, ?, ?, ?)"
)
_FLOOR_USER = (
    "INSERT INTO users (user_id, team_id, sealed_client_user_id, client_user_id_digest,"
    " status, created_on, version) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_FLOOR_KEY = "INSERT INTO user_data_keys (user_id, wrapped_key, created_at) VALUES (?, ?, ?)"


def _sqlite_text(moment: datetime) -> str:
    return moment.replace(tzinfo=None).isoformat(" ", "microseconds")


def floor_side(directory: Path, warmup: int) -> tuple[sqlite3.Connection, Callable[[int], None]]:
    """The least a create can cost in this design, for reference: the domain makes the
    user and its client_user_id claim and the ledger's mapper maps their two events to
    stored form, as the service does (the client_user_id sealed with a new data key,
    wrapped by the master key, and the claim named by the team's digest), and raw sqlite3
    writes the two event rows, the key row and the users row into the service's own
    schema (its tables and indexes), durably. Nothing else of the service: no validation,
    unit of work, cache, read-model code or SQLAlchemy."""
    service, team_id = _new_service(directory, "floor")
    mapper = service.ledger.mapper
    team_secret = service.users.client_user_ids.secrets.secret_of(
        CommandContext.system("bench:embedded"), team_id
    ).secret
    master = AESGCM(AESGCM.generate_key(bit_length=256))
    service.close()
    conn = sqlite3.connect(directory / "floor.db", isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
        conn.execute(f"PRAGMA {pragma}")
    ctx = CommandContext(actor="bench:embedded", request_id="bench")

    def create(i: int) -> None:
        client_user_id = f"floor-{i}"
        now = datetime.now(UTC)
        user_id = uuid.uuid4()
        data_key = new_data_key(keyed_ids=True)
        nonce = os.urandom(12)
        wrapped = nonce + master.encrypt(nonce, data_key, user_id.bytes)
        digest = client_user_id_digest(team_secret, client_user_id)
        # The users row holds the value only sealed, and the team's digest of it
        # (revision 0015), as the service's does.
        sealed = UserCipher(user_id, data_key).seal(client_user_id)
        user = User.register(
            ctx,
            now,
            user_id=user_id,
            team_id=team_id,
            sealed_client_user_id=sealed,
            claim_id=ClientUserIdClaim.id_for_digest(digest),
            sealed_fallback_time_zone=None,
            sealed_birth_date=None,
            ingestion_start=None,
            ingestion_end=None,
        )
        claim = ClientUserIdClaim.start(ctx, now, team_id, digest, user_id)
        events = [*user.collect_events(), *claim.collect_events()]
        stored = [mapper.to_stored_event(e) for e in events]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_FLOOR_KEY, (user_id.hex, wrapped, _sqlite_text(now)))
        for s, e in zip(stored, events, strict=True):
            conn.execute(
                _FLOOR_EVENT,
                (
                    # The mapper keeps our ids as UUIDs (StoredEvent allows str too); no
                    # conversion here, where the floor is being measured.
                    s.originator_id.hex,  # type: ignore[union-attr]
                    s.originator_version,
                    s.topic,
                    s.state,
                    _sqlite_text(e.timestamp),
                ),
            )
        conn.execute(
            _FLOOR_USER,
            (user_id.hex, team_id.hex, sealed, digest, "active", _sqlite_text(now), 1),
        )
        conn.execute("COMMIT")

    for i in range(warmup):
        create(-1 - i)
    return conn, create


@dataclass
class KindResults:
    service: Result
    raw: Result
    # create only: the design's floor (see `floor_side`), timed in the same blocks.
    floor: Result | None = None


def bench_kind(kind: str, directory: Path, n: int, warmup: int, block: int) -> KindResults:
    """N service commands and N raw transactions (and, for create, N floor commands),
    timed in alternating blocks, each side first in turn.

    The disk's fsync latency and the machine's other work drift over seconds; running
    the sides in turns of `block` puts them under the same conditions, so the ratio
    compares the code, not two moments of the machine.
    """
    side = service_side(kind, directory, n, warmup)
    conn, raw_run = raw_side(kind, directory, warmup, side.rows_per_txn, side.rows_before)
    floor_conn, floor_run = floor_side(directory, warmup) if kind == "create" else (None, None)
    service_clocks, raw_clocks, floor_clocks = Clocks(), Clocks(), Clocks()
    raw_changes = conn.total_changes
    service_changes = side.counter.total_changes()
    try:
        # A collection during one side's block would be noise, not the code: collect
        # first, and keep the collector out of the timed blocks.
        gc.collect()
        gc.disable()
        turns: list[tuple[Clocks, Callable[[int], None]]] = [
            (service_clocks, side.run),
            (raw_clocks, raw_run),
        ]
        if floor_run is not None:
            turns.append((floor_clocks, floor_run))
        for number, first in enumerate(range(0, n, block)):
            indexes = range(first, min(first + block, n))
            # Whichever side runs first after the collection below meets caches the
            # collector just walked through (a few µs a command, measured): the sides
            # take that place in turn.
            shift = number % len(turns)
            for clocks, run in turns[shift:] + turns[:shift]:
                clocks.time(run, indexes)
            gc.enable()
            gc.collect()
            gc.disable()
        service_rows = side.counter.total_changes() - service_changes
    finally:
        gc.enable()
        side.service.close()
        raw_rows = conn.total_changes - raw_changes
        conn.close()
        if floor_conn is not None:
            floor_conn.close()
    counter = side.counter
    service = Result(
        kind,
        n,
        service_clocks.seconds,
        counter.transactions,
        warmup,
        service_rows,
        service_clocks.cpu_seconds,
        side.rows_before,
    )
    raw = Result(
        kind, n, raw_clocks.seconds, n, n, raw_rows, raw_clocks.cpu_seconds, side.rows_before
    )
    floor = None
    if floor_run is not None:
        floor = Result(
            "floor",
            n,
            floor_clocks.seconds,
            n,
            n,
            4 * n,  # two event rows, the key row, the users row
            floor_clocks.cpu_seconds,
            side.rows_before,
        )
    return KindResults(service, raw, floor)


# -- report ------------------------------------------------------------------------------


def report(results: Sequence[KindResults]) -> bool:
    header = (
        f"{'command':<8} {'rows/cmd':>8} {'txns/cmd':>8} {'service cmds/s':>15} "
        f"{'raw txns/s':>11} {'ratio':>7} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    all_met = True
    for kind in results:
        service, raw = kind.service, kind.raw
        ratio = service.per_second / raw.per_second
        met = ratio >= TARGET
        all_met &= met
        print(
            f"{service.kind:<8} {service.rows_per_command:>8.2f} "
            f"{service.transactions_per_command:>8.2f} {service.per_second:>15.0f} "
            f"{raw.per_second:>11.0f} {ratio:>7.1%} {TARGET:>7.0%}  {'PASS' if met else 'MISS'}"
        )
    for kind in results:
        if kind.floor is not None:
            floor, raw = kind.floor, kind.raw
            print(
                f"\nfloor of create (the ledger's aggregates and mapper, raw sqlite3 rows in "
                f"the service's schema): {floor.per_second:.0f}/s, "
                f"{floor.per_second / raw.per_second:.1%} of raw"
            )
    # Where the time goes: per command (service) and per transaction (raw), wall and CPU.
    print(
        f"\n{'command':<8} {'service ms wall':>15} {'service ms CPU':>14} "
        f"{'raw ms wall':>11} {'raw ms CPU':>10} {'floor ms wall':>13}"
    )
    for kind in results:
        service, raw = kind.service, kind.raw
        floor_ms = f"{kind.floor.wall_ms:>13.3f}" if kind.floor is not None else f"{'-':>13}"
        print(
            f"{service.kind:<8} {service.wall_ms:>15.3f} {service.cpu_ms:>14.3f} "
            f"{raw.wall_ms:>11.3f} {raw.cpu_ms:>10.3f} {floor_ms}"
        )
    return all_met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Embedded create/delete/undo commands per second vs raw sqlite3."
    )
    parser.add_argument("--n", type=int, default=2000, help="timed commands per kind")
    parser.add_argument("--warmup", type=int, default=200, help="untimed commands first")
    parser.add_argument("--block", type=int, default=100, help="commands per turn of each side")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args(argv)
    if args.n < 1 or args.warmup < 1 or args.block < 1:
        # The warm-up also counts the transactions per command (see WriteCounter).
        parser.error("--n, --warmup and --block must be at least 1")

    print(
        f"embedded benchmark: N={args.n} per command kind, warm-up {args.warmup}, "
        f"sqlite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    results: list[KindResults] = []
    # One temp dir on the same file system for every side, so all pay the same fsync.
    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as tmp:
        directory = Path(tmp)
        print(f"files in {directory}\n")
        for kind in args.kinds:
            measured = bench_kind(kind, directory, args.n, args.warmup, args.block)
            service = measured.service
            if service.transactions != service.counted:
                print(
                    f"note: {kind} used {service.transactions} write transactions for "
                    f"{service.counted} commands; the raw side does one per command"
                )
            results.append(measured)
    all_met = report(results)
    # Another busy process on the machine makes the figures noise: say so next to them.
    print(f"\nload average after the run: {os.getloadavg()[0]:.2f}")
    if args.check and not all_met:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
