"""`healthledger serve`: the team API, the management API and the hosted link page under
uvicorn, each on its own port, with the scheduler beside them.

With one worker (the default) everything runs in one process. With `--workers N`
(PostgreSQL only) the process that was started is the primary: it applies migrations,
announces a first run, runs the management API, the link page and a scheduler, binds the
team API's port, and starts N worker processes that serve the team API on that one socket
(the kernel hands each connection to one of them), each with its own service and
scheduler, so that a commit in a worker wakes that worker's pull and webhook workers at
once. The primary restarts a worker that dies; a worker whose primary died finishes its
requests and stops (see docs/operations.md, running on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any, TextIO

import uvicorn
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.http.access_log import redact_access_log
from healthledger.adapters.http.imports import UNLIMITED_PATH
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.request_deadlines import request_deadlines
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from sqlalchemy.engine import make_url

log = logging.getLogger("healthledger.server")

# How often the primary looks for dead workers, and a worker for a dead primary.
WATCH_SECONDS = 0.5
# How long a stopping worker may finish its requests before it is killed.
WORKER_STOP_SECONDS = 30.0


def settle_heap() -> None:
    """What a serving process built at its start (the modules, the service, its apps and
    compiled statements: some 200,000 objects) lives until it stops: moved out of the
    garbage collector's reach (`gc.freeze`, as `frozen_heap` does for a rebuild: ADR
    0026), so that its full passes, which any busy stretch of writes sets off, walk only
    what was made since. They were 5 to 14% of the event publisher's time (ADR 0056)."""
    gc.collect()
    gc.freeze()


class ServeRefused(Exception):
    """A `serve` that would not be safe as configured; the message says why and what to do."""


def refusal(settings: Settings) -> str | None:
    """Why `serve` must not start as configured (None: it may)."""
    if settings.workers > 1 and make_url(settings.database_url).get_backend_name() == "sqlite":
        return (
            f"--workers {settings.workers} needs PostgreSQL (HEALTHLEDGER_DATABASE_URL=postgresql"
            "+psycopg://...). A SQLite file has one writer, so more processes only queue "
            "for it, and their readers would hold the WAL that an erasure checkpoints to "
            "remove the destroyed keys' old pages. Run one worker on SQLite "
            "(docs/operations.md, running on PostgreSQL)."
        )
    return None


def announce_bootstrap(service: Service, out: TextIO) -> None:
    """On an empty database, create the default organization and keys; print them once."""
    created = service.bootstrap()
    if created is None:
        return
    print(
        "healthledger: first run on an empty database.\n"
        f"  organization    {created.org_id}\n"
        f"  team            {created.team_id}\n"
        f"  team API key    {created.team_api_key.plain}\n"
        f"  management key  {created.management_key.plain}  (org_admin)\n"
        "The keys are shown only this once (only their hashes are stored). Send the team\n"
        "API key in x-service-api-key, the management key in X-Management-Key.",
        file=out,
        flush=True,
    )


class _Server(uvicorn.Server):
    # The servers share one process: signals are handled once, for all, in serve().
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _serve_all(
    servers: list[tuple[_Server, list[socket.socket]]], workers: WorkerProcesses | None = None
) -> None:
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server, _ in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    serving = [server.serve(sockets=sockets) for server, sockets in servers]
    if workers is not None:
        serving.append(workers.supervise(lambda: servers[0][0].should_exit))
    await asyncio.gather(*serving)


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s %(message)s"
    )
    # APScheduler logs every run at INFO; its warnings (missed runs, errors) still show.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # Alembic narrates each step at INFO; what the start applied is logged once by
    # healthledger.migrations, and pending migrations under `refuse` stop the start
    # (`build_service` raises; the command line says so and exits 1).
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # The link page's and the portal's tokens travel in query strings: not into the log.
    redact_access_log()
    # httpx logs every request's URL at INFO: a maker's URLs can carry a token (Oura's
    # revocation takes the access token in its query), so only its warnings show.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def uvicorn_config(settings: Settings, app: Any, port: int) -> uvicorn.Config:
    """How `serve` runs an app under uvicorn (also what the HTTP benchmark gives its
    baseline app, so that both sides are served alike)."""
    # Deadlines for reading requests and a connection limit, so that slow clients cannot
    # exhaust a port (docs/adr/0013-slow-clients.md).
    protocol = request_deadlines(
        header_timeout=settings.request_header_timeout.total_seconds(),
        body_timeout=settings.request_body_timeout.total_seconds(),
        # An export upload streams for as long as a large file takes (adapters/http/imports.py).
        upload_paths=UNLIMITED_PATH,
        upload_timeout=settings.upload_body_timeout.total_seconds(),
    )
    return uvicorn.Config(
        app,
        host=settings.host,
        port=port,
        log_level=settings.log_level.lower(),
        http=protocol,
        timeout_keep_alive=math.ceil(settings.keep_alive_timeout.total_seconds()),
        limit_concurrency=settings.connection_limit,
    )


@dataclass
class Listeners:
    """The sockets `serve` listens on, bound before the process does anything that takes
    a port the system chooses: a database connection, the scheduler's requests,
    `--fake-makers`' fakes (bound to port 0). Each of those gets an ephemeral port, and
    the configured ports may be ephemeral ones: bound later, the API could find its own
    port held by its own process. A bound socket is never handed out again."""

    team_api: list[socket.socket]
    management_api: list[socket.socket]
    link: list[socket.socket]


def bind_sockets(host: str, port: int, what: str) -> list[socket.socket]:
    """The sockets uvicorn's `loop.create_server(host=, port=)` would bind (one for each
    address `host` resolves to, SO_REUSEADDR, IPv6 sockets IPv6 only), bound now; uvicorn
    listens on them when it starts. A port that cannot be had refuses the start."""
    infos = socket.getaddrinfo(
        host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                # Bound, not yet listening (uvicorn listens when it starts: until then a
                # client is refused at once rather than kept waiting). Bound is enough: the
                # system hands out no bound port, to port 0 or to a connection.
                sock.bind(address)
            except OSError as exc:
                # asyncio's wording ("address already in use"), which the logs had before.
                reason = (exc.strerror or str(exc)).lower()
                raise ServeRefused(f"the {what} cannot listen on {host}:{port}: {reason}") from exc
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


@contextlib.contextmanager
def listening(settings: Settings) -> Iterator[Listeners]:
    """Every port `serve` listens on, bound for the block (see `Listeners`)."""
    with contextlib.ExitStack() as stack:

        def bound(port: int, what: str) -> list[socket.socket]:
            sockets = bind_sockets(settings.host, port, what)
            for sock in sockets:
                stack.callback(sock.close)
            return sockets

        if settings.workers == 1:
            team_api = bound(settings.team_api_port, "team API")
        else:
            # The workers accept on one socket (WorkerProcesses), bound as uvicorn does.
            team_api = [uvicorn_config(settings, None, settings.team_api_port).bind_socket()]
            stack.callback(team_api[0].close)
        yield Listeners(
            team_api=team_api,
            management_api=bound(settings.management_api_port, "management API"),
            link=bound(settings.link_port, "link page"),
        )


def serve(settings: Settings, out: TextIO = sys.stdout, listeners: Listeners | None = None) -> None:
    """Serve until SIGINT or SIGTERM, on `listeners` (`listening(settings)`'s) or on
    sockets bound here first, before the service connects to its database."""
    refused = refusal(settings)
    if refused is not None:
        raise ServeRefused(refused)
    configure_logging(settings)
    with contextlib.ExitStack() as stack:
        if listeners is None:
            listeners = stack.enter_context(listening(settings))
        _serve_on(settings, out, listeners)


def _serve_on(settings: Settings, out: TextIO, listeners: Listeners) -> None:
    # Migrations and the first-run bootstrap happen here, once, before any worker starts.
    service = build_service(settings)
    announce_bootstrap(service, out)
    scheduler = start_scheduler(service)
    apps = [
        (create_management_api(service), settings.management_api_port, listeners.management_api),
        (create_link_app(service), settings.link_port, listeners.link),
    ]
    workers = None
    if settings.workers == 1:
        apps.insert(0, (create_team_api(service), settings.team_api_port, listeners.team_api))
    else:
        workers = WorkerProcesses(
            settings, settings.team_api_port, run_team_api_worker, sock=listeners.team_api[0]
        )
    servers = [
        (_Server(uvicorn_config(settings, app, port)), sockets) for app, port, sockets in apps
    ]
    settle_heap()
    try:
        asyncio.run(_serve_all(servers, workers))
    finally:
        if workers is not None:
            workers.stop()
        scheduler.shutdown(wait=True)
        service.close()


# What a worker process runs: (settings, the listening socket, the primary's pid).
WorkerTarget = Callable[[Settings, socket.socket, int], None]


class WorkerProcesses:
    """`settings.workers` processes serving one port, whose socket is bound here: started,
    restarted when one dies, stopped (SIGTERM, then SIGKILL after WORKER_STOP_SECONDS)."""

    def __init__(
        self,
        settings: Settings,
        port: int,
        target: WorkerTarget,
        *,
        sock: socket.socket | None = None,
    ) -> None:
        self.settings = settings
        self.target = target
        # Bound once, by the primary, and handed to every worker (as uvicorn and gunicorn
        # do): the workers accept on the same listening socket. `serve` binds it first of
        # all (`listening`) and gives it here.
        if sock is None:
            sock = uvicorn_config(settings, None, port).bind_socket()
        self.socket = sock
        # Spawned, not forked: the primary's service holds connections and threads.
        self.context = multiprocessing.get_context("spawn")
        self.processes: list[BaseProcess] = [self.start() for _ in range(settings.workers)]

    def start(self) -> BaseProcess:
        process = self.context.Process(
            target=self.target,
            args=(self.settings, self.socket, os.getpid()),
            name="healthledger-worker",
        )
        process.start()
        return process

    async def supervise(self, stopping: Any) -> None:
        """Until the primary stops: start a new worker in the place of each that died."""
        while not stopping():
            for index, process in enumerate(self.processes):
                if not process.is_alive():
                    log.warning(
                        "worker %s stopped (exit code %s); starting another",
                        process.pid,
                        process.exitcode,
                    )
                    self.processes[index] = self.start()
            await asyncio.sleep(WATCH_SECONDS)

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + WORKER_STOP_SECONDS
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        self.socket.close()


def run_team_api_worker(settings: Settings, sock: socket.socket, primary: int) -> None:
    """A team API worker: its own service and scheduler, the team API on the primary's
    socket. Migrations were applied by the primary (this finds none to apply)."""
    configure_logging(settings)
    service = build_service(settings)
    scheduler = start_scheduler(service)
    server = uvicorn.Server(
        uvicorn_config(settings, create_team_api(service), settings.team_api_port)
    )
    settle_heap()
    try:
        serve_as_worker(server, sock, primary)
    finally:
        scheduler.shutdown(wait=True)
        service.close()


def serve_as_worker(server: uvicorn.Server, sock: socket.socket, primary: int) -> None:
    """Run `server` on the primary's socket until it is told to stop (uvicorn's own
    SIGINT and SIGTERM handling) or the primary is gone."""

    def watch_primary() -> None:
        # A primary killed outright cannot stop its workers: each stops by itself,
        # finishing its requests, when it finds itself orphaned.
        while not server.should_exit:
            if os.getppid() != primary:
                log.warning("the primary process is gone: this worker stops")
                server.should_exit = True
            time.sleep(WATCH_SECONDS)

    threading.Thread(target=watch_primary, daemon=True, name="primary-watch").start()
    server.run(sockets=[sock])
