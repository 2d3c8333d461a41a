"""The OAuth link flow end to end, as a person's browser goes through it: the link page
(its own origin) sends the browser to a fake maker (a real HTTP server) with a signed
state, PKCE and a cookie that binds the sign-in to the browser; the maker sends it back
to the callback on the team API (`GET /v2/link/oauth/callback/{provider}`, the
redirect_uri custom credentials hand out), which connects the provider and stores the
maker's tokens sealed with the user's key. The browser is an httpx client with a cookie
jar: the two apps answer in process at their configured origins, the maker over TCP."""

from __future__ import annotations

import logging
import uuid
import warnings
from collections.abc import Iterator
from datetime import timedelta
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.management_api import create_management_api
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.oauth_flows import OAuthFlow
from healthledger.domain.connections.providers import OAuthNotSupported
from healthledger.domain.context import CommandContext
from healthledger.domain.teams.directory import Bootstrap
from healthledger.domain.users.user import User

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import (
    API,
    APP,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    TEAM_CLIENT,
    TEAM_SECRET,
    Browser,
    a_browser,
    clear_copies,
    connected,
    link,
    outcome,
    token_rows,
)
from tests.makers import FakeMaker, challenge, fake_maker
from tests.stream_ids import stream_of_connection

CALLBACK = "/v2/link/oauth/callback/oura"

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def maker() -> Iterator[FakeMaker]:
    with fake_maker() as running:
        running.register(SERVICE_CLIENT, SERVICE_SECRET)
        running.register(TEAM_CLIENT, TEAM_SECRET)
        yield running


@pytest.fixture
def svc(settings: Settings, maker: FakeMaker, clock: Clock) -> Iterator[Service]:
    """The service with the fake maker standing in for every maker, and a client of its
    own registered there for oura."""
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": maker.base,
            "oauth_clients": {"oura": SERVICE},
        }
    )
    built = build_service(configured, clock=clock)
    yield built
    built.close()


@pytest.fixture
def boot(svc: Service) -> Bootstrap:
    created = svc.bootstrap()
    assert created is not None
    return created


@pytest.fixture
def home(boot: Bootstrap) -> Team:
    return Team(boot.team_id, boot.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


def custom_credentials(svc: Service, boot: Bootstrap, provider: str = "oura") -> str:
    """The team registers its own OAuth client: the redirect_uri it is handed out."""
    management = TestClient(create_management_api(svc))
    headers = {"X-Management-Key": boot.management_key.plain}
    base = f"/v1/org/{boot.org_id}/team_custom_credentials/{boot.team_id}/{provider}"
    prepared = management.post(f"{base}/prepare", headers=headers)
    assert prepared.status_code == 200, prepared.text
    body = {"client_id": TEAM_CLIENT, "client_secret": TEAM_SECRET}
    assert management.put(base, json=body, headers=headers).status_code == 200
    return str(prepared.json()["redirect_uri"])


def page(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    return response.text


def is_valid(api: TestClient, token: str) -> bool:
    return bool(api.post("/v2/link/token/isValid", json={"token": token}).json()["is_valid"])


def flow_cookie(response: httpx.Response) -> tuple[str, Any]:
    """The one Set-Cookie of a flow's start: (name, morsel)."""
    [header] = response.headers.get_list("set-cookie")
    jar: SimpleCookie = SimpleCookie()
    jar.load(header)
    [(name, morsel)] = jar.items()
    return name, morsel


# -- the link page starts the sign-in --------------------------------------------------------


def test_the_link_page_offers_a_sign_in_only_where_a_client_is_there(
    svc: Service, api: TestClient, home: Team, boot: Bootstrap, browser: Browser
) -> None:
    _, token = link(api, home, filter_on_providers=["oura", "whoop", "garmin"])
    text = browser.client.get(f"{LINK}/", params={"token": token}).text
    # Oura: the service's own client signs in; in the sandbox a simulated device too.
    assert text.count('action="oauth/start"') == 1
    assert 'value="oura"><button type="submit">Sign in</button>' in text
    assert "Simulated device" in text
    # Whoop has documented endpoints but no client here yet; Garmin has no adapter.
    assert text.count("Not available here") == 2
    refused = browser.start(token, "whoop")
    page(refused, 400)
    # The team registers its own client for Whoop: now its people can sign in there.
    custom_credentials(svc, boot, "whoop")
    text = browser.client.get(f"{LINK}/", params={"token": token}).text
    assert text.count('action="oauth/start"') == 2 and text.count("Not available here") == 1
    started = browser.start(token, "whoop")
    assert started.status_code == 303
    assert started.headers["location"].startswith(
        f"{svc.settings.oauth_maker_url}/whoop/authorize?"
    )


def test_outside_the_sandbox_a_person_signs_in_at_the_maker_and_is_offered_no_simulation(
    svc: Service, api: TestClient, home: Team, browser: Browser
) -> None:
    issued = svc.teams.issue_team_api_key(
        CommandContext.system("test:setup"), home.team_id, environment="production"
    )
    production = Team(home.team_id, issued.plain)
    _, token = link(api, production, filter_on_providers=["oura", "fitbit"])
    text = browser.client.get(f"{LINK}/", params={"token": token}).text
    assert text.count('action="oauth/start"') == 1  # oura, at its maker
    assert "Simulated device" not in text
    # Fitbit has no client here: its demo device is still what the page offers.
    assert text.count('action="connect"') == 1 and 'value="fitbit"><button' in text
    refused = browser.client.post(f"{LINK}/connect", data={"token": token, "provider": "oura"})
    page(refused, 400)
    assert is_valid(api, token)


def test_the_sign_in_goes_to_the_maker_with_state_pkce_and_a_browser_bound_cookie(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    _, token = link(api, home, redirect_url=APP)
    started = browser.start(token)
    assert started.status_code == 303
    location = urlsplit(started.headers["location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{maker.base}/oura/authorize"
    query = {k: v[0] for k, v in parse_qs(location.query).items()}
    assert query["response_type"] == "code"
    assert query["client_id"] == SERVICE_CLIENT
    assert query["redirect_uri"] == f"{API}{CALLBACK}"
    assert query["code_challenge_method"] == "S256"
    assert len(query["code_challenge"]) == 43
    # The catalog's documented scopes for the maker, space-separated.
    assert query["scope"] == "personal daily heartrate workout session spo2Daily"
    assert query["state"].startswith("hlo_")
    # The state names a recorded flow of this link; its secret is only in the cookie.
    flow = svc.ledger.find(uuid.UUID(query["state"].split("_")[1]))
    assert isinstance(flow, OAuthFlow) and flow.provider == "oura" and flow.returned_at is None
    name, cookie = flow_cookie(started)
    assert name == f"hl_oauth_{flow.id.hex}"
    assert cookie["path"] == CALLBACK  # sent to the callback only
    assert cookie["httponly"] is True
    assert cookie["samesite"].lower() == "lax"
    assert not cookie["secure"]  # the link page is plain http here
    assert 0 < int(cookie["max-age"]) <= 30 * 60
    assert flow.bound_to(cookie.value) and cookie.value not in repr(flow.__dict__)
    # Nothing of the cookie is in the URL the browser takes to the maker.
    assert cookie.value not in started.headers["location"]


def test_the_sign_in_cookie_is_secure_when_the_link_page_is_served_over_https(
    settings: Settings, maker: FakeMaker
) -> None:
    configured = settings.model_copy(
        update={
            "link_url": "https://link.example.com",
            "oauth_maker_url": maker.base,
            "oauth_cookie_domain": "example.com",
            "oauth_clients": {"oura": SERVICE},
        }
    )
    secure = build_service(configured)
    try:
        boot = secure.bootstrap()
        assert boot is not None
        api = TestClient(create_team_api(secure))
        _, token = link(api, Team(boot.team_id, boot.team_api_key.plain))
        started = TestClient(create_link_app(secure), follow_redirects=False).post(
            "/oauth/start", data={"token": token, "provider": "oura"}
        )
        assert started.status_code == 303
        _, cookie = flow_cookie(started)
        assert cookie["secure"] is True and cookie["domain"] == "example.com"
    finally:
        secure.close()


# -- and the callback ends it -----------------------------------------------------------------


def test_a_person_connects_through_the_maker_with_the_team_s_own_client(
    svc: Service,
    api: TestClient,
    home: Team,
    boot: Bootstrap,
    browser: Browser,
    maker: FakeMaker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    redirect_uri = custom_credentials(svc, boot)
    assert redirect_uri == f"{API}{CALLBACK}"
    user_id, token = link(api, home, redirect_url=APP)
    # httpx's own request log too, which `serve` quiets (its logging set-up, if another
    # test of this process ran it, would hide the calls to the maker from this check).
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="httpx"):
        callback, answer = browser.sign_in(token)
    assert outcome(answer) == {"state": "success"}
    # The authorization and the exchange used the team's client and the handed-out
    # redirect_uri; the maker checked the PKCE verifier against the challenge it got.
    [authorization] = maker.authorizations
    assert authorization.client_id == TEAM_CLIENT
    [exchange] = maker.grants("authorization_code")
    assert exchange.client_id == TEAM_CLIENT and exchange.auth == "post"
    assert exchange.form["redirect_uri"] == redirect_uri
    assert challenge(exchange.form["code_verifier"]) == authorization.code_challenge
    assert connected(api, home, user_id) == ["oura"]
    assert not is_valid(api, token)  # consumed by the connection
    assert svc.pull_queries.due_pulls(svc.clock(), 100)  # pulls scheduled, as for any connect
    # The flow's cookie is taken back.
    assert not [c for c in browser.client.cookies.jar if c.name.startswith("hl_oauth_")]

    # The maker's tokens are stored with the connection, sealed with the user's key.
    [row] = token_rows(svc, user_id)
    assert row.connection_id == stream_of_connection(svc, uuid.UUID(user_id), "oura")
    assert row.version == 1
    # With its maker and the client that obtained it (revision 0047): neither in clear.
    opened = svc.key_store.open(uuid.UUID(user_id), row.sealed_grant)
    assert opened is not None
    assert (opened["provider"], opened["client_id"]) == ("oura", TEAM_CLIENT)
    assert [opened["tokens"]["access_token"], opened["tokens"]["refresh_token"]] == maker.issued
    assert row.expires_at == svc.clock() + timedelta(seconds=maker.expires_in)
    # ... and nowhere in clear: not in any table, not in the database's files.
    assert len(maker.issued) == 2
    assert clear_copies(svc, maker.issued) == set()
    assert clear_copies(svc, [TEAM_SECRET, exchange.form["code_verifier"]]) == set()
    # Nor in any log line of the flow (which did log: the calls to the maker).
    logged = caplog.text
    assert "token" in logged.lower()
    for secret in [*maker.issued, TEAM_SECRET, exchange.form["code_verifier"]]:
        assert secret not in logged

    # The same callback again (a reload): the link is used up, the code not spent twice.
    replayed = browser.client.get(callback)
    page(replayed, 403)  # the cookie was taken back: this browser no longer holds the flow


def test_without_custom_credentials_the_service_s_client_signs_in_and_a_page_shows_it(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    maker.answer_extra = {"user_id": "oura-account-7"}
    user_id, token = link(api, home, provider="oura")
    _, answer = browser.sign_in(token)
    assert "Oura is connected" in page(answer, 200)
    [exchange] = maker.grants("authorization_code")
    assert exchange.client_id == SERVICE_CLIENT
    assert connected(api, home, user_id) == ["oura"]
    [row] = token_rows(svc, user_id)
    stored = svc.provider_tokens.current(row.connection_id)
    assert stored is not None and stored.client_id == SERVICE_CLIENT


def test_a_callback_without_the_browser_s_cookie_is_refused_and_its_owner_goes_on(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    started = browser.start(token)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    name, cookie = flow_cookie(started)
    elsewhere = a_browser(svc)
    try:
        # Another browser (the code and state intercepted, or a link sent to a victim).
        text = page(elsewhere.client.get(callback), 403)
        assert "started in another browser" in text
        # With a cookie of its own making.
        elsewhere.client.cookies.set(name, "forged-" + cookie.value[7:], domain="127.0.0.1")
        page(elsewhere.client.get(callback), 403)
    finally:
        elsewhere.client.close()
    assert maker.grants("authorization_code") == []  # refused before the code is spent
    assert connected(api, home, user_id) == []
    # The browser that started it still completes it.
    assert outcome(browser.client.get(callback)) == {"state": "success"}
    assert connected(api, home, user_id) == ["oura"]


def test_a_replayed_state_is_refused(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    maker.decision = "access_denied"
    started = browser.start(token)
    name, cookie = flow_cookie(started)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    assert outcome(browser.client.get(callback))["error_type"] == "user_cancelled"
    # The same state again, even with the flow's cookie put back: used once.
    browser.client.cookies.set(name, cookie.value, domain="127.0.0.1", path=CALLBACK)
    text = page(browser.client.get(callback), 400)
    assert "already been used" in text
    # The link itself is still good: a new sign-in works...
    maker.decision = "approve"
    started = browser.start(token)
    name, cookie = flow_cookie(started)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    assert outcome(browser.client.get(callback)) == {"state": "success"}
    assert connected(api, home, user_id) == ["oura"]
    # ... and its callback replayed with its cookie is told the link is used up, with no
    # second exchange of the code.
    browser.client.cookies.set(name, cookie.value, domain="127.0.0.1", path=CALLBACK)
    assert outcome(browser.client.get(callback))["error_type"] == "token_consumed"
    assert len(maker.grants("authorization_code")) == 1


def test_the_maker_s_access_denied_goes_back_to_the_app_with_the_link_error_parameters(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    maker.decision = "access_denied"
    _, answer = browser.sign_in(token)
    declined = outcome(answer)
    assert declined["state"] == "error" and declined["error_type"] == "user_cancelled"
    assert "declined" in declined["error"] and "nope" not in declined["error"]
    # Another refusal of the maker's (RFC 6749's server_error): the provider failed.
    maker.decision = "server_error"
    _, answer = browser.sign_in(token)
    assert outcome(answer)["error_type"] == "provider_credential_error"
    assert maker.grants("authorization_code") == []
    assert connected(api, home, user_id) == [] and is_valid(api, token)


def test_without_a_redirect_url_a_declined_sign_in_is_a_page(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    _, token = link(api, home)
    maker.decision = "access_denied"
    _, answer = browser.sign_in(token)
    text = page(answer, 200)
    assert "You declined to connect Oura" in text and "nope" not in text


def test_a_code_the_maker_refuses_is_a_502_page_and_consumes_nothing(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id, token = link(api, home)
    started = browser.start(token)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    stale = callback.replace("code=code-", "code=stale-")
    assert "did not accept the sign-in" in page(browser.client.get(stale), 502)
    assert connected(api, home, user_id) == [] and is_valid(api, token)
    # No code at all: refused before the maker is asked.
    started = browser.start(token)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    no_code = f"{API}{CALLBACK}?state={parse_qs(urlsplit(callback).query)['state'][0]}"
    page(browser.client.get(no_code), 502)
    assert len(maker.grants("authorization_code")) == 1


def test_a_state_we_did_not_make_is_a_400_page(
    svc: Service, api: TestClient, home: Team, browser: Browser
) -> None:
    _, token = link(api, home, redirect_url=APP)
    started = browser.start(token)
    state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
    flow_hex = state.split("_")[1]
    forged = [
        None,
        "",
        "not-a-state",
        f"hlo_{flow_hex}_{'A' * 43}",  # the right flow, a MAC we did not make
        f"hlo_{uuid.uuid4().hex}_{state.split('_', 2)[2]}",  # another (unknown) flow
        token,  # the link token itself is no state
    ]
    for value in forged:
        params = {"code": "c"} | ({} if value is None else {"state": value})
        text = page(browser.client.get(f"{API}{CALLBACK}", params=params), 400)
        assert "cannot be matched to a link" in text  # and no redirect: no link is trusted
    # A state made for one provider is refused by another provider's callback.
    fitbit = f"{API}/v2/link/oauth/callback/fitbit"
    page(browser.client.get(fitbit, params={"code": "c", "state": state}), 400)
    # An unknown provider: nothing to sign in with.
    nope = f"{API}/v2/link/oauth/callback/nope"
    page(browser.client.get(nope, params={"code": "c", "state": state}), 404)


def test_a_sign_in_that_took_too_long_is_refused(
    svc: Service, api: TestClient, home: Team, browser: Browser, clock: Clock, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    started = browser.start(token)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    clock.advance(timedelta(minutes=31))
    assert "expired" in page(browser.client.get(callback), 400)
    assert maker.grants("authorization_code") == [] and connected(api, home, user_id) == []
    # The link is good for 60 minutes: a new sign-in still works.
    _, answer = browser.sign_in(token)
    assert outcome(answer) == {"state": "success"}


def test_a_link_that_died_meanwhile_goes_back_to_the_app(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    started = browser.start(token)
    callback = browser.client.get(started.headers["location"]).headers["location"]
    assert api.delete(f"/v2/user/{user_id}", headers=home.headers).status_code == 200
    assert outcome(browser.client.get(callback))["error_type"] == "invalid_token"
    assert maker.grants("authorization_code") == []


def test_credentials_deleted_during_the_sign_in_make_it_unavailable(
    svc: Service, api: TestClient, home: Team, boot: Bootstrap, browser: Browser
) -> None:
    custom_credentials(svc, boot, "whoop")
    user_id, token = link(api, home, redirect_url=APP)
    started = browser.start(token, "whoop")
    callback = browser.client.get(started.headers["location"]).headers["location"]
    management = TestClient(create_management_api(svc))
    deleted = management.delete(
        f"/v1/org/{boot.org_id}/team_custom_credentials/{boot.team_id}/whoop",
        headers={"X-Management-Key": boot.management_key.plain},
    )
    assert deleted.status_code == 200, deleted.text
    assert outcome(browser.client.get(callback))["error_type"] == "oauth_unavailable"
    assert connected(api, home, user_id) == [] and is_valid(api, token)


def test_the_callback_is_a_browser_page_not_an_api_operation(svc: Service) -> None:
    # (The link API's `/v2/link/provider/oauth/{oauth_provider}` is an API operation of
    # its own: it answers where the browser signs in, ADR 0038.)
    paths = create_team_api(svc).openapi()["paths"]
    assert not any("/oauth/callback" in path for path in paths)
    # The demo adapter has no maker to send anyone to.
    with pytest.raises(OAuthNotSupported):
        DemoProvider().authorization_url(f"{API}{CALLBACK}", None, "s", "c")
    with pytest.raises(OAuthNotSupported):
        DemoProvider().exchange("code", f"{API}{CALLBACK}", None, "v")


# -- the tokens go with the connection, and with the person -------------------------------------


def test_the_tokens_go_with_the_connection_and_the_user(
    svc: Service, api: TestClient, home: Team, browser: Browser, clock: Clock, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    outcome(browser.sign_in(token)[1])
    [row] = token_rows(svc, user_id)
    sealed = row.sealed_grant
    # Deleting the user deregisters its connections: their tokens are only kept for the
    # revocation at the maker (test_grant_revocation.py), never used again.
    assert api.delete(f"/v2/user/{user_id}", headers=home.headers).status_code == 200
    assert [r.revoke_due_at is not None for r in token_rows(svc, user_id)] == [True]
    assert svc.provider_tokens.current(row.connection_id) is None
    # The erasure checks the place too, and destroys the key: no copy of the sealed
    # tokens (a backup's) opens any more.
    clock.advance(timedelta(days=7, minutes=1))
    assert svc.jobs.sweep_erasures() == 1
    erased = list(svc.ledger.events.get(uuid.UUID(user_id)))[-1]
    assert isinstance(erased, User.Erased)
    # Found and destroyed: the revocation was not done (no maker answers it here).
    assert erased.checked["provider_tokens"] == 1
    assert token_rows(svc, user_id) == []
    assert svc.key_store.open(uuid.UUID(user_id), sealed) is None
    assert clear_copies(svc, maker.issued) == set()


def test_a_team_s_deregistration_ends_the_tokens_and_a_reconnection_stores_new_ones(
    svc: Service, api: TestClient, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id, token = link(api, home, redirect_url=APP)
    outcome(browser.sign_in(token)[1])
    assert len(token_rows(svc, user_id)) == 1
    assert api.delete(f"/v2/user/{user_id}/oura", headers=home.headers).status_code == 200
    # Kept only for the revocation at the maker (test_grant_revocation.py).
    assert [r.revoke_due_at is not None for r in token_rows(svc, user_id)] == [True]
    response = api.post("/v2/link/token", json={"user_id": user_id}, headers=home.headers)
    _, again = browser.sign_in(response.json()["link_token"])
    assert again.status_code == 200  # no redirect_url: a page
    [row] = token_rows(svc, user_id)
    opened = svc.key_store.open(uuid.UUID(user_id), row.sealed_grant)
    # The second grant's.
    assert opened is not None and opened["tokens"]["access_token"] == maker.issued[-2]
