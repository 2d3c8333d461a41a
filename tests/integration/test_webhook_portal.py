"""The webhook portal (issue 34; `team.get_svix_url`): the link the team API hands out opens
a page of the key's team and environment, with its endpoints, their deliveries and each
delivery's attempts, from a real local receiver's answers; on both databases. Another
team's delivery, a forged or expired link are refused; no secret and no payload shows."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.clocks import Clock
from tests.conftest import Team
from tests.receivers import Receiver, http_receiver

CTX = CommandContext.system("test:webhook-portal")


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    yield built
    built.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with http_receiver() as running:
        yield running


def portal_path(api: TestClient, team: Team) -> str:
    answer = api.get("/v2/team/svix/url", headers=team.headers)
    assert answer.status_code == 200, answer.text
    url = urlsplit(answer.json()["url"])
    assert url.path == "/webhooks" and url.query.startswith("token=")
    return f"{url.path}?{url.query}"


def test_the_portal_shows_the_environments_endpoints_deliveries_and_attempts(
    svc: Service, clock: Clock, receiver: Receiver, home: Team, api: TestClient
) -> None:
    ok = svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    failing = svc.webhooks.create(
        CTX, home.team_id, "sandbox", url=receiver.url("fail"), description="flaky one"
    )
    elsewhere = svc.webhooks.create(CTX, home.team_id, "production", url=receiver.url("prod"))
    user = svc.users.create_user(CTX, home.team_id, client_user_id="portal-user").id
    svc.connections.connect_demo(CTX, home.team_id, user, "oura", ["sleep"])
    clock.advance(timedelta(seconds=1))
    svc.jobs.dispatch_webhooks()
    assert receiver.on("ok") and receiver.on("fail")

    with TestClient(create_link_app(svc)) as pages:
        page = pages.get(portal_path(api, home))
        assert page.status_code == 200, page.text
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "no-referrer"
        html = page.text
        assert receiver.url("ok") in html and receiver.url("fail") in html
        assert receiver.url("prod") not in html  # the key's environment only
        assert "flaky one" in html and "provider.connection.created" in html
        assert str(user) in html
        assert "succeeded" in html and "pending" in html and ">500<" in html
        # No secret, no payload: the endpoints' signing secrets are nowhere.
        assert "whsec_" not in html and "portal-user" not in html
        for endpoint in (ok, failing, elsewhere):
            assert all(secret not in html for secret in svc.webhooks.signing_secrets(endpoint.id))

        # The failing delivery's page: its attempt and the answer it got.
        links = re.findall(r'href="(webhooks/deliveries/[^"]+)"', html)
        assert len(links) == 2
        pages_of = [pages.get("/" + link.replace("&amp;", "&")) for link in links]
        failed = next(p for p in pages_of if receiver.url("fail") in p.text)
        assert failed.status_code == 200
        assert "attempt 1" in failed.text and "HTTP 500" in failed.text
        assert "../../webhooks?token=" in failed.text  # back to the list


def test_the_portal_refuses_what_is_not_its_own(
    svc: Service, clock: Clock, receiver: Receiver, home: Team, api: TestClient
) -> None:
    svc.webhooks.create(CTX, home.team_id, "sandbox", url=receiver.url("ok"))
    user = svc.users.create_user(CTX, home.team_id, client_user_id="portal-a").id
    svc.connections.connect_demo(CTX, home.team_id, user, "oura", ["sleep"])
    svc.jobs.dispatch_webhooks()
    org_id = svc.teams.create_organization(CTX, "Other org")
    other_id = svc.teams.create_team(CTX, org_id, "Other team", "us")
    other = Team(other_id, svc.teams.issue_team_api_key(CTX, other_id).plain)
    with TestClient(create_link_app(svc)) as pages:
        mine = pages.get(portal_path(api, home)).text
        [link] = re.findall(r'href="(webhooks/deliveries/[^"]+)"', mine)
        delivery_id = link.split("/")[2].split("?")[0]
        theirs = portal_path(api, other)
        their_token = theirs.split("token=")[1]
        # Another team's link does not open this team's delivery.
        refused = pages.get(f"/webhooks/deliveries/{delivery_id}?token={their_token}")
        assert refused.status_code == 404 and receiver.url("ok") not in refused.text
        assert "No webhook endpoint" in pages.get(theirs).text
        for token in ("", "forged", their_token[:-2] + "xx"):
            forged = pages.get(f"/webhooks?token={token}")
            assert forged.status_code == 404, token
        clock.advance(timedelta(hours=1, seconds=1))
        expired = pages.get(theirs)
        assert expired.status_code == 410 and "expired" in expired.text
    assert (
        api.get(
            "/v2/team/svix/url", params={"as_of": clock().isoformat()}, headers=home.headers
        ).status_code
        == 422
    )
