"""The webhook portal through the official client and a real browser (issue 34):
`team.get_svix_url()` of `vital.Vital` (only its base_url changed) hands out our link;
Debian's headless Chromium opens it on the link page's server, sees the team's endpoint and
its delivery, and clicks through to the delivery's attempts. On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.e2e.devtools import Browser
from tests.e2e.test_official_client_portal import (  # noqa: F401  (the fixtures)
    chromium,
    link_page,
    link_socket,
    settings,
)
from tests.receivers import Receiver, http_receiver

pytestmark = CLIENTS_PARSE_ANSWERS

CTX = CommandContext.system("test:webhook-portal")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def test_the_webhook_portal_in_a_browser(
    api: vital.Vital,
    team: Team,
    service: Service,
    receiver: Receiver,
    link_page: str,  # noqa: F811
    chromium: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    service.webhooks.create(CTX, team.team_id, "sandbox", url=receiver.url("fail"))
    user = api.user.create(client_user_id="portal-browser")
    api.link.connect_demo_provider(user_id=user.user_id, provider="oura")
    service.jobs.dispatch_webhooks()
    assert receiver.on("fail")

    link = api.team.get_svix_url()
    assert link["url"].startswith(f"{link_page}/webhooks?token=") and link["expires_at"]
    browser = Browser(tmp_path / "profile", chromium)
    try:
        browser.open(link["url"])
        page = browser.text()
        assert receiver.url("fail") in page and "provider.connection.created" in page
        browser.click('a[href^="webhooks/deliveries/"]')
        delivery = browser.text()
        assert "attempt 1" in delivery and "HTTP 500" in delivery, delivery
        browser.click("#all-endpoints")
        assert receiver.url("fail") in browser.text()
    finally:
        browser.close()
