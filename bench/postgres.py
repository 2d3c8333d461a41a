"""PostgreSQL benchmark: user commands per second, embedded, against raw psycopg.

Runs N create, update (settings), delete and undo commands through
`build_service(...).users` on this machine's PostgreSQL, one command at a time on one
thread (so one connection at a time), and compares each with raw psycopg doing one
transaction of 3 inserts (issue 15's baseline), both in fresh schemas of the same
database, with the same durability (the server's: `synchronous_commit` as configured,
reported), the two sides taking turns of `--block` commands so that both meet the same
disk and machine. The target is at least 50% of the raw figure. It also counts, during
the warm-up, what each command sends (libpq's protocol trace): its round trips (turns
from sending to reading an answer) and its messages (a simple query, which may carry
several statements, or an extended one's execute), and prints them (`--statements`
lists one command's).

At its end it runs the other PostgreSQL sections when their files exist
(`bench/erasure_rebuild.py`, `bench/postgres_http.py`): each one's `main()` is called with
`sys.argv` set to its own name alone, so it runs its defaults, and with
`HEALTHLEDGER_BENCH_POSTGRES_URL` set to this run's database URL.

    .venv/bin/python bench/postgres.py [--url URL] [--n 1000] [--warmup 100] [--block 50]
        [--kinds create update delete undo] [--statements] [--no-sections] [--check]

The URL defaults to `HEALTHLEDGER_BENCH_POSTGRES_URL`, then
`HEALTHLEDGER_TEST_POSTGRES_URL`, then the local server's `test` database. Everything is
written to schemas made for the run and dropped at its end.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from psycopg import pq
from support import Clocks, fresh_schema, libpq_url

BENCH = Path(__file__).resolve().parent
TARGET = 0.50
KINDS = ("create", "update", "delete", "undo")
DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
# The other engineers' PostgreSQL sections, run at the end when their files exist.
SECTIONS = ("erasure_rebuild", "postgres_http")
URL_VARIABLE = "HEALTHLEDGER_BENCH_POSTGRES_URL"

# The raw rows have the width of an event row: a uuid, a version, a topic, a state of
# about a User.Created event's size and a timestamp.
_TOPIC = "healthledger:User.Created.v1"
_STATE = os.urandom(300)
_RAW_TABLE = """
CREATE TABLE events (
    notification_id BIGSERIAL PRIMARY KEY,
    originator_id UUID NOT NULL,
    originator_version INTEGER NOT NULL,
    topic TEXT NOT NULL,
    state BYTEA NOT NULL,
    timestamp TIMESTAMPTZ NOT NULL,
    UNIQUE (originator_id, originator_version)
);
CREATE INDEX ix_events_originator_time ON events (originator_id, timestamp);
"""
_RAW_INSERT = (
    "INSERT INTO events (originator_id, originator_version, topic, state, timestamp) "
    "VALUES (%s, %s, %s, %s, %s)"
)
RAW_ROWS = 3


# -- schemas -----------------------------------------------------------------------------


# -- counting round trips ------------------------------------------------------------------


class Trace:
    """libpq's protocol trace (`PGconn.trace`, public in psycopg) of every connection the
    service checks out meanwhile, each to a file of its own (libpq buffers a trace until
    it ends). A round trip is a turn from sending to receiving: a run of messages sent
    (statements, or a pipeline's queue and its sync or flush) and the answers read back.
    A message is a simple `Query` (it may carry several statements) or an extended
    `Execute`."""

    def __init__(self, service: Service, directory: Path) -> None:
        self.service = service
        self.directory = directory
        self.files: list[tuple[Any, int, Path]] = []

    def __enter__(self) -> Trace:
        for engine in {self.service.db.writer, self.service.db.reader}:
            sa.event.listen(engine, "checkout", self.checkout)
        return self

    def checkout(self, dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        if any(known is dbapi_conn for known, _, _ in self.files):
            return
        path = self.directory / f"trace-{uuid.uuid4().hex}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        dbapi_conn.pgconn.trace(fd)
        dbapi_conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        self.files.append((dbapi_conn, fd, path))

    def __exit__(self, *_exc: object) -> None:
        for engine in {self.service.db.writer, self.service.db.reader}:
            sa.event.remove(engine, "checkout", self.checkout)
        for conn, fd, _ in self.files:
            if not conn.closed:
                conn.pgconn.untrace()  # flushes it
            os.close(fd)

    def traffic(self) -> Traffic:
        """What was sent and read on each connection traced."""
        traffics = [
            Traffic.of(path.read_text("utf-8", "replace").splitlines()) for *_, path in self.files
        ]
        for *_, path in self.files:
            path.unlink()
        return Traffic(
            sum(t.round_trips for t in traffics),
            sum(t.messages for t in traffics),
            [line for t in traffics for line in [*t.lines, ""]],
        )


@dataclass
class Traffic:
    round_trips: int
    messages: int
    lines: list[str]
    # The statements psycopg prepared, by name (to show what a Bind of one runs).
    names: dict[str, str] = field(default_factory=dict)

    def prepared(self) -> dict[str, str]:
        """The statements prepared here (a Parse with a name), by name."""
        found = {}
        for fields in self.records(self.lines):
            if len(fields) > 3 and fields[0] == "F" and fields[2] == "Parse":
                name, _, text = fields[3].strip().partition(" ")
                if name != '""':
                    found[name] = text
        return found

    @staticmethod
    def records(lines: list[str]) -> list[list[str]]:
        """The trace's records, each split in its fields (a statement's text may hold
        newlines: a line that starts with no direction goes on the record before it)."""
        joined: list[str] = []
        for line in lines:
            if line[:2] in ("F\t", "B\t") or not joined or not line:
                joined.append(line)
            else:
                joined[-1] += "\n" + line
        return [record.split("\t") for record in joined]

    @classmethod
    def of(cls, lines: list[str]) -> Traffic:
        round_trips = messages = 0
        sending = False
        for fields in cls.records(lines):
            if len(fields) < 3:
                continue
            if fields[0] == "F":
                sending = True
                messages += fields[2] in ("Query", "Execute")
            elif fields[0] == "B" and sending:
                sending = False
                round_trips += 1
        return cls(round_trips, messages, lines)

    def sent(self) -> list[str]:
        """The statements sent and the round trips, in order on each connection (for
        `--statements`): a simple query's text, an extended one's (or the name of the
        statement it had prepared)."""
        shown = []
        sending = False
        for fields in self.records(self.lines):
            if fields == [""]:
                shown.append("  (another connection)")
                continue
            if len(fields) > 3 and fields[0] == "F" and fields[2] in ("Query", "Parse", "Bind"):
                text = fields[3].strip()
                if fields[2] == "Parse":
                    text = text.partition(" ")[2]
                elif fields[2] == "Bind":
                    name = text.split(" ")[1]
                    if name == '""':
                        continue  # its Parse was shown
                    text = self.names.get(name, f"(prepared {name})")
                # A simple query may carry several statements: one a line.
                for statement in text.strip('"').split(";\n"):
                    shown.append("  " + " ".join(statement.split())[:140])
            if fields[0] == "F":
                sending = True
            elif fields[0] == "B" and sending:
                sending = False
                shown.append("  -- round trip --")
        return shown[:-1] if shown and shown[-1].startswith("  (") else shown


# -- the sides ---------------------------------------------------------------------------


@dataclass
class ServiceSide:
    service: Service
    run: Callable[[int], None]
    traffic: Traffic
    last_command: Traffic
    per_command: float
    events_before: int


def service_side(
    kind: str, url: str, directory: Path, n: int, warmup: int
) -> tuple[ServiceSide, Callable[[], None]]:
    """A service in a fresh schema, its users made untimed, `warmup` commands of the kind
    run untimed (the last ones traced); N commands of the kind ready to run."""
    schema = fresh_schema(url, f"bench_{kind}")
    service_url = schema.__enter__()
    settings = Settings(
        database_url=service_url, master_key_file=directory / "keys" / f"{kind}.master.key"
    )
    service = build_service(settings)
    boot = service.bootstrap()
    assert boot is not None, "a fresh schema bootstraps"
    team_id = boot.team_id
    users = service.users
    ctx = CommandContext(actor="bench:postgres", request_id="bench")
    prefix = uuid.uuid4().hex[:8]

    def made(count: int, tag: str) -> list[uuid.UUID]:
        return [
            users.create_user(ctx, team_id, client_user_id=f"{prefix}-{tag}-{i}").id
            for i in range(count)
        ]

    run: Callable[[int], None]
    warm: Callable[[int], None]
    if kind == "create":

        def warm(i: int) -> None:
            users.create_user(ctx, team_id, client_user_id=f"{prefix}-warm-{i}")

        def run(i: int) -> None:
            users.create_user(ctx, team_id, client_user_id=f"{prefix}-{kind}-{i}")

    else:
        warm_ids, ids = made(warmup, "warm"), made(n, "timed")
        if kind == "update":

            def warm(i: int) -> None:
                users.update_user(ctx, team_id, warm_ids[i], {"fallback_time_zone": "Europe/Paris"})

            def run(i: int) -> None:
                users.update_user(ctx, team_id, ids[i], {"fallback_time_zone": "Europe/Paris"})

        elif kind == "delete":

            def warm(i: int) -> None:
                users.delete_user(ctx, team_id, warm_ids[i])

            def run(i: int) -> None:
                users.delete_user(ctx, team_id, ids[i])

        else:
            for user_id in warm_ids + ids:
                users.delete_user(ctx, team_id, user_id)

            def warm(i: int) -> None:
                users.undo_deletion(ctx, team_id, warm_ids[i])

            def run(i: int) -> None:
                users.undo_deletion(ctx, team_id, ids[i])

    # The warm-up traced: the last 10 commands counted, the last one's traffic alone for
    # --statements, and the statements psycopg prepared (by name) from all of it.
    traced = min(10, warmup)
    with Trace(service, directory) as trace:
        for i in range(warmup - traced):
            warm(i)
    prepared = trace.traffic().prepared()
    with Trace(service, directory) as trace:
        for i in range(warmup - traced, warmup - 1):
            warm(i)
    traffic = trace.traffic()
    with Trace(service, directory) as trace:
        warm(warmup - 1)
    last_command = trace.traffic()
    last_command.names = {**prepared, **traffic.prepared(), **last_command.prepared()}
    traffic = Traffic(
        traffic.round_trips + last_command.round_trips,
        traffic.messages + last_command.messages,
        [],
    )
    with service.db.read() as conn:
        events = conn.exec_driver_sql("SELECT count(*) FROM stored_events").scalar_one()

    def close() -> None:
        service.close()
        schema.__exit__(None, None, None)

    return ServiceSide(service, run, traffic, last_command, traced, events), close


def raw_side(
    url: str, warmup: int, prefill: int
) -> tuple[Callable[[int], None], Callable[[], None]]:
    """psycopg, one connection, one transaction of 3 inserts a command (BEGIN, the three
    INSERTs, COMMIT, as psycopg sends them); the table first filled, untimed, with as
    many rows as the service's event table holds."""
    schema = fresh_schema(url, "bench_raw")
    raw_url = schema.__enter__()
    conn = psycopg.connect(libpq_url(raw_url))
    conn.execute(_RAW_TABLE)
    conn.commit()
    now = datetime.now(UTC)
    with conn.cursor() as cursor:
        cursor.executemany(
            _RAW_INSERT, [(uuid.uuid4(), 1, _TOPIC, _STATE, now) for _ in range(prefill)]
        )
    conn.commit()

    def one_transaction(_i: int) -> None:
        # Values made inside, as the service makes its ids and timestamps per command.
        moment = datetime.now(UTC)
        for _ in range(RAW_ROWS):
            conn.execute(_RAW_INSERT, (uuid.uuid4(), 1, _TOPIC, _STATE, moment))
        conn.commit()

    for i in range(warmup):
        one_transaction(i)

    def close() -> None:
        conn.close()
        schema.__exit__(None, None, None)

    return one_transaction, close


@dataclass
class KindResult:
    kind: str
    n: int
    service: Clocks
    raw: Clocks
    traffic: Traffic
    last_command: Traffic
    per_command: float

    @property
    def ratio(self) -> float:
        return self.raw.seconds / self.service.seconds


def bench_kind(kind: str, url: str, directory: Path, n: int, warmup: int, block: int) -> KindResult:
    """N service commands and N raw transactions in alternating blocks, each side first in
    turn, the collector kept out of the timed blocks."""
    side, close_service = service_side(kind, url, directory, n, warmup)
    try:
        raw_run, close_raw = raw_side(url, warmup, side.events_before)
        try:
            service_clocks, raw_clocks = Clocks(), Clocks()
            turns = [(service_clocks, side.run), (raw_clocks, raw_run)]
            gc.collect()
            gc.disable()
            try:
                for number, first in enumerate(range(0, n, block)):
                    indexes = range(first, min(first + block, n))
                    shift = number % len(turns)
                    for clocks, run in turns[shift:] + turns[:shift]:
                        clocks.time(run, indexes)
                    gc.enable()
                    gc.collect()
                    gc.disable()
            finally:
                gc.enable()
        finally:
            close_raw()
    finally:
        close_service()
    return KindResult(
        kind, n, service_clocks, raw_clocks, side.traffic, side.last_command, side.per_command
    )


# -- report and main -----------------------------------------------------------------------


def report(results: Sequence[KindResult]) -> bool:
    header = (
        f"{'command':<8} {'trips/cmd':>9} {'msgs/cmd':>9} {'service cmds/s':>15} "
        f"{'raw txns/s':>11} {'ratio':>7} {'target':>7}  result"
    )
    print(header)
    print("-" * len(header))
    all_met = True
    for r in results:
        met = r.ratio >= TARGET
        all_met &= met
        print(
            f"{r.kind:<8} {r.traffic.round_trips / r.per_command:>9.1f} "
            f"{r.traffic.messages / r.per_command:>9.1f} {r.n / r.service.seconds:>15.0f} "
            f"{r.n / r.raw.seconds:>11.0f} {r.ratio:>7.1%} {TARGET:>7.0%}  "
            f"{'PASS' if met else 'MISS'}"
        )
    print(
        f"\n{'command':<8} {'service ms wall':>15} {'service ms CPU':>14} "
        f"{'raw ms wall':>11} {'raw ms CPU':>10}"
    )
    for r in results:
        print(
            f"{r.kind:<8} {1000 * r.service.seconds / r.n:>15.3f} "
            f"{1000 * r.service.cpu_seconds / r.n:>14.3f} {1000 * r.raw.seconds / r.n:>11.3f} "
            f"{1000 * r.raw.cpu_seconds / r.n:>10.3f}"
        )
    return all_met


def run_sections(url: str) -> None:
    """The other PostgreSQL sections whose files exist, each by its own `main()`."""
    for name in SECTIONS:
        path = BENCH / f"{name}.py"
        if not path.exists():
            continue
        print(f"\n== {path.name} ==\n")
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Registered first, as an import would (dataclasses look their module up there).
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        argv, os.environ[URL_VARIABLE] = sys.argv, url
        sys.argv = [str(path)]
        try:
            module.main()
        except SystemExit as ended:
            if ended.code not in (None, 0):
                print(f"{path.name} ended with {ended.code}")
        finally:
            sys.argv = argv


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a SQLAlchemy postgresql+psycopg URL")
    parser.add_argument("--n", type=int, default=1000, help="timed commands per kind")
    parser.add_argument("--warmup", type=int, default=100, help="untimed commands first")
    parser.add_argument("--block", type=int, default=50, help="commands per turn of each side")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--statements", action="store_true", help="list one command's traffic")
    parser.add_argument("--no-sections", action="store_true", help="skip the other sections")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if args.n < 1 or args.warmup < 10 or args.block < 1:
        parser.error("--n and --block must be at least 1, --warmup at least 10")
    url = (
        args.url
        or os.environ.get(URL_VARIABLE)
        or os.environ.get("HEALTHLEDGER_TEST_POSTGRES_URL")
        or DEFAULT_URL
    )
    with contextlib.closing(psycopg.connect(libpq_url(url))) as probe:
        server = probe.info.parameter_status("server_version")
        durability = {
            name: probe.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("synchronous_commit", "fsync", "wal_sync_method")
        }
    print(
        f"PostgreSQL benchmark: N={args.n} per command kind, warm-up {args.warmup}, "
        f"PostgreSQL {server} ({', '.join(f'{k}={v}' for k, v in durability.items())}), "
        f"psycopg {psycopg.__version__}, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as tmp:
        directory = Path(tmp)
        (directory / "keys").mkdir()
        for kind in args.kinds:
            result = bench_kind(kind, url, directory, args.n, args.warmup, args.block)
            results.append(result)
            if args.statements:
                print(f"{kind}: one command's statements and round trips")
                print("\n".join(result.last_command.sent()), end="\n\n")
    all_met = report(results)
    print(f"\nload average after the run: {os.getloadavg()[0]:.2f}")
    if not args.no_sections:
        run_sections(url)
    return 1 if args.check and not all_met else 0


if __name__ == "__main__":
    sys.exit(main())
