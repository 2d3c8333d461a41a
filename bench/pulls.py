"""Pull benchmark: two figures of the historical pulls, on SQLite files.

1. **A full history, embedded.** For each demo provider: a fresh service on a SQLite file,
   one user, one demo connection, and every historical pull run to the end (30 days, every
   supported resource, 7-day chunks, sealed under the user's key, events and read models
   written). Target: under 2 s per connection. The baseline, in the same run: raw
   `sqlite3` writing the same demo data as plain JSON rows, one transaction per chunk
   window (every resource's 7 days) as the service stores them, with the same durability
   (WAL, synchronous=FULL), and no events, encryption or claims.
2. **Many users at once, over HTTP.** A real `healthledger serve` process on a fresh
   SQLite file; N users (200 by default) are created, then all connect a demo device at
   once through `POST /v2/link/connect/demo` from a pool of threads. The server's own pull
   worker (woken by each connect) runs every pull. The figure is the time from the first
   connect until no pull is pending, and the check is that nothing is lost: every pull
   succeeded, exactly one PullSucceeded event per pull, and every day a pull reported is
   a stored row.

    .venv/bin/python bench/pulls.py [--users 200] [--provider oura] [--check]

It prints a report; `--check` exits 1 on a missed target or anything lost.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from healthledger.adapters.composition import build_service
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.adapters.reference import provider_catalog
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.providers import PullTarget
from healthledger.domain.connections.pulling import pull_chunks
from healthledger.domain.context import CommandContext

FULL_HISTORY_TARGET_S = 2.0
DEMO_PROVIDERS = ("oura", "fitbit", "apple_health_kit", "freestyle_libre", "withings")


def full_history(provider: str, workdir: Path) -> dict[str, Any]:
    settings = Settings(
        database_url=f"sqlite:///{workdir / f'{provider}.db'}",
        master_key_file=workdir / "keys" / f"{provider}.key",
    )
    service = build_service(settings)
    try:
        team = service.bootstrap()
        assert team is not None
        ctx = CommandContext.system("bench:pulls")
        user = service.users.create_user(ctx, team.team_id, client_user_id=f"bench-{provider}")
        resources = service.catalog[provider].supported_resources
        started = time.perf_counter()
        prepared = service.connections.connect_demo(ctx, team.team_id, user.id, provider, resources)
        while service.pulls.run_due():
            pass
        elapsed = time.perf_counter() - started
        feeds = [service.ledger.find(f.id) for f in prepared.feeds]
        statuses = {f.status for f in feeds}  # type: ignore[union-attr]
        days = sum(f.days_with_data for f in feeds)  # type: ignore[union-attr]
        stored = service.health_data.count(user.id)
        first = feeds[0]
        window = first.window  # type: ignore[union-attr]
    finally:
        service.close()
    baseline = raw_baseline(provider, resources, window, workdir / f"{provider}-raw.db")
    return {
        "provider": provider,
        "resources": len(resources),
        "seconds": elapsed,
        "baseline_seconds": baseline,
        "ok": statuses == {"success"} and days == stored,
        "days": days,
    }


def raw_baseline(
    provider: str, resources: Sequence[str], window: tuple[datetime, datetime], path: Path
) -> float:
    """The same demo data as plain JSON rows, one transaction per chunk, same durability."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE data (user_id BLOB, provider TEXT, resource TEXT, day TEXT, "
        "payload TEXT, PRIMARY KEY (user_id, provider, resource, day))"
    )
    demo, user = DemoProvider(), uuid.uuid4()
    now = window[1]
    started = time.perf_counter()
    # As the service stores them: one transaction per chunk window, every resource in it.
    for start, end in pull_chunks(*window):
        rows = [
            (user.bytes, provider, resource, day.isoformat(), json.dumps(payload))
            for resource in resources
            for day, payload in demo.fetch(
                PullTarget(user, provider, resource, {}), start, end, now, 1
            ).items()
        ]
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO data VALUES (?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


# -- many users over HTTP -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def many_users(users: int, provider: str, workers: int, workdir: Path) -> dict[str, Any]:
    db_path = workdir / "many.db"
    ports = [free_port() for _ in range(3)]
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": f"sqlite:///{db_path}",
        "HEALTHLEDGER_MASTER_KEY_FILE": str(workdir / "keys" / "many.key"),
        "HEALTHLEDGER_TEAM_API_PORT": str(ports[0]),
        "HEALTHLEDGER_MANAGEMENT_API_PORT": str(ports[1]),
        "HEALTHLEDGER_LINK_PORT": str(ports[2]),
        "HEALTHLEDGER_LOG_LEVEL": "warning",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "healthledger.adapters.cli", "serve"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{ports[0]}"
    try:
        key = None
        deadline = time.monotonic() + 60
        assert process.stdout is not None
        while key is None:
            line = process.stdout.readline()
            assert line or process.poll() is None, "server exited"
            match = re.search(r"(hlk_\S+)", line)
            key = match.group(1) if match else None
            assert time.monotonic() < deadline, "no team key printed"
        headers = {"x-service-api-key": key}
        while True:
            try:
                httpx.get(f"{base}/openapi.json", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            user_ids = [
                client.post("/v2/user", json={"client_user_id": f"many-{n}"}).json()["user_id"]
                for n in range(users)
            ]

        def connect(user_id: str) -> int:
            with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
                answer = client.post(
                    "/v2/link/connect/demo", json={"user_id": user_id, "provider": provider}
                )
                return answer.status_code

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            codes = list(pool.map(connect, user_ids))
        connected = time.perf_counter() - started
        pending = -1
        while pending != 0:
            time.sleep(0.25)
            with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as ro:
                pending = ro.execute(
                    "SELECT count(*) FROM resource_feeds "
                    "WHERE status IN ('scheduled', 'in_progress', 'retrying')"
                ).fetchone()[0]
            assert time.perf_counter() - started < 1800, "pulls did not finish"
        elapsed = time.perf_counter() - started
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as ro:
            statuses = dict(
                ro.execute("SELECT status, count(*) FROM resource_feeds GROUP BY status").fetchall()
            )
            succeeded_events = ro.execute(
                "SELECT count(*) FROM stored_events "
                "WHERE topic = 'healthledger:ResourceFeed.PullSucceeded.v2'"
            ).fetchone()[0]
            reported = ro.execute("SELECT sum(days_with_data) FROM resource_feeds").fetchone()[0]
            # Days, not rows: a row is a month's block (ADR 0033), its current version
            # the one not replaced, holding `days` days.
            stored = ro.execute(
                "SELECT coalesce(sum(days), 0) FROM health_data WHERE replaced_at IS NULL"
            ).fetchone()[0]
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    (entry,) = [e for e in provider_catalog() if e.slug == provider]
    expected = users * len(entry.supported_resources)
    return {
        "users": users,
        "pulls": expected,
        "connect_codes": {code: codes.count(code) for code in set(codes)},
        "connect_seconds": connected,
        "seconds": elapsed,
        "statuses": statuses,
        "succeeded_events": succeeded_events,
        "reported_days": reported,
        "stored_days": stored,
        "ok": codes.count(200) == users
        and statuses == {"success": expected}
        and succeeded_events == expected
        and reported == stored,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--provider", default="oura")
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print("\n1. A full demo history (30 days, every supported resource), embedded, SQLite")
        print(
            f"{'provider':<18}{'resources':>10}{'days':>7}{'ours s':>9}{'raw s':>8}"
            f"{'raw/ours':>10}  target < {FULL_HISTORY_TARGET_S:.0f} s"
        )
        for provider in DEMO_PROVIDERS:
            r = full_history(provider, workdir)
            passed = r["ok"] and r["seconds"] < FULL_HISTORY_TARGET_S
            ok &= passed
            print(
                f"{provider:<18}{r['resources']:>10}{r['days']:>7}{r['seconds']:>9.3f}"
                f"{r['baseline_seconds']:>8.3f}{r['baseline_seconds'] / r['seconds']:>9.0%}"
                f"  {'PASS' if passed else 'MISS'}{'' if r['ok'] else ' (data lost!)'}"
            )
        print(f"\n2. {args.users} users connect {args.provider} at once over HTTP (serve, SQLite)")
        r = many_users(args.users, args.provider, args.workers, workdir)
        ok &= r["ok"]
        print(f"connects answered: {r['connect_codes']} in {r['connect_seconds']:.1f} s")
        print(
            f"every pull ended after {r['seconds']:.1f} s: {r['pulls']} pulls, "
            f"{r['pulls'] / r['seconds']:.0f} pulls/s; statuses {r['statuses']}"
        )
        print(
            f"PullSucceeded events {r['succeeded_events']} (expected {r['pulls']}); days "
            f"reported {r['reported_days']}, days stored {r['stored_days']}: "
            f"{'NOTHING LOST' if r['ok'] else 'LOST OR FAILED'}"
        )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
