"""The link API driven through both official clients, `vital` 2.1.569 and
`junction-api-sdk` 2.0.0, against the team API served by uvicorn and the fake LibreView
(adapters/makers/fake_libreview.py), both real HTTP servers (issue 34, `link.*`; ADR
0038): each link method is called as a customer's widget and backend would, and what it
answers is checked against the service's own state. On both databases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
import junction
import pytest
import vital
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_libreview import FakeLibreView, running_fake_libreview
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connection import Connection
from vital import ConnectionRecipe
from vital.core.api_error import ApiError

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team
from tests.stream_ids import stream_of_connection

pytestmark = CLIENTS_PARSE_ANSWERS

LENA = ("lena@example.com", "correct horse battery")
OMAR = ("omar@example.com", "staple 42")  # a second factor by SMS
OMAR_PHONE = "+15550100"


@pytest.fixture
def libreview() -> Iterator[FakeLibreView]:
    with running_fake_libreview() as fake:
        yield fake


@pytest.fixture
def service(settings: Settings, libreview: FakeLibreView) -> Iterator[Service]:
    configured = settings.model_copy(
        update={
            "libreview_api_url": libreview.base,
            "libreview_history_days": 3,
            "link_url": "https://link.example.test",
        }
    )
    built = build_service(configured)
    yield built
    built.close()


def new_token(api: vital.Vital, **options: object) -> tuple[str, str]:
    user_id = str(api.user.create(client_user_id=uuid.uuid4().hex).user_id)
    return user_id, api.link.token(user_id=user_id, **options).link_token


def connected(service: Service, user_id: str, provider: str) -> bool:
    found = service.ledger.find(stream_of_connection(service, uuid.UUID(user_id), provider))
    return isinstance(found, Connection) and found.status == "connected"


def test_every_link_method_of_vital(
    api: vital.Vital, service: Service, libreview: FakeLibreView, base_url: str
) -> None:
    link = api.link
    user_id, token = new_token(
        api, filter_on_providers=["oura", "freestyle_libre", "abbott_libreview"]
    )
    assert link.is_token_valid(token=token)["is_valid"] is True
    state = link.token_state(vital_link_token=token)
    assert state["state"] == "pending"
    assert state["filter_on_providers"] == ["oura", "freestyle_libre", "abbott_libreview"]
    providers = link.get_all_providers(vital_link_token=token)
    assert [p.slug for p in providers] == ["oura", "freestyle_libre", "abbott_libreview"]
    oura = link.generate_oauth_link("oura", vital_link_token=token)
    assert oura.slug == "oura" and oura.oauth_url is not None
    assert oura.oauth_url.endswith("&provider=oura")
    started = link.start_connect(link_token=token, provider="freestyle_libre")
    assert started["auth_type"] == "password"

    # A password with a second factor, then the code the maker "sent".
    pending = link.connect_password_provider(
        "freestyle_libre", username=OMAR[0], password=OMAR[1], vital_link_token=token
    )
    assert pending.state == "pending_provider_mfa" and pending.provider_mfa is not None
    assert pending.provider_mfa.method == "sms"
    done = link.complete_password_provider_mfa(
        "freestyle_libre", mfa_code=libreview.outbox[OMAR_PHONE], vital_link_token=token
    )
    assert done.state == "success" and done.connected
    assert connected(service, user_id, "freestyle_libre")
    # The token is used up: the clients raise the 401.
    with pytest.raises(ApiError) as used:
        link.connect_password_provider(
            "freestyle_libre", username=LENA[0], password=LENA[1], vital_link_token=token
        )
    assert used.value.status_code == 401
    assert link.is_token_valid(token=token)["reason"] == "token_consumed"

    # The older routes: a password in the body, then an e-mail code.
    user_id, token = new_token(api)
    wrong = link.password_auth(
        username=LENA[0],
        password="not it",
        provider="freestyle_libre",
        auth_type="password",
        vital_link_token=token,
    )
    assert wrong["state"] == "error" and wrong["error_type"] == "provider_credential_error"
    right = link.password_auth(
        username=LENA[0],
        password=LENA[1],
        provider="freestyle_libre",
        auth_type="password",
        vital_link_token=token,
    )
    assert right["state"] == "success" and connected(service, user_id, "freestyle_libre")

    user_id, token = new_token(api)
    sent = link.email_auth(
        email=LENA[0], provider="abbott_libreview", auth_type="email", vital_link_token=token
    )
    assert sent["state"] == "pending_provider_mfa"
    finished = link.complete_password_provider_mfa(
        "abbott_libreview", mfa_code=libreview.outbox[LENA[0]], vital_link_token=token
    )
    assert finished.state == "success" and connected(service, user_id, "abbott_libreview")

    user_id, token = new_token(api)
    emailed = link.connect_email_auth_provider(
        email=LENA[0], email_provider_auth_link_provider="abbott_libreview", vital_link_token=token
    )
    assert emailed["provider_mfa"]["method"] == "email"

    # The team's backend: a manual provider, the SDK's code, a demo device.
    assert link.connect_manual_provider("health_connect", user_id=user_id, provider_id="p-1") == {
        "success": True
    }
    assert connected(service, user_id, "health_connect")
    code = link.code_create(user_id=user_id, expires_at=datetime.now(UTC) + timedelta(minutes=5))
    assert code.expires_at > datetime.now(UTC)
    # The app exchanges it where the answer says (on this test's server).
    exchange = base_url + urlsplit(code.exchange_url).path
    exchanged = httpx.post(exchange, json={"code": code.code})
    assert exchanged.status_code == 200 and exchanged.json()["user_id"] == user_id
    demo = link.connect_demo_provider(user_id=user_id, provider="oura")
    assert demo.success and connected(service, user_id, "oura")

    # A bulk operation over the user's demo connection, and the team's list of them.
    triggered = link.bulk_trigger_historical_pull(user_ids=[user_id], provider="oura")
    assert triggered["status"] == "success" and triggered["processed"] == 1
    [listed] = link.list_bulk_ops().data
    assert listed.type == "link_bulk_historical_trigger" and listed.status == "success"
    assert (listed.pending, listed.processed) == (0, 1) and listed.ended_at is not None
    # A demo device holds no maker's grant: nothing to export. An import needs an OAuth
    # client of ours for the provider, which this deployment has none of: it fails.
    assert link.bulk_export(provider="oura").data == []
    recipe = ConnectionRecipe(
        user_id=user_id,
        access_token="at",
        refresh_token="rt",
        provider_id="oura-person",
        expires_at=2_000_000_000,
    )
    imported = link.bulk_import(provider="oura", connections=[recipe])
    assert (imported.user_ids_imported, imported.user_ids_failed) == ([], [user_id])
    paused = link.bulk_pause(user_ids=[user_id], provider="oura")
    assert paused["type"] == "link_bulk_pause" and paused["status"] == "success"
    found = service.ledger.find(stream_of_connection(service, uuid.UUID(user_id), "oura"))
    assert isinstance(found, Connection) and found.status == "paused"


def test_the_link_methods_of_junction(
    base_url: str, team: Team, service: Service, libreview: FakeLibreView
) -> None:
    client = junction.Junction(api_key=team.key, base_url=base_url, timeout=30)
    user_id = str(client.user.create(client_user_id="link-junction").user_id)
    token = client.link.token(user_id=user_id).link_token
    assert "freestyle_libre" in [
        p.slug for p in client.link.get_all_providers(vital_link_token=token)
    ]
    assert client.link.generate_oauth_link("oura", vital_link_token=token).oauth_url
    answer = client.link.connect_password_provider(
        "freestyle_libre", username=LENA[0], password=LENA[1], vital_link_token=token
    )
    assert answer.state == "success" and connected(service, user_id, "freestyle_libre")
    code = client.link.code_create(user_id=user_id)
    assert code.code.startswith("hlc_")
