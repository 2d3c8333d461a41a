"""Audit benchmarks (issue 16), one section each, on SQLite; `main()` runs the sections
asked for (all by default) and prints each one's figures against a baseline measured in
the same run.

Sections:

- `as_of`: a user with 10,000 events (a create, two demo connections, then settings
  changes), read as of instants spread over its history through the team API's operation
  (`GET /v2/user/{user_id}?as_of=`, adapters/compliance/time_travel.py), against the plain current
  read of the same user (the read models). Target: under 20 ms (median). For scale, one
  replay of the whole stream without a snapshot.

- `deletion_report`: the JSON deletion report (adapters/compliance/deletion_report.py) of an erased
  user with a typical history (demographics, two demo connections and their pulls, a link
  token, webhook deliveries about it), made through the team API's operation, against
  reading the same user's whole audit history (compliance/audit.py `history`). Target: under
  100 ms (median).

- `verify`: `healthledger verify` (the hash chain's walk, `Chain.verify`) over a log of
  1,000,000 synthetic events written through the chain's own writer, against the same
  SELECT (every column, streamed in the same pages) without hashing. Target: at least
  200,000 events/s.

- `chain_cost`: embedded creates (`users.create_user`, durable commits) on two services
  of one run, one recording with the hash chain and one without (`build_service(...,
  chained=False)`), taking turns in blocks. Target: the chain adds at most 10%.

    .venv/bin/python bench/audit.py [--section as_of] [--events 10000] [--reads 200] [--check]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eventsourcing.application import project_aggregate
from healthledger.adapters.composition import build_service
from healthledger.adapters.operations import users as user_operations
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

CTX = CommandContext(actor="bench:audit", request_id="req-bench")
AS_OF_TARGET_MS = 20.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class SteppingClock:
    """The service's clock: one second later at each reading, so that every event of the
    long history has its own instant."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def median_ms(run: Callable[[], Any], times: int) -> float:
    samples = []
    for _ in range(times):
        began = time.perf_counter()
        run()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


def as_of_section(args: argparse.Namespace, workdir: Path) -> bool:
    """`as_of` of a user with `args.events` events; True if under the target."""
    settings = Settings(
        database_url=f"sqlite:///{workdir}/as_of.db",
        master_key_file=workdir / "keys" / "master.key",
        grace_period=timedelta(days=7),
    )
    clock = SteppingClock(T0)
    service = build_service(settings, clock=clock)
    try:
        made = service.bootstrap()
        assert made is not None
        team = made.team_id
        user = service.users.create_user(
            CTX, team, client_user_id="long-lived", fallback_time_zone="UTC"
        ).id
        service.connections.connect_demo(CTX, team, user, "freestyle_libre", ["glucose"])
        service.connections.connect_demo(CTX, team, user, "oura", ["sleep"])
        zones = ("Europe/Paris", "Asia/Tokyo", "America/Lima")
        for n in range(args.events - 1):
            service.users.update_user(CTX, team, user, {"fallback_time_zone": zones[n % 3]})
        last = clock.now
        events = service.recorder.version_at(user, last)
        rng = random.Random(16)
        span = (last - T0).total_seconds()
        instants = [T0 + timedelta(seconds=rng.uniform(60, span)) for _ in range(args.reads)]
        pending = iter(instants * 2)

        def as_of() -> Any:
            return user_operations.resolved_user(service, team, user, as_of=next(pending))

        def current() -> Any:
            return user_operations.resolved_user(service, team, user)

        def replay_all() -> Any:
            return project_aggregate(None, service.ledger.events.get(user))

        for _ in range(20):  # warm-up: the statements compiled, the pages cached
            current()
        as_of_ms = median_ms(as_of, args.reads)
        current_ms = median_ms(current, args.reads)
        replay_ms = median_ms(replay_all, 5)
    finally:
        service.close()

    print(f"as_of: one user with {events} events, {args.reads} reads each, SQLite")
    print(f"  GET /v2/user/{{id}}?as_of=   {as_of_ms:8.3f} ms (median, instants spread over")
    print("                               its history; target < 20 ms)")
    print(f"  GET /v2/user/{{id}}          {current_ms:8.3f} ms (median, the read models)")
    print(f"  ratio as_of / current        {as_of_ms / current_ms:8.1f}")
    print(f"  for scale: the whole stream replayed without a snapshot: {replay_ms:.1f} ms")
    met = as_of_ms < AS_OF_TARGET_MS
    print(f"  {'met' if met else 'MISSED'}: as_of under {AS_OF_TARGET_MS:.0f} ms")
    return met


REPORT_TARGET_MS = 100.0


def deletion_report_section(args: argparse.Namespace, workdir: Path) -> bool:
    """The JSON deletion report of an erased user; True if under the target."""
    from healthledger.adapters.compliance.audit import history
    from healthledger.adapters.compliance.deletion_report import deletion_report

    settings = Settings(
        database_url=f"sqlite:///{workdir}/report.db",
        master_key_file=workdir / "keys" / "master.key",
        grace_period=timedelta(days=7),
    )
    clock = SteppingClock(T0)
    service = build_service(settings, clock=clock)
    try:
        made = service.bootstrap()
        assert made is not None
        team = made.team_id
        # Other users around it, so that nothing is read by a scan of a tiny log.
        for n in range(200):
            service.users.create_user(CTX, team, client_user_id=f"neighbour-{n}")
        # An endpoint that is never reached: the dispatcher only records the deliveries.
        service.webhooks.create(CTX, team, "sandbox", url="https://hooks.example.com/in")
        user = service.users.create_user(
            CTX, team, client_user_id="reported", fallback_time_zone="UTC"
        ).id
        service.users.record_demographics(CTX, team, user, DEMOGRAPHICS)
        service.link_tokens.issue(CTX, team, "sandbox", user_id=user)
        service.connections.connect_demo(CTX, team, user, "freestyle_libre", ["glucose"])
        service.connections.connect_demo(CTX, team, user, "oura", ["sleep", "activity"])
        service.jobs.run_due_pulls()
        service.users.delete_user(CTX, team, user)
        clock.now += settings.grace_period
        assert service.jobs.sweep_erasures() == 1
        while service.dispatcher.follow():
            pass
        report = deletion_report(service, user, CTX, team_id=team)  # signs a head once

        def make_report() -> Any:
            return deletion_report(service, user, CTX, team_id=team)

        def read_history() -> Any:
            return history(service, user)

        for _ in range(5):  # warm-up: the statements compiled, the pages cached
            make_report()
            read_history()
        report_ms = median_ms(make_report, args.reports)
        history_ms = median_ms(read_history, args.reports)
    finally:
        service.close()

    events = len(report["proof"]["events"])
    streams = len({e["originator_id"] for e in report["proof"]["events"]})
    print(
        f"deletion_report: an erased user, {events} events in {streams} streams, "
        f"{args.reports} reports, SQLite"
    )
    print(f"  deletion report (JSON, signed)  {report_ms:8.3f} ms (median; target < 100 ms)")
    print(f"  the user's audit history        {history_ms:8.3f} ms (median)")
    print(f"  ratio report / history          {report_ms / history_ms:8.2f}")
    met = report_ms < REPORT_TARGET_MS
    print(f"  {'met' if met else 'MISSED'}: a deletion report under {REPORT_TARGET_MS:.0f} ms")
    return met


# A person's demographics (the report must show none of it; here they are only its cost).
DEMOGRAPHICS: dict[str, Any] = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada@example.org",
    "phone_number": "+44 20 7946 0958",
    "gender": "female",
    "dob": "1985-12-10",
    "address": {"first_line": "1 Row", "zip_code": "10001", "state": "NY", "city": "York"},
}

VERIFY_TARGET = 200_000  # events/s
# Synthetic events of the width of real ones: a state about the size of a User.Created
# event's, topics of a few kinds, streams of a few events each.
SYNTHETIC_TOPICS = (
    "healthledger:User.Created.v1",
    "healthledger:ClientUserIdClaim.Created.v1",
    "healthledger:User.SettingsChanged.v1",
    "healthledger:Connection.Created.v1",
)


def verify_section(args: argparse.Namespace, workdir: Path) -> bool:
    """`Chain.verify` over `args.verify_events` events; True if at the target."""
    from healthledger.adapters.persistence.engine.schema import stored_events
    from healthledger.adapters.persistence.engine.statements import CompiledStatement, insert_of
    from healthledger.adapters.persistence.eventstore.chain import (
        CHAIN_COLUMNS,
        ChainWriter,
        log_rows,
    )
    from healthledger.adapters.persistence.eventstore.recorder import EVENT_COLUMNS

    settings = Settings(
        database_url=f"sqlite:///{workdir}/verify.db",
        master_key_file=workdir / "keys" / "master.key",
    )
    service = build_service(settings)
    try:
        columns = EVENT_COLUMNS + CHAIN_COLUMNS
        insert_rows = CompiledStatement(insert_of(stored_events, columns))
        writer = ChainWriter(stored_events)
        rng = random.Random(16)
        payload = os.urandom(4096)
        built = time.perf_counter()
        at, written, batch = T0, 0, 20_000
        while written < args.verify_events:
            rows: list[tuple[Any, ...]] = []
            wanted = min(batch, args.verify_events - written)
            while len(rows) < wanted:
                stream = uuid.UUID(bytes=rng.randbytes(16), version=4)
                for version in range(1, 1 + rng.randint(1, 4)):
                    at += timedelta(microseconds=rng.randint(1, 5_000_000))
                    start = rng.randrange(0, 3800)
                    state = payload[start : start + rng.randint(250, 450)]
                    topic = SYNTHETIC_TOPICS[0 if version == 1 else rng.randrange(1, 4)]
                    rows.append((stream, version, topic, state, at))
            del rows[wanted:]
            with service.db.write() as conn:
                linked = writer.links(conn, rows)
                insert_rows.execute_many(
                    conn,
                    [
                        dict(zip(columns, (*row, *link), strict=True))
                        for row, link in zip(rows, linked, strict=True)
                    ],
                )
            written += len(rows)
        built = time.perf_counter() - built
        events = service.recorder.max_notification_id() or 0

        def plain_select() -> int:
            # The walk's own pages of the log (`log_rows`), every column read.
            read = 0
            with service.db.read() as conn:
                for row in log_rows(conn):
                    read += len(row[7])
            return read

        timings: dict[str, list[float]] = {"verify": [], "select": []}
        outcome = None
        for _ in range(args.verify_rounds):
            began = time.perf_counter()
            outcome = service.chain.verify()
            timings["verify"].append(time.perf_counter() - began)
            began = time.perf_counter()
            plain_select()
            timings["select"].append(time.perf_counter() - began)
        assert outcome is not None and outcome.ok and outcome.records_checked == events
    finally:
        service.close()
    verify_s, select_s = min(timings["verify"]), min(timings["select"])
    rate, select_rate = events / verify_s, events / select_s
    rounds = args.verify_rounds
    print(f"verify: {events:,} events on SQLite (built in {built:.1f} s), best of {rounds}")
    print(f"  healthledger verify (the walk)  {rate:12,.0f} events/s ({verify_s:.2f} s)")
    print(f"  the same SELECT, no hashing     {select_rate:12,.0f} rows/s ({select_s:.2f} s)")
    print(f"  ratio verify / select           {rate / select_rate:12.2f}")
    print(f"  for scale: hashlib SHA-256 here  {_sha256_rate():12,.0f} 400-byte states/s")
    met = rate >= VERIFY_TARGET
    print(f"  {'met' if met else 'MISSED'}: verify at least {VERIFY_TARGET:,} events/s")
    return met


def _sha256_rate() -> float:
    state = bytes(400)
    began = time.perf_counter()
    for _ in range(100_000):
        hashlib.sha256(state).digest()
    return 100_000 / (time.perf_counter() - began)


CHAIN_COST_TARGET = 0.10


def chain_cost_section(args: argparse.Namespace, workdir: Path) -> bool:
    """Embedded creates with and without the chain, in turns; True if the chain adds at
    most `CHAIN_COST_TARGET`."""
    sides = {}
    for chained in (True, False):
        name = "chained" if chained else "unchained"
        settings = Settings(
            database_url=f"sqlite:///{workdir}/{name}.db",
            master_key_file=workdir / "keys" / f"{name}.master.key",
        )
        service = build_service(settings, chained=chained)
        made = service.bootstrap()
        assert made is not None
        sides[name] = (service, made.team_id)
    wall = dict.fromkeys(sides, 0.0)
    cpu = dict.fromkeys(sides, 0.0)
    try:
        for service, team in sides.values():  # warm-up, untimed
            for i in range(args.warmup):
                service.users.create_user(CTX, team, client_user_id=f"warm-{i}")
        block = 100
        gc.collect()
        gc.disable()
        for number, first in enumerate(range(0, args.creates, block)):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for name in order:
                service, team = sides[name]
                cpu_began, began = time.process_time(), time.perf_counter()
                for i in range(first, min(first + block, args.creates)):
                    service.users.create_user(CTX, team, client_user_id=f"{name}-{i}")
                wall[name] += time.perf_counter() - began
                cpu[name] += time.process_time() - cpu_began
            gc.enable()
            gc.collect()
            gc.disable()
        gc.enable()
        chained_service = sides["chained"][0]
        assert chained_service.chain.verify().ok
    finally:
        gc.enable()
        for service, _ in sides.values():
            service.close()
    n = args.creates
    added = wall["chained"] / wall["unchained"] - 1
    print(f"chain_cost: {n} embedded creates per side, in turns of 100, SQLite, durable commits")
    for name in sides:
        print(
            f"  {name:<10} {n / wall[name]:8.0f} creates/s  {1000 * wall[name] / n:7.3f} ms wall "
            f" {1000 * cpu[name] / n:7.3f} ms CPU per create"
        )
    print(
        f"  the chain adds {added:+.1%} wall time, {cpu['chained'] / cpu['unchained'] - 1:+.1%} CPU"
    )
    met = added <= CHAIN_COST_TARGET
    print(f"  {'met' if met else 'MISSED'}: the chain adds at most {CHAIN_COST_TARGET:.0%}")
    return met


SECTIONS: dict[str, Callable[[argparse.Namespace, Path], bool]] = {
    "as_of": as_of_section,
    "deletion_report": deletion_report_section,
    "verify": verify_section,
    "chain_cost": chain_cost_section,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--section", action="append", choices=sorted(SECTIONS), help="(repeatable) default: all"
    )
    parser.add_argument("--events", type=int, default=10_000, help="as_of: the user's events")
    parser.add_argument("--reads", type=int, default=200, help="as_of: timed reads of each kind")
    parser.add_argument(
        "--reports", type=int, default=100, help="deletion_report: timed reports and histories"
    )
    parser.add_argument(
        "--verify-events", type=int, default=1_000_000, help="verify: events in the log"
    )
    parser.add_argument("--verify-rounds", type=int, default=3, help="verify: timed walks")
    parser.add_argument(
        "--creates", type=int, default=2000, help="chain_cost: timed creates per side"
    )
    parser.add_argument("--warmup", type=int, default=200, help="chain_cost: untimed creates")
    parser.add_argument("--check", action="store_true", help="exit 1 on a missed target")
    args = parser.parse_args()
    met = True
    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as workdir:
        for name in args.section or sorted(SECTIONS):
            (Path(workdir) / "keys").mkdir(exist_ok=True)
            met = SECTIONS[name](args, Path(workdir)) and met
            print()
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    raise SystemExit(main())
