"""Event destinations benchmark (issue 35): publishing throughput with the brokers'
confirmations, and commit-to-publish latency, against the machine's local RabbitMQ
(127.0.0.1:5672) and NATS JetStream (127.0.0.1:4222), on SQLite (PostgreSQL with
--database-url). Its exchange, queues and streams are its own (`bench-*`), removed after.

1. **Throughput.** Users are deleted and restored untimed (each announces `user.deleted`
   and `user.deletion_undone`); then the outbox and the publisher are timed from following
   the log to the last message acknowledged and recorded (`dispatch_webhooks`: the outbox
   follows the log, the publisher reads the stretch after the destination's cursor, builds
   each body, records its round as started, publishes each with the broker's
   confirmation, records the round finished: ADR 0055). Baseline in the same run: the same bodies
   published one after another with confirmations by a plain loop: pika's
   BlockingConnection with confirm_delivery (persistent, mandatory), and nats-py's
   `js.publish` with a Nats-Msg-Id. Target: at least 50% of the loop's rate, as the
   median of `--repeat` pairs (one pair's ratio swung from 0.28 to 0.60 on a quiet
   machine, the loop's rate from 1,600 to 3,200 a second).
2. **Latency.** The service's own scheduler runs (as `serve` runs it); users are deleted
   one after another, and for each `user.deleted` the time from its event (recorded in
   the committing transaction) to the message's arrival at a consumer of the broker is
   taken: median and 99th percentile. Target: median under 200 ms.

    .venv/bin/python bench/destinations.py [--messages 2000] [--latency-events 200]
        [--repeat 5] [--database-url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import pika
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.persistence.engine.schema import teams
from healthledger.adapters.server import settle_heap
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.webhooks.event_destinations import NATS, RABBITMQ, Route
from sqlalchemy import select
from support import fresh_schema

CTX = CommandContext.system("bench:destinations")
RABBIT_PORT = 5672
NATS_PORT = 4222
RUN = uuid.uuid4().hex[:8]
EXCHANGE = f"bench-{RUN}"
STREAM = f"BENCH_{RUN}"
SUBJECT = f"bench.{RUN}"


def new_service(workdir: Path, name: str, database_url: str | None) -> Service:
    service = build_service(
        Settings(
            database_url=database_url or f"sqlite:///{workdir / f'{name}.db'}",
            master_key_file=workdir / "keys" / f"{name}.key",
            # The brokers listen on this machine's loopback, which is not reached unless
            # the operator allows it (docs/operations.md).
            webhook_allowed_destinations=["127.0.0.1"],
        )
    )
    service.bootstrap()
    settle_heap()  # as `serve` does once it has started
    return service


def team_of(service: Service) -> Any:
    with service.db.read() as conn:
        return conn.execute(select(teams.c.team_id)).scalar_one()


# -- the brokers' side ------------------------------------------------------------------


def rabbit_channel() -> tuple[Any, Any]:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", RABBIT_PORT))
    return connection, connection.channel()


@contextmanager
def broker_objects() -> Iterator[None]:
    """The bench's exchange and queue (RabbitMQ) and stream (NATS), removed after."""
    connection, channel = rabbit_channel()
    channel.exchange_declare(EXCHANGE, "direct", durable=True)
    for queue in (f"{EXCHANGE}-ours", f"{EXCHANGE}-loop"):
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, EXCHANGE, queue)
    connection.close()

    async def stream(add: bool) -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{NATS_PORT}")
        js = nc.jetstream()
        if add:
            await js.add_stream(name=STREAM, subjects=[f"{SUBJECT}.>"])
        else:
            await js.delete_stream(STREAM)
        await nc.close()

    asyncio.run(stream(True))
    try:
        yield
    finally:
        connection, channel = rabbit_channel()
        for queue in (f"{EXCHANGE}-ours", f"{EXCHANGE}-loop"):
            channel.queue_delete(queue)
        channel.exchange_delete(EXCHANGE)
        connection.close()
        asyncio.run(stream(False))


def connection_of(kind: str) -> dict[str, Any]:
    if kind == RABBITMQ:
        return {"host": "127.0.0.1", "port": RABBIT_PORT, "exchange": EXCHANGE}
    return {"host": "127.0.0.1", "port": NATS_PORT, "stream": STREAM}


def target_of(kind: str, who: str) -> str:
    return f"{EXCHANGE}-{who}" if kind == RABBITMQ else f"{SUBJECT}.{who}"


def loop_rabbitmq(bodies: list[bytes]) -> float:
    """The plain pika loop: one publish after another, each confirmed."""
    connection, channel = rabbit_channel()
    channel.confirm_delivery()
    started = time.perf_counter()
    for n, body in enumerate(bodies):
        channel.basic_publish(
            EXCHANGE,
            target_of(RABBITMQ, "loop"),
            body,
            pika.BasicProperties(
                content_type="application/json", delivery_mode=2, message_id=f"loop-{n}"
            ),
            mandatory=True,
        )
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed


def loop_nats(bodies: list[bytes]) -> float:
    """The plain nats-py loop: one JetStream publish after another, each acknowledged."""

    async def run() -> float:
        nc = await nats.connect(f"nats://127.0.0.1:{NATS_PORT}")
        js = nc.jetstream()
        started = time.perf_counter()
        for n, body in enumerate(bodies):
            await js.publish(
                target_of(NATS, "loop"), body, headers={"Nats-Msg-Id": f"loop-{RUN}-{n}"}
            )
        elapsed = time.perf_counter() - started
        await nc.close()
        return elapsed

    return asyncio.run(run())


# -- 1. throughput ----------------------------------------------------------------------


def churn(service: Service, count: int, prefix: str) -> None:
    """`count` messages: users deleted and restored (two announced events each)."""
    team = team_of(service)
    for n in range(max(1, count // 2)):
        user = service.users.create_user(CTX, team, client_user_id=f"{prefix}-{n}")
        service.users.delete_user(CTX, team, user.id)
        service.users.undo_deletion(CTX, team, user.id)


class Recorded:
    """The service's broker clients, each message's body kept as it is published (what
    the loop publishes after): a list append beside each publish."""

    def __init__(self, service: Service) -> None:
        self.bodies: list[bytes] = []
        self.acknowledged = 0
        real = service.publisher.connector

        def connector(target: Any, connect_to: str, timeout: float) -> Any:
            client = real(target, connect_to, timeout)
            recorded = self

            class Client:
                def publish(self, messages: Any, deadline: float) -> Any:
                    outcomes = client.publish(messages, deadline)
                    for message, outcome in zip(messages, outcomes, strict=True):
                        if outcome is not None and outcome.failure is None:
                            recorded.bodies.append(message.body)
                            recorded.acknowledged += 1
                    return outcomes

                def close(self) -> None:
                    client.close()

            return Client()

        service.publisher.connector = connector


def throughput(
    kind: str, messages: int, workdir: Path, database_url: str | None, run: int = 0
) -> dict[str, Any]:
    service = new_service(workdir, f"throughput-{kind}-{run}", database_url)
    try:
        team = team_of(service)
        service.event_destinations.create(
            CTX,
            team,
            "sandbox",
            kind=kind,
            connection=connection_of(kind),
            routes=[Route("user.", target_of(kind, "ours"))],
        )
        churn(service, messages, f"t-{kind}-{run}")
        recorded = Recorded(service)
        started = time.perf_counter()
        while service.jobs.dispatch_webhooks():
            pass
        ours = time.perf_counter() - started
        published = recorded.acknowledged
        bodies = recorded.bodies
    finally:
        service.close()
    baseline = loop_rabbitmq(bodies) if kind == RABBITMQ else loop_nats(bodies)
    return {
        "kind": kind,
        "messages": published,
        "not_published": 2 * max(1, messages // 2) - published,
        "ours_per_s": published / ours,
        "loop_per_s": len(bodies) / baseline,
    }


# -- 2. latency ------------------------------------------------------------------------


class Arrivals:
    """A consumer of the bench's queue or subject: when each user's message arrived."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.at: dict[str, float] = {}
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(30)

    def _note(self, body: bytes) -> None:
        self.at.setdefault(json.loads(body)["user_id"], time.time())

    def _run(self) -> None:
        if self.kind == RABBITMQ:
            connection, channel = rabbit_channel()
            self.ready.set()
            while not self.stop.is_set():
                for _method, _properties, body in channel.consume(
                    target_of(RABBITMQ, "ours"), auto_ack=True, inactivity_timeout=0.2
                ):
                    if body is None:
                        break
                    self._note(body)
            channel.cancel()
            connection.close()
            return

        async def run() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{NATS_PORT}")

            async def got(msg: Any) -> None:
                self._note(msg.data)

            # Core NATS sees every message JetStream stores on the subject as it arrives.
            await nc.subscribe(target_of(NATS, "ours"), cb=got)
            await nc.flush()
            self.ready.set()
            while not self.stop.is_set():
                await asyncio.sleep(0.05)
            await nc.close()

        asyncio.run(run())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def latency(kind: str, events: int, workdir: Path, database_url: str | None) -> dict[str, Any]:
    service = new_service(workdir, f"latency-{kind}", database_url)
    arrivals = Arrivals(kind)
    scheduler = start_scheduler(service)
    committed: dict[str, float] = {}
    try:
        team = team_of(service)
        service.event_destinations.create(
            CTX,
            team,
            "sandbox",
            kind=kind,
            connection=connection_of(kind),
            routes=[Route("user.deleted", target_of(kind, "ours"))],
        )
        for n in range(events):
            user = service.users.create_user(CTX, team, client_user_id=f"lat-{kind}-{n}")
            deleted = service.users.delete_user(CTX, team, user.id)
            committed[str(user.id)] = deleted.modified_on.timestamp()
            time.sleep(0.01)
        deadline = time.monotonic() + 120
        while len(arrivals.at) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        scheduler.shutdown(wait=True)
        arrivals.close()
        service.close()
    delays = sorted((arrivals.at[u] - t) * 1000 for u, t in committed.items() if u in arrivals.at)
    return {
        "kind": kind,
        "events": len(committed),
        "arrived": len(delays),
        "median_ms": statistics.median(delays),
        "p99_ms": delays[min(len(delays) - 1, int(len(delays) * 0.99))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--latency-events", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5, help="throughput pairs per kind")
    parser.add_argument("--database-url", default=None, help="PostgreSQL (default: SQLite)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp, broker_objects():
        workdir = Path(tmp)

        def url() -> Any:
            if args.database_url is None:
                return contextmanager(lambda: iter([None]))()
            return fresh_schema(args.database_url, "bench_destinations")

        print("\n1. Throughput with confirmations (messages per second)")
        print(f"{'kind':<10}{'messages':>10}{'ours/s':>10}{'loop/s':>10}{'ratio':>8}")
        for kind in (RABBITMQ, NATS):
            ratios = []
            for run in range(args.repeat):
                with url() as database_url:
                    found = throughput(kind, args.messages, workdir, database_url, run)
                ratio = found["ours_per_s"] / found["loop_per_s"]
                ratios.append(ratio)
                ok = ok and found["not_published"] == 0
                print(
                    f"{kind:<10}{found['messages']:>10}{found['ours_per_s']:>10.0f}"
                    f"{found['loop_per_s']:>10.0f}{ratio:>8.2f}"
                )
            # One pair swings widely (the broker's pace as much as ours): the median of
            # pairs, each ours then its loop, is the figure.
            median = statistics.median(ratios)
            ok = ok and median >= 0.5
            print(f"{kind:<10}{'median of ' + str(len(ratios)):>30}{median:>8.2f}")
        print("\n2. Commit to arrival at a consumer (the scheduler running, as in serve)")
        print(f"{'kind':<10}{'events':>8}{'arrived':>9}{'median ms':>11}{'p99 ms':>9}")
        for kind in (RABBITMQ, NATS):
            with url() as database_url:
                found = latency(kind, args.latency_events, workdir, database_url)
            ok = ok and found["median_ms"] < 200 and found["arrived"] == found["events"]
            print(
                f"{kind:<10}{found['events']:>8}{found['arrived']:>9}"
                f"{found['median_ms']:>11.1f}{found['p99_ms']:>9.1f}"
            )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    print("targets (>= 50% of the loop, median < 200 ms):", "pass" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
