"""The OAuth callback of the link flow (`GET /v2/link/oauth/callback/{provider}` on the team
API, the redirect_uri that custom credentials hand out): its pages without a maker adapter
(this deployment has none), and a successful exchange through a fake maker's adapter."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from healthledger.adapters.composition import Service
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.link_tokens import LinkTokenRejected
from healthledger.domain.connections.providers import (
    OAuthClient,
    OAuthExchangeFailed,
    OAuthGrant,
    OAuthNotSupported,
    ProviderAdapter,
    PullTarget,
)
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.teams.directory import Bootstrap

from tests.conftest import Team, create_user

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

APP = "https://app.example.com/linked?session=abc"
CALLBACK = "/v2/link/oauth/callback/oura"
CODE = "one-time-code-from-the-maker"
SECRET = "team-oauth-secret-never-shown"


@dataclass
class FakeMaker:
    """A maker's cloud API behind the provider port: it accepts one code and says whose
    account it grants; each exchange is recorded, so the test sees what was sent."""

    accepted_code: str = CODE
    history_days: int = 7
    exchanges: list[tuple[str, str, OAuthClient | None]] = field(default_factory=list)

    def availability(self, resources: Sequence[str]) -> dict[str, Any]:
        return DemoProvider().availability(resources)

    def fetch(
        self, target: PullTarget, start: date, end: date, now: datetime, attempt: int
    ) -> dict[date, Any]:
        return {}

    def exchange(self, code: str, redirect_uri: str, client: OAuthClient | None) -> OAuthGrant:
        self.exchanges.append((code, redirect_uri, client))
        if code != self.accepted_code:
            raise OAuthExchangeFailed()
        return OAuthGrant(external_user_id="oura-account-7")


@pytest.fixture
def boot(service: Service) -> Bootstrap:
    created = service.bootstrap()
    assert created is not None
    return created


@pytest.fixture
def team(boot: Bootstrap) -> Team:  # the bootstrapped team, whose org key `boot` keeps
    return Team(boot.team_id, boot.team_api_key.plain)


@pytest.fixture
def browser(service: Service) -> Iterator[TestClient]:
    """The team API as a person's browser reaches it: redirects are looked at, not taken."""
    app = create_team_api(service)
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def maker(service: Service) -> FakeMaker:
    """The fake maker, registered for oura in the composition root's one adapter lookup
    (build_service takes no adapters; a real maker's adapter is added there)."""
    fake = FakeMaker()
    built_in = service.pulls.adapter_for

    def adapter_for(provider: str, demo: bool) -> ProviderAdapter:
        return fake if provider == "oura" and not demo else built_in(provider, demo)

    service.pulls.adapter_for = adapter_for
    return fake


def link(client: TestClient, team: Team, **fields: Any) -> tuple[str, str]:
    """(user id, link token) for a new user."""
    user_id = create_user(client, team, f"u-{uuid.uuid4().hex[:8]}")["user_id"]
    response = client.post(
        "/v2/link/token", json={"user_id": user_id, **fields}, headers=team.headers
    )
    assert response.status_code == 200, response.text
    return user_id, response.json()["link_token"]


def outcome(response: Any) -> dict[str, str]:
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert location.startswith("https://app.example.com/linked?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert query.pop("session") == "abc"
    return query


def page(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    return str(response.text)


def connected(client: TestClient, team: Team, user_id: str) -> list[str]:
    response = client.get(f"/v2/user/providers/{user_id}", headers=team.headers)
    assert response.status_code == 200, response.text
    return [p["slug"] for p in response.json()["providers"]]


def is_valid(client: TestClient, token: str) -> bool:
    return bool(client.post("/v2/link/token/isValid", json={"token": token}).json()["is_valid"])


# -- without a maker adapter (this deployment) -------------------------------------------------


def test_without_a_maker_adapter_the_callback_says_the_exchange_is_not_available(
    service: Service, client: TestClient, browser: TestClient, team: Team
) -> None:
    user_id, token = link(client, team)
    state = service.link_tokens.oauth_state(token, "oura")
    response = browser.get(CALLBACK, params={"code": CODE, "state": state})
    text = page(response, 501)
    assert "OAuth exchange is not available in this deployment" in text
    # Nothing was connected, and the link is still good for another try.
    assert connected(client, team, user_id) == []
    assert is_valid(client, token)
    # The demo provider's own exchange says why: it has no maker to sign in at.
    with pytest.raises(OAuthNotSupported):
        DemoProvider().exchange(CODE, "http://x/", None)


def test_with_a_redirect_url_the_outcome_goes_back_to_the_team_s_app(
    service: Service, client: TestClient, browser: TestClient, team: Team
) -> None:
    _, token = link(client, team, redirect_url=APP)
    state = service.link_tokens.oauth_state(token, "oura")
    # Spec 2.5: OAuth providers always redirect with their outcome.
    unavailable = outcome(browser.get(CALLBACK, params={"code": CODE, "state": state}))
    assert unavailable["state"] == "error"
    assert unavailable["error_type"] == "oauth_unavailable"
    declined = outcome(browser.get(CALLBACK, params={"error": "access_denied", "state": state}))
    assert declined["state"] == "error"
    assert declined["error_type"] == "user_cancelled"
    assert "declined" in declined["error"]


def test_a_person_who_declined_sees_so_and_the_link_stays_usable(
    service: Service, client: TestClient, browser: TestClient, team: Team
) -> None:
    _, token = link(client, team)
    state = service.link_tokens.oauth_state(token, "oura")
    params = {"error": "access_denied", "error_description": "<b>nope</b>", "state": state}
    text = page(browser.get(CALLBACK, params=params), 200)
    assert "You declined to connect Oura" in text
    assert "nope" not in text  # the maker's own text is never echoed
    assert is_valid(client, token)


def test_a_missing_or_foreign_state_is_a_400_page(
    service: Service, client: TestClient, browser: TestClient, team: Team
) -> None:
    _, token = link(client, team, redirect_url=APP)
    state = service.link_tokens.oauth_state(token, "oura")
    token_hex = state.split("_")[1]
    forged = [
        None,
        "",
        "not-a-state",
        f"hlo_{token_hex}_{'A' * 43}",  # the right token, a MAC we did not make
        f"hlo_{uuid.uuid4().hex}_{state.split('_', 2)[2]}",  # another (unknown) token
        token,  # the link token itself is no state
    ]
    for value in forged:
        params = {"code": CODE} | ({} if value is None else {"state": value})
        text = page(browser.get(CALLBACK, params=params), 400)
        assert "cannot be matched to a link" in text  # and no redirect: no link is trusted
    # A state made for one provider is refused by another provider's callback.
    page(browser.get("/v2/link/oauth/callback/fitbit", params={"code": CODE, "state": state}), 400)
    # An unknown provider: nothing to sign in with.
    page(browser.get("/v2/link/oauth/callback/nope", params={"code": CODE, "state": state}), 404)


def test_a_state_is_made_only_for_a_usable_link_that_offers_the_provider(
    service: Service, client: TestClient, team: Team
) -> None:
    _, token = link(client, team, filter_on_providers=["fitbit"])
    with pytest.raises(InvalidRequest):
        service.link_tokens.oauth_state(token, "oura")
    assert service.link_tokens.oauth_state(token, "fitbit").startswith("hlo_")
    with pytest.raises(LinkTokenRejected):
        service.link_tokens.oauth_state("hll_" + "0" * 32 + "_" + "x" * 43, "oura")


def test_the_callback_is_a_browser_page_not_an_api_operation(service: Service) -> None:
    assert not any("oauth" in path for path in create_team_api(service).openapi()["paths"])


# -- through a fake maker ----------------------------------------------------------------------


def test_a_successful_callback_connects_the_provider_and_redirects_to_the_app(
    service: Service,
    client: TestClient,
    browser: TestClient,
    team: Team,
    boot: Bootstrap,
    maker: FakeMaker,
) -> None:
    # The team registered its own OAuth client: the redirect_uri handed out is this route.
    management = TestClient(create_management_api(service))
    headers = {"X-Management-Key": boot.management_key.plain}
    base = f"/v1/org/{boot.org_id}/team_custom_credentials/{team.team_id}/oura"
    prepared = management.post(f"{base}/prepare", headers=headers)
    assert prepared.status_code == 200, prepared.text
    redirect_uri = prepared.json()["redirect_uri"]
    assert urlsplit(redirect_uri).path == CALLBACK
    body = {"client_id": "team-client", "client_secret": SECRET}
    assert management.put(base, json=body, headers=headers).status_code == 200

    user_id, token = link(client, team, redirect_url=APP)
    state = service.link_tokens.oauth_state(token, "oura")
    response = browser.get(CALLBACK, params={"code": CODE, "state": state})
    assert outcome(response) == {"state": "success"}
    # The code went to the maker with the registered redirect_uri and the team's client.
    assert maker.exchanges == [(CODE, redirect_uri, OAuthClient("team-client", SECRET))]
    assert SECRET not in repr(maker.exchanges)  # the secret stays out of reprs and logs
    assert connected(client, team, user_id) == ["oura"]
    assert not is_valid(client, token)  # consumed by the connection
    # Historical pulls were scheduled for the new connection, as for any connect.
    assert service.pull_queries.due_pulls(service.clock(), 100)

    # The same callback again (a reload): the link is used up.
    again = outcome(browser.get(CALLBACK, params={"code": CODE, "state": state}))
    assert again["error_type"] == "token_consumed"
    assert len(maker.exchanges) == 1  # checked before a code is spent


def test_without_custom_credentials_the_exchange_uses_the_service_s_client_and_shows_a_page(
    service: Service, client: TestClient, browser: TestClient, team: Team, maker: FakeMaker
) -> None:
    user_id, token = link(client, team, provider="oura")
    state = service.link_tokens.oauth_state(token, "oura")
    text = page(browser.get(CALLBACK, params={"code": CODE, "state": state}), 200)
    assert "Oura is connected" in text
    [(_, _, client_used)] = maker.exchanges
    assert client_used is None
    assert connected(client, team, user_id) == ["oura"]


def test_a_code_the_maker_refuses_is_a_502_page_and_consumes_nothing(
    service: Service, client: TestClient, browser: TestClient, team: Team, maker: FakeMaker
) -> None:
    user_id, token = link(client, team)
    state = service.link_tokens.oauth_state(token, "oura")
    text = page(browser.get(CALLBACK, params={"code": "stale", "state": state}), 502)
    assert "did not accept the sign-in" in text
    assert connected(client, team, user_id) == []
    assert is_valid(client, token)
    # No code at all: refused before the maker is asked.
    page(browser.get(CALLBACK, params={"state": state}), 502)
    assert len(maker.exchanges) == 1


def test_a_link_whose_user_was_deleted_connects_nothing(
    service: Service, client: TestClient, browser: TestClient, team: Team, maker: FakeMaker
) -> None:
    user_id, token = link(client, team)
    state = service.link_tokens.oauth_state(token, "oura")
    assert client.delete(f"/v2/user/{user_id}", headers=team.headers).status_code == 200
    page(browser.get(CALLBACK, params={"code": CODE, "state": state}), 404)
    assert maker.exchanges == []
