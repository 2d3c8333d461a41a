"""`healthledger serve`: the team API under uvicorn, with the scheduler beside it."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import uvicorn
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from healthledger.scheduler.runner import start_scheduler

log = logging.getLogger("healthledger.server")


def announce_bootstrap(service: Service, out: TextIO) -> None:
    """On an empty database, create the default team and print its key, once."""
    created = service.bootstrap()
    if created is None:
        return
    print(
        "healthledger: first run on an empty database.\n"
        f"  organization  {created.org_id}\n"
        f"  team          {created.team_id}\n"
        f"  team API key  {created.team_api_key.plain}\n"
        "The key is shown only this once (only its hash is stored). Send it in the\n"
        "x-service-api-key header. `healthledger keys create --team TEAM_ID` makes another.",
        file=out,
        flush=True,
    )


def serve(settings: Settings, out: TextIO = sys.stdout) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s %(message)s"
    )
    # APScheduler logs every run at INFO; its warnings (missed runs, errors) still show.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    service = build_service(settings)
    announce_bootstrap(service, out)
    scheduler = start_scheduler(service)
    config = uvicorn.Config(
        create_team_api(service),
        host=settings.host,
        port=settings.team_api_port,
        log_level=settings.log_level.lower(),
    )
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        pass  # uvicorn re-raises Ctrl-C after its graceful shutdown: ours follows
    finally:
        scheduler.shutdown(wait=True)
        service.close()
