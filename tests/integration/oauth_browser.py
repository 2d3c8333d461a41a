"""A person's browser on the OAuth link flow, for the tests of the callback and of the
makers' adapters: the two apps (the link page and the team API) answer in process at
their configured origins, the fake maker (tests/makers.py) over TCP; and the calls and
reads those tests share (a link token for a new user, the app's redirect, a user's
connected providers, the maker's tokens stored, clear copies of secrets anywhere)."""

from __future__ import annotations

import asyncio
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import sqlalchemy as sa
from healthledger.adapters.composition import Service
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import provider_tokens
from healthledger.adapters.settings import OAuthClientSetting
from pydantic import SecretStr
from starlette.types import ASGIApp

from tests.conftest import Team, create_user

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

# The team's app a sign-in returns to, the link page's and the team API's origins.
APP = "https://app.example.com/linked?session=abc"
LINK = "http://127.0.0.1:8002"
API = "http://127.0.0.1:8000"
SERVICE_CLIENT, SERVICE_SECRET = "service-client", "service-secret-never-shown"
TEAM_CLIENT, TEAM_SECRET = "team-client", "team-oauth-secret-never-shown"
SERVICE = OAuthClientSetting(client_id=SERVICE_CLIENT, client_secret=SecretStr(SERVICE_SECRET))


class InProcess(httpx.BaseTransport):
    """An ASGI app at its origin, for a synchronous browser (httpx's ASGI transport is
    asynchronous): each request runs to its end in a loop of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.transport = httpx.ASGITransport(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def run() -> httpx.Response:
            response = await self.transport.handle_async_request(request)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        return asyncio.run(run())


@dataclass
class Browser:
    client: httpx.Client

    def go(self, response: httpx.Response) -> httpx.Response:
        """Follow redirects as a browser does, up to the team's app (not reachable here)."""
        while response.is_redirect:
            location = response.headers["location"]
            if location.startswith("https://app.example.com/"):
                return response
            response = self.client.get(location)
        return response

    def start(self, token: str, provider: str = "oura") -> httpx.Response:
        """Choose `provider` on the link page: the 303 to the maker's authorization URL."""
        return self.client.post(f"{LINK}/oauth/start", data={"token": token, "provider": provider})

    def sign_in(self, token: str, provider: str = "oura") -> tuple[str, httpx.Response]:
        """Through the maker and back: (the callback URL the maker sent the browser to,
        the callback's answer)."""
        started = self.start(token, provider)
        assert started.status_code == 303, started.text
        at_maker = self.client.get(started.headers["location"])
        assert at_maker.status_code == 302, at_maker.text
        callback = at_maker.headers["location"]
        assert callback.startswith(f"{API}/v2/link/oauth/callback/{provider}?")
        return callback, self.client.get(callback)


def a_browser(svc: Service) -> Browser:
    mounts: dict[str, httpx.BaseTransport] = {
        LINK: InProcess(create_link_app(svc)),
        API: InProcess(create_team_api(svc)),
    }
    return Browser(httpx.Client(mounts=mounts, follow_redirects=False))


def link(api: TestClient, team: Team, **fields: Any) -> tuple[str, str]:
    """(user id, link token) for a new user."""
    user_id = create_user(api, team, f"u-{uuid.uuid4().hex[:8]}")["user_id"]
    response = api.post("/v2/link/token", json={"user_id": user_id, **fields}, headers=team.headers)
    assert response.status_code == 200, response.text
    return user_id, response.json()["link_token"]


def outcome(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert location.startswith("https://app.example.com/linked?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert query.pop("session") == "abc"
    return query


def signed_in_user(api: TestClient, team: Team, browser: Browser, provider: str) -> uuid.UUID:
    """A new user of `team` connected to `provider` through the link page's OAuth sign-in
    (at the maker the tests serve), the flow ending in success."""
    user_id, token = link(api, team, redirect_url=APP)
    _, answer = browser.sign_in(token, provider)
    assert outcome(answer) == {"state": "success"}
    return uuid.UUID(user_id)


def connected(api: TestClient, team: Team, user_id: str) -> list[str]:
    response = api.get(f"/v2/user/providers/{user_id}", headers=team.headers)
    assert response.status_code == 200, response.text
    return [p["slug"] for p in response.json()["providers"]]


def token_rows(svc: Service, user_id: str) -> list[Any]:
    with svc.db.read() as conn:
        return list(
            conn.execute(
                sa.select(provider_tokens).where(provider_tokens.c.user_id == uuid.UUID(user_id))
            )
        )


def clear_copies(svc: Service, needles: list[str]) -> set[str]:
    """The needles found in clear anywhere in the database: every row of every table,
    and on SQLite the bytes of its files (the WAL included)."""
    found: set[str] = set()
    with svc.db.read() as conn:
        tables = sa.MetaData()
        tables.reflect(conn)
        for table in tables.sorted_tables:
            for row in conn.execute(sa.select(table)):
                text = repr(tuple(row))
                found |= {needle for needle in needles if needle in text}
    if svc.db.sqlite_file is not None:
        for path in (Path(svc.db.sqlite_file), Path(f"{svc.db.sqlite_file}-wal")):
            if path.exists():
                data = path.read_bytes()
                found |= {needle for needle in needles if needle.encode() in data}
    return found
