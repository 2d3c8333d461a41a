"""HTTP benchmark on PostgreSQL: `POST /v2/user` through `healthledger serve --workers 2`,
against a bare FastAPI app with two workers that inserts one row with psycopg (issue 15).

Both servers are started the same way: a primary process binds the port and starts two
worker processes that accept on that one socket, each running uvicorn with `serve`'s
settings (`adapters/server.py`: `WorkerProcesses`, `uvicorn_config`, `serve_as_worker`).
The service is the real command (`healthledger serve --workers 2`, each worker with its
own service and scheduler); the bare app is this file run with `--serve-bare`, whose sync
endpoint inserts one row (a user id, the client_user_id, a 300-byte state, a time) in
one autocommitted statement on a psycopg connection of its thread. Each side has a fresh
schema of the same database. The same load generator (`bench/http_api.py`'s `run_load`:
keep-alive clients, one per connection, unique client_user_ids) sends the same number
of requests to each, the two sides taking turns (`--rounds`), and the ratio of the
request rates is printed; the target is at least 50%. `--check` makes a missed target
(or any failed request) exit 1.

    .venv/bin/python bench/postgres_http.py [--url URL] [--n 2000] [--connections 16]
        [--warmup 200] [--rounds 2] [--check]

The URL defaults to `HEALTHLEDGER_BENCH_POSTGRES_URL`, then
`HEALTHLEDGER_TEST_POSTGRES_URL`, then the local server's `test` database
(`bench/postgres.py` runs this file's `main()` at its end). Traffic stays on loopback;
both servers are stopped and both schemas dropped before the script exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn
from fastapi import FastAPI
from healthledger.adapters.server import (
    WorkerProcesses,
    configure_logging,
    serve_as_worker,
    uvicorn_config,
)
from healthledger.adapters.settings import Settings
from pydantic import BaseModel
from support import fresh_schema, libpq_url

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
URL_VARIABLE = "HEALTHLEDGER_BENCH_POSTGRES_URL"
TARGET = 0.50
WORKERS = 2
PATH = "/v2/user"
READY_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0
BENCH = Path(__file__).resolve().parent
_STATE = os.urandom(300)  # about the size of a User.Created event
_BARE_TABLE = """
CREATE TABLE users (
    user_id UUID PRIMARY KEY,
    client_user_id TEXT NOT NULL,
    state BYTEA NOT NULL,
    created_on TIMESTAMPTZ NOT NULL
)
"""
_BARE_INSERT = (
    "INSERT INTO users (user_id, client_user_id, state, created_on) VALUES (%s, %s, %s, %s)"
)


def http_api() -> Any:
    """bench/http_api.py, whose load generator both benchmarks share."""
    spec = importlib.util.spec_from_file_location("bench_http_api", BENCH / "http_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up in sys.modules while they are made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# -- the bare app (its worker processes run `run_bare_worker`) -----------------------------


class CreateUser(BaseModel):
    client_user_id: str


def bare_app(database_url: str) -> FastAPI:
    """One sync POST endpoint inserting one row, on a psycopg connection per thread."""
    conninfo = libpq_url(database_url)
    local = threading.local()
    app = FastAPI()

    @app.post(PATH)
    def create_user(body: CreateUser) -> dict[str, Any]:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(conninfo, autocommit=True)
        user_id = uuid.uuid4()
        conn.execute(_BARE_INSERT, (user_id, body.client_user_id, _STATE, datetime.now(UTC)))
        return {"user_id": str(user_id), "client_user_id": body.client_user_id}

    return app


def run_bare_worker(settings: Settings, sock: socket.socket, primary: int) -> None:
    configure_logging(settings)
    app = bare_app(settings.database_url)
    serve_as_worker(
        uvicorn.Server(uvicorn_config(settings, app, settings.team_api_port)), sock, primary
    )


def serve_bare(settings: Settings) -> None:
    """The bare app's primary: its workers on the port, until SIGINT or SIGTERM."""
    configure_logging(settings)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    workers = WorkerProcesses(settings, settings.team_api_port, run_bare_worker)
    try:
        asyncio.run(workers.supervise(stopping.is_set))
    finally:
        workers.stop()


# -- the servers, as the load generator sees them ------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_tree(pid: int) -> list[int]:
    tree = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    with contextlib.suppress(OSError):
        for child in children.read_text().split():
            tree.extend(process_tree(int(child)))
    return tree


class Server:
    # A plain class, not a dataclass: bench/postgres.py loads this file by path, without
    # registering it in sys.modules, which dataclasses need.
    def __init__(self, kind: str, process: subprocess.Popen[bytes], port: int) -> None:
        self.kind = kind
        self.process = process
        self.port = port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float | None:
        """User + system CPU of the primary and its workers so far (Linux /proc)."""
        total = 0
        for pid in process_tree(self.process.pid):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return None
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                for pid in reversed(process_tree(self.process.pid)):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self.process.wait()


def start(kind: str, command: list[str], env: dict[str, str], port: int, ready: int) -> Server:
    """Start a server; wait until a request without a body is answered `ready` (the
    service's 401 for a missing key, the bare app's 404 on /)."""
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    server = Server(kind, process, port)
    deadline = time.monotonic() + READY_TIMEOUT
    path = PATH if kind == "service" else "/"
    try:
        with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the {kind} server exited during startup")
                with contextlib.suppress(httpx.TransportError):
                    if client.get(path).status_code == ready:
                        return server
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {kind} server was not ready in {READY_TIMEOUT}s")
                time.sleep(0.1)
    except BaseException:
        server.stop()
        raise


def start_service(url: str, directory: Path) -> tuple[Server, str]:
    """`healthledger serve --workers 2` on a fresh schema; the server and its team key."""
    from healthledger.adapters.composition import build_service

    master_key_file = directory / "keys" / "master.key"
    # Bootstrapped here, before the server starts, to learn the team API key.
    service = build_service(Settings(database_url=url, master_key_file=master_key_file))
    boot = service.bootstrap()
    service.close()
    assert boot is not None, "a fresh schema bootstraps"
    port = free_port()
    env = {
        **os.environ,
        "HEALTHLEDGER_DATABASE_URL": url,
        "HEALTHLEDGER_MASTER_KEY_FILE": str(master_key_file),
        "HEALTHLEDGER_TEAM_API_PORT": str(port),
        "HEALTHLEDGER_MANAGEMENT_API_PORT": str(free_port()),
        "HEALTHLEDGER_LINK_PORT": str(free_port()),
        "HEALTHLEDGER_LOG_LEVEL": "warning",
    }
    command = [sys.executable, "-m", "healthledger.adapters.cli", "serve"]
    command += ["--workers", str(WORKERS)]
    return start("service", command, env, port, 401), boot.team_api_key.plain


def start_bare(url: str) -> Server:
    with contextlib.closing(psycopg.connect(libpq_url(url), autocommit=True)) as conn:
        conn.execute(_BARE_TABLE)
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve-bare", "--port", str(port)]
    env = {**os.environ, URL_VARIABLE: url, "HEALTHLEDGER_LOG_LEVEL": "warning"}
    return start("bare", command, env, port, 404)


# -- report ---------------------------------------------------------------------------------


def report(loads: dict[str, list[Any]]) -> bool:
    header = (
        f"{'server':<8} {'ok':>6} {'failed':>6} {'seconds':>8} {'req/s':>7} "
        f"{'server CPU ms/req':>17} {'client CPU ms/req':>17}"
    )
    print(header)
    print("-" * len(header))
    rates: dict[str, float] = {}
    clean = True
    for kind, runs in loads.items():
        ok = sum(run.ok for run in runs)
        sent = sum(run.sent for run in runs)
        seconds = sum(run.seconds for run in runs)
        server_cpu = [run.server_cpu for run in runs]
        cpu = None if None in server_cpu else sum(c for c in server_cpu if c is not None)
        client_cpu = sum(run.client_cpu for run in runs)
        rates[kind] = ok / seconds if seconds else 0.0
        cpu_ms, client_ms = (
            "n/a" if c is None or not sent else f"{1000 * c / sent:.2f}" for c in (cpu, client_cpu)
        )
        print(
            f"{kind:<8} {ok:>6} {sent - ok:>6} {seconds:>8.2f} {rates[kind]:>7.0f} "
            f"{cpu_ms:>17} {client_ms:>17}"
        )
        for run in runs:
            if run.failed:
                print(f"  {kind} answers: {dict(run.statuses)}")
            if not run.complete:
                print(f"  {kind}: time limit reached after {run.sent} of {run.requested}")
            clean = clean and run.complete and not run.failed
    ratio = rates["service"] / rates["bare"] if rates["bare"] else 0.0
    met = ratio >= TARGET and clean
    print(
        f"\nratio service/bare {ratio:.1%} ({WORKERS} workers each), target {TARGET:.0%}: "
        f"{'PASS' if met else 'MISS'}"
    )
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a SQLAlchemy postgresql+psycopg URL")
    parser.add_argument("--n", type=int, default=2000, help="timed requests per side")
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections")
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests first")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each side (n split)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per load run")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    # Internal: the bare app's primary process.
    parser.add_argument("--serve-bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    url = (
        args.url
        or os.environ.get(URL_VARIABLE)
        or os.environ.get("HEALTHLEDGER_TEST_POSTGRES_URL")
        or DEFAULT_URL
    )
    if args.serve_bare:
        serve_bare(
            Settings(
                database_url=url,
                workers=WORKERS,
                team_api_port=args.port,
                log_level=os.environ.get("HEALTHLEDGER_LOG_LEVEL", "warning"),
            )
        )
        return 0
    if args.n < args.rounds or args.connections < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("--n at least --rounds, --connections and --rounds at least 1")
    load = http_api()
    print(
        f"HTTP on PostgreSQL: N={args.n} POST {PATH} per side in {args.rounds} rounds, "
        f"{args.connections} connections, {WORKERS} workers each, warm-up {args.warmup}, "
        f"uvicorn {uvicorn.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hl-bench-")))
        service_url = stack.enter_context(fresh_schema(url, "bench_http_service"))
        bare_url = stack.enter_context(fresh_schema(url, "bench_http_bare"))
        service, key = start_service(service_url, directory)
        stack.callback(service.stop)
        bare = start_bare(bare_url)
        stack.callback(bare.stop)
        headers = {"x-service-api-key": key}
        run = uuid.uuid4().hex[:8]
        for server in (bare, service):
            warm = load.run_load(
                server, args.warmup, args.connections, args.timeout, headers, f"{run}-warm"
            )
            if warm.failed:
                print(f"warm-up of {server.kind} failed: {dict(warm.statuses)}")
                return 1
        loads: dict[str, list[Any]] = {"bare": [], "service": []}
        per_round = args.n // args.rounds
        for number in range(args.rounds):
            for server in (bare, service):
                loads[server.kind].append(
                    load.run_load(
                        server,
                        per_round,
                        args.connections,
                        args.timeout,
                        headers,
                        f"{run}-{number}",
                    )
                )
        met = report(loads)
    print(f"load average after the run: {os.getloadavg()[0]:.2f}")
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
