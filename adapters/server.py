"""`healthledger serve`: the team API, the management API and the hosted link page under
uvicorn, each on its own port, in one process, with the scheduler beside them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import sys
from collections.abc import Iterator
from typing import TextIO

import uvicorn
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.request_deadlines import request_deadlines
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings

log = logging.getLogger("healthledger.server")


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


async def _serve_all(servers: list[_Server]) -> None:
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(server.serve() for server in servers))


def serve(settings: Settings, out: TextIO = sys.stdout) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s %(message)s"
    )
    # APScheduler logs every run at INFO; its warnings (missed runs, errors) still show.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # Alembic narrates each step at INFO; what the start applied is logged once by
    # healthledger.migrations, and pending migrations under `refuse` stop the start
    # (`build_service` raises; the command line says so and exits 1).
    logging.getLogger("alembic").setLevel(logging.WARNING)
    service = build_service(settings)
    announce_bootstrap(service, out)
    scheduler = start_scheduler(service)
    # Deadlines for reading requests and a connection limit, so that slow clients cannot
    # exhaust a port (docs/adr/0013-slow-clients.md).
    protocol = request_deadlines(
        header_timeout=settings.request_header_timeout.total_seconds(),
        body_timeout=settings.request_body_timeout.total_seconds(),
    )
    servers = [
        _Server(
            uvicorn.Config(
                app,
                host=settings.host,
                port=port,
                log_level=settings.log_level.lower(),
                http=protocol,
                timeout_keep_alive=math.ceil(settings.keep_alive_timeout.total_seconds()),
                limit_concurrency=settings.connection_limit,
            )
        )
        for app, port in (
            (create_team_api(service), settings.team_api_port),
            (create_management_api(service), settings.management_api_port),
            (create_link_app(service), settings.link_port),
        )
    ]
    try:
        asyncio.run(_serve_all(servers))
    finally:
        scheduler.shutdown(wait=True)
        service.close()
