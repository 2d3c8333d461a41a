"""HTTP benchmark: create-user requests per second through uvicorn on SQLite.

Two real uvicorn servers on 127.0.0.1, each in its own subprocess: the team API
(`create_team_api(build_service(...))`) on a fresh SQLite file, and a bare FastAPI app in
the same run whose one sync POST endpoint inserts one row with SQLAlchemy into another
SQLite file with the same durability (WAL, synchronous=FULL, secure_delete=ON). The same
load generator sends the same number of `POST /v2/user` requests to each; the target is
at least 50% of the bare figure. It prints a report; `--check` makes a missed target (or
any failed request) exit 1.

    /work/venv/bin/python bench/http_api.py [--n 2000] [--workers 8] [--warmup 200] [--check]

Traffic goes to loopback only, is bounded in count (--n) and time (--timeout), and both
servers are stopped before the script exits.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    create_engine,
    event,
    insert,
)

TARGET = 0.50
PATH = "/v2/user"
API_KEY_HEADER = "x-service-api-key"
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


# -- the servers (run in subprocesses: `--serve KIND`) -----------------------------------


class CreateUser(BaseModel):
    """The bare app's body: the same JSON the team API takes (its other fields optional)."""

    client_user_id: str


def bare_app(database_url: str) -> FastAPI:
    """One sync POST endpoint that inserts one event-sized row with SQLAlchemy Core."""
    engine = create_engine(database_url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    metadata = MetaData()
    rows = Table(
        "rows",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("user_id", String(32), nullable=False, unique=True),
        Column("client_user_id", String(255), nullable=False),
        Column("version", Integer, nullable=False),
        Column("state", LargeBinary, nullable=False),
        Column("created_on", DateTime, nullable=False),
    )
    metadata.create_all(engine)
    state = os.urandom(300)  # about the size of a User.Created event
    # One writer at a time, as the service's own Database does: without it the threadpool's
    # writers would meet SQLite's busy handler, which sleeps, and the baseline would be
    # slower than a sensible bare app is.
    write_lock = threading.Lock()

    app = FastAPI()

    @app.post(PATH)
    def create_user(body: CreateUser) -> dict[str, Any]:
        user_id = uuid.uuid4().hex
        created_on = datetime.now(UTC).replace(tzinfo=None)
        with write_lock, engine.begin() as conn:
            conn.execute(
                insert(rows).values(
                    user_id=user_id,
                    client_user_id=body.client_user_id,
                    version=1,
                    state=state,
                    created_on=created_on,
                )
            )
        return {"user_id": user_id, "client_user_id": body.client_user_id}

    return app


def serve(kind: str, fd: int, database_url: str, master_key_file: str | None) -> None:
    """Serve `kind` on the listening socket `fd` until standard input closes."""
    close: Any = None
    if kind == "service":
        from healthledger.adapters.composition import build_service
        from healthledger.adapters.http.team_api import create_team_api
        from healthledger.adapters.settings import Settings

        assert master_key_file is not None
        service = build_service(
            Settings(database_url=database_url, master_key_file=Path(master_key_file))
        )
        app = create_team_api(service)
        close = service.close
    else:
        app = bare_app(database_url)
    # Same server settings for both; no access log, which would cost both sides alike and
    # measure the terminal, not the app.
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    # The parent stops us by closing our stdin: a clean shutdown that also happens if the
    # parent dies, so no server outlives its benchmark.
    def wait_for_parent() -> None:
        sys.stdin.read()
        server.should_exit = True

    threading.Thread(target=wait_for_parent, daemon=True).start()
    try:
        # The parent bound the socket (port 0: a free port, no race); uvicorn listens on it.
        server.run(sockets=[socket.socket(fileno=fd)])
    finally:
        if close is not None:
            close()


@dataclass
class Server:
    kind: str
    process: subprocess.Popen[bytes]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float | None:
        """User + system CPU the server process used so far (Linux /proc), else None."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        # Fields 14 and 15 of stat (utime, stime), counted after "pid (comm)".
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(kind: str, database_url: str, master_key_file: Path | None = None) -> Server:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, "--fd"]
    command += [str(sock.fileno()), "--database-url", database_url]
    if master_key_file is not None:
        command += ["--master-key-file", str(master_key_file)]
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, pass_fds=[sock.fileno()])
    finally:
        sock.close()  # the child holds its own copy
    server = Server(kind, process, port)
    try:
        _wait_until_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_ready(server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(f"the {server.kind} server exited during startup")
            try:
                client.get("/")  # any answer (a 404) means uvicorn is serving
                return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"the {server.kind} server was not ready in {READY_TIMEOUT}s")


# -- the load ----------------------------------------------------------------------------


@dataclass
class Load:
    kind: str
    requested: int
    sent: int
    seconds: float
    statuses: Counter[str]
    server_cpu: float | None
    client_cpu: float

    @property
    def ok(self) -> int:
        return sum(count for status, count in self.statuses.items() if status.startswith("2"))

    @property
    def failed(self) -> int:
        return self.sent - self.ok

    @property
    def complete(self) -> bool:
        """Every requested request was sent (the time limit did not cut the run short)."""
        return self.sent == self.requested

    @property
    def per_second(self) -> float:
        return self.ok / self.seconds

    def ms_per_request(self, seconds: float | None) -> str:
        if seconds is None or not self.sent:
            return "n/a"
        return f"{1000 * seconds / self.sent:.2f}"


def run_load(
    server: Server,
    n: int,
    workers: int,
    timeout: float,
    headers: dict[str, str],
    prefix: str,
) -> Load:
    """`n` POSTs from `workers` threads, each with its own keep-alive client.

    Stops at `n` requests or after `timeout` seconds, whichever comes first. Every request
    carries a unique client_user_id (a taken one would be a 400, not a create).
    """
    numbers = itertools.count()  # next() on it is atomic under the GIL
    statuses: Counter[str] = Counter()
    statuses_lock = threading.Lock()
    # A worker that dies before the start line breaks the barrier after READY_TIMEOUT
    # instead of leaving the main thread waiting for ever.
    start_line = threading.Barrier(workers + 1, timeout=READY_TIMEOUT)

    def worker() -> None:
        local: Counter[str] = Counter()
        try:
            with httpx.Client(base_url=server.base_url, headers=headers, timeout=30.0) as client:
                start_line.wait()
                # The time limit starts at the start line, not while clients are being made.
                deadline = time.monotonic() + timeout
                while (i := next(numbers)) < n and time.monotonic() < deadline:
                    try:
                        response = client.post(PATH, json={"client_user_id": f"{prefix}-{i}"})
                        local[str(response.status_code)] += 1
                    except httpx.HTTPError as exc:
                        local[type(exc).__name__] += 1
        finally:
            # Counted even if the worker fails: what was sent is part of the result.
            with statuses_lock:
                statuses.update(local)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    cpu_before = server.cpu_seconds()
    client_cpu_before = time.process_time()
    start = time.perf_counter()
    start_line.wait()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    cpu_after = server.cpu_seconds()
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    client_cpu = time.process_time() - client_cpu_before
    sent = sum(statuses.values())
    return Load(server.kind, n, sent, seconds, statuses, server_cpu, client_cpu)


# -- report ------------------------------------------------------------------------------


def report(bare: Load, service: Load) -> bool:
    header = (
        f"{'server':<8} {'ok':>6} {'failed':>6} {'seconds':>8} {'req/s':>7} "
        f"{'server CPU ms/req':>17} {'client CPU ms/req':>17}"
    )
    print(header)
    print("-" * len(header))
    for load in (bare, service):
        print(
            f"{load.kind:<8} {load.ok:>6} {load.failed:>6} {load.seconds:>8.2f} "
            f"{load.per_second:>7.0f} {load.ms_per_request(load.server_cpu):>17} "
            f"{load.ms_per_request(load.client_cpu):>17}"
        )
        if load.failed:
            print(f"  {load.kind} answers: {dict(load.statuses)}")
        if not load.complete:
            print(f"  {load.kind}: time limit reached after {load.sent} of {load.requested}")
    ratio = service.per_second / bare.per_second if bare.per_second else 0.0
    # A run with failed or unsent requests measured something else: never a PASS.
    met = ratio >= TARGET and all(load.complete and not load.failed for load in (bare, service))
    print(f"\nratio service/bare {ratio:.1%}, target {TARGET:.0%}: {'PASS' if met else 'MISS'}")
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Create-user requests per second through uvicorn vs a bare FastAPI app."
    )
    parser.add_argument("--n", type=int, default=2000, help="timed requests per server")
    parser.add_argument("--workers", type=int, default=8, help="concurrent client threads")
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests first")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per load run")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    # Internal: how the parent starts each server in its own process.
    parser.add_argument("--serve", choices=("service", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--master-key-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve:
        serve(args.serve, args.fd, args.database_url, args.master_key_file)
        return 0
    if args.n < 1 or args.workers < 1 or args.warmup < 0:
        parser.error("--n and --workers must be at least 1, --warmup at least 0")

    from healthledger.adapters.composition import build_service
    from healthledger.adapters.settings import Settings

    print(
        f"HTTP benchmark: N={args.n} POST {PATH} per server, {args.workers} client threads, "
        f"warm-up {args.warmup}, uvicorn {uvicorn.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    # Both databases in one temp dir on the same file system: both pay the same fsync.
    with tempfile.TemporaryDirectory(prefix="healthledger-bench-") as tmp:
        directory = Path(tmp)
        service_url = f"sqlite:///{directory / 'service.db'}"
        master_key_file = directory / "keys" / "service.master.key"
        # Bootstrap here, before the server starts, to learn the team API key.
        service = build_service(Settings(database_url=service_url, master_key_file=master_key_file))
        boot = service.bootstrap()
        service.close()
        assert boot is not None, "a fresh database bootstraps"
        api_key = boot.team_api_key.plain

        servers: list[Server] = []
        try:
            servers.append(start_server("bare", f"sqlite:///{directory / 'bare.db'}"))
            servers.append(start_server("service", service_url, master_key_file))
            bare_server, service_server = servers
            headers = {API_KEY_HEADER: api_key}
            run = uuid.uuid4().hex[:8]
            for server in servers:
                warm = run_load(
                    server, args.warmup, args.workers, args.timeout, headers, f"{run}-warm"
                )
                if warm.failed:
                    print(f"warm-up of {server.kind} failed: {dict(warm.statuses)}")
                    return 1
            # Bare first, then the service: each gets the machine to itself while timed.
            bare = run_load(bare_server, args.n, args.workers, args.timeout, headers, run)
            timed = run_load(service_server, args.n, args.workers, args.timeout, headers, run)
        finally:
            for server in servers:
                server.stop()
    print(f"servers stopped, exit codes {[s.process.returncode for s in servers]}\n")
    met = report(bare, timed)
    # Another busy process on the machine makes the figures noise: say so next to them.
    print(f"load average after the run: {os.getloadavg()[0]:.2f}")
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
