"""The portal URL (spec 2.4, endpoint 4; gaps.md Portal URL) and the hosted portal page it
opens, through the team API and the link page's app, on both databases: the closed-beta
switch, the rules of the endpoint, the page's orders, deep links and results, and every
way a URL stops working (expired, forged, another team's, a deleted user, the switch
turned off), each with its error page."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.cursors import CursorCodec
from healthledger.adapters.http.link_page import create_link_app
from healthledger.adapters.http.portal_tokens import PortalTokens
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext
from healthledger.domain.labs.portal import LAUNCH, PortalPass
from healthledger.domain.teams.directory import DEFAULT_ORG_ID
from healthledger.domain.teams.teams import BrandInformation, EnvironmentSettings

from tests.conftest import Team, create_user

CTX = CommandContext.system("test:portal")
# The shared demo lab tests (adapters/reference/labs/demo_lab_tests.json).
WELLNESS = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a01"
THYROID_KIT = "0b7e5a52-3c1d-4f6e-8a9b-1c2d3e4f5a03"
DEMOGRAPHICS = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "email": "ada.lovelace@example.org",
    "phone_number": "+1 555 010 1815",
    "gender": "female",
    "dob": "1985-12-10",
    "address": {
        "first_line": "12 Analytical Row",
        "city": "Austin",
        "state": "TX",
        "zip_code": "78701",
    },
}
# Personal values that must never reach a URL or a log.
PERSONAL = ("Ada", "Lovelace", "ada.lovelace", "Analytical", "1985-12-10", "555 010 1815")
LAUNCH_SECONDS = 10 * 60
COMMUNICATIONS_SECONDS = 28 * 24 * 3600


@pytest.fixture
def settings(database_url: str, tmp_path: Any) -> Settings:
    # Orders run their whole course (no simulated failure or cancellation by the lab).
    return Settings(
        database_url=database_url,
        master_key_file=tmp_path / "master.key",
        grace_period=timedelta(days=7),
        link_url="https://link.example.test/hosted",
        lab_order_failure_rate=0,
        lab_order_cancellation_rate=0,
    )


@pytest.fixture
def browser(service: Service) -> Iterator[TestClient]:
    """The link page's app, where the portal is served, as a browser reaches it."""
    app = create_link_app(service)
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as test_client:
        yield test_client


def with_demographics(client: TestClient, team: Team, service: Service, name: str) -> str:
    service.teams.set_feature(CTX, team.team_id, "demographics", True)
    user_id: str = create_user(client, team, name)["user_id"]
    recorded = client.patch(f"/v2/user/{user_id}/info", json=DEMOGRAPHICS, headers=team.headers)
    assert recorded.status_code == 200, recorded.text
    return user_id


@pytest.fixture
def user(client: TestClient, team: Team, service: Service) -> str:
    """A live user of a team with the portal switched on, with demographics."""
    service.teams.set_feature(CTX, team.team_id, "portal_url", True)
    return with_demographics(client, team, service, "portal-1")


def place(client: TestClient, team: Team, user_id: str, lab_test_id: str = WELLNESS) -> str:
    response = client.post(
        "/v3/order", json={"user_id": user_id, "lab_test_id": lab_test_id}, headers=team.headers
    )
    assert response.status_code == 200, response.text
    order_id: str = response.json()["id"]
    return order_id


def complete(client: TestClient, team: Team, order_id: str, outcome: str) -> None:
    """Step a sandbox order to its results, with the outcome forced."""
    for _ in range(10):
        response = client.post(
            f"/v3/order/{order_id}/test", json={"interpretation": outcome}, headers=team.headers
        )
        assert response.status_code == 200, response.text
        if response.json()["status"] == "completed":
            return
    raise AssertionError("the order did not complete")


def portal_url(client: TestClient, team: Team, user_id: str, **body: Any) -> Any:
    return client.post(f"/v2/user/{user_id}/create_portal_url", json=body, headers=team.headers)


def created(client: TestClient, team: Team, user_id: str, **body: Any) -> dict[str, Any]:
    response = portal_url(client, team, user_id, **body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def open_page(browser: TestClient, url: str) -> Any:
    """GET a URL handed out at {link_url} from the link page's app."""
    parts = urlsplit(url)
    assert url.startswith("https://link.example.test/hosted/")
    return browser.get(parts.path.removeprefix("/hosted") + "?" + parts.query)


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


def hrefs(page: str) -> dict[str, str]:
    """id -> href of the page's links."""
    return {
        match.group(1): unescape(match.group(2))
        for match in re.finditer(r'<a[^>]* id="([^"]+)"[^>]* href="([^"]+)"', page)
    }


def assert_error_page(response: Any, status: int, title: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    assert f'<h1 id="error">{title}</h1>' in response.text
    assert "Traceback" not in response.text
    assert not any(value in response.text for value in PERSONAL)


# -- the endpoint -----------------------------------------------------------------------------


def test_a_launch_url_opens_the_users_orders_and_a_communications_url_lives_28_days(
    client: TestClient, team: Team, user: str, browser: TestClient, service: Service
) -> None:
    order_id = place(client, team, user)
    launch = created(client, team, user, context="launch")
    assert launch["expires_in"] == LAUNCH_SECONDS
    communications = created(client, team, user, context="communications")
    assert communications["expires_in"] == COMMUNICATIONS_SECONDS
    for answer in (launch, communications):
        parts = urlsplit(answer["url"])
        assert (parts.scheme, parts.netloc, parts.path) == (
            "https",
            "link.example.test",
            "/hosted/portal",
        )
        # Nothing personal in the URL: ids, a context and instants, signed.
        assert not any(value in answer["url"] for value in PERSONAL)
        page = open_page(browser, answer["url"])
        assert page.status_code == 200, page.text
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert "Annual Wellness" in page.text and f'id="order-{order_id}"' in page.text
    # Each pass is signed with its own expiry.
    grants = [
        PortalTokens(service.cursor_secret).open(token_of(a["url"]))
        for a in (launch, communications)
    ]
    assert [g.context for g in grants if g is not None] == ["launch", "communications"]


def test_the_lifetimes_are_settings(
    database_url: str, tmp_path: Any, team: Team, service: Service
) -> None:
    del team  # the bootstrap's team, in the shared database
    configured = build_service(
        Settings(
            database_url=database_url,
            master_key_file=tmp_path / "master.key",
            # As the environment gives them: seconds, or ISO 8601.
            portal_launch_lifetime="120",  # type: ignore[arg-type]
            portal_communications_lifetime="P3D",  # type: ignore[arg-type]
        )
    )
    try:
        team_id = configured.team_queries.team_ids()[0]
        configured.teams.set_feature(CTX, team_id, "portal_url", True)
        key = configured.teams.issue_team_api_key(CTX, team_id).plain
        headers = {"x-service-api-key": key}
        with TestClient(create_team_api(configured)) as api:
            configured.teams.set_feature(CTX, team_id, "demographics", True)
            user_id = api.post("/v2/user", json={"client_user_id": "x"}, headers=headers).json()[
                "user_id"
            ]
            api.patch(f"/v2/user/{user_id}/info", json=DEMOGRAPHICS, headers=headers)
            path = f"/v2/user/{user_id}/create_portal_url"
            launch = api.post(path, json={"context": "launch"}, headers=headers).json()
            communications = api.post(path, json={"context": "communications"}, headers=headers)
        assert launch["expires_in"] == 120
        assert communications.json()["expires_in"] == 3 * 24 * 3600
    finally:
        configured.close()


def test_the_portal_is_closed_beta(client: TestClient, team: Team, service: Service) -> None:
    user_id = with_demographics(client, team, service, "no-beta")
    refused = portal_url(client, team, user_id, context="launch")
    assert refused.status_code == 403
    assert refused.json()["detail"]["error_type"] == "FEATURE_NOT_ENABLED"
    # Before anything else: an unknown user of a team without the switch is a 403 too.
    assert portal_url(client, team, str(uuid4()), context="launch").status_code == 403
    service.teams.set_feature(CTX, team.team_id, "portal_url", True)
    assert portal_url(client, team, user_id, context="launch").status_code == 200


def test_the_endpoints_rules(
    client: TestClient, team: Team, other_team: Team, user: str, service: Service
) -> None:
    # Spec 4 rule 1: a user without demographics is a 422.
    bare = create_user(client, team, "portal-bare")["user_id"]
    no_info = portal_url(client, team, bare, context="launch")
    assert no_info.status_code == 422
    (problem,) = no_info.json()["detail"]
    assert problem["loc"] == ["path", "user_id"] and "demographics" in problem["msg"]
    # Unknown users, another team's user: 404.
    assert portal_url(client, team, str(uuid4()), context="launch").status_code == 404
    service.teams.set_feature(CTX, other_team.team_id, "portal_url", True)
    assert portal_url(client, other_team, user, context="launch").status_code == 404
    # The request: a known context, no unknown field, a uuid order_id.
    for body in (
        {},
        {"context": "email"},
        {"context": "launch", "extra": 1},
        {"context": "launch", "order_id": "not-a-uuid"},
    ):
        assert portal_url(client, team, user, **body).status_code == 422, body
    assert (
        client.post(f"/v2/user/{user}/create_portal_url", headers=team.headers).status_code == 422
    )
    # A path that is not a uuid is not this route.
    assert portal_url(client, team, "not-a-uuid", context="launch").status_code in (404, 405, 422)
    # An order that is not one of this user's: another user's, another team's, unknown.
    sibling = with_demographics(client, team, service, "portal-sibling")
    theirs = place(client, team, sibling)
    service.teams.set_feature(CTX, other_team.team_id, "demographics", True)
    stranger = with_demographics(client, other_team, service, "portal-stranger")
    foreign = place(client, other_team, stranger)
    for order_id in (theirs, foreign, str(uuid4())):
        missing = portal_url(client, team, user, context="launch", order_id=order_id)
        assert missing.status_code == 404 and missing.json() == {"detail": "Order not found."}
    # A user scheduled for deletion: 404 saying so, as elsewhere.
    assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    pending = portal_url(client, team, user, context="launch")
    assert pending.status_code == 404 and "deletion" in pending.json()["detail"]


# -- the page ---------------------------------------------------------------------------------


def test_the_page_lists_the_users_orders_and_links_to_each(
    client: TestClient, team: Team, user: str, browser: TestClient, service: Service
) -> None:
    first = place(client, team, user)
    second = place(client, team, user, THYROID_KIT)
    complete(client, team, second, "abnormal")
    sibling = with_demographics(client, team, service, "portal-sibling")
    theirs = place(client, team, sibling)

    page = open_page(browser, created(client, team, user, context="launch")["url"])
    assert page.status_code == 200
    links = hrefs(page.text)
    # The user's orders, newest first; never another user's.
    assert [k for k in links if k.startswith("order-")] == [f"order-{second}", f"order-{first}"]
    assert theirs not in page.text
    assert "Results ready" in page.text and "Abnormal" in page.text

    # Following a link: the order's own page, whose link leads back to the list.
    list_url = "https://link.example.test/hosted/portal?token=" + token_of(
        created(client, team, user, context="launch")["url"]
    )
    detail_url = urljoin(list_url, links[f"order-{first}"])
    assert urlsplit(detail_url).path == f"/hosted/portal/orders/{first}"
    detail = open_page(browser, detail_url)
    assert detail.status_code == 200, detail.text
    assert f'<h1 id="order-{first}">Annual Wellness' in detail.text
    assert "Your results are not ready yet." in detail.text
    back = urljoin(detail_url, hrefs(detail.text)["all-orders"])
    assert urlsplit(back).path == "/hosted/portal"
    assert open_page(browser, back).status_code == 200


def test_a_deep_link_opens_the_order_with_its_results(
    client: TestClient, team: Team, user: str, browser: TestClient
) -> None:
    order_id = place(client, team, user)
    complete(client, team, order_id, "critical")
    results = client.get(f"/v3/order/{order_id}/result", headers=team.headers).json()["results"]
    order = client.get(f"/v3/order/{order_id}", headers=team.headers).json()

    answer = created(client, team, user, context="communications", order_id=order_id)
    assert urlsplit(answer["url"]).path == f"/hosted/portal/orders/{order_id}"
    page = open_page(browser, answer["url"])
    assert page.status_code == 200, page.text
    assert page.headers["cache-control"] == "no-store"
    text = unescape(page.text)
    assert order["lab_test"]["lab"]["name"] in text
    assert "Critical" in text and "Results ready" in text
    # Every result of the order, with its value, unit and reference range.
    assert results
    for result in results:
        row = re.search(
            rf"<tr><td>{re.escape(result['name'])}</td><td class=\"value\">(.*?)</td>"
            r"<td>(.*?)</td><td>(.*?)</td>",
            text,
        )
        assert row is not None, result["name"]
        assert row.groups() == (
            str(result["result"]),
            result["unit"] or "",
            result["reference_range"] or "",
        )
    # Its progress, one line per status it went through.
    assert text.count("<li><span>") == len(order["events"])


def test_an_order_of_another_user_or_team_is_not_shown(
    client: TestClient,
    team: Team,
    other_team: Team,
    user: str,
    browser: TestClient,
    service: Service,
) -> None:
    mine = place(client, team, user)
    sibling = with_demographics(client, team, service, "portal-sibling")
    theirs = place(client, team, sibling)
    service.teams.set_feature(CTX, other_team.team_id, "demographics", True)
    foreign = place(client, other_team, with_demographics(client, other_team, service, "far"))
    token = token_of(created(client, team, user, context="launch")["url"])
    assert browser.get(f"/portal/orders/{mine}", params={"token": token}).status_code == 200
    for order_id in (theirs, foreign, str(uuid4())):
        page = browser.get(f"/portal/orders/{order_id}", params={"token": token})
        assert_error_page(page, 404, "This lab test is not here")
        assert order_id not in page.text.replace(f"/portal/orders/{order_id}", "")
    # A token bound to another team: even one we signed, for this user, opens nothing.
    tokens = PortalTokens(service.cursor_secret)
    now = datetime.now(UTC)
    elsewhere = tokens.sign(
        PortalPass(other_team.team_id, UUID(user), LAUNCH, now, now + timedelta(minutes=5))
    )
    service.teams.set_feature(CTX, other_team.team_id, "portal_url", True)
    assert_error_page(
        browser.get("/portal", params={"token": elsewhere}), 404, "This portal link is not valid"
    )


def test_an_expired_url_gets_a_clear_error_page(
    client: TestClient, team: Team, user: str, browser: TestClient
) -> None:
    place(client, team, user)
    start = datetime.now(UTC) + timedelta(seconds=1)
    with freeze_time(start) as frozen:
        launch = created(client, team, user, context="launch")["url"]
        communications = created(client, team, user, context="communications")["url"]
        frozen.tick(timedelta(seconds=LAUNCH_SECONDS - 1))
        assert open_page(browser, launch).status_code == 200
        frozen.tick(timedelta(seconds=1))
        assert_error_page(open_page(browser, launch), 410, "This portal link has expired")
        assert open_page(browser, communications).status_code == 200
        frozen.tick(timedelta(days=28))
        assert_error_page(open_page(browser, communications), 410, "This portal link has expired")


def test_a_forged_or_altered_token_gets_a_clear_error_page(
    client: TestClient, team: Team, user: str, browser: TestClient, service: Service
) -> None:
    token = token_of(created(client, team, user, context="launch")["url"])
    body, signature = token.split(".")
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    # The same claims for another user, with the genuine token's signature.
    other_user = with_demographics(client, team, service, "portal-other")
    forged_body = CursorCodec(b"not our key").encode(
        {"t": team.team_id.hex, "u": UUID(other_user).hex, "c": "l", "i": 0, "e": 2**31},
        "portal-v1",
    )
    # Signed with the cursor secret itself (a paging cursor's key), not the portal's.
    cursor_signed = CursorCodec(service.cursor_secret).encode(
        {"t": team.team_id.hex, "u": UUID(user).hex, "c": "l", "i": 0, "e": 2**31}, "portal-v1"
    )
    for forged in (
        f"{body}.{flipped}",
        f"{forged_body.split('.')[0]}.{signature}",
        forged_body,
        cursor_signed,
        "",
        "garbage",
        "a.b.c",
        "é.ü",
        "x" * 5000,
    ):
        assert_error_page(
            browser.get("/portal", params={"token": forged}), 404, "This portal link is not valid"
        )
    assert_error_page(browser.get("/portal"), 404, "This portal link is not valid")
    # The genuine token still works.
    assert browser.get("/portal", params={"token": token}).status_code == 200


def test_a_url_stops_working_when_the_user_is_deleted_even_after_an_undo(
    client: TestClient, team: Team, user: str, browser: TestClient, service: Service
) -> None:
    order_id = place(client, team, user)
    before = created(client, team, user, context="communications", order_id=order_id)["url"]
    assert open_page(browser, before).status_code == 200
    assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    assert_error_page(open_page(browser, before), 410, "This portal link no longer works")
    undo = client.post("/v2/user/undo_delete", params={"user_id": user}, headers=team.headers)
    assert undo.status_code == 200
    # A link handed out before the deletion stays dead; a new one works.
    assert_error_page(open_page(browser, before), 410, "This portal link no longer works")
    after = created(client, team, user, context="launch")["url"]
    assert open_page(browser, after).status_code == 200
    # Erased: gone for good.
    assert client.delete(f"/v2/user/{user}", headers=team.headers).status_code == 200
    with freeze_time(datetime.now(UTC) + timedelta(days=8)):
        assert service.jobs.sweep_erasures() == 1
        assert_error_page(open_page(browser, after), 410, "This portal link no longer works")


def test_switching_the_portal_off_closes_its_pages(
    client: TestClient, team: Team, user: str, browser: TestClient, service: Service
) -> None:
    url = created(client, team, user, context="launch")["url"]
    service.teams.set_feature(CTX, team.team_id, "portal_url", False)
    assert_error_page(open_page(browser, url), 403, "The portal is not available")
    service.teams.set_feature(CTX, team.team_id, "portal_url", True)
    assert open_page(browser, url).status_code == 200


def test_the_team_brand_heads_the_page(
    client: TestClient, team: Team, user: str, browser: TestClient, service: Service
) -> None:
    brand = EnvironmentSettings.model_validate(
        {
            "logo_url": "https://cdn.example.com/acme.png",
            "brand_information": BrandInformation(
                company_name="Acme <Health>", brand_color="#aa3300"
            ),
        }
    )
    service.teams.update_team(CTX, DEFAULT_ORG_ID, team.team_id, settings={"sandbox": brand})
    page = open_page(browser, created(client, team, user, context="launch")["url"])
    assert '<p class="team">Acme &lt;Health&gt;</p>' in page.text
    assert "#aa3300" in page.text and 'src="https://cdn.example.com/acme.png"' in page.text


def test_no_personal_data_or_token_reaches_the_logs(
    client: TestClient,
    team: Team,
    user: str,
    browser: TestClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    order_id = place(client, team, user)
    complete(client, team, order_id, "abnormal")
    with caplog.at_level(logging.DEBUG):
        url = created(client, team, user, context="launch", order_id=order_id)["url"]
        token = token_of(url)
        assert open_page(browser, url).status_code == 200
        assert browser.get("/portal", params={"token": token}).status_code == 200
        assert browser.get("/portal", params={"token": token + "x"}).status_code == 404
    # The service's records (the test's own HTTP client logs the URLs it asks for).
    logged = "\n".join(
        record.getMessage() for record in caplog.records if not record.name.startswith("httpx")
    )
    assert not any(value in logged for value in PERSONAL)
    assert token not in logged
