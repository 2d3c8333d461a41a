"""The portal URL through the official Python client `vital==2.1.569`
(`user.create_portal_url`, parsed by its `CreateUserPortalUrlResponse`), and the hosted
portal it opens in a real browser: Debian's headless Chromium loads the URL from the link
page's app under uvicorn, sees the order, and follows the page's link to the order's own
page with its results (docs/labs.md#portal). On both databases.

Chromium is driven the simplest way that exercises a real browser: `--dump-dom` prints
the DOM after the page loaded; following a link is a second load of the href found in it,
resolved against the page's URL as the browser resolves it."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.adapters.http.access_log import (
    ACCESS_LOGGER,
    REDACTED_QUERY,
    redact_access_log,
)
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.printing import HEADLESS_CHROMIUM_FLAGS
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from vital.core.api_error import ApiError
from vital.errors import UnprocessableEntityError
from vital.types import CreateUserPortalUrlResponse
from vital.user import CreateUserPortalUrlBodyContext

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.official_client import upsert_info
from tests.receivers import free_socket, serving

pytestmark = CLIENTS_PARSE_ANSWERS

CTX = CommandContext.system("test:portal")
WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"  # a shared demo lab test: Quest, walk-in
BROWSER_TIMEOUT_SECONDS = 60


@pytest.fixture
def link_socket() -> Iterator[socket.socket]:
    """The link page's socket, bound first: the service hands out URLs at its address."""
    sock = free_socket()
    yield sock
    sock.close()


@pytest.fixture
def settings(database_url: str, tmp_path: Path, link_socket: socket.socket) -> Settings:
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
        link_url=f"http://127.0.0.1:{link_socket.getsockname()[1]}",
        lab_order_failure_rate=0,
        lab_order_cancellation_rate=0,
    )


class AccessLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def link_page(service: Service, link_socket: socket.socket) -> Iterator[str]:
    """The link page's app (where the portal is) under uvicorn."""
    with serving(create_link_app(service), link_socket) as url:
        yield url


@pytest.fixture
def access_log(link_page: str) -> Iterator[AccessLines]:
    """uvicorn's access log lines, at INFO, redacted as `healthledger serve` has them.
    Installed once the server started: uvicorn's logging configuration replaces the
    access logger's handlers (its filters stay)."""
    del link_page
    redact_access_log()
    handler = AccessLines()
    logger = logging.getLogger(ACCESS_LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; the test skips without it only outside CI (.ci/run installs it)."""
    found = Path("/usr/bin/chromium")
    if not found.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have /usr/bin/chromium (.ci/run installs it)")
        pytest.skip("not installed: /usr/bin/chromium (apt-get install chromium)")
    return found


@pytest.fixture
def portal_user(api: vital.Vital, service: Service, team: Team) -> str:
    """A user with demographics, in a team with the portal switched on."""
    service.teams.set_feature(CTX, team.team_id, "portal_url", True)
    user_id = str(api.user.create(client_user_id="oc-portal").user_id)
    upsert_info(api, user_id)
    return user_id


class Links(HTMLParser):
    """The links (by id) and headings of a DOM as Chromium printed it."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.hrefs: dict[str, str] = {}
        self.headings: list[str] = []
        self._in_h1 = False
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("id") and found.get("href"):
            self.hrefs[str(found["id"])] = str(found["href"])
        self._in_h1 = tag == "h1"

    def handle_endtag(self, tag: str) -> None:
        if tag == "h1":
            self._in_h1 = False

    def handle_data(self, data: str) -> None:
        if self._in_h1:
            self.headings.append(data)


def load(chromium: Path, url: str, profile: Path) -> str:
    """The DOM of the page at `url` once Chromium loaded it."""
    done = subprocess.run(
        [
            str(chromium),
            *HEADLESS_CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        timeout=BROWSER_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode()


def place_and_complete(base_url: str, team: Team, user_id: str) -> str:
    with httpx.Client(base_url=base_url, headers=team.headers, timeout=30) as http:
        placed = http.post("/v3/order", json={"user_id": user_id, "lab_test_id": WELLNESS})
        assert placed.status_code == 200, placed.text
        order_id: str = placed.json()["id"]
        for _ in range(10):
            step = http.post(f"/v3/order/{order_id}/test", json={"interpretation": "abnormal"})
            assert step.status_code == 200, step.text
            if step.json()["status"] == "completed":
                return order_id
    raise AssertionError("the order did not complete")


def result_names(base_url: str, team: Team, order_id: str) -> list[str]:
    answer = httpx.get(f"{base_url}/v3/order/{order_id}/result", headers=team.headers)
    return [result["name"] for result in answer.json()["results"]]


# -- the tests ----------------------------------------------------------------------------------


def test_the_client_creates_portal_urls_that_open_in_a_browser(
    api: vital.Vital,
    base_url: str,
    link_page: str,
    team: Team,
    portal_user: str,
    chromium: Path,
    access_log: AccessLines,
    tmp_path: Path,
) -> None:
    order_id = place_and_complete(base_url, team, portal_user)
    launch = api.user.create_portal_url(portal_user, context=CreateUserPortalUrlBodyContext.LAUNCH)
    assert isinstance(launch, CreateUserPortalUrlResponse)
    assert launch.expires_in == 600
    assert launch.url.startswith(f"{link_page}/portal?token=")

    # The browser loads the portal and sees the order...
    listing = Links(load(chromium, launch.url, tmp_path / "profile"))
    assert "Your lab tests" in listing.headings
    assert f"order-{order_id}" in listing.hrefs
    # ...and follows its link to the order's page, with the results.
    detail_url = urljoin(launch.url, listing.hrefs[f"order-{order_id}"])
    assert urlsplit(detail_url).path == f"/portal/orders/{order_id}"
    detail_dom = load(chromium, detail_url, tmp_path / "profile")
    detail = Links(detail_dom)
    assert any(h.startswith("Annual Wellness") for h in detail.headings)
    names = result_names(base_url, team, order_id)
    assert names and all(name in detail_dom for name in names)
    assert "Abnormal" in detail_dom
    back = urljoin(detail_url, detail.hrefs["all-orders"])
    assert urlsplit(back).path == "/portal"

    # A deep link: the communications URL opens on the order.
    deep = api.user.create_portal_url(
        portal_user, context=CreateUserPortalUrlBodyContext.COMMUNICATIONS, order_id=order_id
    )
    assert deep.expires_in == 28 * 24 * 3600
    assert urlsplit(deep.url).path == f"/portal/orders/{order_id}"
    assert any(
        h.startswith("Annual Wellness")
        for h in Links(load(chromium, deep.url, tmp_path / "profile")).headings
    )

    # A forged token: the browser shows the error page.
    token = parse_qs(urlsplit(launch.url).query)["token"][0]
    forged = f"{link_page}/portal?token={token[:-2]}xx"
    assert (
        "This portal link is not valid"
        in Links(load(chromium, forged, tmp_path / "profile")).headings
    )

    # The access log has every page view, and no token.
    portal_lines = [line for line in access_log.lines if "/portal" in line]
    assert len(portal_lines) >= 4
    assert all(f"?{REDACTED_QUERY}" in line for line in portal_lines)
    assert not any(token[:40] in line for line in access_log.lines)


def test_the_clients_errors(
    api: vital.Vital,
    service: Service,
    team: Team,
) -> None:
    user_id = str(api.user.create(client_user_id="oc-portal-errors").user_id)
    # Closed beta: 403 FEATURE_NOT_ENABLED.
    with pytest.raises(ApiError) as off:
        api.user.create_portal_url(user_id, context=CreateUserPortalUrlBodyContext.LAUNCH)
    assert off.value.status_code == 403
    assert off.value.body["detail"]["error_type"] == "FEATURE_NOT_ENABLED"
    service.teams.set_feature(CTX, team.team_id, "portal_url", True)
    # No demographics: the client's 422 type.
    with pytest.raises(UnprocessableEntityError) as bare:
        api.user.create_portal_url(user_id, context=CreateUserPortalUrlBodyContext.LAUNCH)
    assert bare.value.body.detail[0]["loc"] == ["path", "user_id"]
    upsert_info(api, user_id)
    # An order that is not the user's, an unknown user: 404.
    for call in (
        lambda: api.user.create_portal_url(
            user_id, context=CreateUserPortalUrlBodyContext.LAUNCH, order_id=str(uuid.uuid4())
        ),
        lambda: api.user.create_portal_url(
            str(uuid.uuid4()), context=CreateUserPortalUrlBodyContext.LAUNCH
        ),
    ):
        with pytest.raises(ApiError) as missing:
            call()
        assert missing.value.status_code == 404
    answer = api.user.create_portal_url(user_id, context=CreateUserPortalUrlBodyContext.LAUNCH)
    assert isinstance(answer, CreateUserPortalUrlResponse) and answer.expires_in == 600
