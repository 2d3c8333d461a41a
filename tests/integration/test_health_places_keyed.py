"""Health data's and raw payloads' provider and resource held as keyed digests under the
user's key (issue 29 §1, ADR 0047), on SQLite and PostgreSQL.

Each row of `health_data` and `raw_payloads` named its provider and resource in clear
beside the user's id: a glucose monitor, `blood_pressure`. Rows now hold keyed digests;
reads find their names again by the user's key; after the erasure no word of them is
left; a kept pull's months are no longer in clear. Rows written before are keyed at the
start (on the database 1809f39 wrote, and on rows put back in clear as a database of
before revision 0039 holds them)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    health_data,
    health_data_days,
    place_digest_backfill,
    raw_payloads,
)
from healthledger.adapters.persistence.health_data.places import (
    is_keyed,
    key_stored_places,
    known_providers,
    known_resources,
    provider_digest,
    resource_digest,
)
from sqlalchemy import create_engine, func, insert, inspect, select, update

from tests.conftest import Team
from tests.integration.test_client_user_id_at_rest import sqlite_bytes
from tests.integration.test_health_facts_sealed import holding, postgres_pages
from tests.integration.test_todays_main import Written, written  # noqa: F401  (fixtures)

# The words of a glucose monitor's data, and of the maker whose raw payloads are kept.
WORDS = (b"freestyle_libre", b"glucose", b"oura")
NAMES = set(known_providers()) | set(known_resources())


def rows_of(service: Service, user_id: UUID | None = None) -> list[tuple[str, str, str]]:
    """(table, provider, resource) of every row of both tables (of one user, if given)."""
    found = []
    with service.db.read() as conn:
        for table in (health_data, raw_payloads):
            query = select(table.c.provider, table.c.resource)
            if user_id is not None:
                query = query.where(table.c.user_id == user_id)
            found += [(table.name, p, r) for p, r in conn.execute(query)]
    return found


def in_clear(service: Service) -> list[tuple[str, str, str]]:
    """The rows of either table, any user's, whose provider or resource is a name."""
    return [row for row in rows_of(service) if row[1] in NAMES or row[2] in NAMES]


def storage(service: Service) -> dict[str, bytes]:
    """SQLite: the file and its WAL. PostgreSQL: every page of both tables and their
    indexes (dead rows too), when pageinspect is there (else the live rows only)."""
    if service.db.is_sqlite:
        return {"sqlite": sqlite_bytes(service)}
    return postgres_pages(service, ("health_data", "raw_payloads")) or {}


@pytest.fixture
def user_with_data(service: Service, team: Team) -> Iterator[tuple[TestClient, UUID, datetime]]:
    start = datetime.now(UTC) + timedelta(hours=1)
    with freeze_time(start) as frozen, TestClient(create_team_api(service)) as client:
        made = client.post("/v2/user", json={"client_user_id": "places-1"}, headers=team.headers)
        user = UUID(made.json()["user_id"])
        for provider in ("freestyle_libre", "oura"):
            connected = client.post(
                "/v2/link/connect/demo",
                json={"user_id": str(user), "provider": provider},
                headers=team.headers,
            )
            assert connected.status_code == 200, connected.text
        frozen.tick(60)
        assert service.jobs.run_due_pulls() >= 2
        yield client, user, start


def test_rows_hold_digests_reads_name_them_and_the_erasure_leaves_no_word(
    service: Service, team: Team, user_with_data: tuple[TestClient, UUID, datetime]
) -> None:
    client, user, start = user_with_data
    headers = team.headers
    cipher = service.key_store.cipher(user)
    assert cipher is not None
    held = rows_of(service, user)
    tables = {table for table, _, _ in held}
    assert tables == {"health_data", "raw_payloads"}, held
    # Every row's names are keyed digests, none a name; the maker's digest is the user's.
    assert all(is_keyed(p) and is_keyed(r) for _, p, r in held), held
    assert in_clear(service) == []
    libre = provider_digest(cipher.digest, "freestyle_libre")
    glucose = resource_digest(cipher.digest, "glucose")
    assert ("health_data", libre, glucose) in held
    assert (
        "raw_payloads",
        provider_digest(cipher.digest, "oura"),
        resource_digest(cipher.digest, "sleep"),
    ) in held
    # A kept pull's window is sealed only: no month of it in clear (revision 0039).
    with service.db.read() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("raw_payloads")}
    assert columns == {"user_id", "provider", "resource", "slot", "fetched_at", "window", "payload"}
    # Another user's digests of the same names differ (a key per user).
    other = client.post("/v2/user", json={"client_user_id": "places-2"}, headers=headers)
    other_cipher = service.key_store.cipher(UUID(other.json()["user_id"]))
    assert other_cipher is not None
    assert provider_digest(other_cipher.digest, "freestyle_libre") != libre
    # The reads name them again: the timeseries by provider, the raw payloads by maker.
    days = {"start_date": (start - timedelta(days=7)).date().isoformat()}
    with freeze_time(start + timedelta(minutes=2)):
        series = client.get(f"/v2/timeseries/{user}/glucose", params=days, headers=headers)
        assert series.status_code == 200, series.text
        assert series.json()
        grouped = client.get(
            f"/v2/timeseries/{user}/glucose/grouped",
            params={**days, "provider": "freestyle_libre"},
            headers=headers,
        )
        assert grouped.status_code == 200, grouped.text
        assert list(grouped.json()["groups"]) == ["freestyle_libre"]
        raw = client.get(f"/v2/summary/sleep/{user}/raw", params=days, headers=headers)
        assert raw.status_code == 200, raw.text
        assert raw.json()["sleep"] and {s["source"]["slug"] for s in raw.json()["sleep"]} == {
            "oura"
        }
        mine = client.get(
            f"/v2/summary/sleep/{user}/raw", params={**days, "provider": "oura"}, headers=headers
        )
        assert len(mine.json()["sleep"]) == len(raw.json()["sleep"])
    # On PostgreSQL no page of either table holds a name, live or dead.
    if not service.db.is_sqlite:
        for word in WORDS:
            assert holding(storage(service), word) == [], word

    with freeze_time(start + timedelta(minutes=3)) as frozen:
        assert client.delete(f"/v2/user/{user}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
    assert rows_of(service, user) == []
    # Nothing left names the device or the maker: SQLite's file and WAL whole; on
    # PostgreSQL the pages of both tables (their dead rows held digests only).
    places = storage(service)
    for word in WORDS:
        assert holding(places, word) == [], word
    assert in_clear(service) == []


def put_back_in_clear(service: Service, user: UUID) -> None:
    """The user's rows as a database of before revision 0039 holds them: every name in
    clear, the user listed by the migration."""
    cipher = service.key_store.cipher(user)
    assert cipher is not None
    names = {provider_digest(cipher.digest, n): n for n in known_providers()}
    names |= {resource_digest(cipher.digest, n): n for n in known_resources()}
    with service.db.write() as conn:
        for table in (health_data, raw_payloads):
            for provider, resource in conn.execute(
                select(table.c.provider, table.c.resource).distinct()
            ).all():
                conn.execute(
                    update(table)
                    .where(table.c.provider == provider, table.c.resource == resource)
                    .values(provider=names[provider], resource=names[resource])
                )
        conn.execute(insert(place_digest_backfill), [{"user_id": user}])
    assert {(t, p, r) for t, p, r in in_clear(service)} >= {
        ("health_data", "freestyle_libre", "glucose"),
        ("raw_payloads", "oura", "sleep"),
    }


def listed(service: Service) -> int:
    with service.db.read() as conn:
        return conn.execute(select(func.count()).select_from(place_digest_backfill)).scalar_one()


def test_rows_written_in_clear_before_are_keyed_at_the_start(
    service: Service, team: Team, user_with_data: tuple[TestClient, UUID, datetime]
) -> None:
    client, user, start = user_with_data
    days = {"start_date": (start - timedelta(days=7)).date().isoformat()}
    with freeze_time(start + timedelta(minutes=2)):
        before = [
            client.get(f"/v2/timeseries/{user}/glucose", params=days, headers=team.headers).json(),
            client.get(f"/v2/summary/sleep/{user}/raw", params=days, headers=team.headers).json(),
        ]
    put_back_in_clear(service, user)
    # The next start keys them, unlists the user, and reads answer as before.
    with freeze_time(start + timedelta(minutes=2)):
        started = build_service(service.settings)
    try:
        assert in_clear(started) == []
        assert all(is_keyed(p) and is_keyed(r) for _, p, r in rows_of(started))
        # Nor does any page keep the names: on PostgreSQL the renamed rows' old versions
        # went with the tables' rewrite (dead rows included, pageinspect).
        for word in WORDS:
            assert holding(storage(started), word) == [], word
        assert listed(started) == 0
        with (
            freeze_time(start + timedelta(minutes=2)),
            TestClient(create_team_api(started)) as again,
        ):
            after = [
                again.get(
                    f"/v2/timeseries/{user}/glucose", params=days, headers=team.headers
                ).json(),
                again.get(
                    f"/v2/summary/sleep/{user}/raw", params=days, headers=team.headers
                ).json(),
            ]
        assert after == before and before[0] and before[1]["sleep"]
        # Nothing more to do at the next start.
        assert key_stored_places(started.db, started.key_store) == 0
    finally:
        started.close()


def test_a_start_stopped_before_the_rewrite_rewrites_at_the_next(
    service: Service,
    user_with_data: tuple[TestClient, UUID, datetime],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, user, start = user_with_data
    put_back_in_clear(service, user)

    def stopped(*tables: str) -> None:
        raise KeyboardInterrupt  # the process stopped after renaming, before the rewrite

    monkeypatch.setattr(service.db, "rewrite", stopped)
    with pytest.raises(KeyboardInterrupt):
        key_stored_places(service.db, service.key_store)
    monkeypatch.undo()
    # Renamed, but the names are still on disk (PostgreSQL's dead rows, SQLite's WAL)
    # and the user still listed...
    assert in_clear(service) == []
    assert holding(storage(service), b"freestyle_libre")
    assert listed(service) == 1
    # ... so the next start, with nothing left to rename, still rewrites, then unlists.
    with freeze_time(start + timedelta(minutes=2)):
        started = build_service(service.settings)
    try:
        for word in WORDS:
            assert holding(storage(started), word) == [], word
        assert listed(started) == 0
    finally:
        started.close()


def names_in_clear(written: Written) -> set[str]:  # noqa: F811
    """The names the days of health data of the database 1809f39 wrote hold in clear,
    before any start (those of five letters or more: a shorter one may be met by chance
    in a sealed value's bytes); it kept no raw payload."""
    engine = create_engine(written.url)
    try:
        with engine.connect() as conn:
            h = health_data.c
            names = {
                name
                for row in conn.execute(select(h.provider, h.resource).distinct())
                for name in row
                if len(name) >= 5
            }
    finally:
        engine.dispose()
    assert "sleep" in names, names
    return names


def test_the_database_1809f39_wrote_is_keyed_at_the_start(
    written: Written,  # noqa: F811
) -> None:
    names = names_in_clear(written)
    with freeze_time(written.now):
        service = build_service(written.settings())
    try:
        held = rows_of(service)
        assert len(held) > 8
        assert in_clear(service) == []
        assert all(is_keyed(p) and is_keyed(r) for _, p, r in held)
        # Its days were converted into blocks (ADR 0033) and deleted from the old table:
        # on PostgreSQL no page of it or of the blocks' (their dead versions included)
        # keeps a name after the start's rewrite. (SQLite's file holds this old log's
        # words in other tables' pages; the test above puts names back in a new
        # database and searches its whole file.)
        if not service.db.is_sqlite:
            places = postgres_pages(service, ("health_data", "health_data_days"))
            assert places
            for name in names:
                assert holding(places, name.encode()) == [], name
        with service.db.read() as conn:
            assert (
                conn.execute(select(func.count()).select_from(place_digest_backfill)).scalar() == 0
            )
        # main-0's oura data reads back by name (test_todays_main checks every answer).
        main_0 = UUID(written.user("main-0"))
        stored = service.health_data.read_range(
            main_0, datetime(2000, 1, 1).date(), written.now.date(), resources=["sleep"]
        )
        assert stored and {d.provider for d in stored} == {"oura"}
    finally:
        service.close()


def test_a_conversion_stopped_before_the_rewrite_rewrites_at_the_next(
    written: Written,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if written.url.startswith("sqlite"):
        pytest.skip("SQLite: secure_delete wrote over the deleted days; the checkpoint follows")
    names = names_in_clear(written)
    rewrite = Database.rewrite

    def stopped_at_the_days(db: Database, *tables: str) -> None:
        # The process stopped after converting the last day, before the rewrite.
        if health_data_days.name not in tables:
            rewrite(db, *tables)

    monkeypatch.setattr(Database, "rewrite", stopped_at_the_days)
    with freeze_time(written.now):
        stopped = build_service(written.settings())
    try:
        # Converted and deleted, their names still in the dead rows.
        pages = postgres_pages(stopped, ("health_data_days",))
        assert pages and any(holding(pages, name.encode()) for name in names)
    finally:
        stopped.close()
    monkeypatch.undo()
    with freeze_time(written.now):
        service = build_service(written.settings())
    try:
        # Nothing left to convert, but the old table's pages were rewritten away.
        with service.db.read() as conn:
            assert conn.execute(select(func.count()).select_from(health_data_days)).scalar() == 0
        places = postgres_pages(service, ("health_data_days",))
        assert places is not None
        for name in names:
            assert holding(places, name.encode()) == [], name
    finally:
        service.close()
