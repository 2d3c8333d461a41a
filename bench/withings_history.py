"""Withings history benchmark (issue 28): two years of a person's Withings, as the fake
Withings serves it (adapters/makers/fake_withings.py, a real HTTP server on localhost, with
its page sizes), pulled and stored by the service.

A fresh service on a SQLite file (or `--database-url`), the fake Withings, one person
signed in through the link page's OAuth flow (the link page and the team API in process,
the fake over TCP), then every historical pull run to its end: 730 days of every resource
Withings gives, 7-day chunks, every page (the intraday series a day a request, each night's
states a request). Targets: under 60 s, resident memory under 300 MB.

    .venv/bin/python bench/withings_history.py [--days 730] [--database-url URL] [--check]

It prints a report; `--check` exits 1 on a missed target or a pull that did not succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from healthledger.adapters.composition import build_service
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_withings import FakeWithings, running_fake_withings
from healthledger.adapters.settings import OAuthClientSetting, Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from pydantic import SecretStr
from starlette.types import ASGIApp

TARGET_S = 60.0
TARGET_RSS_MB = 300.0
LINK, API = "http://127.0.0.1:8002", "http://127.0.0.1:8000"
APP = "https://app.example.com/linked"
CLIENT, SECRET = "bench-client", "bench-secret"


class InProcess(httpx.BaseTransport):
    """An ASGI app at its origin for a synchronous client (one loop per request)."""

    def __init__(self, app: ASGIApp) -> None:
        self.transport = httpx.ASGITransport(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def run() -> httpx.Response:
            response = await self.transport.handle_async_request(request)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        return asyncio.run(run())


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(days: int, database_url: str | None, workdir: Path) -> dict[str, Any]:
    (workdir / "db").mkdir()
    with running_fake_withings(FakeWithings()) as withings:
        withings.register(CLIENT, SECRET)
        settings = Settings(
            database_url=database_url or f"sqlite:///{workdir / 'db' / 'withings.db'}",
            master_key_file=workdir / "keys" / "master.key",
            link_url=LINK,
            public_base_url=API,
            oauth_maker_url=withings.base,
            withings_api_url=withings.base,
            withings_history_days=days,
            oauth_clients={
                "withings": OAuthClientSetting(client_id=CLIENT, client_secret=SecretStr(SECRET))
            },
        )
        service = build_service(settings)
        try:
            team = service.bootstrap()
            assert team is not None
            headers = {"x-service-api-key": team.team_api_key.plain}
            mounts: dict[str, httpx.BaseTransport] = {
                LINK: InProcess(create_link_app(service)),
                API: InProcess(create_team_api(service)),
            }
            with httpx.Client(mounts=mounts, follow_redirects=False) as browser:
                user_id = browser.post(
                    f"{API}/v2/user", json={"client_user_id": "bench-withings"}, headers=headers
                ).json()["user_id"]
                token = browser.post(
                    f"{API}/v2/link/token",
                    json={"user_id": user_id, "redirect_url": APP},
                    headers=headers,
                ).json()["link_token"]
                started = browser.post(
                    f"{LINK}/oauth/start", data={"token": token, "provider": "withings"}
                )
                at_withings = browser.get(started.headers["location"])
                back = browser.get(at_withings.headers["location"])
                assert back.status_code == 303, back.text
            rss_before = rss_mb()
            began = time.perf_counter()
            while service.pulls.run_due():
                pass
            elapsed = time.perf_counter() - began
            connection_id = Connection.id_for(_uuid(user_id), "withings")
            resources = service.catalog["withings"].supported_resources
            feeds = [service.ledger.find(ResourceFeed.id_for(connection_id, r)) for r in resources]
            statuses = {getattr(f, "status", None) for f in feeds}
            stored = service.health_data.count(_uuid(user_id))
        finally:
            service.close()
        return {
            "days": days,
            "resources": len(resources),
            "requests": len(withings.requests),
            "stored_days": stored,
            "seconds": elapsed,
            "max_rss_mb": rss_mb(),
            "rss_before_mb": rss_before,
            "ok": statuses == {"success"},
        }


def _uuid(text: str) -> Any:
    import uuid

    return uuid.UUID(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--database-url")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        report = run(args.days, args.database_url, Path(tmp))
    print(
        f"Withings, {report['days']} days, {report['resources']} resources: "
        f"{report['seconds']:.1f} s (target {TARGET_S:.0f} s: "
        f"{report['seconds'] / TARGET_S:.2f} of it), "
        f"{report['requests']} requests to the fake, {report['stored_days']} stored days, "
        f"max RSS {report['max_rss_mb']:.0f} MB (target {TARGET_RSS_MB:.0f} MB; "
        f"{report['rss_before_mb']:.0f} MB before the pulls, the fake Withings in the process), "
        f"pulls {'all succeeded' if report['ok'] else 'NOT all succeeded'}"
    )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    missed = (
        report["seconds"] > TARGET_S or report["max_rss_mb"] > TARGET_RSS_MB or not report["ok"]
    )
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
