"""Link tokens (spec 2.5, endpoint 6; gaps.md link): issuing them through the team API,
`isValid`, and the hosted link page that connects a demo provider and consumes the token
in the same transaction, once, whatever races it."""

from __future__ import annotations

import threading
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.link_page import create_link_app, outcome_url
from healthledger.adapters.persistence.engine.schema import link_tokens
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.connecting import Connections, PreparedConnection
from healthledger.domain.connections.link_tokens import LinkToken, LinkTokenRejected
from healthledger.domain.context import CommandContext
from healthledger.domain.keys import hash_key, link_token_id
from healthledger.domain.teams.directory import DEFAULT_ORG_ID
from healthledger.domain.teams.teams import BrandInformation, EnvironmentSettings
from sqlalchemy import select

from tests.conftest import Team, create_user
from tests.stream_ids import stream_of_connection

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
APP = "https://app.example.com/linked?session=abc"
ISSUED_TOPIC = "healthledger:LinkToken.Issued.v3"
CONSUMED_TOPIC = "healthledger:LinkToken.Consumed.v2"


@pytest.fixture
def page(service: Service) -> Iterator[TestClient]:
    app = create_link_app(service)
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def user(client: TestClient, team: Team) -> dict[str, Any]:
    return create_user(client, team, "linker")


def issue(client: TestClient, team: Team, user_id: str, **fields: Any) -> str:
    response = client.post(
        "/v2/link/token", json={"user_id": user_id, **fields}, headers=team.headers
    )
    assert response.status_code == 200, response.text
    return response.json()["link_token"]


def is_valid(client: TestClient, token: str) -> dict[str, Any]:
    response = client.post("/v2/link/token/isValid", json={"token": token})
    assert response.status_code == 200, response.text
    return response.json()


def providers(client: TestClient, team: Team, user_id: str) -> list[str]:
    response = client.get(f"/v2/user/providers/{user_id}", headers=team.headers)
    assert response.status_code == 200, response.text
    return sorted(p["slug"] for p in response.json()["providers"])


def outcome(response: Any) -> dict[str, str]:
    """The outcome parameters of a redirect to APP (and that it went to APP)."""
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert location.startswith("https://app.example.com/linked?")
    query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert query.pop("session") == "abc"  # the team's own parameters are kept
    return query


def forged(token: str) -> str:
    """A well-formed token text with the id of a real token and another secret."""
    return token[:37] + ("A" if token[37] != "A" else "B") + token[38:]


# -- issuing --------------------------------------------------------------------------


def test_issue_answers_the_token_and_the_web_link(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], other_team: Team
) -> None:
    response = client.post(
        "/v2/link/token", json={"user_id": user["user_id"]}, headers=team.headers
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"link_token", "link_web_url"}
    token = body["link_token"]
    assert token.startswith("hll_") and link_token_id(token) is not None
    url = urlsplit(body["link_web_url"])
    assert f"{url.scheme}://{url.netloc}" == service.settings.link_url == "http://127.0.0.1:8002"
    assert url.path == "/"
    assert parse_qs(url.query) == {"token": [token], "env": ["sandbox"], "region": ["us"]}

    # The environment is the calling key's, the region the team's.
    ctx = CommandContext.system("test:setup")
    production = service.teams.issue_team_api_key(ctx, other_team.team_id, "production")
    eu_user = create_user(client, other_team, "eu-linker")
    answer = client.post(
        "/v2/link/token",
        json={"user_id": eu_user["user_id"]},
        headers={"x-service-api-key": production.plain},
    ).json()
    query = parse_qs(urlsplit(answer["link_web_url"]).query)
    assert (query["env"], query["region"]) == (["production"], ["eu"])


def test_the_link_url_setting_is_the_base_of_the_web_link(
    settings: Settings, service: Service, team: Team, user: dict[str, Any]
) -> None:
    from healthledger.adapters.http.team_api import create_team_api

    elsewhere = build_service(settings.model_copy(update={"link_url": "https://link.example/"}))
    try:
        with TestClient(create_team_api(elsewhere)) as other_client:
            answer = other_client.post(
                "/v2/link/token", json={"user_id": user["user_id"]}, headers=team.headers
            ).json()
    finally:
        elsewhere.close()
    assert answer["link_web_url"].startswith("https://link.example/?token=hll_")


def test_every_optional_field_may_be_null_or_set(
    client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    nulls = dict.fromkeys(
        ("provider", "redirect_url", "filter_on_providers", "on_error", "on_close")
    )
    issue(client, team, user["user_id"], **nulls)
    issue(
        client,
        team,
        user["user_id"],
        provider="oura",
        redirect_url="http://localhost:3000/done",
        filter_on_providers=["oura", "garmin", "oura"],
        on_error="redirect",
        on_close="redirect",
    )


# (fields, loc): each refused with its first error at loc.
INVALID_REQUESTS: list[tuple[dict[str, Any], list[str]]] = [
    ({"provider": "nokia"}, ["body", "provider"]),
    ({"provider": ""}, ["body", "provider"]),
    ({"provider": 7}, ["body", "provider"]),
    ({"filter_on_providers": []}, ["body", "filter_on_providers"]),
    ({"filter_on_providers": ["oura", "nokia"]}, ["body", "filter_on_providers"]),
    ({"filter_on_providers": "oura"}, ["body", "filter_on_providers"]),
    ({"on_error": "show", "redirect_url": APP}, ["body", "on_error"]),
    ({"on_close": "close", "redirect_url": APP}, ["body", "on_close"]),
    ({"on_error": "redirect"}, ["body", "on_error"]),  # redirect to nowhere
    ({"on_close": "redirect"}, ["body", "on_close"]),
    ({"redirect_url": "ftp://files.example.com/"}, ["body", "redirect_url"]),
    ({"redirect_url": "javascript:alert(1)"}, ["body", "redirect_url"]),
    ({"redirect_url": "not a url"}, ["body", "redirect_url"]),
    ({"redirect_url": "https://"}, ["body", "redirect_url"]),
    ({"environment": "production"}, ["body", "environment"]),  # unknown field
    ({"user_id": "not-a-uuid"}, ["body", "user_id"]),
]


def test_invalid_requests_are_422_and_issue_nothing(
    service: Service, client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    # Refusals issue nothing: every case against the one user, each checked against the
    # log position before the first.
    before = service.recorder.max_notification_id()
    for fields, loc in INVALID_REQUESTS:
        case = fields
        response = client.post(
            "/v2/link/token", json={"user_id": user["user_id"], **fields}, headers=team.headers
        )
        assert response.status_code == 422, (case, response.text)
        assert response.json()["detail"][0]["loc"] == loc, (case, response.text)
        assert service.recorder.max_notification_id() == before, case


def test_a_missing_user_id_is_422(client: TestClient, team: Team) -> None:
    response = client.post("/v2/link/token", json={"provider": "oura"}, headers=team.headers)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "user_id"]


def test_only_a_live_user_of_the_team_gets_a_token(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], other_team: Team
) -> None:
    leaving = create_user(client, team, "leaving")
    assert client.delete(f"/v2/user/{leaving['user_id']}", headers=team.headers).status_code == 200
    before = service.recorder.max_notification_id()
    for caller, user_id in (
        (other_team, user["user_id"]),  # another team's user
        (team, str(uuid.uuid4())),  # nobody
        (team, leaving["user_id"]),  # pending erasure
    ):
        response = client.post("/v2/link/token", json={"user_id": user_id}, headers=caller.headers)
        assert response.status_code == 404, response.text
    assert service.recorder.max_notification_id() == before
    anonymous = client.post("/v2/link/token", json={"user_id": user["user_id"]})
    assert anonymous.status_code == 401


def test_the_token_is_stored_only_as_a_hash_and_events_say_who(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    response = client.post(
        "/v2/link/token",
        json={"user_id": user["user_id"], "redirect_url": APP},
        headers={**team.headers, "x-request-id": "req-issue-1"},
    )
    token = response.json()["link_token"]
    connected = page.post(
        "/connect",
        data={"token": token, "provider": "oura"},
        headers={"x-request-id": "req-page-1"},
    )
    assert outcome(connected) == {"state": "success"}

    notifications = service.recorder.select_notifications(1, 10000)
    assert not any(token.encode() in n.state for n in notifications)
    # hll_<id>_<secret>: the secret itself may contain "_" (URL-safe base64), so split
    # off the first two parts, not the last one (a short tail matched event text by
    # chance).
    secret = token.split("_", 2)[2]
    assert len(secret) == 43
    assert not any(secret.encode() in n.state for n in notifications)
    with service.db.read() as conn:
        rows = conn.execute(select(link_tokens)).all()
    assert [r.token_hash for r in rows] == [hash_key(token)]
    assert not any(token in str(value) for row in rows for value in row)
    # The redirect_url (teams make it name the person) only sealed with the user's key
    # (ADR 0032): in no record's bytes, in no column of the row.
    assert not any(APP.encode() in n.state for n in notifications)
    assert not any(APP in str(value) for row in rows for value in row)

    token_id = link_token_id(token)
    assert token_id is not None
    events = list(service.ledger.events.get(token_id))
    assert [type(e).__name__ for e in events] == ["Issued", "Consumed"]
    issued, consumed = events
    assert issued.actor.startswith("team_api_key:")  # type: ignore[attr-defined]
    assert issued.request_id == "req-issue-1"  # type: ignore[attr-defined]
    assert consumed.actor == f"link_token:{token_id}"  # type: ignore[attr-defined]
    assert consumed.request_id == "req-page-1"  # type: ignore[attr-defined]
    assert consumed.provider == "oura"  # type: ignore[attr-defined]
    # The connection is recorded as the link holder's act too, in the same request.
    connection = list(
        service.ledger.events.get(stream_of_connection(service, uuid.UUID(user["user_id"]), "oura"))
    )
    assert [(e.actor, e.request_id) for e in connection] == [  # type: ignore[attr-defined]
        (f"link_token:{token_id}", "req-page-1")
    ]
    topics = [n.topic for n in notifications]
    assert topics.count(ISSUED_TOPIC) == 1 and topics.count(CONSUMED_TOPIC) == 1


# -- lifetime and isValid ----------------------------------------------------------------


def test_a_token_lives_sixty_minutes(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    with freeze_time(T0):
        token = issue(client, team, user["user_id"], redirect_url=APP)
    with freeze_time(T0 + timedelta(minutes=59, seconds=59)):
        assert is_valid(client, token) == {
            "is_valid": True,
            "reason": None,
            "expires_at": "2026-03-01T13:00:00Z",
        }
        assert page.get("/", params={"token": token}).status_code == 200
    with freeze_time(T0 + timedelta(minutes=60)):
        assert is_valid(client, token) == {
            "is_valid": False,
            "reason": "token_expired",
            "expires_at": "2026-03-01T13:00:00Z",
        }
        shown = page.get("/", params={"token": token})
        assert shown.status_code == 410
        assert "expired" in shown.text
        connected = page.post("/connect", data={"token": token, "provider": "oura"})
        assert outcome(connected) == {
            "state": "error",
            "error_type": "token_expired",
            "error": "The link has expired; ask for a new one.",
        }
    assert providers(client, team, user["user_id"]) == []


def test_is_valid_reports_without_consuming_and_needs_no_team_key(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"])
    for _ in range(3):
        answer = is_valid(client, token)
        assert (answer["is_valid"], answer["reason"]) == (True, None)
        assert set(answer) == {"is_valid", "reason", "expires_at"}
    assert page.post("/connect", data={"token": token, "provider": "oura"}).status_code == 200
    answer = is_valid(client, token)
    assert (answer["is_valid"], answer["reason"]) == (False, "token_consumed")

    invalid = {"is_valid": False, "reason": "invalid_token", "expires_at": None}
    for text in (forged(token), "hll_" + uuid.uuid4().hex + "_" + "x" * 43, "nonsense", ""):
        assert is_valid(client, text) == invalid
    assert is_valid(client, team.key) == invalid  # a team API key is no link token

    for body in ({}, {"token": token, "user_id": user["user_id"]}, {"token": "x" * 513}):
        response = client.post("/v2/link/token/isValid", json=body)
        assert response.status_code == 422, body


def test_is_valid_answers_nothing_personal(
    client: TestClient, team: Team, user: dict[str, Any]
) -> None:
    token = issue(client, team, user["user_id"], redirect_url=APP, provider="oura")
    text = client.post("/v2/link/token/isValid", json={"token": token}).text
    for private in (user["user_id"], user["client_user_id"], str(team.team_id), "example.com"):
        assert private not in text


def test_a_deleted_users_token_is_invalid(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], redirect_url=APP)
    assert client.delete(f"/v2/user/{user['user_id']}", headers=team.headers).status_code == 200
    assert is_valid(client, token)["reason"] == "invalid_token"
    assert page.get("/", params={"token": token}).status_code == 404
    connected = page.post("/connect", data={"token": token, "provider": "oura"})
    assert outcome(connected)["error_type"] == "invalid_token"
    undo = client.post(
        "/v2/user/undo_delete", params={"user_id": user["user_id"]}, headers=team.headers
    )
    assert undo.status_code == 200
    assert providers(client, team, user["user_id"]) == []


def test_the_openapi_document_shows_which_route_needs_the_key(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert paths["/v2/link/token"]["post"]["security"]
    assert "security" not in paths["/v2/link/token/isValid"]["post"]


# -- the link page -----------------------------------------------------------------------


def test_the_page_shows_the_team_and_the_filtered_providers(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], filter_on_providers=["withings", "oura"])
    shown = page.get("/", params={"token": token, "env": "sandbox", "region": "us"})
    assert shown.status_code == 200
    assert shown.headers["content-type"].startswith("text/html")
    assert shown.headers["referrer-policy"] == "no-referrer"
    assert shown.headers["cache-control"] == "no-store"
    text = shown.text
    assert "Default team" in text
    assert "Withings" in text and "Oura" in text
    assert "Fitbit" not in text and "Garmin" not in text
    assert 'name="provider" value="withings"' in text
    # Nothing personal on the page.
    assert user["client_user_id"] not in text and user["user_id"] not in text


def test_without_a_filter_the_page_offers_every_demo_provider(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    text = page.get("/", params={"token": issue(client, team, user["user_id"])}).text
    demo = [entry for entry in service.catalog.values() if entry.demo]
    assert len(demo) >= 3
    for entry in demo:
        assert f'name="provider" value="{entry.slug}"' in text
    assert "Garmin" not in text


def test_a_provider_takes_the_page_straight_to_it(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], provider="fitbit")
    text = page.get("/", params={"token": token}).text
    assert 'value="fitbit"' in text
    assert text.count('name="provider"') == 1
    # A provider with no demo device is shown, but cannot be connected from here.
    unavailable = issue(client, team, user["user_id"], provider="garmin")
    text = page.get("/", params={"token": unavailable}).text
    assert "Garmin" in text and 'name="provider"' not in text
    refused = page.post("/connect", data={"token": unavailable, "provider": "garmin"})
    assert refused.status_code == 400
    assert is_valid(client, unavailable)["is_valid"] is True


def test_the_page_shows_the_brand_name_of_the_tokens_environment(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    brand = EnvironmentSettings.model_validate(
        {
            "logo_url": "https://cdn.example.com/acme.png",
            "brand_information": BrandInformation(company_name="Acme <Health>"),
        }
    )
    ctx = CommandContext.system("test:setup")
    service.teams.update_team(ctx, DEFAULT_ORG_ID, team.team_id, settings={"sandbox": brand})
    text = page.get("/", params={"token": issue(client, team, user["user_id"])}).text
    assert "Acme &lt;Health&gt;" in text and "Acme <Health>" not in text  # escaped
    assert 'src="https://cdn.example.com/acme.png"' in text


def test_connecting_redirects_with_success_connects_and_consumes(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], redirect_url=APP)
    connected = page.post("/connect", data={"token": token, "provider": "oura"})
    assert outcome(connected) == {"state": "success"}
    assert providers(client, team, user["user_id"]) == ["oura"]
    assert is_valid(client, token)["reason"] == "token_consumed"

    # A second use, for any provider: token_consumed, and nothing more is connected.
    again = page.post("/connect", data={"token": token, "provider": "fitbit"})
    assert outcome(again) == {
        "state": "error",
        "error_type": "token_consumed",
        "error": "The link has already been used; ask for a new one.",
    }
    assert providers(client, team, user["user_id"]) == ["oura"]
    shown = page.get("/", params={"token": token})
    assert shown.status_code == 410
    assert "already been used" in shown.text
    # The dead link's page leads back to the team's app with the reason.
    assert "error_type=token_consumed" in shown.text


def test_without_a_redirect_url_outcomes_are_pages(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"])
    connected = page.post("/connect", data={"token": token, "provider": "withings"})
    assert connected.status_code == 200
    assert "Withings is connected" in connected.text
    again = page.post("/connect", data={"token": token, "provider": "oura"})
    assert again.status_code == 410
    assert "already been used" in again.text
    assert providers(client, team, user["user_id"]) == ["withings"]


def test_forged_tokens_are_refused_and_never_redirect(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], redirect_url=APP, on_close="redirect")
    for text in (forged(token), "hll_" + uuid.uuid4().hex + "_" + "x" * 43, "nonsense"):
        shown = page.get("/", params={"token": text})
        assert shown.status_code == 404
        assert "not valid" in shown.text and "app.example.com" not in shown.text
        for path, data in (("/connect", {"provider": "oura"}), ("/close", {})):
            refused = page.post(path, data={"token": text, **data})
            assert refused.status_code == 404, path
            assert "location" not in refused.headers
    assert page.get("/").status_code == 404  # no token at all
    assert page.post("/connect", data={}).status_code == 404
    assert providers(client, team, user["user_id"]) == []
    assert is_valid(client, token)["is_valid"] is True


def test_close_redirects_with_user_cancelled_when_asked(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], redirect_url=APP, on_close="redirect")
    assert 'action="close"' in page.get("/", params={"token": token}).text
    closed = page.post("/close", data={"token": token})
    assert outcome(closed) == {
        "state": "error",
        "error_type": "user_cancelled",
        "error": "The user closed the link page.",
    }
    assert is_valid(client, token)["is_valid"] is True  # closing consumes nothing

    # Without on_close=redirect the close button only ends on a page of ours.
    plain = issue(client, team, user["user_id"], redirect_url=APP)
    closed = page.post("/close", data={"token": plain})
    assert closed.status_code == 200 and "close this window" in closed.text


def test_a_provider_the_link_does_not_offer_is_refused(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    token = issue(client, team, user["user_id"], redirect_url=APP, filter_on_providers=["oura"])
    for provider in ("fitbit", "garmin", "nokia", ""):
        refused = page.post("/connect", data={"token": token, "provider": provider})
        assert refused.status_code == 400, provider
    assert providers(client, team, user["user_id"]) == []
    assert is_valid(client, token)["is_valid"] is True


def test_a_duplicate_connection_does_not_consume_the_token(
    client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    for provider in ("oura", "freestyle_libre"):
        response = client.post(
            "/v2/link/connect/demo",
            json={"user_id": user["user_id"], "provider": provider},
            headers=team.headers,
        )
        assert response.status_code == 200

    # OAuth providers always redirect with the error.
    token = issue(client, team, user["user_id"], redirect_url=APP)
    duplicate = page.post("/connect", data={"token": token, "provider": "oura"})
    assert outcome(duplicate) == {
        "state": "error",
        "error_type": "duplicate_connection",
        "error": "The user is already connected to this provider.",
    }
    # A password provider's error shows on the page, where the user can choose again...
    shown = page.post("/connect", data={"token": token, "provider": "freestyle_libre"})
    assert shown.status_code == 409
    assert "already connected" in shown.text and "Choose again" in shown.text
    assert is_valid(client, token)["is_valid"] is True
    # ... unless on_error asks for a redirect.
    redirecting = issue(client, team, user["user_id"], redirect_url=APP, on_error="redirect")
    duplicate = page.post("/connect", data={"token": redirecting, "provider": "freestyle_libre"})
    assert outcome(duplicate)["error_type"] == "duplicate_connection"
    # The token still connects another provider.
    connected = page.post("/connect", data={"token": token, "provider": "fitbit"})
    assert outcome(connected) == {"state": "success"}
    assert providers(client, team, user["user_id"]) == ["fitbit", "freestyle_libre", "oura"]


# -- consumed exactly once ---------------------------------------------------------------


def submit_at_once(apps: list[Any], token: str, chosen: list[str]) -> list[dict[str, str]]:
    """Each app (a server process) gets the same link submitted for its provider, at once."""
    barrier = threading.Barrier(len(apps))
    results: list[dict[str, str]] = []

    def submit(app: Any, provider: str) -> None:
        with TestClient(app, follow_redirects=False) as browser:
            barrier.wait()
            response = browser.post("/connect", data={"token": token, "provider": provider})
        results.append(outcome(response))

    threads = [
        threading.Thread(target=submit, args=pair) for pair in zip(apps, chosen, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_submits_consume_the_token_once(
    settings: Settings, service: Service, client: TestClient, team: Team
) -> None:
    # A second service on the same database stands in for a second server process; each
    # round, two browsers submit the same link at once, for different providers.
    other = build_service(settings)
    apps = [create_link_app(service), create_link_app(other)]
    try:
        for round_ in range(4):
            user = create_user(client, team, f"race-{round_}")
            token = issue(client, team, user["user_id"], redirect_url=APP)
            results = submit_at_once(apps, token, ["oura", "fitbit"])
            states = sorted(r.get("error_type", r["state"]) for r in results)
            assert states == ["success", "token_consumed"]
            assert len(providers(client, team, user["user_id"])) == 1
            token_id = link_token_id(token)
            assert token_id is not None
            kinds = [type(e).__name__ for e in service.ledger.events.get(token_id)]
            assert kinds == ["Issued", "Consumed"]
    finally:
        other.close()


def test_a_use_that_loses_the_race_connects_nothing(
    settings: Settings,
    service: Service,
    client: TestClient,
    team: Team,
    user: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Deterministic: while one use is between its checks and its save, another use of
    # the same token (through another process) completes. The first one's save must
    # then fail as a whole: no connection without the token's consumption.
    token = issue(client, team, user["user_id"], redirect_url=APP)
    other = build_service(settings)
    prepare = Connections.prepare_demo

    def prepare_and_lose(self: Connections, *args: Any, **kwargs: Any) -> PreparedConnection:
        prepared = prepare(self, *args, **kwargs)
        if self is service.connections:
            other.link_tokens.connect_demo(token, "req-winner", "fitbit", ["sleep"])
        return prepared

    monkeypatch.setattr(Connections, "prepare_demo", prepare_and_lose)
    try:
        with TestClient(create_link_app(service), follow_redirects=False) as browser:
            lost = browser.post("/connect", data={"token": token, "provider": "oura"})
    finally:
        other.close()
    assert outcome(lost)["error_type"] == "token_consumed"
    assert providers(client, team, user["user_id"]) == ["fitbit"]
    token_id = link_token_id(token)
    assert token_id is not None
    token_events = list(service.ledger.events.get(token_id))
    assert [type(e).__name__ for e in token_events] == ["Issued", "Consumed"]
    assert token_events[1].request_id == "req-winner"  # type: ignore[attr-defined]


def test_link_tokens_rebuild_from_the_log(
    service: Service, client: TestClient, team: Team, user: dict[str, Any], page: TestClient
) -> None:
    used = issue(client, team, user["user_id"])
    fresh = issue(client, team, user["user_id"], filter_on_providers=["oura"])
    assert page.post("/connect", data={"token": used, "provider": "oura"}).status_code == 200
    service.read_models.rebuild(service.recorder, service.ledger.mapper)
    assert is_valid(client, used)["reason"] == "token_consumed"
    assert is_valid(client, fresh)["is_valid"] is True
    assert "Fitbit" not in page.get("/", params={"token": fresh}).text


# -- the aggregate and the redirect --------------------------------------------------------


def test_the_aggregate_judges_by_the_clock(ctx: CommandContext) -> None:
    token, plain = LinkToken.issue(
        ctx,
        T0,
        team_id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        environment="sandbox",
        provider=None,
        redirect_url=None,
        filter_on_providers=None,
        on_error=None,
        on_close=None,
    )
    assert token.matches(plain) and not token.matches(forged(plain))
    assert token.expires_at == T0 + timedelta(minutes=60)
    token.require_usable(T0 + timedelta(minutes=59))
    with pytest.raises(LinkTokenRejected) as expired:
        token.consume(ctx, T0 + timedelta(minutes=60), "oura")
    assert expired.value.error_type == "token_expired"
    token.consume(ctx, T0 + timedelta(minutes=1), "oura")
    with pytest.raises(LinkTokenRejected) as consumed:
        token.consume(ctx, T0 + timedelta(minutes=2), "fitbit")
    assert consumed.value.error_type == "token_consumed"
    assert [type(e).__name__ for e in token.collect_events()] == ["Issued", "Consumed"]


def test_outcome_urls_keep_the_teams_parameters_and_replace_ours() -> None:
    url = outcome_url(
        "https://app.example.com/cb?x=1&state=stale#frag", "error", "user_cancelled", "a b&c"
    )
    parts = urlsplit(url)
    assert parts.fragment == "frag"
    assert parse_qs(parts.query) == {
        "x": ["1"],
        "state": ["error"],
        "error_type": ["user_cancelled"],
        "error": ["a b&c"],
    }
