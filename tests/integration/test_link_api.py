"""The link API of a team's own widget (adapters/http/link_api.py, ADR 0038) against the
fake LibreView (adapters/makers/fake_libreview.py, a real HTTP server on localhost), on
SQLite and PostgreSQL: a person signs in with a password, with a password and a second
factor, or with an e-mail code; the connection's glucose is pulled with the grant kept
sealed; wrong passwords, a locked account, a wrong or replayed code, expired, used and
foreign tokens answer what the docs say, and no credential reaches the log or the
database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_libreview import (
    LOCK_AFTER,
    FakeLibreView,
    running_fake_libreview,
)
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from healthledger.domain.context import CommandContext

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration import maker_reads as reads
from tests.integration.stored_text import stored_text
from tests.stream_ids import stream_of_connection

LENA = ("lena@example.com", "correct horse battery")  # no second factor
OMAR = ("omar@example.com", "staple 42")  # a code by SMS
HISTORY_DAYS = 5


@pytest.fixture
def libreview(clock: Clock) -> Iterator[FakeLibreView]:
    with running_fake_libreview(clock=clock) as fake:
        yield fake


@pytest.fixture
def svc(settings: Settings, libreview: FakeLibreView, clock: Clock) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "libreview_api_url": libreview.base,
            "libreview_history_days": HISTORY_DAYS,
            "link_url": "https://link.example.test",
        }
    )
    built = build_service(configured, clock=clock)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def api(svc: Service) -> Iterator[TestClient]:
    with TestClient(create_team_api(svc), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def home(svc: Service) -> Team:
    created = svc.bootstrap()
    assert created is not None
    return Team(created.team_id, created.team_api_key.plain)


def new_user(api: TestClient, home: Team) -> uuid.UUID:
    response = api.post("/v2/user", json={"client_user_id": uuid.uuid4().hex}, headers=home.headers)
    assert response.status_code == 200, response.text
    return uuid.UUID(response.json()["user_id"])


def link_token(api: TestClient, home: Team, user_id: uuid.UUID, **options: Any) -> str:
    response = api.post(
        "/v2/link/token", json={"user_id": str(user_id), **options}, headers=home.headers
    )
    assert response.status_code == 200, response.text
    return str(response.json()["link_token"])


def password(
    api: TestClient, token: str, person: tuple[str, str], provider: str = "freestyle_libre"
) -> Any:
    # No team key: the link token is the credential.
    return api.post(
        f"/v2/link/provider/password/{provider}",
        json={"username": person[0], "password": person[1]},
        headers={"x-vital-link-token": token},
    )


def complete(api: TestClient, token: str, code: str, provider: str = "freestyle_libre") -> Any:
    return api.post(
        f"/v2/link/provider/password/{provider}/complete_mfa",
        json={"mfa_code": code},
        headers={"x-vital-link-token": token},
    )


def test_a_password_sign_in_connects_and_its_glucose_is_pulled(
    svc: Service, api: TestClient, home: Team, libreview: FakeLibreView, clock: Clock
) -> None:
    user_id = new_user(api, home)
    token = link_token(api, home, user_id, redirect_url="https://app.example.com/done")
    response = password(api, token, LENA)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "state": "success",
        "provider": "freestyle_libre",
        "connected": True,
        "redirect_url": "https://app.example.com/done",
        "error_type": None,
        "error": None,
        "provider_mfa": None,
    }
    # The token is used up by the connection.
    again = password(api, token, LENA)
    assert again.status_code == 401
    assert again.json()["detail"]["error_type"] == "token_consumed"
    state = api.get("/v2/link/state", headers={"x-vital-link-token": token}).json()
    assert state["state"] == "consumed"

    # The grant is kept sealed, and reads the person's glucose.
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, "freestyle_libre"))
    assert stored is not None and stored.tokens.access_token
    assert svc.jobs.run_due_pulls() > 0
    assert reads.feed(svc, user_id, "freestyle_libre", "glucose").status == "success"
    yesterday = (clock() - timedelta(days=1)).date()
    served = libreview.readings("lena", yesterday)
    answer = reads.get(
        api,
        home,
        f"/v2/timeseries/{user_id}/glucose",
        start_date=yesterday.isoformat(),
        end_date=yesterday.isoformat(),
    )
    assert [round(r["value"] / 18.0156, 1) for r in served] == [s["value"] for s in answer]
    [provider] = reads.get(api, home, f"/v2/user/providers/{user_id}")["providers"]
    assert provider["slug"] == "freestyle_libre" and provider["status"] == "connected"


def test_a_second_factor_is_asked_then_completed_once(
    svc: Service, api: TestClient, home: Team, libreview: FakeLibreView
) -> None:
    user_id = new_user(api, home)
    token = link_token(api, home, user_id)
    first = password(api, token, OMAR).json()
    assert first["state"] == "pending_provider_mfa" and not first["connected"]
    assert first["provider_mfa"] == {"method": "sms", "hint": "•••00"}
    # A wrong code is spent (the maker's challenge is used once): a new sign-in is needed.
    wrong = complete(api, token, "000000" if libreview.outbox["+15550100"] != "000000" else "1")
    assert wrong.json()["error_type"] == "incorrect_mfa_code"
    assert complete(api, token, libreview.outbox["+15550100"]).status_code == 400
    assert password(api, token, OMAR).json()["state"] == "pending_provider_mfa"
    done = complete(api, token, libreview.outbox["+15550100"])
    assert done.json()["state"] == "success", done.text
    assert (
        svc.provider_tokens.current(stream_of_connection(svc, user_id, "freestyle_libre"))
        is not None
    )


def test_an_email_code_connects_abbott_libreview(
    svc: Service, api: TestClient, home: Team, libreview: FakeLibreView
) -> None:
    user_id = new_user(api, home)
    token = link_token(api, home, user_id)
    # The official clients' path names freestyle_libre; the body's provider wins.
    sent = api.post(
        "/v2/link/provider/email/freestyle_libre",
        json={"email": "lena@example.com", "provider": "abbott_libreview"},
        headers={"x-vital-link-token": token},
    ).json()
    assert sent["state"] == "pending_provider_mfa" and sent["provider"] == "abbott_libreview"
    assert sent["provider_mfa"]["method"] == "email"
    done = complete(api, token, libreview.outbox["lena@example.com"], "abbott_libreview")
    assert done.json()["state"] == "success", done.text
    found = svc.ledger.find(stream_of_connection(svc, user_id, "abbott_libreview"))
    assert isinstance(found, Connection)


def test_the_makers_refusals_are_link_errors_and_keep_the_token(
    api: TestClient, home: Team, libreview: FakeLibreView
) -> None:
    token = link_token(api, home, new_user(api, home))
    wrong = password(api, token, (LENA[0], "not it"))
    assert wrong.status_code == 200
    assert wrong.json()["state"] == "error"
    assert wrong.json()["error_type"] == "provider_credential_error"
    assert "not it" not in wrong.text
    # LibreView locks the account after repeated wrong passwords.
    for _ in range(LOCK_AFTER - 1):
        password(api, token, (LENA[0], "not it"))
    locked = password(api, token, LENA).json()
    assert locked["error_type"] == "provider_password_expired"
    libreview.fail(503, path="/auth/login")
    assert password(api, token, OMAR).json()["error_type"] == "provider_api_error"
    # None of it used the token up.
    assert api.get("/v2/link/state", headers={"x-vital-link-token": token}).json()["state"] == (
        "pending"
    )


def test_tokens_that_cannot_be_used_are_401s_and_bad_input_422s(
    svc: Service, api: TestClient, home: Team, clock: Clock
) -> None:
    setup = CommandContext.system("test:setup")
    other_id = svc.teams.create_team(
        setup, svc.teams.create_organization(setup, "Other"), "O", "eu"
    )
    other_team_key = Team(other_id, svc.teams.issue_team_api_key(setup, other_id).plain)
    user_id = new_user(api, home)
    assert password(api, "hll_nonsense", LENA).json()["detail"]["error_type"] == "invalid_token"
    missing = api.post(
        "/v2/link/provider/password/freestyle_libre",
        json={"username": LENA[0], "password": LENA[1]},
    )
    assert missing.status_code == 401
    narrowed = link_token(api, home, user_id, filter_on_providers=["oura"])
    assert password(api, narrowed, LENA).status_code == 422  # not offered by this link
    token = link_token(api, home, user_id)
    assert password(api, token, LENA, provider="oura").status_code == 422  # OAuth, not password
    empty = api.post(
        "/v2/link/provider/password/freestyle_libre",
        json={"username": "", "password": "secret-pw"},
        headers={"x-vital-link-token": token},
    )
    assert empty.status_code == 422 and "secret-pw" not in empty.text
    # Another team's user: its key cannot issue a token for ours (404).
    foreign = api.post(
        "/v2/link/token", json={"user_id": str(user_id)}, headers=other_team_key.headers
    )
    assert foreign.status_code == 404
    clock.advance(timedelta(minutes=61))
    expired = password(api, token, LENA)
    assert expired.status_code == 401 and expired.json()["detail"]["error_type"] == "token_expired"


def test_no_credential_is_stored_or_logged(
    svc: Service, api: TestClient, home: Team, libreview: FakeLibreView, caplog: Any
) -> None:
    caplog.set_level("DEBUG")
    token = link_token(api, home, new_user(api, home))
    password(api, token, OMAR)
    complete(api, token, libreview.outbox["+15550100"])
    dump = stored_text(svc)
    for secret in (OMAR[0], OMAR[1], libreview.outbox["+15550100"]):
        assert secret not in dump
        assert secret not in caplog.text


def test_the_link_lists_its_providers_and_oauth_links(api: TestClient, home: Team) -> None:
    token = link_token(
        api, home, new_user(api, home), filter_on_providers=["oura", "freestyle_libre"]
    )
    headers = {"x-vital-link-token": token}
    listed = api.get("/v2/link/providers", headers=headers).json()
    assert [p["slug"] for p in listed] == ["oura", "freestyle_libre"]
    oura = api.get("/v2/link/provider/oauth/oura", headers=headers).json()
    assert oura["oauth_url"].startswith("https://link.example.test/?token=")
    assert oura["oauth_url"].endswith("&provider=oura")
    assert api.get("/v2/link/provider/oauth/freestyle_libre", headers=headers).status_code == 422
    assert api.get("/v2/link/provider/oauth/whoop", headers=headers).status_code == 422
    started = api.post("/v2/link/start", json={"link_token": token, "provider": "freestyle_libre"})
    assert started.json() == {
        "provider": "freestyle_libre",
        "auth_type": "password",
        "oauth_url": None,
    }


def test_the_oauth_url_opens_the_link_page_on_that_provider_alone(
    svc: Service, api: TestClient, home: Team
) -> None:
    token = link_token(api, home, new_user(api, home))
    oauth_url = api.get(
        "/v2/link/provider/oauth/oura", headers={"x-vital-link-token": token}
    ).json()["oauth_url"]
    page = TestClient(create_link_app(svc)).get("/" + oauth_url.split("/", 3)[3])
    assert page.status_code == 200
    assert 'value="oura"' in page.text and 'value="fitbit"' not in page.text
    # Without the provider, the page offers the link's providers as before.
    whole = TestClient(create_link_app(svc)).get("/", params={"token": token})
    assert 'value="oura"' in whole.text and 'value="fitbit"' in whole.text


def test_a_code_for_the_mobile_sdk_is_exchanged_once_for_a_sign_in_token(
    svc: Service, api: TestClient, home: Team, clock: Clock
) -> None:
    user_id = new_user(api, home)
    created = api.post(
        "/v2/link/code/create", params={"user_id": str(user_id)}, headers=home.headers
    )
    assert created.status_code == 200, created.text
    answer = created.json()
    assert answer["exchange_url"].endswith("/v2/link/code/exchange")
    # No key: the code is the credential, once.
    exchanged = api.post("/v2/link/code/exchange", json={"code": answer["code"]})
    assert exchanged.status_code == 200, exchanged.text
    assert exchanged.json()["user_id"] == str(user_id)
    # A genuine sign-in token: the import it asks about is unknown (404), not the caller.
    bearer = {"Authorization": f"Bearer {exchanged.json()['sign_in_token']}"}
    status = f"/v2/user/{user_id}/import/apple_health/00000000-0000-4000-8000-000000000001"
    assert api.get(status, headers=bearer).status_code == 404
    assert api.get(status, headers={"Authorization": "Bearer forged"}).status_code == 401
    again = api.post("/v2/link/code/exchange", json={"code": answer["code"]})
    assert again.status_code == 401
    # Only the code's hash is stored.
    dump = stored_text(svc)
    assert answer["code"] not in dump
    # Expired, malformed, another team's user, an expiry too far ahead.
    late = api.post("/v2/link/code/create", params={"user_id": str(user_id)}, headers=home.headers)
    clock.advance(timedelta(minutes=61))
    assert api.post("/v2/link/code/exchange", json={"code": late.json()["code"]}).status_code == 401
    assert api.post("/v2/link/code/exchange", json={"code": "hlc_x"}).status_code == 401
    assert (
        api.post(
            "/v2/link/code/create", params={"user_id": str(uuid.uuid4())}, headers=home.headers
        ).status_code
        == 404
    )
    far = (clock() + timedelta(days=2)).isoformat()
    too_far = api.post(
        "/v2/link/code/create",
        params={"user_id": str(user_id), "expires_at": far},
        headers=home.headers,
    )
    assert too_far.status_code == 422


def test_a_manual_provider_is_connected_with_the_team_key_and_nothing_pulled(
    svc: Service, api: TestClient, home: Team
) -> None:
    user_id = new_user(api, home)
    connected = api.post(
        "/v2/link/provider/manual/health_connect",
        json={"user_id": str(user_id), "provider_id": "device-person-1"},
        headers=home.headers,
    )
    assert connected.status_code == 200, connected.text
    assert connected.json() == {"success": True}
    [provider] = reads.get(api, home, f"/v2/user/providers/{user_id}")["providers"]
    assert provider["slug"] == "health_connect" and provider["status"] == "connected"
    assert provider["external_user_id"] == "device-person-1"
    assert svc.jobs.run_due_pulls() == 0
    # An OAuth provider is not manual; a stranger's key cannot reach the user.
    oauth = api.post(
        "/v2/link/provider/manual/oura", json={"user_id": str(user_id)}, headers=home.headers
    )
    assert oauth.status_code == 422
    unknown = api.post(
        "/v2/link/provider/manual/apple_health_kit",
        json={"user_id": str(uuid.uuid4())},
        headers=home.headers,
    )
    assert unknown.status_code == 404
