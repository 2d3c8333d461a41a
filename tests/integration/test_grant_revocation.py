"""Revocation at deregistration (issue 28; domain/connections/revocation.py), on SQLite and
PostgreSQL: our DELETE of a connection, and a user's deletion, revoke the person's grant at
the maker: Oura's own revocation at the fake Oura (adapters/makers/fake_oura.py), RFC 7009
at a maker whose catalog entry documents it (Fitbit, at the tests' generic fake maker).
The deletion never waits for the maker: a maker down is asked again later, a bounded
number of times, and the tokens are destroyed in the end whatever it answered, and by the
user's erasure in any case."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.makers.fake_oura import FakeOura, running_fake_oura
from healthledger.adapters.settings import Settings
from healthledger.domain.connections.revocation import RETRY_DELAYS
from healthledger.domain.users.user import User

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import (
    API,
    LINK,
    SERVICE,
    SERVICE_CLIENT,
    SERVICE_SECRET,
    Browser,
    clear_copies,
    signed_in_user,
    token_rows,
)
from tests.makers import FakeMaker, fake_maker
from tests.stream_ids import stream_of_connection


@pytest.fixture
def oura(clock: Clock) -> Iterator[FakeOura]:
    with running_fake_oura(FakeOura(clock=clock)) as fake:
        fake.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield fake


@pytest.fixture
def maker() -> Iterator[FakeMaker]:
    with fake_maker() as running:
        running.register(SERVICE_CLIENT, SERVICE_SECRET)
        yield running


@pytest.fixture
def svc(settings: Settings, oura: FakeOura, maker: FakeMaker, clock: Clock) -> Iterator[Service]:
    # Oura at its fake (its own stand-in URL), every other maker at the generic fake.
    configured = settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": maker.base,
            "oauth_maker_urls": {"oura": oura.base},
            "oura_api_url": oura.base,
            "oura_history_days": 3,
            "oauth_clients": {"oura": SERVICE, "fitbit": SERVICE},
        }
    )
    built = build_service(configured, clock=clock)
    yield built
    built.close()


def connected_to_oura(svc: Service, api: Any, home: Team, browser: Browser) -> tuple[str, str]:
    """(user id, the access token Oura granted it)."""
    user_id = signed_in_user(api, home, browser, "oura")
    stored = svc.provider_tokens.current(stream_of_connection(svc, user_id, "oura"))
    assert stored is not None
    return str(user_id), stored.tokens.access_token


def oura_accepts(oura: FakeOura, access_token: str) -> bool:
    answer = httpx.get(
        f"{oura.base}/v2/usercollection/personal_info",
        headers={"Authorization": f"Bearer {access_token}"},
    )
    assert answer.status_code in (200, 401), answer.text
    return answer.status_code == 200


def owed(svc: Service, user_id: str) -> list[int]:
    """The attempts made of each revocation the user's tokens are owed."""
    return [row.revoke_attempts for row in token_rows(svc, user_id) if row.revoke_due_at]


# -- revoked -----------------------------------------------------------------------------------


def test_a_deleted_connection_s_grant_is_revoked_at_oura(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura
) -> None:
    user_id, access = connected_to_oura(svc, api, home, browser)
    assert oura_accepts(oura, access)
    response = api.delete(f"/v2/user/{user_id}/oura", headers=home.headers)
    assert response.status_code == 200, response.text
    # Ended at once: no pull opens the tokens any more; they wait for the revocation.
    assert svc.provider_tokens.current(stream_of_connection(svc, user_id, "oura")) is None
    assert owed(svc, user_id) == [0]
    assert oura.revoked == []
    assert svc.jobs.revoke_grants() == 1
    assert oura.revoked == [access]
    assert not oura_accepts(oura, access)
    assert token_rows(svc, user_id) == []
    assert svc.jobs.revoke_grants() == 0  # done once


def test_a_deleted_user_s_grant_is_revoked_and_the_erasure_finds_nothing_left(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id, access = connected_to_oura(svc, api, home, browser)
    assert api.delete(f"/v2/user/{user_id}", headers=home.headers).status_code == 200
    assert svc.jobs.revoke_grants() == 1
    assert oura.revoked == [access]
    assert not oura_accepts(oura, access)
    clock.advance(timedelta(days=7, minutes=1))
    assert svc.jobs.sweep_erasures() == 1
    erased = list(svc.ledger.events.get(uuid.UUID(user_id)))[-1]
    assert isinstance(erased, User.Erased)
    assert erased.checked["provider_tokens"] == 0
    assert clear_copies(svc, oura.issued) == set()


def test_a_fitbit_grant_is_revoked_by_rfc_7009_as_the_client_that_obtained_it(
    svc: Service, api: Any, home: Team, browser: Browser, maker: FakeMaker
) -> None:
    user_id = str(signed_in_user(api, home, browser, "fitbit"))
    [grant] = maker.grants("authorization_code")
    issued_refresh = maker.issued[-1]
    assert api.delete(f"/v2/user/{user_id}/fitbit", headers=home.headers).status_code == 200
    assert svc.jobs.revoke_grants() == 1
    [revocation] = maker.revocations
    assert revocation.slug == "fitbit"
    assert revocation.client_id == SERVICE_CLIENT and revocation.auth == grant.auth
    assert revocation.form["token"] == issued_refresh
    assert revocation.form["token_type_hint"] == "refresh_token"
    assert token_rows(svc, user_id) == []


def test_a_revocation_the_maker_refuses_is_given_up_at_once_and_the_tokens_destroyed(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    maker: FakeMaker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RFC 7009 2.2.1: a 401 is our client refused, not a token gone: said, not retried."""
    user_id = str(signed_in_user(api, home, browser, "fitbit"))
    del maker.clients[SERVICE_CLIENT]  # the application deleted at the maker
    assert api.delete(f"/v2/user/{user_id}/fitbit", headers=home.headers).status_code == 200
    with caplog.at_level(logging.WARNING, logger="healthledger.revocations"):
        assert svc.jobs.revoke_grants() == 1
    assert len(maker.revocations) == 1
    assert token_rows(svc, user_id) == []
    [warning] = [r.getMessage() for r in caplog.records if r.name == "healthledger.revocations"]
    assert "fitbit" in warning and "non_retriable_error" in warning and user_id not in warning


# -- the maker down -----------------------------------------------------------------------------


def test_oura_down_at_the_deletion_the_deletion_stands_and_the_revocation_is_done_later(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id, access = connected_to_oura(svc, api, home, browser)
    oura.fail(503, times=2, path="revoke")
    assert api.delete(f"/v2/user/{user_id}/oura", headers=home.headers).status_code == 200
    assert svc.jobs.revoke_grants() == 0
    assert owed(svc, user_id) == [1]
    # Not before its retry is due.
    assert svc.jobs.revoke_grants() == 0
    clock.advance(RETRY_DELAYS[0] + timedelta(seconds=1))
    assert svc.jobs.revoke_grants() == 0  # down again
    assert owed(svc, user_id) == [2]
    clock.advance(RETRY_DELAYS[1] + timedelta(seconds=1))
    assert svc.jobs.revoke_grants() == 1
    assert oura.revoked == [access]
    assert token_rows(svc, user_id) == []


def test_a_maker_down_for_good_the_attempts_end_and_the_tokens_are_destroyed_anyway(
    svc: Service,
    api: Any,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user_id, access = connected_to_oura(svc, api, home, browser)
    oura.fail(503, times=100, path="revoke")
    assert api.delete(f"/v2/user/{user_id}/oura", headers=home.headers).status_code == 200
    with caplog.at_level(logging.WARNING, logger="healthledger.revocations"):
        for delay in RETRY_DELAYS:
            assert svc.jobs.revoke_grants() == 0
            clock.advance(delay + timedelta(seconds=1))
        assert svc.jobs.revoke_grants() == 1  # given up: the tokens go
    assert token_rows(svc, user_id) == []
    assert oura.revoked == []
    # Said without anything personal: the maker only.
    [warning] = [r.getMessage() for r in caplog.records if r.name == "healthledger.revocations"]
    assert "oura" in warning and user_id not in warning and access not in warning


def test_the_erasure_destroys_tokens_still_owed_a_revocation(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura, clock: Clock
) -> None:
    user_id, _ = connected_to_oura(svc, api, home, browser)
    oura.fail(503, times=100, path="revoke")
    assert api.delete(f"/v2/user/{user_id}", headers=home.headers).status_code == 200
    assert svc.jobs.revoke_grants() == 0
    assert owed(svc, user_id) == [1]
    clock.advance(timedelta(days=7, minutes=1))
    assert svc.jobs.sweep_erasures() == 1
    erased = list(svc.ledger.events.get(uuid.UUID(user_id)))[-1]
    assert isinstance(erased, User.Erased)
    assert erased.checked["provider_tokens"] == 1  # found owed, destroyed
    assert token_rows(svc, user_id) == []
    assert svc.jobs.revoke_grants() == 0
    assert clear_copies(svc, oura.issued) == set()


def test_a_reconnection_before_the_revocation_drops_it(
    svc: Service, api: Any, home: Team, browser: Browser, oura: FakeOura
) -> None:
    """Revoking the old grant after the person connected again could end the new one
    (a maker that ends every grant of the person): the new period's tokens replace it."""
    user_id, first = connected_to_oura(svc, api, home, browser)
    assert api.delete(f"/v2/user/{user_id}/oura", headers=home.headers).status_code == 200
    made = api.post("/v2/link/token", json={"user_id": user_id}, headers=home.headers)
    browser.sign_in(made.json()["link_token"])
    [row] = token_rows(svc, user_id)
    assert row.revoke_due_at is None
    assert svc.jobs.revoke_grants() == 0
    assert oura.revoked == []
    stored = svc.provider_tokens.current(stream_of_connection(svc, uuid.UUID(user_id), "oura"))
    assert stored is not None and stored.tokens.access_token != first
    assert oura_accepts(oura, stored.tokens.access_token)
