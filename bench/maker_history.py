"""Two years of a person's history at a maker, as the maker's fake serves it, pulled and
stored by the service (issue 28): what bench/oura_history.py and bench/withings_history.py
(and any maker's) share.

A fresh service on a SQLite file (or `--database-url`), the maker's fake, one person signed
in through the link page's OAuth flow (the link page and the team API in process, the fake
over TCP), then every historical pull run to its end: every resource the maker gives,
7-day chunks, every page. Targets: under 60 s, resident memory under 300 MB. A maker's
script names its fake and the settings that point the service at it, and calls `main`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
from healthledger.adapters.composition import build_service
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.serving import served
from healthledger.adapters.settings import OAuthClientSetting, Settings
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


class Fake(Protocol):
    """A maker's fake as its `running_fake_*` yields it."""

    base: str
    requests: list[Any]

    def register(self, client_id: str, secret: str) -> None: ...


@dataclass(frozen=True)
class Maker:
    slug: str  # the provider's slug
    name: str  # as printed
    running: Callable[[], AbstractContextManager[Fake]]  # the fake, served in a thread
    api_url_setting: str  # the Settings field of the maker's data API (`oura_api_url`)
    history_setting: str  # the Settings field of its history (`oura_history_days`)
    # A maker that delivers its history (Garmin: the pulls ask backfills, the fake then
    # POSTs the summaries to our webhook, the worker stores them): timed to the last one
    # stored. Its fake has `webhook_url` and `deliver()`.
    delivers: bool = False


def run(maker: Maker, days: int, database_url: str | None, workdir: Path) -> dict[str, Any]:
    (workdir / "db").mkdir()
    with maker.running() as fake:
        fake.register(CLIENT, SECRET)
        settings = Settings(
            database_url=database_url or f"sqlite:///{workdir / 'db' / f'{maker.slug}.db'}",
            master_key_file=workdir / "keys" / "master.key",
            link_url=LINK,
            public_base_url=API,
            oauth_maker_url=fake.base,
            oauth_clients={
                maker.slug: OAuthClientSetting(client_id=CLIENT, client_secret=SecretStr(SECRET))
            },
        ).model_copy(update={maker.api_url_setting: fake.base, maker.history_setting: days})
        service = build_service(settings)
        try:
            team = service.bootstrap()
            assert team is not None
            headers = {"x-service-api-key": team.team_api_key.plain}
            team_api = create_team_api(service)  # one app: the sign-in's and the webhook's
            mounts: dict[str, httpx.BaseTransport] = {
                LINK: InProcess(create_link_app(service)),
                API: InProcess(team_api),
            }
            with httpx.Client(mounts=mounts, follow_redirects=False) as browser:
                user_id = browser.post(
                    f"{API}/v2/user",
                    json={"client_user_id": f"bench-{maker.slug}"},
                    headers=headers,
                ).json()["user_id"]
                token = browser.post(
                    f"{API}/v2/link/token",
                    json={"user_id": user_id, "redirect_url": APP},
                    headers=headers,
                ).json()["link_token"]
                started = browser.post(
                    f"{LINK}/oauth/start", data={"token": token, "provider": maker.slug}
                )
                at_maker = browser.get(started.headers["location"])
                back = browser.get(at_maker.headers["location"])
                assert back.status_code == 303, back.text
            rss_before = rss_mb()
            with ExitStack() as webhook:
                if maker.delivers:  # the team API on a real port, where the fake POSTs
                    base = webhook.enter_context(served(team_api, "team API"))
                    fake.webhook_url = f"{base}/makers/{maker.slug}/webhook"  # type: ignore[attr-defined]
                began = time.perf_counter()
                while service.pulls.run_due():
                    pass
                # Delivered as Garmin does, a backfill's POSTs at a time, each stored by the
                # worker (woken by their commits in `serve`) before the next backfill's.
                while maker.delivers and fake.deliver(1):  # type: ignore[attr-defined]
                    while service.maker_notices.run_due():
                        pass
                elapsed = time.perf_counter() - began
            streams = service.pulls.streams
            connection_id = streams.connection_id(_uuid(user_id), maker.slug)
            resources = service.catalog[maker.slug].supported_resources
            feeds = [
                service.ledger.find(streams.feed_id(connection_id, _uuid(user_id), r))
                for r in resources
            ]
            statuses = {getattr(f, "status", None) for f in feeds}
            stored = service.health_data.count(_uuid(user_id))
        finally:
            service.close()
        return {
            "days": days,
            "resources": len(resources),
            "requests": len(fake.requests),
            "stored_days": stored,
            "seconds": elapsed,
            "max_rss_mb": rss_mb(),
            "rss_before_mb": rss_before,
            "ok": statuses == {"success"},
        }


def _uuid(text: str) -> Any:
    import uuid

    return uuid.UUID(text)


def main(maker: Maker, description: str) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--database-url")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        report = run(maker, args.days, args.database_url, Path(tmp))
    print(
        f"{maker.name}, {report['days']} days, {report['resources']} resources: "
        f"{report['seconds']:.1f} s (target {TARGET_S:.0f} s: "
        f"{report['seconds'] / TARGET_S:.2f} of it), "
        f"{report['requests']} requests to the fake, {report['stored_days']} stored days, "
        f"max RSS {report['max_rss_mb']:.0f} MB (target {TARGET_RSS_MB:.0f} MB; "
        f"{report['rss_before_mb']:.0f} MB before the pulls, the fake {maker.name} in the "
        f"process), pulls {'all succeeded' if report['ok'] else 'NOT all succeeded'}"
    )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    missed = (
        report["seconds"] > TARGET_S or report["max_rss_mb"] > TARGET_RSS_MB or not report["ok"]
    )
    return 1 if args.check and missed else 0
