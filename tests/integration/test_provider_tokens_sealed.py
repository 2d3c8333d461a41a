"""A connection's maker and OAuth client held only sealed with the user's key in
`provider_tokens` (issue 29 §1, revision 0047), on SQLite and PostgreSQL.

A maker is a health fact (freestyle_libre, a glucose monitor, says the person is
diabetic), and the client id names the maker through the team's settings: the row seals
both with the tokens (`sealed_grant`). The refresh, the revocation at a deregistration
(as the client that obtained the grant) and its retries work as before; after the user's
erasure no page of the table (pageinspect or the table's files on PostgreSQL, the file
and its -wal on SQLite) holds either. Rows of before the revision are sealed at the
service's start (their values moved aside by the migration), the tables rewritten, and
the service works on them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.makers.fake_oura import FakeOura, running_fake_oura
from healthledger.adapters.persistence.engine import migrating
from healthledger.adapters.persistence.engine.schema import (
    UTCDateTime,
    provider_token_backfill,
    provider_tokens,
)
from healthledger.adapters.settings import OAuthClientSetting, Settings
from healthledger.domain.connections.revocation import RETRY_DELAYS
from healthledger.domain.users.user import User
from pydantic import SecretStr
from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    NullPool,
    String,
    Table,
    Text,
    Uuid,
    create_engine,
    func,
    select,
    text,
)

from tests.clocks import Clock
from tests.conftest import Team
from tests.integration.oauth_browser import API, LINK, Browser, signed_in_user, token_rows
from tests.integration.test_health_facts_sealed import holding, postgres_files, postgres_pages
from tests.integration.test_todays_main import Written, written  # noqa: F401  (fixture)
from tests.makers import FakeMaker, fake_maker
from tests.stream_ids import stream_of_connection

# Each test's own clients, so that a needle found is this test's (PostgreSQL's test
# schema is shared with the worker's other tests).
SECRET = "client-secret-never-shown"
TABLES = (provider_tokens.name, provider_token_backfill.name)


@pytest.fixture
def clients() -> dict[str, OAuthClientSetting]:
    return {
        slug: OAuthClientSetting(
            client_id=f"hl-{slug}-client-{uuid.uuid4().hex[:12]}", client_secret=SecretStr(SECRET)
        )
        for slug in ("oura", "fitbit")
    }


@pytest.fixture
def oura(clock: Clock, clients: dict[str, OAuthClientSetting]) -> Iterator[FakeOura]:
    with running_fake_oura(FakeOura(clock=clock)) as fake:
        fake.register(clients["oura"].client_id, SECRET)
        yield fake


@pytest.fixture
def maker(clients: dict[str, OAuthClientSetting]) -> Iterator[FakeMaker]:
    with fake_maker() as running:
        running.register(clients["fitbit"].client_id, SECRET)
        yield running


@pytest.fixture
def configured(
    settings: Settings, oura: FakeOura, maker: FakeMaker, clients: dict[str, OAuthClientSetting]
) -> Settings:
    # Oura at its fake (a real maker's API), Fitbit at the generic fake (RFC 7009).
    return settings.model_copy(
        update={
            "link_url": LINK,
            "public_base_url": API,
            "oauth_maker_url": maker.base,
            "oauth_maker_urls": {"oura": oura.base},
            "oura_api_url": oura.base,
            "oura_history_days": 3,
            "oauth_clients": clients,
        }
    )


@pytest.fixture
def svc(configured: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(configured, clock=clock)
    yield built
    built.close()


def needles(clients: dict[str, OAuthClientSetting]) -> list[str]:
    return [*clients, *(c.client_id for c in clients.values())]


def in_clear(row: Any, values: list[str]) -> list[str]:
    """The values found in any column of a `provider_tokens` row but its sealed one."""
    shown = repr([v for k, v in row._mapping.items() if k != "sealed_grant"])
    return [value for value in values if value in shown]


def pages(service: Service) -> dict[str, bytes]:
    """What this test can read of the table's storage: SQLite's file and its -wal, or
    PostgreSQL's pages of the tables (and indexes) and their files."""
    if service.db.is_sqlite:
        path = service.db.sqlite_file
        assert path is not None
        return {
            f"file{suffix}": path.with_name(path.name + suffix).read_bytes()
            for suffix in ("", "-wal")
            if path.with_name(path.name + suffix).exists()
        }
    found: dict[str, bytes] = {}
    for place in (postgres_pages(service, TABLES), postgres_files(service, TABLES)):
        found.update(place or {})
    if not found:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return found


def anywhere(service: Service, values: list[str]) -> dict[str, list[str]]:
    """Each value's places (outside sealed values) in the table's storage."""
    stored = pages(service)
    return {v: found for v in values if (found := holding(stored, v.encode()))}


def test_a_connection_s_maker_and_client_are_sealed_and_gone_after_the_erasure(
    svc: Service,
    api: TestClient,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    maker: FakeMaker,
    clock: Clock,
    clients: dict[str, OAuthClientSetting],
) -> None:
    looked_for = needles(clients)
    ring = signed_in_user(api, home, browser, "oura")
    band = signed_in_user(api, home, browser, "fitbit")
    rows = [*token_rows(svc, str(ring)), *token_rows(svc, str(band))]
    assert len(rows) == 2
    for row in rows:
        assert "provider" not in row._mapping and "client_id" not in row._mapping
        assert in_clear(row, looked_for) == []
    # Sealed with the user's key, with the tokens.
    opened = svc.key_store.open(ring, rows[0].sealed_grant)
    assert opened is not None
    assert (opened["provider"], opened["client_id"]) == ("oura", clients["oura"].client_id)
    # The searches do look where the values would be: the live rows' sealed values.
    stored = pages(svc)
    for row in rows:
        assert [p for p, content in stored.items() if row.sealed_grant.encode() in content]

    # A refresh opens the maker and client, and seals them again with the new tokens.
    connection = stream_of_connection(svc, ring, "oura")
    before = svc.provider_tokens.current(connection)
    assert before is not None and before.provider == "oura"
    assert before.client_id == clients["oura"].client_id
    clock.advance(timedelta(seconds=oura.expires_in + 60))
    svc.jobs.run_due_pulls()
    refreshes = [r for r in oura.requests if r[2].get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and refreshes[0][3] == 200
    after = svc.provider_tokens.current(connection)
    assert after is not None and after.version == before.version + 1
    assert (after.provider, after.client_id) == (before.provider, before.client_id)
    assert after.tokens.access_token != before.tokens.access_token
    [refreshed] = token_rows(svc, str(ring))
    assert in_clear(refreshed, looked_for) == []

    # Deregistered: Oura down twice, the revocation retried and then done with the
    # opened maker; Fitbit's revoked by RFC 7009 as the client that obtained it.
    oura.fail(503, times=2, path="revoke")
    for user, slug in ((ring, "oura"), (band, "fitbit")):
        answer = api.delete(f"/v2/user/{user}/{slug}", headers=home.headers)
        assert answer.status_code == 200, answer.text
    assert svc.jobs.revoke_grants() == 1  # Fitbit's
    [revocation] = maker.revocations
    assert (revocation.slug, revocation.client_id) == ("fitbit", clients["fitbit"].client_id)
    assert [r.revoke_attempts for r in token_rows(svc, str(ring))] == [1]
    clock.advance(RETRY_DELAYS[0] + timedelta(seconds=1))
    assert svc.jobs.revoke_grants() == 0
    assert [r.revoke_attempts for r in token_rows(svc, str(ring))] == [2]
    clock.advance(RETRY_DELAYS[1] + timedelta(seconds=1))
    assert svc.jobs.revoke_grants() == 1
    assert oura.revoked == [after.tokens.access_token]
    assert token_rows(svc, str(ring)) == token_rows(svc, str(band)) == []

    # A third user connected again, then erased with its tokens still owed a revocation.
    again = signed_in_user(api, home, browser, "oura")
    oura.fail(503, times=100, path="revoke")
    assert api.delete(f"/v2/user/{again}", headers=home.headers).status_code == 200
    assert svc.jobs.revoke_grants() == 0
    clock.advance(timedelta(days=7, minutes=1))
    for user in (ring, band):
        assert api.delete(f"/v2/user/{user}", headers=home.headers).status_code == 200
    clock.advance(timedelta(days=7, minutes=1))
    assert svc.jobs.sweep_erasures() == 3
    erased = list(svc.ledger.events.get(again))[-1]
    assert isinstance(erased, User.Erased) and erased.checked["provider_tokens"] == 1
    assert token_rows(svc, str(again)) == []
    # No page of the table keeps a maker or a client of theirs, live or dead.
    assert anywhere(svc, looked_for) == {}


# The table as revision 0045 left it (revision 0013's, with 0018's columns).
OLD_PROVIDER_TOKENS = Table(
    "provider_tokens",
    MetaData(),
    Column("connection_id", Uuid, primary_key=True),
    Column("user_id", Uuid),
    Column("team_id", Uuid),
    Column("provider", String(64)),
    Column("client_id", String(512)),
    Column("sealed_tokens", Text),
    Column("expires_at", UTCDateTime),
    Column("version", Integer),
    Column("stored_at", UTCDateTime),
)


def old_row(service: Service, user_id: uuid.UUID, slug: str) -> dict[str, Any]:
    """The user's grant at `slug` as the main before revision 0047 stored it: the maker
    and client in clear, the tokens alone sealed."""
    connection = stream_of_connection(service, user_id, slug)
    stored = service.provider_tokens.current(connection)
    assert stored is not None
    return {
        "connection_id": connection,
        "user_id": user_id,
        "team_id": stored.team_id,
        "provider": slug,
        "client_id": stored.client_id,
        "sealed_tokens": service.key_store.seal(user_id, stored.tokens.sealable()),
        "expires_at": stored.tokens.expires_at,
        "version": stored.version,
        "stored_at": service.clock(),
    }


def test_rows_of_before_are_sealed_at_the_start_and_the_service_works_on_them(
    svc: Service,
    api: TestClient,
    home: Team,
    browser: Browser,
    oura: FakeOura,
    maker: FakeMaker,
    clock: Clock,
    configured: Settings,
    clients: dict[str, OAuthClientSetting],
) -> None:
    looked_for = needles(clients)
    ring = signed_in_user(api, home, browser, "oura")
    band = signed_in_user(api, home, browser, "fitbit")
    gone = signed_in_user(api, home, browser, "oura")
    rows = [old_row(svc, user, slug) for user, slug in ((ring, "oura"), (band, "fitbit"))]
    gone_row = old_row(svc, gone, "oura")
    # One user erased (its key destroyed) whose row of before was left (none is, in
    # practice: the erasure deletes them; the start deletes what no key opens).
    assert api.delete(f"/v2/user/{gone}", headers=home.headers).status_code == 200
    clock.advance(timedelta(days=7, minutes=1))
    assert svc.jobs.sweep_erasures() == 1
    access = {row["provider"]: svc.provider_tokens.current(row["connection_id"]) for row in rows}

    # The database as the main before this revision leaves it: at 0045, the rows of
    # before (the downgrade deletes the sealed rows it cannot tell the maker of).
    svc.close()
    migrating.downgrade(configured.database_url, "0045")
    engine = create_engine(configured.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            assert conn.execute(text("SELECT count(*) FROM provider_tokens")).scalar() == 0
            conn.execute(OLD_PROVIDER_TOKENS.insert(), [*rows, gone_row])
    finally:
        engine.dispose()

    service = build_service(configured, clock=clock)
    try:
        with service.db.read() as conn:
            listed = conn.execute(select(func.count()).select_from(provider_token_backfill))
            assert listed.scalar() == 0
        assert token_rows(service, str(gone)) == []
        for row in rows:
            [now] = token_rows(service, str(row["user_id"]))
            assert in_clear(now, looked_for) == []
            stored = service.provider_tokens.current(row["connection_id"])
            before = access[row["provider"]]
            assert stored is not None and before is not None
            assert (stored.provider, stored.client_id) == (row["provider"], row["client_id"])
            assert stored.tokens == before.tokens and stored.version == row["version"]
        # No page keeps the values of before (the start rewrote the tables).
        assert anywhere(service, looked_for) == {}
        # Pulls refresh an expired grant; a deregistration revokes it as its client.
        clock.advance(timedelta(hours=2))
        service.jobs.run_due_pulls()
        refreshes = [r for r in oura.requests if r[2].get("grant_type") == "refresh_token"]
        assert len(refreshes) == 1 and refreshes[0][3] == 200
        with TestClient(create_team_api(service)) as client:
            for user, slug in ((ring, "oura"), (band, "fitbit")):
                answer = client.delete(f"/v2/user/{user}/{slug}", headers=home.headers)
                assert answer.status_code == 200, answer.text
        assert service.jobs.revoke_grants() == 2
        [revocation] = maker.revocations
        assert (revocation.slug, revocation.client_id) == ("fitbit", clients["fitbit"].client_id)
        assert len(oura.revoked) == 1
        assert token_rows(service, str(ring)) == token_rows(service, str(band)) == []
    finally:
        service.close()


# -- the database main wrote at 1809f39 -------------------------------------------------------


def test_the_start_seals_1809f39s_grant_with_its_maker_and_client(
    written: Written,  # noqa: F811
) -> None:
    """main-6's grant at oura (its maker and the service's client in clear at 1809f39):
    sealed with them at the start, opened as before, and in no page of the table."""
    main_6 = written.user("main-6")
    with freeze_time(written.now):
        service = build_service(written.settings())
    try:
        [row] = token_rows(service, main_6)
        assert in_clear(row, ["oura", "service-client"]) == []
        stored = service.provider_tokens.current(row.connection_id)
        assert stored is not None
        assert (stored.provider, stored.client_id) == ("oura", "service-client")
        assert stored.tokens.access_token and stored.tokens.refresh_token
        if not service.db.is_sqlite:
            # A database of its own: every page of the tables is this fixture's (on
            # SQLite, other tables of the file name the maker in clear).
            assert anywhere(service, ["oura", "service-client"]) == {}
    finally:
        service.close()
