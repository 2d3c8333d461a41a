"""A maker's webhook in to our `daily.data.*` webhook out (issue 28), with the scheduler
running as `serve` runs it, on SQLite.

The fake Oura (a real HTTP server in a thread), the team API served by uvicorn on a
loopback port (where the fake calls us), and a receiver of our webhooks (another uvicorn
server) that notes when each arrived. One person is signed in through the link page's
OAuth flow and their short history pulled; our subscriptions are made at the fake
(`ensure_subscriptions`, Oura's handshake included); then, round after round, the person's
yesterday changes at Oura (`revise`), which sends its signed notifications, and we time
from just before the first notification is sent to the arrival of the first
`daily.data.*` webhook it caused (and of the last). Target: median under 2 s.

Baseline in the same process and the same scheduler: a plain webhook delivery, from the
commit of a demo connection to the arrival of its `provider.connection.created`.

    .venv/bin/python bench/maker_webhook_latency.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from healthledger.adapters.composition import Service, build_service, start_scheduler
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_oura import FakeOura, running_fake_oura
from healthledger.adapters.makers.serving import served
from healthledger.adapters.providers.maker_webhooks import oura_verification_token
from healthledger.adapters.providers.oura_subscriptions import ensure_subscriptions
from healthledger.adapters.settings import OAuthClientSetting, Settings
from healthledger.domain.context import CommandContext
from maker_history import API, APP, CLIENT, LINK, SECRET, InProcess
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CTX = CommandContext.system("bench:maker-webhooks")
TARGET_MEDIAN_S = 2.0


class Arrivals:
    """Our webhooks as they arrive: (arrival time, event type), in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, str]] = []

    async def receive(self, request: Request) -> Response:
        body = await request.json()
        with self.lock:
            self.seen.append((time.time(), str(body.get("event_type"))))
        return Response("ok")

    def since(self, instant: float, prefix: str) -> list[float]:
        with self.lock:
            return [t for t, kind in self.seen if t >= instant and kind.startswith(prefix)]


def wait_for(arrivals: Arrivals, since: float, prefix: str, settle: float) -> list[float]:
    """The arrivals of `prefix` events after `since`, once none came for `settle` s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = arrivals.since(since, prefix)
        if found and time.time() - found[-1] > settle:
            return found
        time.sleep(0.02)
    return arrivals.since(since, prefix)


def sign_in(service: Service, headers: dict[str, str]) -> None:
    mounts: dict[str, httpx.BaseTransport] = {
        LINK: InProcess(create_link_app(service)),
        API: InProcess(create_team_api(service)),
    }
    with httpx.Client(mounts=mounts, follow_redirects=False) as browser:
        user_id = browser.post(
            f"{API}/v2/user", json={"client_user_id": "bench-webhooks"}, headers=headers
        ).json()["user_id"]
        token = browser.post(
            f"{API}/v2/link/token",
            json={"user_id": user_id, "redirect_url": APP},
            headers=headers,
        ).json()["link_token"]
        started = browser.post(f"{LINK}/oauth/start", data={"token": token, "provider": "oura"})
        at_maker = browser.get(started.headers["location"])
        back = browser.get(at_maker.headers["location"])
        assert back.status_code == 303, back.text


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def run(rounds: int, workdir: Path) -> dict[str, Any]:
    arrivals = Arrivals()
    receiver_app = Starlette(routes=[Route("/{name}", arrivals.receive, methods=["POST"])])
    with (
        running_fake_oura(FakeOura()) as oura,
        served(receiver_app, "receiver") as receiver,
    ):
        oura.register(CLIENT, SECRET)
        settings = Settings(
            database_url=f"sqlite:///{workdir / 'ledger.db'}",
            master_key_file=workdir / "keys" / "master.key",
            link_url=LINK,
            public_base_url=API,
            oauth_maker_url=oura.base,
            oura_api_url=oura.base,
            oura_history_days=5,
            oauth_clients={
                "oura": OAuthClientSetting(client_id=CLIENT, client_secret=SecretStr(SECRET))
            },
            webhook_allowed_destinations=["127.0.0.1"],
        )
        service = build_service(settings)
        try:
            boot = service.bootstrap()
            assert boot is not None
            sign_in(service, {"x-service-api-key": boot.team_api_key.plain})
            while service.pulls.run_due():
                pass
            service.webhooks.create(CTX, boot.team_id, "sandbox", url=f"{receiver}/ours")
            while service.jobs.dispatch_webhooks():
                pass
            with served(create_team_api(service), "team API") as api:
                with httpx.Client(timeout=10) as http:
                    ensure_subscriptions(
                        http,
                        oura.base,
                        CLIENT,
                        SECRET,
                        f"{api}/makers/oura/webhook",
                        oura_verification_token(settings),
                        service.clock(),
                    )
                scheduler = start_scheduler(service)
                try:
                    first, last, baseline = [], [], []
                    yesterday = service.clock().date() - timedelta(days=1)
                    for n in range(rounds):
                        began = time.time()
                        oura.revise("ava", yesterday)
                        found = wait_for(arrivals, began, "daily.data.", settle=0.5)
                        assert found, f"round {n}: no daily.data webhook"
                        first.append(found[0] - began)
                        last.append(found[-1] - began)
                        # The baseline: a plain delivery, commit to arrival.
                        user = service.users.create_user(CTX, boot.team_id, client_user_id=f"b{n}")
                        began = time.time()
                        service.connections.connect_demo(
                            CTX, boot.team_id, user.id, "freestyle_libre", ["glucose"]
                        )
                        found = wait_for(arrivals, began, "provider.connection.created", 0.2)
                        assert found, f"round {n}: no provider.connection.created"
                        baseline.append(found[0] - began)
                finally:
                    scheduler.shutdown(wait=True)
        finally:
            service.close()
    return {"first": first, "last": last, "baseline": baseline}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        r = run(args.rounds, Path(tmp))
    median, p95 = statistics.median(r["first"]), percentile(r["first"], 0.95)
    base_median, base_p95 = statistics.median(r["baseline"]), percentile(r["baseline"], 0.95)
    print(f"\n{args.rounds} rounds (seconds)       median     p95")
    print(f"maker webhook -> first daily.data {median:>8.3f} {p95:>7.3f}")
    last_median, last_p95 = statistics.median(r["last"]), percentile(r["last"], 0.95)
    print(f"maker webhook -> last daily.data  {last_median:>8.3f} {last_p95:>7.3f}")
    print(f"baseline: demo connect -> created {base_median:>8.3f} {base_p95:>7.3f}")
    print(f"ratio (median, first / baseline): {median / base_median:.1f}x")
    verdict = "met" if median < TARGET_MEDIAN_S else "MISSED"
    print(f"target median < {TARGET_MEDIAN_S:.0f} s: {verdict}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0 if median < TARGET_MEDIAN_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
