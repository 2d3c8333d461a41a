"""The generic OAuth 2.0 adapter of the makers (adapters/providers/oauth2.py): the makers'
documented endpoints in the catalog, their conventions (scope separators, client
authentication, where the account id is), the refresh of an expired access token before
a pull, and pulls that cannot read a maker's data API failing clearly. The fake maker
is a real local HTTP server (tests/makers.py); the browser flow is the one of
test_oauth_callback.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.providers.oauth2 import OAuth2Maker, tokens_of
from healthledger.adapters.reference import (
    ReferenceDataError,
    parse_provider_catalog,
    provider_catalog,
)
from healthledger.adapters.settings import OAuthClientSetting, Settings
from healthledger.domain.connections.providers import (
    NON_RETRIABLE,
    OAuthClient,
    OAuthNotSupported,
    ProviderError,
)
from healthledger.domain.connections.resource_feeds import ResourceFeed
from pydantic import SecretStr

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import (
    API,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    Browser,
    clear_copies,
    connected,
    signed_in_user,
    token_rows,
)
from tests.makers import FakeMaker, fake_maker
from tests.stream_ids import stream_of_connection, stream_of_feed

# The makers whose documented OAuth 2.0 endpoints the catalog holds (ADR 0022 says why
# the others are not among them).
OAUTH_SLUGS = {
    "oura",
    "fitbit",
    "whoop",
    "whoop_v2",
    "strava",
    "wahoo",
    "google_fit",
    "dexcom",
    "dexcom_v3",
    "polar",
    "withings",
    "garmin",
}
POLAR = OAuthClientSetting(client_id="polar-client", client_secret=SecretStr("polar-secret"))


@pytest.fixture
def maker() -> Iterator[FakeMaker]:
    with fake_maker() as running:
        running.register(SERVICE_CLIENT, SERVICE.client_secret.get_secret_value())
        running.register(POLAR.client_id, POLAR.client_secret.get_secret_value())
        yield running


@pytest.fixture
def svc(settings: Settings, maker: FakeMaker, clock: Clock) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": maker.base,
            "oauth_clients": {"oura": SERVICE, "polar": POLAR, "whoop": SERVICE},
            # Polar's reader registers the person at the sign-in: with the stand-in maker,
            # which does not know AccessLink (a 404 that leaves the sign-in standing).
            "polar_api_url": maker.base,
        }
    )
    built = build_service(configured, clock=clock)
    yield built
    built.close()


@pytest.fixture
def home(svc: Service) -> Team:
    boot = svc.bootstrap()
    assert boot is not None
    return Team(boot.team_id, boot.team_api_key.plain)


@pytest.fixture
def api(svc: Service) -> Iterator[Any]:
    from fastapi.testclient import TestClient
    from healthledger.adapters.http.team_api import create_team_api

    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


def connect(api: Any, home: Team, browser: Browser, provider: str = "oura") -> uuid.UUID:
    return signed_in_user(api, home, browser, provider)


def last_failure(svc: Service, user_id: uuid.UUID, resource: str, provider: str = "oura") -> Any:
    feed_id = stream_of_feed(svc, user_id, provider, resource)
    return list(svc.ledger.events.get(feed_id))[-1]


def status_of(api: Any, home: Team, user_id: uuid.UUID) -> dict[str, Any]:
    response = api.get(f"/v2/user/providers/{user_id}", headers=home.headers)
    assert response.status_code == 200, response.text
    [provider] = response.json()["providers"]
    return dict(provider)


# -- the catalog -------------------------------------------------------------------------------


def test_the_catalog_documents_each_maker_s_endpoints_and_each_has_an_adapter(
    svc: Service,
) -> None:
    with_oauth = {entry.slug: entry for entry in provider_catalog() if entry.oauth is not None}
    assert set(with_oauth) == OAUTH_SLUGS
    for slug, entry in with_oauth.items():
        assert entry.oauth is not None and entry.auth_type == "oauth"
        for url in (entry.oauth.authorize_url, entry.oauth.token_url, entry.oauth.documentation):
            assert url.startswith("https://"), slug
        assert svc.pulls.adapter_for(slug, False) is svc.oauth_makers[slug]
    # A provider without documented endpoints has no adapter: nothing to sign in at.
    with pytest.raises(LookupError):
        svc.pulls.adapter_for("ihealth", False)


def test_the_catalog_refuses_oauth_endpoints_where_no_one_signs_in_at_a_maker() -> None:
    entry = {
        "slug": "renpho",
        "name": "Renpho",
        "description": "Scales.",
        "logo": "https://storage.healthledger.dev/providers/renpho.png",
        "auth_type": "password",
        "source_type": "device",
        "supported_resources": ["weight"],
        "oauth": {
            "authorize_url": "https://example.com/authorize",
            "token_url": "https://example.com/token",
            "documentation": "https://example.com/docs",
        },
    }
    with pytest.raises(ReferenceDataError, match="renpho"):
        parse_provider_catalog(json.dumps({"providers": [entry]}), "test.json")
    plain = {**entry, "auth_type": "oauth"}
    plain["oauth"] = {**entry["oauth"], "token_url": "http://example.com/token"}  # type: ignore[dict-item]
    with pytest.raises(ReferenceDataError):
        parse_provider_catalog(json.dumps({"providers": [plain]}), "test.json")


def documented(svc: Service, slug: str, client: OAuthClient | None) -> OAuth2Maker:
    """The adapter of a maker at its documented endpoints (no stand-in)."""
    (entry,) = [e for e in provider_catalog() if e.slug == slug]
    assert entry.oauth is not None
    return OAuth2Maker(
        entry,
        entry.oauth,
        service_client=client,
        custom_client=lambda team_id, provider: None,
        tokens=svc.provider_tokens,
        http=svc.oauth_http,
        clock=svc.clock,
    )


def test_authorization_urls_follow_each_maker_s_documented_conventions(svc: Service) -> None:
    client = OAuthClient("c-1", "s-1")
    cases = {
        "oura": ("https://cloud.ouraring.com/oauth/authorize", {}),
        "strava": ("https://www.strava.com/oauth/authorize", {"scope": "read,activity:read_all"}),
        "google_fit": (
            "https://accounts.google.com/o/oauth2/v2/auth",
            {"access_type": "offline", "prompt": "consent"},
        ),
        "dexcom_v3": ("https://api.dexcom.com/v2/oauth2/login", {"scope": "offline_access"}),
    }
    for slug, (endpoint, expected) in cases.items():
        url = documented(svc, slug, client).authorization_url(f"{API}/cb", None, "st", "ch")
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == endpoint, slug
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        assert query["client_id"] == "c-1" and query["state"] == "st"
        assert query["code_challenge"] == "ch" and query["code_challenge_method"] == "S256"
        assert query["redirect_uri"] == f"{API}/cb" and query["response_type"] == "code"
        assert expected.items() <= query.items(), slug
        assert "s-1" not in url  # the secret never goes to the browser
    # No client of the team's and none of the service's: no one to send anywhere.
    with pytest.raises(OAuthNotSupported):
        documented(svc, "oura", None).authorization_url(f"{API}/cb", None, "st", "ch")


def test_a_token_answer_is_read_as_rfc_6749_says(clock: Clock) -> None:
    now = clock()
    full = tokens_of(
        {"access_token": "a", "token_type": "bearer", "expires_in": 60, "refresh_token": "r"},
        now,
        None,
    )
    assert (full.access_token, full.refresh_token, full.token_type) == ("a", "r", "bearer")
    assert full.expires_at == now + timedelta(seconds=60) and full.expired(now)
    # A refresh answer without a refresh token keeps the one it was asked with; one
    # without expires_in lives until revoked.
    kept = tokens_of({"access_token": "b"}, now, "old")
    assert (kept.refresh_token, kept.expires_at, kept.expired(now)) == ("old", None, False)
    assert "'a'" not in repr(full) and "'r'" not in repr(full)  # kept out of logs


# -- through the fake maker ----------------------------------------------------------------------


def test_basic_client_authentication_and_the_account_id_of_the_token_answer(
    svc: Service, api: Any, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    # Polar authenticates clients with HTTP Basic and names the account `x_user_id`.
    maker.answer_extra = {"x_user_id": 48151623}
    user_id = connect(api, home, browser, "polar")
    [exchange] = maker.grants("authorization_code")
    assert exchange.auth == "basic" and exchange.client_id == POLAR.client_id
    assert "client_secret" not in exchange.form
    assert status_of(api, home, user_id)["external_user_id"] == "48151623"


def test_an_expired_access_token_is_refreshed_before_a_pull_which_then_fails_clearly(
    svc: Service, api: Any, home: Team, browser: Browser, clock: Clock, maker: FakeMaker
) -> None:
    # WHOOP: a maker whose data API has no reader yet (Oura's, Fitbit's and Withings'
    # have: test_oura.py, test_fitbit.py, test_withings.py).
    user_id = connect(api, home, browser, "whoop")
    connection_id = stream_of_connection(svc, user_id, "whoop")
    first = svc.provider_tokens.current(connection_id)
    assert first is not None and first.version == 1
    # Two hours on, the access token (an hour's) has expired: the pull refreshes it.
    clock.advance(timedelta(hours=2))
    svc.jobs.run_due_pulls()
    [refresh] = maker.grants("refresh_token")
    assert refresh.client_id == SERVICE_CLIENT
    assert refresh.form["refresh_token"] == first.tokens.refresh_token
    fresh = svc.provider_tokens.current(connection_id)
    assert fresh is not None and fresh.version == 2
    assert fresh.tokens.access_token == maker.issued[2]
    assert fresh.tokens.refresh_token == maker.issued[3]  # the maker rotated it
    assert fresh.tokens.expires_at == clock() + timedelta(seconds=maker.expires_in)
    [row] = token_rows(svc, str(user_id))
    assert row.refreshed_at == clock() and row.expires_at == fresh.tokens.expires_at
    assert clear_copies(svc, maker.issued) == set()
    # No reader of the maker's data API here: each pull failed for good, saying why, and
    # the connection itself is fine.
    failed = last_failure(svc, user_id, "sleep", "whoop")
    assert isinstance(failed, ResourceFeed.PullFailed)
    assert failed.error_code == NON_RETRIABLE
    assert "WHOOP's data API cannot be read by this deployment" in failed.reason
    assert status_of(api, home, user_id)["status"] == "connected"


def test_a_fresh_access_token_is_used_as_it_is(
    svc: Service, api: Any, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id = connect(api, home, browser, "whoop")
    svc.jobs.run_due_pulls()
    assert maker.grants("refresh_token") == []
    assert last_failure(svc, user_id, "sleep", "whoop").error_code == NON_RETRIABLE


def test_a_grant_the_maker_no_longer_accepts_puts_the_connection_in_error(
    svc: Service, api: Any, home: Team, browser: Browser, clock: Clock, maker: FakeMaker
) -> None:
    user_id = connect(api, home, browser)
    maker.revoked = True  # the person revoked our access at the maker
    clock.advance(timedelta(hours=2))
    svc.jobs.run_due_pulls()
    assert len(maker.grants("refresh_token")) == 1
    provider = status_of(api, home, user_id)
    assert provider["status"] == "error"
    assert provider["error_details"]["error_type"] == "token_refresh_failed"
    assert last_failure(svc, user_id, "sleep").error_code == NON_RETRIABLE
    # The stored grant is left as it was: a new sign-in replaces it.
    [row] = token_rows(svc, str(user_id))
    assert row.version == 1


def test_a_maker_that_cannot_be_reached_is_a_passing_failure(
    svc: Service, api: Any, home: Team, browser: Browser, clock: Clock, maker: FakeMaker
) -> None:
    user_id = connect(api, home, browser)
    connection_id = stream_of_connection(svc, user_id, "oura")
    (entry,) = [e for e in provider_catalog() if e.slug == "oura"]
    assert entry.oauth is not None
    transport = Counting()
    with httpx.Client(timeout=2, transport=transport) as http:
        unreachable = OAuth2Maker(
            entry,
            entry.oauth,
            service_client=svc.oauth_makers["oura"].service_client,
            custom_client=lambda team_id, provider: None,
            tokens=svc.provider_tokens,
            http=http,
            clock=clock,
            maker_url="http://127.0.0.1:9",  # the discard port: nothing answers
        )
        clock.advance(timedelta(hours=2))
        with pytest.raises(ProviderError) as raised:
            unreachable.access_token(connection_id, clock())
        assert raised.value.retriable and raised.value.code == "transport_failure"
        assert raised.value.connection_error is None
        assert transport.calls == 1
        # The other resources of the pull get the same answer without asking again...
        with pytest.raises(ProviderError):
            unreachable.access_token(connection_id, clock())
        assert transport.calls == 1
        # ... until a minute has passed.
        clock.advance(timedelta(seconds=61))
        with pytest.raises(ProviderError):
            unreachable.access_token(connection_id, clock())
        assert transport.calls == 2
    assert connected(api, home, str(user_id)) == ["oura"]


class Counting(httpx.HTTPTransport):
    """The network, counting the requests sent through it."""

    calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        return super().handle_request(request)


def test_a_refresh_never_overwrites_a_newer_grant(
    svc: Service, api: Any, home: Team, browser: Browser, clock: Clock, maker: FakeMaker
) -> None:
    user_id = connect(api, home, browser)
    connection_id = stream_of_connection(svc, user_id, "oura")
    stale = svc.provider_tokens.current(connection_id)
    assert stale is not None
    clock.advance(timedelta(hours=2))
    token = svc.oauth_makers["oura"].access_token(connection_id, clock())
    assert token == maker.issued[2]
    # Another worker that read the grant before that refresh cannot store its own over it.
    assert not svc.provider_tokens.replace(stale, stale.tokens, clock())
    current = svc.provider_tokens.current(connection_id)
    assert current is not None and current.tokens.access_token == token
