"""Webhook benchmark: fan-out throughput and commit-to-delivery latency, on SQLite.

A local receiver runs in its own process (uvicorn, answers 200 and notes when each
message id arrived).

1. **Fan-out.** For 1, 10 and 100 endpoints on the receiver: demo connections are made
   untimed (each announces `provider.connection.created` and
   `historical.data.glucose.created`), then the dispatcher is timed from following the log
   to the last delivery recorded (`dispatch_webhooks`: create deliveries, build, sign,
   post, record every attempt). Baseline in the same run: the same number of POSTs of the
   same bodies to the same receiver from a plain `httpx` loop (one client, sequential).
2. **Latency.** The service's own scheduler runs (as `serve` runs it); demo devices are
   connected one after another, and for each `provider.connection.created` the time from
   the event (recorded in the committing transaction) to its arrival at the receiver is
   taken: median and 99th percentile.

    .venv/bin/python bench/webhooks.py [--deliveries 2000] [--latency-events 200]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.persistence.engine.schema import teams, webhook_deliveries
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks.signing import signed_headers
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.deliveries import message_id_for
from sqlalchemy import select

CTX = CommandContext.system("bench:webhooks")

RECEIVER = r"""
import sys, time, uvicorn
arrivals = {}
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["method"] == "GET":
        import json
        payload = json.dumps(arrivals).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": payload})
        return
    headers = dict(scope["headers"])
    arrivals[headers.get(b"webhook-id", b"").decode()] = time.time()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_receiver() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(base, timeout=1)
            return process, base
        except httpx.TransportError:
            assert time.monotonic() < deadline, "receiver did not start"
            time.sleep(0.05)


def new_service(workdir: Path, name: str) -> Service:
    service = build_service(
        Settings(
            database_url=f"sqlite:///{workdir / f'{name}.db'}",
            master_key_file=workdir / "keys" / f"{name}.key",
            # The receiver listens on this machine's loopback, which webhooks are not
            # sent to unless allowed (docs/operations.md).
            webhook_allowed_destinations=["127.0.0.1"],
        )
    )
    service.bootstrap()
    return service


def team_of(service: Service) -> Any:
    with service.db.read() as conn:
        return conn.execute(select(teams.c.team_id)).scalar_one()


def connect_users(service: Service, count: int, prefix: str) -> None:
    team = team_of(service)
    resources = service.catalog["freestyle_libre"].supported_resources
    for n in range(count):
        user = service.users.create_user(CTX, team, client_user_id=f"{prefix}-{n}")
        service.connections.connect_demo(CTX, team, user.id, "freestyle_libre", resources)
    service.jobs.run_due_pulls()


def fan_out(endpoints: int, deliveries: int, base: str, workdir: Path) -> dict[str, Any]:
    service = new_service(workdir, f"fanout-{endpoints}")
    try:
        team = team_of(service)
        for n in range(endpoints):
            service.webhooks.create(CTX, team, "sandbox", url=f"{base}/e{n}")
        # Two public events per connection.
        connect_users(service, max(1, deliveries // (2 * endpoints)), f"f{endpoints}")
        started = time.perf_counter()
        while service.jobs.dispatch_webhooks():
            pass
        ours = time.perf_counter() - started
        counts = service.webhook_queries.delivery_counts()
        sent = counts.get("succeeded", 0)
        # The baseline: the same bodies, POSTed one after another by a plain httpx loop.
        bodies = []
        payloads = service.dispatcher.payloads
        stored = _all_deliveries(service)
        for row, event_type in zip(stored, payloads.event_types(stored), strict=True):
            assert event_type is not None
            body = payloads.of_delivery(row, event_type)
            assert body is not None
            bodies.append((row.endpoint_id, row.message_id, body))
        secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        with httpx.Client(timeout=15) as client:
            started = time.perf_counter()
            for n, (_endpoint, message_id, body) in enumerate(bodies):
                headers = signed_headers([secret], message_id, int(time.time()), body)
                client.post(f"{base}/e{n % endpoints}", content=body, headers=headers)
            baseline = time.perf_counter() - started
    finally:
        service.close()
    return {
        "endpoints": endpoints,
        "deliveries": sent,
        "failed": sum(v for k, v in counts.items() if k != "succeeded"),
        "ours_per_s": sent / ours,
        "baseline_per_s": len(bodies) / baseline,
    }


def _all_deliveries(service: Service) -> Sequence[Any]:
    with service.db.read() as conn:
        return conn.execute(select(webhook_deliveries)).all()


def latency(events: int, base: str, workdir: Path) -> dict[str, Any]:
    service = new_service(workdir, "latency")
    scheduler = start_scheduler(service)
    try:
        team = team_of(service)
        service.webhooks.create(
            CTX, team, "sandbox", url=f"{base}/latency", filter_types=["provider.connection.*"]
        )
        resources = service.catalog["freestyle_libre"].supported_resources
        committed: dict[str, float] = {}
        for n in range(events):
            user = service.users.create_user(CTX, team, client_user_id=f"lat-{n}")
            prepared = service.connections.connect_demo(
                CTX, team, user.id, "freestyle_libre", resources
            )
            created = prepared.connection
            message = message_id_for(
                created.id, created.version, "provider.connection.created", None
            )
            committed[message] = created.modified_on.timestamp()
            time.sleep(0.01)
        deadline = time.monotonic() + 120
        while True:
            arrivals = httpx.get(base).json()
            if all(m in arrivals for m in committed) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        scheduler.shutdown(wait=True)
        service.close()
    delays = sorted((arrivals[m] - t) * 1000 for m, t in committed.items() if m in arrivals)
    return {
        "events": events,
        "arrived": len(delays),
        "median_ms": statistics.median(delays),
        "p99_ms": delays[max(0, int(len(delays) * 0.99) - 1)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--latency-events", type=int, default=200)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    receiver, base = start_receiver()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            print("\n1. Fan-out to a local receiver (deliveries per second)")
            print(
                f"{'endpoints':>10}{'deliveries':>12}{'ours/s':>10}{'httpx loop/s':>14}"
                f"{'ours/loop':>11}"
            )
            for endpoints in (1, 10, 100):
                r = fan_out(endpoints, args.deliveries, base, workdir)
                print(
                    f"{r['endpoints']:>10}{r['deliveries']:>12}{r['ours_per_s']:>10.0f}"
                    f"{r['baseline_per_s']:>14.0f}{r['ours_per_s'] / r['baseline_per_s']:>10.0%}"
                    + (f"  ({r['failed']} not delivered!)" if r["failed"] else "")
                )
            print("\n2. Commit to first delivery attempt (the scheduler running, as in serve)")
            r = latency(args.latency_events, base, workdir)
            print(
                f"{r['arrived']}/{r['events']} provider.connection.created arrived: median "
                f"{r['median_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
            )
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
