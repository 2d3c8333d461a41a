"""The erasure sweep and `healthledger rebuild` at scale (issue 15), on SQLite and on
PostgreSQL; `main()` runs the sections asked for (all by default, on every backend it
can reach) and prints each one's figures against a baseline measured in the same run.
`bench/postgres.py` calls it at its end.

Sections:

- `sweep`: `--users` (10,000) users created and deleted (batched saves of the same
  aggregates and events as the API's commands, so that setting up takes seconds), the
  clock moved past their grace period, then erased by the scheduler's sweep (batches of
  `erasure_batch_size` in one transaction each, claimed first: ADR 0021), by one process,
  and on a second database of the same kind by two processes at once. Each run checks
  that every user was erased exactly once (one `User.Erased` event each, no pending row
  left). Baseline: the same users erased one by one (`erase_user`, one transaction
  each, as the sweep did before batches) on a sample. Target: under 30 s for 10,000.

- `rebuild`: a log of about `--events` (200,000) events (users created, their settings
  changed, a third deleted, some with a demo connection and its pulls, webhook
  deliveries queued about them), rebuilt by `healthledger rebuild`'s code
  (`rebuild_read_models`: pages, held writes, whole pages up to 20,000 events a
  transaction, shadow tables swapped in). Baseline: reading and decoding the same log in
  the same pages without projecting it. Targets: 50,000 events/s on SQLite, 25,000 on PostgreSQL.
  On SQLite it also prints the *floor* of this design (`sqlite_floor`): the baseline's
  reading and decoding, plus raw sqlite3 writing the read models' final rows into the
  rebuild's own shadow, committed as often, and its swap; no projection at all.

PostgreSQL: `HEALTHLEDGER_BENCH_POSTGRES_URL` (else `HEALTHLEDGER_TEST_POSTGRES_URL`);
each run gets a schema of its own, dropped afterwards.

    .venv/bin/python bench/erasure_rebuild.py [--section sweep] [--backend sqlite]
        [--users 10000] [--events 200000] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import (
    READ_MODEL_TABLES,
    pending_erasures,
    stored_events,
)
from healthledger.adapters.persistence.projections.rebuild import (
    COMMIT_EVENTS,
    SqliteShadow,
    rebuild_read_models,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import ClientUserIdClaim, User

CTX = CommandContext(actor="bench:erasure_rebuild", request_id="req-bench")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
GRACE = timedelta(days=7)
# When the sweep runs: every user deleted at T0 is due.
SWEEP_AT = T0 + GRACE + timedelta(days=1)
SWEEP_TARGET_S = 30.0
REBUILD_TARGETS = {"sqlite": 50_000.0, "postgres": 25_000.0}
# Users saved per batch while setting up.
SETUP_BATCH = 250


def postgres_url() -> str | None:
    return os.environ.get("HEALTHLEDGER_BENCH_POSTGRES_URL") or os.environ.get(
        "HEALTHLEDGER_TEST_POSTGRES_URL"
    )


@contextmanager
def database(backend: str, workdir: Path, name: str) -> Iterator[str]:
    """A new, empty database of `backend`: its URL (a SQLite file, or a PostgreSQL
    schema of its own first on the search path, dropped afterwards)."""
    if backend == "sqlite":
        path = workdir / name / "ledger.db"
        path.parent.mkdir(parents=True)
        yield f"sqlite:///{path}"
        return
    base = postgres_url()
    assert base is not None
    schema = f"bench_{name}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}_rebuild" CASCADE')
        admin.dispose()


def settings_for(url: str, workdir: Path) -> Settings:
    return Settings(
        database_url=url,
        master_key_file=workdir / "keys" / "master.key",
        grace_period=GRACE,
        # The bench's own runs: no scheduler, and the batches of the default settings.
        erasure_batch_size=Settings().erasure_batch_size,
    )


class SteppingClock:
    """One millisecond later at each reading, from `start`: every event its own instant."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


# -- setting up: users made and deleted in batched saves ------------------------------


def create_users(service: Service, team_id: uuid.UUID, count: int, prefix: str) -> list[User]:
    """`count` users, as `UserLifecycle.create_user` makes them (their key, their sealed
    client_user_id, their claim), saved `SETUP_BATCH` at a time."""
    made: list[User] = []
    key_store, lifecycle, clock = service.key_store, service.users, service.clock
    for start in range(0, count, SETUP_BATCH):
        batch: list[Any] = []
        for n in range(start, min(start + SETUP_BATCH, count)):
            user_id = uuid.uuid4()
            value = f"{prefix}-{n}"
            key_store.new_key(user_id)
            sealed = key_store.seal(user_id, value)
            located = lifecycle.client_user_ids.locate(CTX, team_id, value, read=False)
            now = clock()
            user = User.register(
                CTX,
                now,
                user_id=user_id,
                team_id=team_id,
                sealed_client_user_id=sealed,
                claim_id=located.claim_id,
                sealed_fallback_time_zone=None,
                sealed_birth_date=None,
                ingestion_start=None,
                ingestion_end=None,
            )
            claim = ClientUserIdClaim.start(CTX, now, team_id, located.digest, user_id)
            batch += [claim, user]
            made.append(user)
        service.ledger.save(*batch)
    return made


def change_and_delete(service: Service, users: Sequence[User], delete_every: int) -> list[User]:
    """Each user's settings changed; every `delete_every`th deleted (its claim released),
    as `update_user` and `delete_user` do; saved in batches. The users deleted."""
    deleted: list[User] = []
    clock = service.clock
    for start in range(0, len(users), SETUP_BATCH):
        batch: list[Any] = []
        for n, user in enumerate(users[start : start + SETUP_BATCH], start):
            now = clock()
            zone = service.key_store.seal(user.id, "Europe/Paris")
            user.change_settings(CTX, now, {"sealed_fallback_time_zone": zone})
            batch.append(user)
            if n % delete_every == 0:
                claim = service.ledger.find(user.claim_id)
                assert isinstance(claim, ClientUserIdClaim)
                user.delete(CTX, now, now + GRACE)
                claim.release(CTX, now, user.id)
                batch.append(claim)
                deleted.append(user)
        service.ledger.save(*batch)
    return deleted


def team_of(service: Service) -> uuid.UUID:
    made = service.bootstrap()
    assert made is not None
    return made.team_id


def count_erased(service: Service) -> tuple[int, int, int]:
    """Erased events in the log, distinct users they name, pending erasures left."""
    erased = stored_events.c.topic == User.Erased.TOPIC
    with service.db.read() as conn:
        events = conn.execute(sa.select(sa.func.count()).where(erased)).scalar_one()
        users = conn.execute(
            sa.select(sa.func.count(sa.distinct(stored_events.c.originator_id))).where(erased)
        ).scalar_one()
        left = conn.execute(sa.select(sa.func.count()).select_from(pending_erasures)).scalar_one()
    return int(events), int(users), int(left)


# -- the sweep --------------------------------------------------------------------------


def prepare_due_users(url: str, workdir: Path, users: int) -> list[uuid.UUID]:
    """A database with `users` deleted users, all due by SWEEP_AT; their ids."""
    service = build_service(settings_for(url, workdir), clock=SteppingClock(T0))
    try:
        team = team_of(service)
        made = create_users(service, team, users, "sweep")
        return [u.id for u in change_and_delete(service, made, 1)]
    finally:
        service.close()


def sweeper(url: str, workdir: str) -> None:
    """One sweeping process (`--sweeper`): waits for a line on stdin, sweeps, prints what
    it erased and how long it took as JSON."""
    service = build_service(settings_for(url, Path(workdir)), clock=lambda: SWEEP_AT)
    try:
        print("ready", flush=True)
        sys.stdin.readline()
        began = time.perf_counter()
        erased = service.jobs.sweep_erasures()
        print(json.dumps({"erased": erased, "seconds": time.perf_counter() - began}), flush=True)
    finally:
        service.close()


def sweep_in_processes(url: str, workdir: Path, processes: int) -> tuple[float, list[int]]:
    """The sweep run by `processes` processes started together: the wall time from the
    go to the last one's end, and what each erased."""
    here = Path(__file__).resolve()
    started = [
        subprocess.Popen(
            [sys.executable, str(here), "--sweeper", url, str(workdir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for process in started:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    began = time.perf_counter()
    for process in started:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results = []
    for process in started:
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0, out
        results.append(json.loads(out.strip().splitlines()[-1])["erased"])
    return time.perf_counter() - began, results


def one_by_one(url: str, workdir: Path, ids: Sequence[uuid.UUID]) -> float:
    """Users/s of erasing `ids` one by one (one transaction each, `erase_user`)."""
    service = build_service(settings_for(url, workdir), clock=lambda: SWEEP_AT)
    try:
        began = time.perf_counter()
        for user_id in ids:
            assert service.users.erase_user(CTX, user_id)
        return len(ids) / (time.perf_counter() - began)
    finally:
        service.close()


def sweep_section(backend: str, args: argparse.Namespace, workdir: Path) -> bool:
    met = True
    print(f"sweep: {args.users} due users, {backend}")
    for processes in (1, 2):
        with database(backend, workdir, f"sweep{processes}") as url:
            ids = prepare_due_users(url, workdir, args.users + args.sample)
            baseline = one_by_one(url, workdir, ids[: args.sample])
            seconds, erased = sweep_in_processes(url, workdir, processes)
            service = build_service(settings_for(url, workdir))
            try:
                events, users, left = count_erased(service)
            finally:
                service.close()
        total = args.users + args.sample
        exact = events == users == total and left == 0 and sum(erased) == args.users
        rate = args.users / seconds
        print(
            f"  {processes} process(es): {seconds:6.1f} s, {rate:7.0f} users/s "
            f"(each erased {erased}); Erased events {events} for {users} users of {total}, "
            f"{left} pending left: {'exactly once' if exact else 'NOT EXACTLY ONCE'}"
        )
        print(
            f"    baseline one by one ({args.sample} users): {baseline:7.0f} users/s; "
            f"ratio batched / one by one {rate / baseline:5.1f}"
        )
        ok = exact and seconds * 10_000 / args.users < SWEEP_TARGET_S
        print(f"    {'met' if ok else 'MISSED'}: 10,000 users in under {SWEEP_TARGET_S:.0f} s")
        met = met and ok
    return met


# -- the rebuild ------------------------------------------------------------------------


def prepare_log(url: str, workdir: Path, events: int) -> int:
    """A log of about `events` events; how many it has."""
    service = build_service(settings_for(url, workdir), clock=SteppingClock(T0))
    try:
        team = team_of(service)
        service.webhooks.create(CTX, team, "sandbox", url="https://hooks.example/in")
        # Some users with a demo connection and its pulls, through the commands.
        for n in range(max(1, events // 2_000)):
            user = service.users.create_user(CTX, team, client_user_id=f"connected-{n}")
            service.connections.connect_demo(CTX, team, user.id, "freestyle_libre", ["glucose"])
        service.jobs.run_due_pulls()
        # The bulk: per user a create (two events), a change, a third deleted (two more).
        per_user = 3 + 2 / 3
        made = create_users(service, team, int(events * 0.9 / per_user), "log")
        change_and_delete(service, made, 3)
        # The webhook deliveries the dispatcher queues about them.
        service.dispatcher.follow()
        return service.recorder.max_notification_id() or 0
    finally:
        service.close()


def decode_only(service: Service, page: int) -> tuple[float, int]:
    """Events/s of reading and decoding the whole log in pages (no projection), and how
    many events it read."""
    recorder, mapper = service.recorder, service.ledger.mapper
    began, position, count = time.perf_counter(), 0, 0
    while True:
        notifications = recorder.select_notifications(position, page, inclusive_of_start=False)
        if not notifications:
            break
        for notification in notifications:
            mapper.to_domain_event(notification)
        position = notifications[-1].id
        count += len(notifications)
    return count / (time.perf_counter() - began), count


def sqlite_floor(service: Service, decoding: float, events: int) -> float:
    """Events/s of the least a rebuild of this design can cost on SQLite: `decoding`
    seconds (the baseline's reading and decoding of the `events`), then raw sqlite3
    (`executemany` of ready tuples) writing the read models' rows as the rebuild left them
    into a new shadow of the rebuild's own (`SqliteShadow`: same file settings), in as
    many transactions as the rebuild commits, rows in log order, and the shadow's swap.
    No handler runs, no row is updated, nothing is bound by SQLAlchemy's types: a rebuild
    can be no faster than this."""
    with service.db.read() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        rows = {
            t.name: driver.execute(f'SELECT * FROM "{t.name}"').fetchall()
            for t in READ_MODEL_TABLES
        }
    commits = max(1, -(-events // COMMIT_EVENTS))
    shadow = SqliteShadow(service.db)
    try:
        with shadow.engine().connect() as conn:
            shadow.create(conn)
            driver = conn.connection.driver_connection
            assert driver is not None
            began = time.perf_counter()
            for part in range(commits):
                with conn.begin():
                    for name, found in rows.items():
                        chunk = found[
                            part * len(found) // commits : (part + 1) * len(found) // commits
                        ]
                        if chunk:
                            marks = ", ".join("?" * len(chunk[0]))
                            driver.executemany(f'INSERT INTO main."{name}" VALUES ({marks})', chunk)
            with shadow.swapping(conn, service.recorder):
                shadow.swap(conn)
            writing = time.perf_counter() - began
        shadow.remove()
    finally:
        shadow.dispose()
    return events / (decoding + writing)


def rebuild_section(backend: str, args: argparse.Namespace, workdir: Path) -> bool:
    with database(backend, workdir, "rebuild") as url:
        made = prepare_log(url, workdir, args.events)
        service = build_service(settings_for(url, workdir))
        try:
            rates, cpu_rates = [], []
            for _ in range(args.repeat):
                began, cpu = time.perf_counter(), time.process_time()
                rebuilt = rebuild_read_models(
                    service.read_models, service.recorder, service.ledger.mapper
                )
                rates.append(rebuilt.events / (time.perf_counter() - began))
                cpu_rates.append(rebuilt.events / (time.process_time() - cpu))
            cpu = time.process_time()
            baseline, decoded = decode_only(service, 5_000)
            baseline_cpu = decoded / (time.process_time() - cpu)
            floor = (
                sqlite_floor(service, decoded / baseline, decoded) if backend == "sqlite" else None
            )
        finally:
            service.close()
    target = REBUILD_TARGETS[backend]
    best, worst = max(rates), min(rates)
    print(f"rebuild: a log of {made} events, {backend}, {args.repeat} run(s)")
    print(f"  healthledger rebuild  {worst:9.0f} - {best:9.0f} events/s")
    print(f"  baseline: read and decode only {baseline:9.0f} events/s")
    print(f"  ratio rebuild / read and decode {best / baseline:5.2f}")
    if floor is not None:
        print(
            f"  floor: read and decode, raw sqlite3 writes of the final rows, swap "
            f"{floor:9.0f} events/s; ratio rebuild / floor {best / floor:5.2f}"
        )
    # On a machine others load, a process gets a share of a core: per second of its own
    # CPU (the PostgreSQL server's is not counted), the rate it would have alone.
    print(
        f"  per CPU second of this process: rebuild {min(cpu_rates):9.0f} - "
        f"{max(cpu_rates):9.0f} events/s, read and decode only {baseline_cpu:9.0f}"
    )
    met = best >= target
    print(f"  {'met' if met else 'MISSED'}: at least {target:,.0f} events/s")
    return met


SECTIONS = {"sweep": sweep_section, "rebuild": rebuild_section}


def main(argv: Sequence[str] = ()) -> int:
    """Run the sections (all by default) on every backend asked for (SQLite, and
    PostgreSQL when a URL is set); with `--check`, exit 1 if a target was missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--section", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), action="append")
    parser.add_argument("--users", type=int, default=10_000, help="due users the sweep erases")
    parser.add_argument("--sample", type=int, default=300, help="users of the one-by-one baseline")
    parser.add_argument("--events", type=int, default=200_000, help="events of the rebuilt log")
    parser.add_argument("--repeat", type=int, default=2, help="rebuilds of the same log")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target was missed")
    args = parser.parse_args(list(argv))
    backends = args.backend or ["sqlite", *(["postgres"] if postgres_url() else [])]
    met = True
    with tempfile.TemporaryDirectory(prefix="bench-erasure-rebuild-") as tmp:
        for name in args.section or list(SECTIONS):
            for backend in backends:
                met = SECTIONS[name](backend, args, Path(tmp) / f"{name}-{backend}") and met
    return 0 if met or not args.check else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--sweeper":
        sweeper(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main(sys.argv[1:]))
