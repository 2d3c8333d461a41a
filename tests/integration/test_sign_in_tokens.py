"""Sign-in tokens of the mobile SDKs (issue 34) on both databases: an hour's validity, the
token's own kind only (no portal link or cursor is one), and only for a live user."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.settings import Settings
from healthledger.domain.context import CommandContext

from tests.clocks import Clock
from tests.conftest import Team

CTX = CommandContext.system("test:sign-in")


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    yield built
    built.close()


def status_path(user_id: str) -> str:
    return f"/v2/user/{user_id}/import/apple_health/00000000-0000-4000-8000-000000000001"


def test_a_sign_in_token_lasts_an_hour_and_is_of_its_own_kind(
    svc: Service, clock: Clock, home: Team, api: TestClient
) -> None:
    user = str(svc.users.create_user(CTX, home.team_id, client_user_id="sdk-1").id)
    issued = api.post(f"/v2/user/{user}/sign_in_token", headers=home.headers)
    assert issued.status_code == 200, issued.text
    assert issued.json()["user_id"] == user
    bearer = {"authorization": f"Bearer {issued.json()['sign_in_token']}"}
    # Genuine: the import is unknown (404), not the caller (401).
    assert api.get(status_path(user), headers=bearer).status_code == 404
    portal = api.get("/v2/team/svix/url", headers=home.headers).json()["url"]
    portal_token = parse_qs(urlsplit(portal).query)["token"][0]
    for token in (portal_token, "x" * 600, ""):
        refused = api.get(status_path(user), headers={"authorization": f"Bearer {token}"})
        assert refused.status_code == 401, token
    clock.advance(timedelta(hours=1, seconds=1))
    expired = api.get(status_path(user), headers=bearer)
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    # None for a user that is not live, nor of another team.
    unknown = api.post(
        "/v2/user/00000000-0000-4000-8000-000000000002/sign_in_token", headers=home.headers
    )
    assert unknown.status_code == 404
    assert api.delete(f"/v2/user/{user}", headers=home.headers).status_code == 200
    assert api.post(f"/v2/user/{user}/sign_in_token", headers=home.headers).status_code == 404
