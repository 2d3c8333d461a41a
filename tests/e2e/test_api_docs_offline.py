"""The interactive API documentation without internet (issue 34): `/docs` (Swagger UI) and
`/redoc` of both APIs, served by a real `healthledger serve`, rendered by Debian's headless
Chromium that can resolve no host but this machine. Swagger UI must draw the operations,
and every file either page needs must have come from the server itself (ReDoc's footer
also shows Redocly's logo from its CDN: a decoration, missing offline, so images are not
counted on that page)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from healthledger.adapters.settings import Settings

from tests.e2e.devtools import Browser
from tests.e2e.servers import running_server
from tests.e2e.test_fake_makers_browser import chromium  # noqa: F401  (the fixture)

# Every host name fails to resolve but the loopback address: the internet is out of reach.
NO_INTERNET = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
# The files a page loaded, but images where `images` is false.
LOADED = (
    "performance.getEntriesByType('resource')"
    ".filter(e => {images} || e.initiatorType !== 'img').map(e => e.name)"
)


def drawn(browser: Browser, expression: str, timeout: float = 30.0) -> int:
    """How many elements `expression` counts, once it counts any (the page draws late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = int(browser.evaluate(expression) or 0)
        if count:
            return count
        time.sleep(0.2)
    return 0


pytestmark = pytest.mark.sqlite_only("the pages and their files come from the package")


def test_the_docs_pages_render_from_the_server_alone(
    settings: Settings,
    tmp_path: Path,
    chromium: Path,  # noqa: F811
) -> None:
    with running_server(settings, tmp_path) as (team_api, management_api, _, _):
        browser = Browser(tmp_path / "profile", chromium, flags=[NO_INTERNET])
        try:
            for origin, operations in ((team_api, 40), (management_api, 10)):
                browser.open(f"{origin}/docs")
                count = drawn(browser, "document.querySelectorAll('.opblock').length")
                assert count > operations, (origin, count, browser.text()[:300])
                loaded = browser.evaluate(LOADED.format(images="true"))
                assert len(loaded) >= 3, loaded  # script, style sheet, the OpenAPI document
                assert all(url.startswith(origin) for url in loaded), loaded
                browser.open(f"{origin}/redoc")
                assert drawn(browser, "document.querySelectorAll('[data-section-id]').length")
                loaded = browser.evaluate(LOADED.format(images="false"))
                assert len(loaded) >= 2, loaded  # script, the OpenAPI document
                assert all(url.startswith(origin) for url in loaded), loaded
        finally:
            browser.close()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_name_no_other_host(settings: Settings, page: str) -> None:
    from fastapi.testclient import TestClient
    from healthledger.adapters.composition import build_service
    from healthledger.adapters.http.team_api import create_team_api

    service = build_service(settings)
    try:
        with TestClient(create_team_api(service)) as client:
            html = client.get(page).text
            assert "cdn." not in html and "https://" not in html, html
            for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
                if asset in html:
                    url = html.split(asset)[0].rsplit('"', 1)[1] + asset
                    fetched = client.get(url)
                    assert fetched.status_code == 200 and len(fetched.content) > 10_000, url
    finally:
        service.close()
