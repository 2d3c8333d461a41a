"""Lab test orders benchmark (issue 14): sandbox orders progressing to their results, with
every status change announced once.

On a fresh SQLite file (or `--database-url`), with the simulated lab's delays at zero
and its default failure and cancellation rates, and one webhook endpoint on a local
receiver that runs in its own process and notes each message it gets:

1. `--orders` orders (default 1,000) are placed for `--orders / 10` users (the four shared
   demo lab tests in turn), each through `LabOrders.place`, as `POST /v3/order` does;
2. the simulated lab's sweep (`jobs.progress_lab_orders`, as the scheduler runs it) is
   called until no order has a step left: every order ends completed, failed or
   cancelled, the completed ones with their results;
3. the dispatcher (`jobs.dispatch_webhooks`) delivers every announcement.

Each phase is timed. Then the receiver's messages are counted per (order, status): each
status each order had must have been announced exactly once (`labtest.order.created` for
the first, `labtest.order.updated` for every later one), and each critical result once
(`labtest.result.critical`); the benchmark fails otherwise.

Baseline, in the same run and database: as many user setting changes
(`UserLifecycle.update_user`: one event, one commit each) as the orders recorded status
changes. Printed: each phase's rate, and the cost of a status change (placing or moving
an order, projected and, for results, sealed) against that of the baseline's command.

    .venv/bin/python bench/lab_orders.py [--orders 1000] [--database-url URL] [--check]

`main()` returns the figures and prints a report.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import teams
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.ordering import OrderRequest
from healthledger.domain.labs.orders import Order
from healthledger.domain.labs.patients import PatientAddress, PatientDetails
from sqlalchemy import select

CTX = CommandContext(actor="bench:lab_orders", request_id="bench", environment="sandbox")
DEMO_TESTS = [UUID(f"0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a0{n}") for n in (1, 2, 3, 4)]
PATIENT = PatientDetails.model_validate(
    {
        "first_name": "Bench",
        "last_name": "Patient",
        "email": "bench.patient@example.org",
        "phone_number": "+1 555 0100",
        "gender": "female",
        "dob": "1980-01-01",
    }
)
ADDRESS = PatientAddress.model_validate(
    {"first_line": "1 Bench Street", "city": "Austin", "state": "TX", "zip": "78701"}
)

# The receiver: notes each message (by its id, so a redelivery counts once) with its
# event type, order and the status it announces; GET answers what it noted.
RECEIVER = r"""
import json, sys, uvicorn
seen = {}
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
        payload = json.dumps(list(seen.values())).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": payload})
        return
    envelope = json.loads(body)
    data = envelope["data"]
    if envelope["event_type"] == "labtest.result.critical":
        noted = (envelope["event_type"], data["order_id"], "critical")
    else:
        noted = (envelope["event_type"], data["id"], data["events"][-1]["status"])
    seen[dict(scope["headers"]).get(b"webhook-id", b"").decode()] = noted
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
            if time.monotonic() > deadline:
                raise RuntimeError("the receiver did not start") from None
            time.sleep(0.05)


def timed(work: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def run(service: Service, orders: int, base: str) -> dict[str, Any]:
    with service.db.read() as conn:
        team = conn.execute(select(teams.c.team_id)).scalar_one()
    service.webhooks.create(CTX, team, "sandbox", url=f"{base}/orders")
    users = [
        service.users.create_user(CTX, team, client_user_id=f"bench-{n}").id
        for n in range(max(1, orders // 10))
    ]

    def place() -> list[Order]:
        return [
            service.lab_orders.place(
                CTX,
                team,
                OrderRequest(
                    users[n % len(users)], DEMO_TESTS[n % len(DEMO_TESTS)], None, PATIENT, ADDRESS
                ),
            )
            for n in range(orders)
        ]

    def progress() -> int:
        sweeps = 0
        while service.order_queries.pending_count():
            service.jobs.progress_lab_orders()
            sweeps += 1
        return sweeps

    def dispatch() -> int:
        rounds = 0
        while service.jobs.dispatch_webhooks():
            rounds += 1
        return rounds

    placed, placing = timed(place)
    sweeps, progressing = timed(progress)
    _, dispatching = timed(dispatch)

    # Every status of every order, and each critical result, announced exactly once.
    expected: Counter[tuple[str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    for order in placed:
        final = service.ledger.find(order.id)
        assert isinstance(final, Order)
        outcomes[final.top_level_status] += 1
        for status, _at in final.history:
            expected[(str(order.id), status)] += 1
        row = service.order_queries.order(team, order.id)
        if row is not None and row.interpretation == "critical":
            expected[(str(order.id), "critical")] += 1
    noted = httpx.get(base, timeout=30).json()
    announced = Counter((order_id, status) for _type, order_id, status in noted)
    wrong = sorted(k for k in expected.keys() | announced.keys() if announced[k] != expected[k])
    status_changes = sum(v for (_, status), v in expected.items() if status != "critical")

    # The baseline: as many one-event commands (a user's settings changed) as status changes.
    def baseline() -> None:
        for n in range(status_changes):
            zone = "Europe/Paris" if (n // len(users)) % 2 else "Europe/Berlin"
            service.users.update_user(
                CTX, team, users[n % len(users)], {"fallback_time_zone": zone}
            )

    _, baseline_time = timed(baseline)
    recorded = placing + progressing
    return {
        "orders": orders,
        "outcomes": dict(outcomes),
        "status_changes": status_changes,
        "announcements": len(noted),
        "announced_wrong": len(wrong),
        "sweeps": sweeps,
        "place_s": placing,
        "progress_s": progressing,
        "dispatch_s": dispatching,
        "status_changes_per_s": status_changes / recorded,
        "deliveries_per_s": len(noted) / dispatching,
        "baseline_per_s": status_changes / baseline_time,
        "cost_vs_baseline": recorded / baseline_time,
    }


def report(figures: dict[str, Any]) -> None:
    f = figures
    print(
        f"orders: {f['orders']} sandbox orders to their end {f['outcomes']}: "
        f"{f['status_changes']} status changes, {f['announcements']} webhook messages "
        f"({f['announced_wrong']} (order, status) pairs announced other than once)"
    )
    print(
        f"  place {f['place_s']:.2f} s, progress {f['progress_s']:.2f} s ({f['sweeps']} "
        f"sweeps), dispatch {f['dispatch_s']:.2f} s; total "
        f"{f['place_s'] + f['progress_s'] + f['dispatch_s']:.2f} s"
    )
    print(
        f"  {f['status_changes_per_s']:.0f} status changes/s recorded vs "
        f"{f['baseline_per_s']:.0f} user setting changes/s (baseline): a status change "
        f"costs {f['cost_vs_baseline']:.2f}x the baseline command; "
        f"{f['deliveries_per_s']:.0f} deliveries/s"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--check", action="store_true", help="exit 1 if an announcement is off")
    args = parser.parse_args(argv)
    print(f"load average: {os.getloadavg()[0]:.2f}")
    receiver, base = start_receiver()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            (workdir / "db").mkdir()
            settings = Settings(
                database_url=args.database_url or f"sqlite:///{workdir / 'db' / 'orders.db'}",
                master_key_file=workdir / "master.key",
                lab_order_step_delays=[0.0],
                # The receiver listens on loopback, refused unless allowed.
                webhook_allowed_destinations=["127.0.0.1"],
            )
            service = build_service(settings)
            try:
                service.bootstrap()
                figures = run(service, args.orders, base)
            finally:
                service.close()
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
    report(figures)
    if figures["announced_wrong"]:
        print(json.dumps(figures, indent=2))
        if args.check:
            sys.exit(1)
    return figures


if __name__ == "__main__":
    main()
