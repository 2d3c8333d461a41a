"""Several `healthledger serve` processes on one PostgreSQL database behave like one
(issue 15, ADR 0019): two processes, each on its own ports, under concurrent load through
both, with a real local webhook receiver.

- The same client_user_id created through both at once yields exactly one user.
- Every due user is erased exactly once (one `Erased` event each).
- Every webhook delivery is created once per endpoint and event and posted at least
  once with its stable id; duplicates stay under 1% while no process dies.
- Killed with SIGKILL mid-load, ten times, one process after the other: nothing
  acknowledged is lost, nothing is half written (the hash chain verifies, a rebuild of
  the read models changes nothing), and the survivor finishes the dead one's leased
  webhook deliveries once their lease has expired, not before; each message posted
  twice is one that a dead process held.
- `serve --workers 2` serves the team API from two processes on one port and replaces
  a worker that dies; on SQLite it is refused.
- Historical pulls run exactly once (issue 30), on PostgreSQL and on SQLite (two `serve`
  processes on one file): hundreds of demo connections, each of several resources, made
  while both processes' pull workers run; every pull is started once, succeeds once, and
  is announced once (one `historical.data.*.created` message per feed and resource), and
  again with one of the processes killed with SIGKILL midway (see
  `test_pulls_run_once_across_processes_and_a_kill`).

PostgreSQL only (skipped without HEALTHLEDGER_TEST_POSTGRES_URL), except the refusal and
the pulls' test on SQLite. Leases, grace periods and sweep intervals are short, so that
it stays bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import sqlalchemy as sa
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.persistence.engine.schema import (
    READ_MODEL_TABLES,
    pending_erasures,
    resource_feeds,
    stored_events,
    teams,
    tracking,
    webhook_deliveries,
    webhook_delivery_leases,
)
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks.dispatcher import TRACKING_NAME
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.context import CommandContext
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deliveries import WebhookDelivery
from sqlalchemy import func, select

from tests.conftest import POSTGRES_URL, postgres_schema
from tests.delivery_rows import with_types
from tests.e2e.servers import KEY, free_port
from tests.receivers import Receiver, http_receiver

postgres_only = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs HEALTHLEDGER_TEST_POSTGRES_URL"
)

KILLS = 10
# Load through both processes before each kill (seconds), from this many client threads.
LOAD_BEFORE_KILL = 1.0
LOAD_THREADS = 2
# Each load thread's pause between one user's requests and the next user's: unpaced, the
# two threads kept both cores busy, and each successor took ~14 s to start beside them
# (the kills' phase was most of the test's 3 to 5 minutes).
LOAD_PAUSE = 0.2
# Webhook sends: a receiver that takes a while, so that kills find leases held.
RECEIVER_SECONDS = 0.3
TIMEOUTS = {
    "HEALTHLEDGER_GRACE_PERIOD": "2",
    "HEALTHLEDGER_ERASURE_SWEEP_INTERVAL": "0.5",
    "HEALTHLEDGER_WEBHOOK_POLL_INTERVAL": "0.3",
    "HEALTHLEDGER_WEBHOOK_TIMEOUT": "2",
    "HEALTHLEDGER_WEBHOOK_LEASE": "8",
    "HEALTHLEDGER_PULL_POLL_INTERVAL": "0.5",
    "HEALTHLEDGER_PULL_LEASE": "5",
    "HEALTHLEDGER_ERASURE_CLAIM_LEASE": "5",
    # Two processes and this test on a server that other suites share.
    "HEALTHLEDGER_DATABASE_POOL_SIZE": "4",
    "HEALTHLEDGER_LOG_LEVEL": "warning",
}
CTX = CommandContext(actor="test:multi-process", request_id="req-multi-process")
DEMO = "freestyle_libre"


def kill_all(processes: list[ServeProcess]) -> None:
    for process in processes:
        if process.process is not None and process.process.poll() is None:
            process.process.kill()
            process.process.wait(timeout=10)


@dataclass
class ServeProcess:
    """One `healthledger serve` on its own ports; started again on the same ports."""

    name: str
    env: dict[str, str]
    workdir: Path
    base: str
    args: tuple[str, ...] = ()
    process: subprocess.Popen[str] | None = None
    starts: int = 0
    logs: list[Path] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        log = self.workdir / f"{self.name}-{self.starts}.log"
        self.logs.append(log)
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "healthledger.adapters.cli", "serve", *self.args],
                cwd=self.workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None and self._lost_its_ports():
                continue
            assert self.process.poll() is None, self.output()
            try:
                # Answered without a key: the app is up (and reads nothing to say so).
                if httpx.get(f"{self.base}/v2/user", timeout=1).status_code == 401:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{self.name} did not start"
            time.sleep(0.05)

    def _lost_its_ports(self) -> bool:
        """A port `free_port` found free was taken before this process bound it (another
        test's server, or an outgoing connection's ephemeral port: the load makes many):
        started again, once or twice, on ports found free now. Whoever reads `base` after
        `wait_ready` meets the new ones."""
        latest = self.logs[-1].read_text() if self.logs and self.logs[-1].exists() else ""
        if "address already in use" not in latest or self.starts >= 3:
            return False
        port, ports = free_ports()
        self.env = {**self.env, **ports}
        self.base = f"http://127.0.0.1:{port}"
        self.start()
        return True

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> int:
        """SIGINT, as an operator's Ctrl-C; the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)

    def output(self) -> str:
        return "\n".join(log.read_text() for log in self.logs if log.exists())


def serve_env(database_url: str, workdir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **TIMEOUTS,
        "HEALTHLEDGER_DATABASE_URL": database_url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(workdir / "keys" / "master.key"),
        **extra,
    }


def free_ports() -> tuple[int, dict[str, str]]:
    """The team API's port and the settings of three ports found free now."""
    port, management_port, link_port = free_port(), free_port(), free_port()
    return port, {
        "HEALTHLEDGER_TEAM_API_PORT": str(port),
        "HEALTHLEDGER_MANAGEMENT_API_PORT": str(management_port),
        "HEALTHLEDGER_LINK_PORT": str(link_port),
        "HEALTHLEDGER_LINK_URL": f"http://127.0.0.1:{link_port}",
    }


def serve_process(name: str, database_url: str, workdir: Path, *args: str) -> ServeProcess:
    port, ports = free_ports()
    env = serve_env(database_url, workdir, **ports)
    return ServeProcess(name, env, workdir, f"http://127.0.0.1:{port}", args)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh schema at the head of the migrations, for this test alone."""
    admin: sa.Engine = request.getfixturevalue("postgres_admin")
    with postgres_schema(admin, request.getfixturevalue("postgres_migrations_sql")) as url:
        yield url


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        running.slow_seconds = RECEIVER_SECONDS
        yield running


@contextmanager
def observer(database_url: str, workdir: Path) -> Iterator[Service]:
    """The test's own view of the database (the composition root, no scheduler): for
    setting up the endpoint and for reading what the processes wrote."""
    settings = Settings(
        database_url=database_url,
        master_key_file=workdir / "keys" / "master.key",
        database_pool_size=2,
    )
    service = build_service(settings)
    try:
        yield service
    finally:
        service.close()


# -- the load: through both processes, acknowledged answers kept --------------------------


class Load:
    """Users created, connected and deleted through whichever process answers; what was
    acknowledged (a 2xx, or an answer that says the work was already done) is kept."""

    def __init__(self, processes: list[ServeProcess], key: str) -> None:
        self.processes = processes
        self.headers = {"x-service-api-key": key}
        self.lock = threading.Lock()
        # client_user_id -> user_id, for every create acknowledged.
        self.created: dict[str, str] = {}
        self.connected: set[str] = set()
        self.deleted: set[str] = set()
        # Users whose deletion was sent but never answered: either state is right.
        self.maybe_deleted: set[str] = set()
        self.stopping = threading.Event()

    def call(
        self, client: httpx.Client, first: int, method: str, path: str, **kwargs: Any
    ) -> httpx.Response | None:
        """The request through process `first`, else through the other one (the first is
        being killed); None if neither answered."""
        with self.lock:
            processes = list(self.processes)
        for attempt in range(4):
            process = processes[(first + attempt) % len(processes)]
            try:
                return client.request(
                    method, f"{process.base}{path}", headers=self.headers, **kwargs
                )
            except httpx.TransportError:
                time.sleep(0.2)
        return None

    def create(self, client: httpx.Client, side: int, client_user_id: str) -> str | None:
        answer = self.call(
            client, side, "POST", "/v2/user", json={"client_user_id": client_user_id}
        )
        if answer is None:
            return None
        body = answer.json()
        if answer.status_code == 200:
            user_id = body["user_id"]
        elif answer.status_code == 400 and isinstance(body["detail"], dict):
            # Created by an earlier try whose answer was lost: the 400 names the user.
            user_id = body["detail"]["user_id"]
        else:
            raise AssertionError(f"create answered {answer.status_code}: {answer.text}")
        with self.lock:
            self.created[client_user_id] = user_id
        return str(user_id)

    def connect(self, client: httpx.Client, side: int, user_id: str) -> None:
        answer = self.call(
            client,
            side,
            "POST",
            "/v2/link/connect/demo",
            json={"user_id": user_id, "provider": DEMO},
        )
        if answer is not None and answer.status_code == 200:
            with self.lock:
                self.connected.add(user_id)

    def delete(self, client: httpx.Client, side: int, user_id: str) -> None:
        with self.lock:
            self.maybe_deleted.add(user_id)
        answer = self.call(client, side, "DELETE", f"/v2/user/{user_id}")
        if answer is None:
            return
        # A 404 after a lost answer: the first try deleted it (no one else deletes).
        assert answer.status_code in (200, 404), answer.text
        with self.lock:
            self.deleted.add(user_id)

    def run(self, worker: int) -> None:
        number = 0
        with httpx.Client(timeout=30) as client:
            while not self.stopping.is_set():
                number += 1
                side = (worker + number) % 2
                user_id = self.create(client, side, f"load-{worker}-{number}")
                if user_id is None:
                    continue
                if number % 3 == 0:
                    self.connect(client, 1 - side, user_id)
                if number % 2 == 0:
                    self.delete(client, 1 - side, user_id)
                self.stopping.wait(LOAD_PAUSE)


# -- reading the database ---------------------------------------------------------------


def scalar(service: Service, query: Any) -> Any:
    with service.db.read() as conn:
        return conn.execute(query).scalar()


def outstanding(service: Service) -> str:
    """What is still due ("" when nothing is): deleted users not yet erased, pulls not
    finished, the log not yet followed to its end, deliveries not yet sent or dropped."""
    feeds = resource_feeds.c
    with service.db.read() as conn:
        erasures = conn.execute(select(func.count()).select_from(pending_erasures)).scalar()
        pulls = conn.execute(
            select(func.count()).where(feeds.status.in_(("scheduled", "in_progress", "retrying")))
        ).scalar()
        # The follower's position is its highest row (as `max_tracking_id` reads it): two
        # processes' rounds committed at once may each leave theirs, in no given order.
        t = tracking.c
        position = conn.execute(
            select(func.max(t.notification_id)).where(t.application_name == TRACKING_NAME)
        ).scalar()
        last = conn.execute(select(func.max(stored_events.c.notification_id))).scalar()
        pending = conn.execute(
            select(func.count()).where(webhook_deliveries.c.status == "pending")
        ).scalar()
    left = {
        "erasures": erasures,
        "pulls": pulls,
        "events not followed": (last or 0) - (position or 0),
        "deliveries": pending,
    }
    return ", ".join(f"{count} {what}" for what, count in left.items() if count)


def wait_settled(service: Service, processes: list[ServeProcess], timeout: float = 90) -> None:
    """Until nothing is due, twice in a row a second apart (an erasure just committed is
    followed by its announcement)."""
    deadline = time.monotonic() + timeout
    for _ in range(2):
        while left := outstanding(service):
            if time.monotonic() > deadline:
                logs = "\n".join(p.output()[-3000:] for p in processes)
                raise AssertionError(f"still due after {timeout} s: {left}\n{logs}")
            time.sleep(0.25)
        time.sleep(1.0)


def erased_counts(service: Service) -> Counter[str]:
    e = stored_events.c
    with service.db.read() as conn:
        rows = conn.execute(
            select(e.originator_id, func.count())
            .where(e.topic == User.Erased.TOPIC)
            .group_by(e.originator_id)
        ).all()
    return Counter({str(originator): count for originator, count in rows})


def delivery_rows(service: Service) -> Sequence[Any]:
    with service.db.read() as conn:
        return with_types(service, conn.execute(select(webhook_deliveries)).all())


def dead_leases(service: Service, pid: int) -> dict[str, Any]:
    """The leases a killed process held at its death: delivery id -> its expiry."""
    lease = webhook_delivery_leases.c
    with service.db.read() as conn:
        rows = conn.execute(
            select(lease.delivery_id, lease.expires_at).where(lease.holder.like(f"{pid}-%"))
        ).all()
    return {str(row.delivery_id): row.expires_at for row in rows}


def read_models(service: Service) -> dict[str, list[tuple[Any, ...]]]:
    with service.db.read() as conn:
        return {
            table.name: sorted((tuple(row) for row in conn.execute(select(table)).all()), key=repr)
            for table in READ_MODEL_TABLES
        }


def duplicates(receiver: Receiver) -> tuple[Counter[str], int]:
    """Message ids posted more than once (and how many times), and the distinct ids."""
    posts = Counter(r.headers["webhook-id"] for r in receiver.received)
    return Counter({m: n for m, n in posts.items() if n > 1}), len(posts)


def live_users(client: httpx.Client, base: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    """Every user the listing shows, page by page."""
    users: list[dict[str, Any]] = []
    while True:
        page = client.get(
            f"{base}/v2/user", params={"offset": len(users), "limit": 500}, headers=headers
        ).json()
        users.extend(page["users"])
        if len(users) >= page["total"] or not page["users"]:
            return users


def check_deliveries(service: Service, receiver: Receiver) -> Sequence[Any]:
    """Every delivery settled: succeeded ones received under their id, dropped ones only
    for an erased user and never received; each (endpoint, message) once."""
    rows = delivery_rows(service)
    received = {r.headers["webhook-id"] for r in receiver.received}
    assert len({(r.endpoint_id, r.message_id) for r in rows}) == len(rows)
    for row in rows:
        assert row.status in ("succeeded", "dropped"), row
        if row.status == "succeeded":
            assert row.message_id in received, row
    # Nothing posted that is not a delivery.
    assert received <= {r.message_id for r in rows}
    return rows


def announced_once(service: Service, rows: Sequence[Any]) -> None:
    """A delivery for each erasure in the log (the endpoint takes every event type), one
    at most for each deletion, and no more. A deletion followed only after its user was
    erased announces nothing (nothing of the user is left to announce); the erasure's
    `user.erased` is always announced."""
    e = stored_events.c

    def sources(topic: str) -> set[tuple[Any, int]]:
        with service.db.read() as conn:
            found = conn.execute(
                select(e.originator_id, e.originator_version).where(e.topic == topic)
            ).all()
        return {(row.originator_id, row.originator_version) for row in found}

    announced = Counter((r.source_id, r.source_version, r.event_type) for r in rows)
    assert set(announced.values()) == {1}
    erasures = {(s, v) for s, v, kind in announced if kind == "user.erased"}
    deletions = {(s, v) for s, v, kind in announced if kind == "user.deleted"}
    assert erasures == sources(User.Erased.TOPIC)
    assert deletions <= sources(User.Deleted.TOPIC)


# -- the tests ----------------------------------------------------------------------------


@postgres_only
def test_two_processes_under_load_and_ten_kills_behave_like_one(
    pg_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    began = time.monotonic()
    (tmp_path / "keys").mkdir()
    one = serve_process("one", pg_url, tmp_path)
    two = serve_process("two", pg_url, tmp_path)
    # Every process started, for the clean-up; `load.processes` are the two serving.
    processes = [one, two]
    with ExitStack() as cleanup:
        cleanup.callback(kill_all, processes)
        # Started together on the empty database: exactly one of them makes the first team
        # and prints its key (the bootstrap's organization id is fixed).
        one.start()
        two.start()
        one.wait_ready()
        two.wait_ready()
        output = one.output() + two.output()
        (key,) = [m.group(1) for line in output.splitlines() if (m := KEY.search(line))]
        observing = cleanup.enter_context(observer(pg_url, tmp_path))
        team = scalar(observing, select(teams.c.team_id))
        observing.webhooks.create(CTX, team, "sandbox", url=receiver.url("slow"))
        load = Load([one, two], key)

        # 1. The same client_user_id through both processes at once: one user each.
        contested = [f"contested-{n}" for n in range(30)]
        with ThreadPoolExecutor(max_workers=12) as pool, httpx.Client(timeout=30) as client:
            answers = list(
                pool.map(
                    lambda job: client.post(
                        f"{load.processes[job[1]].base}/v2/user",
                        json={"client_user_id": job[0]},
                        headers=load.headers,
                    ),
                    [(cuid, side) for cuid in contested for side in (0, 1)],
                )
            )
            winners: dict[str, set[str]] = {}
            for (cuid, _side), answer in zip(
                [(c, s) for c in contested for s in (0, 1)], answers, strict=True
            ):
                body = answer.json()
                if answer.status_code == 200:
                    winners.setdefault(cuid, set()).add(body["user_id"])
                else:
                    assert answer.status_code in (400, 409), answer.text
                    if answer.status_code == 400:
                        winners.setdefault(cuid, set()).add(body["detail"]["user_id"])
            assert {cuid: len(ids) for cuid, ids in winners.items()} == dict.fromkeys(contested, 1)
            by_cuid = Counter(
                u["client_user_id"] for u in live_users(client, one.base, load.headers)
            )
            assert all(by_cuid[cuid] == 1 for cuid in contested)
            # Half of them deleted through one, half through two; they fall due at once.
            contested_ids = [next(iter(winners[cuid])) for cuid in contested]
            list(
                pool.map(
                    lambda job: load.delete(client, job[0] % 2, job[1]),
                    list(enumerate(contested_ids)),
                )
            )
        wait_settled(observing, load.processes)
        erased = erased_counts(observing)
        assert {user: erased[user] for user in contested_ids} == dict.fromkeys(contested_ids, 1)
        rows = check_deliveries(observing, receiver)
        announced_once(observing, rows)
        doubled_before_kills, distinct = duplicates(receiver)
        again = sum(doubled_before_kills.values()) - len(doubled_before_kills)
        assert distinct >= 60 and again < 0.01 * distinct

        contested_seconds = time.monotonic() - began
        # 2. Load through both, one of them killed mid-load ten times, alternately. The
        # next process to take the dead one's place starts beforehand, so that its start
        # overlaps the load instead of adding to the test's time.
        threads = [threading.Thread(target=load.run, args=(n,)) for n in range(LOAD_THREADS)]
        for thread in threads:
            thread.start()
        # Per kill: when, whose, and the leases the dead process held.
        kills: list[tuple[datetime, int, dict[str, Any]]] = []
        try:
            for kill in range(KILLS):
                successor = serve_process(f"successor-{kill}", pg_url, tmp_path)
                processes.append(successor)
                successor.start()
                time.sleep(LOAD_BEFORE_KILL)
                successor.wait_ready()
                victim = load.processes[kill % 2]
                victim.kill()
                kills.append((datetime.now(UTC), victim.pid, dead_leases(observing, victim.pid)))
                with load.lock:
                    load.processes[kill % 2] = successor
        finally:
            load.stopping.set()
            for thread in threads:
                thread.join(timeout=60)
        killing_seconds = time.monotonic() - began - contested_seconds
        # The kills are over: the receiver need no longer hold posts long enough for a kill
        # to find leases held, and the load's backlog drains without the wait.
        receiver.slow_seconds = 0.0
        # The load's messages waited for the slow receiver (RECEIVER_SECONDS each) until
        # now: how many are left grows with the time the ten successors took to start, so
        # the wait may be longer than between phases (87 s of 90 were needed at 8a93b11 on
        # the CI machine, with the receiver slow to the end).
        wait_settled(observing, load.processes, timeout=300)

        # Nothing acknowledged is lost: live users answer, deleted ones were erased once.
        with httpx.Client(timeout=30) as client:
            for cuid, user_id in load.created.items():
                if user_id in load.maybe_deleted:
                    continue
                answer = client.get(
                    f"{load.processes[1].base}/v2/user/{user_id}", headers=load.headers
                )
                assert answer.status_code == 200 and answer.json()["client_user_id"] == cuid
            for user_id in load.connected - load.maybe_deleted:
                pulls = client.get(
                    f"{load.processes[0].base}/v2/introspect/historical_pull",
                    params={"user_id": user_id},
                    headers=load.headers,
                ).json()["data"]
                statuses = {
                    status["status"]
                    for entry in pulls
                    for provider in entry["provider"].values()
                    for status in provider["pulled"].values()
                }
                assert statuses == {"success"}, pulls
            live = {u["user_id"] for u in live_users(client, load.processes[0].base, load.headers)}
        assert len(load.created) > 20 and len(load.deleted) > 10
        assert live == set(load.created.values()) - load.maybe_deleted
        erased = erased_counts(observing)
        assert set(erased.values()) == {1}
        assert load.deleted <= set(erased) <= load.maybe_deleted | set(contested_ids)

        # Deliveries: each once, settled; the dead ones' leased work finished after their
        # lease, by another process; every message posted twice was one a dead one held.
        rows = check_deliveries(observing, receiver)
        announced_once(observing, rows)
        held = {delivery_id for _at, _pid, leases in kills for delivery_id in leases}
        assert held, "no kill found a lease held: the load was too light to test takeover"
        by_id = {str(r.delivery_id): r for r in rows}
        for killed_at, pid, leases in kills:
            for delivery_id, expires_at in leases.items():
                # Finished by another process, which took it only once the lease ended.
                assert by_id[delivery_id].status in ("succeeded", "dropped")
                taken_early = [
                    e
                    for e in observing.ledger.events.get(UUID(delivery_id))
                    if isinstance(e, WebhookDelivery.AttemptMade)
                    and not e.request_id.startswith(f"send-{pid}-")
                    and killed_at <= e.timestamp < expires_at
                ]
                assert taken_early == [], delivery_id
        doubled, distinct = duplicates(receiver)
        held_messages = {by_id[d].message_id for d in held}
        assert set(doubled) - set(doubled_before_kills) <= held_messages
        print(
            f"\n{len(load.created)} users created under load, {distinct} messages, "
            f"{sum(doubled.values()) - len(doubled)} posted again after {KILLS} kills "
            f"({len(held)} deliveries leased by a killed process); contested phase "
            f"{contested_seconds:.0f} s, kills {killing_seconds:.0f} s, settled at "
            f"{time.monotonic() - began:.0f} s"
        )

        # Nothing half written: the chain verifies, and a rebuild changes no read model.
        assert [process.stop() for process in load.processes] == [0, 0]
        before = read_models(observing)
        env = serve_env(pg_url, tmp_path)
        for command in (["verify"], ["rebuild"]):
            done = subprocess.run(
                [sys.executable, "-m", "healthledger.adapters.cli", *command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stdout + done.stderr
        assert read_models(observing) == before


def children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def team_api_workers(pid: int) -> set[int]:
    """The primary's worker processes (not multiprocessing's resource tracker)."""
    return {
        child
        for child in children(pid)
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    }


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@postgres_only
def test_serve_with_two_workers_shares_one_port_and_replaces_a_dead_worker(
    pg_url: str, tmp_path: Path
) -> None:
    (tmp_path / "keys").mkdir()
    primary = serve_process("workers", pg_url, tmp_path, "--workers", "2")
    primary.start()
    try:
        primary.wait_ready()
        (key,) = [m.group(1) for line in primary.output().splitlines() if (m := KEY.search(line))]
        headers = {"x-service-api-key": key}
        wait_for(lambda: len(team_api_workers(primary.pid)) == 2)
        first = team_api_workers(primary.pid)

        def create_many(prefix: str) -> None:
            with httpx.Client(timeout=30) as client:
                for n in range(10):
                    answer = client.post(
                        f"{primary.base}/v2/user",
                        json={"client_user_id": f"{prefix}-{n}"},
                        headers=headers,
                    )
                    assert answer.status_code == 200, answer.text

        create_many("before")
        # A worker killed outright is replaced; the port keeps answering meanwhile.
        dead = min(first)
        os.kill(dead, signal.SIGKILL)
        wait_for(lambda: dead not in team_api_workers(primary.pid))
        create_many("during")
        wait_for(lambda: len(team_api_workers(primary.pid)) == 2)
        assert "stopped (exit code -9); starting another" in primary.output()
        create_many("after")
        with httpx.Client(timeout=30) as client:
            listed = client.get(f"{primary.base}/v2/user", params={"limit": 100}, headers=headers)
        assert listed.json()["total"] == 30
        workers = team_api_workers(primary.pid)
        assert primary.stop() == 0
        # Every worker stopped with the primary.
        for pid in workers:
            assert (
                not Path(f"/proc/{pid}").exists()
                or b"zombie" in Path(f"/proc/{pid}/status").read_bytes().lower()
            )
    finally:
        if primary.process is not None and primary.process.poll() is None:
            primary.process.kill()


def test_serve_refuses_several_workers_on_sqlite(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    env = serve_env(f"sqlite:///{tmp_path / 'db' / 'ledger.db'}", tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "healthledger.adapters.cli", "serve", "--workers", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--workers 2 needs PostgreSQL" in done.stderr and "one writer" in done.stderr
    assert not (tmp_path / "db").exists()  # refused before touching anything


# -- historical pulls: exactly once across processes and a kill (issue 30) -----------------

# Connections per phase (each of PULL_RESOURCES: their pulls run together, so that two
# workers claiming one connection's pulls at once is the common case, not a rare one).
# 150 pulls a phase: both processes take part and the kill finds pulls in progress, at
# half the CPU of the 100 connections this began with.
PULL_CONNECTIONS = 50
PULL_PROVIDER = "oura"
PULL_RESOURCES = ("activity", "body", "sleep")
# Long enough that no live process is overtaken on a loaded machine (a connection's pulls
# take a fraction of a second), short enough to wait for after the kill.
PULL_LEASE_SECONDS = 10
PULL_TIMEOUTS = {
    "HEALTHLEDGER_PULL_LEASE": str(PULL_LEASE_SECONDS),
    "HEALTHLEDGER_PULL_POLL_INTERVAL": "0.3",
    "HEALTHLEDGER_WEBHOOK_POLL_INTERVAL": "0.3",
}


@pytest.fixture(params=["sqlite", "postgres"])
def any_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The pulls' test on each database that runs several processes: PostgreSQL, and
    SQLite (several processes on one file; only `--workers` is refused there)."""
    if request.param == "sqlite":
        (tmp_path / "db").mkdir()
        return f"sqlite:///{tmp_path / 'db' / 'ledger.db'}"
    if POSTGRES_URL is None:
        pytest.skip("needs HEALTHLEDGER_TEST_POSTGRES_URL")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def fast_receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def connect_many(service: Service, team: UUID, prefix: str, count: int) -> list[UUID]:
    """Users, each with a demo connection of PULL_RESOURCES, made by the test's own
    service (their pulls are picked up by the processes' pull workers); the feeds' ids."""
    feeds: list[UUID] = []
    for n in range(count):
        user = service.users.create_user(CTX, team, client_user_id=f"{prefix}-{n}")
        connected = service.connections.connect_demo(
            CTX, team, user.id, PULL_PROVIDER, PULL_RESOURCES
        )
        feeds.extend(feed.id for feed in connected.feeds)
    return feeds


def feed_events(service: Service, feed_ids: Sequence[UUID]) -> dict[UUID, list[Any]]:
    return {feed_id: list(service.ledger.events.get(feed_id)) for feed_id in feed_ids}


def started_by(event: Any) -> int:
    """The process that recorded a PullStarted: its request id is pull-<pid>-<holder>-<n>."""
    prefix, pid, *_ = event.request_id.split("-")
    assert prefix == "pull", event.request_id
    return int(pid)


def historical_messages(service: Service, receiver: Receiver) -> dict[UUID, Counter[str]]:
    """Per feed (the announced stream: one connection's resource), the historical
    messages the receiver got: message id -> times posted."""
    rows = {r.message_id: r for r in delivery_rows(service)}
    found: dict[UUID, Counter[str]] = {}
    for received in receiver.received:
        row = rows[received.headers["webhook-id"]]
        assert row.event_type.startswith("historical."), row
        found.setdefault(row.source_id, Counter())[row.message_id] += 1
    return found


def in_progress_by(service: Service, pid: int) -> list[UUID]:
    """The pulls in progress whose attempt the process started."""
    f = resource_feeds.c
    with service.db.read() as conn:
        running = list(conn.execute(select(f.feed_id).where(f.status == "in_progress")).scalars())
    held = []
    for feed_id in running:
        *_, last = service.ledger.events.get(feed_id)
        if isinstance(last, ResourceFeed.PullStarted) and started_by(last) == pid:
            held.append(feed_id)
    return held


def ended_count(service: Service) -> int:
    """The feeds whose pull ended (succeeded or failed), of every phase."""
    f = resource_feeds.c
    with service.db.read() as conn:
        return conn.execute(
            select(func.count()).where(f.status.in_(("success", "failure")))
        ).scalar_one()


def starts_by(service: Service) -> Counter[int]:
    """How many PullStarted each process recorded, over every feed."""
    with service.db.read() as conn:
        feed_ids = list(conn.execute(select(resource_feeds.c.feed_id)).scalars())
    return Counter(
        started_by(e)
        for feed in feed_events(service, feed_ids).values()
        for e in feed
        if isinstance(e, ResourceFeed.PullStarted)
    )


def test_pulls_run_once_across_processes_and_a_kill(
    any_database: str, tmp_path: Path, fast_receiver: Receiver
) -> None:
    """Two `serve` processes pull the same due pulls. Phase 1, both alive: every pull is
    started exactly once, succeeds once and is announced by exactly one message, posted
    once. Phase 2, one process killed with SIGKILL while it holds pulls in progress: every
    pull still succeeds once and is announced by exactly one message id. A pull is
    started twice only where the killed process had started it and died before its end:
    the first PullStarted is the dead process's, the second the survivor's, recorded once
    the lease ran out (not before), and the success after it the survivor's. A message is
    posted twice only if it is a delivery the dead process held a lease on (at-least-once
    delivery across a crash, under one stable message id: ADR 0019)."""
    began = time.monotonic()
    (tmp_path / "keys").mkdir()
    one = serve_process("one", any_database, tmp_path)
    two = serve_process("two", any_database, tmp_path)
    for process in (one, two):
        process.env.update(PULL_TIMEOUTS)
    processes = [one, two]
    with ExitStack() as cleanup:
        cleanup.callback(kill_all, processes)
        one.start()
        two.start()
        one.wait_ready()
        two.wait_ready()
        observing = cleanup.enter_context(observer(any_database, tmp_path))
        team = scalar(observing, select(teams.c.team_id))
        observing.webhooks.create(
            CTX, team, "sandbox", url=fast_receiver.url("ok"), filter_types=["historical.*"]
        )
        started_seconds = time.monotonic() - began

        # Phase 1: both processes alive.
        first = connect_many(observing, team, "both", PULL_CONNECTIONS)
        wait_settled(observing, processes, timeout=240)
        events = feed_events(observing, first)
        starts = Counter(
            sum(isinstance(e, ResourceFeed.PullStarted) for e in feed) for feed in events.values()
        )
        successes = Counter(
            sum(isinstance(e, ResourceFeed.PullSucceeded) for e in feed) for feed in events.values()
        )
        by_process = Counter(
            started_by(e)
            for feed in events.values()
            for e in feed
            if isinstance(e, ResourceFeed.PullStarted)
        )
        messages = historical_messages(observing, fast_receiver)
        assert starts == {1: len(first)}, starts
        assert successes == {1: len(first)}, successes
        assert set(messages) == set(first)
        assert {feed: len(ids) for feed, ids in messages.items()} == dict.fromkeys(first, 1)
        posts_first = Counter(n for ids in messages.values() for n in ids.values())
        assert posts_first == {1: len(first)}, posts_first
        assert set(by_process) == {one.pid, two.pid}, by_process  # both took part
        phase_one_seconds = time.monotonic() - began - started_seconds

        # Phase 2: `two` is killed midway, while it holds pulls in progress. The
        # connections are made in a thread while the processes pull them: made first,
        # on a loaded machine their pulls could all end before the first look.
        second: list[UUID] = []
        making = threading.Thread(
            target=lambda: second.extend(connect_many(observing, team, "kill", PULL_CONNECTIONS))
        )
        making.start()
        cleanup.callback(making.join)
        deadline = time.monotonic() + 120
        # The victim is frozen (SIGSTOP) before its pulls are looked at, so a pull seen in
        # progress cannot end between the look and the kill (a demo pull takes about
        # 0.1 s: looking at a running victim lost that race now and then); thawed again
        # if it holds none. The first looks wait for some of the phase's pulls to end.
        looks = 0
        while True:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"the victim never held a pull in progress: {looks} looks, "
                    f"{ended_count(observing) - len(first)} of the phase's pulls ended, "
                    f"started by process {dict(starts_by(observing))} "
                    f"(one {one.pid}, two {two.pid})"
                )
            if ended_count(observing) - len(first) >= len(first) // 4:
                two.freeze()
                looks += 1
                if in_progress_by(observing, two.pid):
                    break
                two.thaw()
            time.sleep(0.02)
        two.kill()
        killed_at = datetime.now(UTC)
        # Read at once: once a lease's time has passed the survivor takes it over (the row
        # then names the survivor), and making the connections can outlast that on a
        # loaded machine (a CI run found no dead lease and three messages posted again).
        leases = dead_leases(observing, two.pid)
        making.join()
        assert len(second) == len(first)
        wait_settled(observing, [one], timeout=240)

        events = feed_events(observing, second)
        held = 0
        for feed_id, feed in events.items():
            kinds = [type(e).__name__ for e in feed]
            assert kinds.count("PullSucceeded") == 1 and "PullFailed" not in kinds, kinds
            started = [e for e in feed if isinstance(e, ResourceFeed.PullStarted)]
            assert len(started) in (1, 2), kinds
            if len(started) == 2:
                held += 1
                dead, taker = started
                assert kinds == [
                    "Created",
                    "PullScheduled",
                    "PullStarted",
                    "PullStarted",
                    "PullSucceeded",
                ], kinds
                assert started_by(dead) == two.pid and started_by(taker) == one.pid, feed_id
                assert dead.timestamp < killed_at
                assert taker.timestamp >= dead.timestamp + timedelta(seconds=PULL_LEASE_SECONDS)
                assert feed[-1].request_id == taker.request_id  # the survivor's success
        assert held >= 1, "no pull was taken over: the kill found none in progress"
        messages = historical_messages(observing, fast_receiver)
        assert set(messages) == set(first) | set(second)
        assert {feed: len(ids) for feed, ids in messages.items()} == dict.fromkeys(
            [*first, *second], 1
        )
        deliveries = delivery_rows(observing)
        rows = {str(r.delivery_id): r.message_id for r in deliveries}
        held_messages = {rows[delivery_id] for delivery_id in leases}
        # A post the receiver got but answered after the sender's timeout is recorded as a
        # failed attempt and posted again: at-least-once, like a crash's (ADR 0019).
        retried = {r.message_id for r in deliveries if r.attempts > 1}
        posted_again = {m for ids in messages.values() for m, n in ids.items() if n > 1}
        assert posted_again <= held_messages | retried, posted_again - held_messages - retried
        print(
            f"\n{any_database.split(':')[0]}: {len(first)} pulls with both processes "
            f"(started once each; {dict(by_process.most_common())} by process), "
            f"{len(second)} with a kill: {held} started twice (held by the dead process, "
            f"taken over after the lease), {len(posted_again)} messages posted again "
            f"({len(leases)} deliveries leased by the dead process); "
            f"start {started_seconds:.0f} s, phase 1 {phase_one_seconds:.0f} s, "
            f"total {time.monotonic() - began:.0f} s"
        )
        assert one.stop() == 0
