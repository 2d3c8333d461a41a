"""User audit benchmark: a user's audit costs the same in a small log and in one ten
times larger, on SQLite.

A user's audit reads `stream_owners` by the user (its primary key) and each owned
stream's events by `ix_stored_events_originator_time`: it must not scan the log. The same
audited users (each with a claim, a link token, two demo connections and their three
feeds: eight streams; the report prints the entries of one audit) are timed in a log of N
users, then again after 9 N more users have been written (a create and two settings
changes each). The baseline is the first measure, in the same run: the ratio of the
second to the first should stay near 1 (a scan would grow it about tenfold). For scale,
the same run times one read of the whole log.

    .venv/bin/python bench/user_audit.py [--users 1000] [--audited 20] [--repeat 20] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from uuid import UUID

from healthledger.adapters.compliance.audit import user_audit
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

CTX = CommandContext(actor="bench:audit", request_id="req-bench")
# The ratio (large log / small log) above which the audit is taken to grow with the log.
TARGET = 1.5


def filler(service: Service, team: UUID, count: int, prefix: str) -> None:
    for n in range(count):
        user = service.users.create_user(CTX, team, client_user_id=f"{prefix}-{n}").id
        service.users.update_user(CTX, team, user, {"fallback_time_zone": "Europe/Paris"})
        service.users.update_user(CTX, team, user, {"ingestion_start": date(2026, 1, 1)})


def audited_users(service: Service, team: UUID, count: int) -> list[UUID]:
    users = []
    for n in range(count):
        user = service.users.create_user(CTX, team, client_user_id=f"audited-{n}").id
        service.users.update_user(CTX, team, user, {"fallback_time_zone": "Europe/Paris"})
        service.link_tokens.issue(CTX, team, "sandbox", user_id=user)
        service.connections.connect_demo(CTX, team, user, "freestyle_libre", ["glucose"])
        service.connections.connect_demo(CTX, team, user, "oura", ["sleep", "activity"])
        users.append(user)
    service.jobs.run_due_pulls()
    return users


def time_audits(service: Service, users: list[UUID], repeat: int) -> tuple[float, int]:
    """The median time of one user's whole audit (ms), and the entries of one."""
    times = []
    entries = 0
    for _ in range(repeat):
        for user in users:
            began = time.perf_counter()
            entries = len(user_audit(service, user, limit=100).entries)
            times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000, entries


def time_log_read(service: Service) -> float:
    began = time.perf_counter()
    total = service.recorder.max_notification_id() or 0
    service.recorder.select_notifications(1, total + 1)
    return (time.perf_counter() - began) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000, help="users in the small log")
    parser.add_argument("--audited", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--check", action="store_true", help="exit 1 on a missed target")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as workdir:
        settings = Settings(
            database_url=f"sqlite:///{workdir}/database/ledger.db",
            # Outside the database's directory, as the service requires.
            master_key_file=Path(workdir) / "keys" / "master.key",
            grace_period=timedelta(days=7),
        )
        (Path(workdir) / "database").mkdir()
        service = build_service(settings)
        try:
            made = service.bootstrap()
            assert made is not None
            team = made.team_id
            filler(service, team, args.users - args.audited, "small")
            users = audited_users(service, team, args.audited)
            small_log = service.recorder.max_notification_id() or 0
            small_ms, entries = time_audits(service, users, args.repeat)
            small_scan = time_log_read(service)

            filler(service, team, 9 * args.users, "large")
            large_log = service.recorder.max_notification_id() or 0
            large_ms, _ = time_audits(service, users, args.repeat)
            large_scan = time_log_read(service)
        finally:
            service.close()

    ratio = large_ms / small_ms
    print(
        f"user audit benchmark: {args.audited} audited users ({entries} entries each), "
        f"{args.repeat} rounds, SQLite"
    )
    print()
    print("log events   audit ms (median)   one read of the whole log ms")
    print(f"{small_log:>10}   {small_ms:>17.3f}   {small_scan:>28.1f}")
    print(f"{large_log:>10}   {large_ms:>17.3f}   {large_scan:>28.1f}")
    print()
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(f"ratio (large log / small log): {ratio:.2f}, target <= {TARGET}: {verdict}")
    return 1 if args.check and ratio > TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
