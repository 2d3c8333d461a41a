"""Connections' and feeds' stream ids keyed by the user's data key (issue 29 §1, ADR 0045),
on SQLite and PostgreSQL.

Their ids were uuid5s of (user, provider) and (connection, resource): with the user's id,
in clear after the erasure, anyone holding the log tried the catalog's slugs and found
which makers a person had. A connection made now takes an id keyed by the user's key;
the service finds it by (user, provider) while the user exists, and after the erasure no
guess of the catalog's is anywhere in the database, while the chain verifies."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.compliance.chain_commands import verify_command
from healthledger.adapters.composition import Service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.connections.stream_ids import legacy_connection_id, legacy_feed_id
from sqlalchemy import select

from tests.conftest import Team
from tests.integration.test_connection_facts_sealed import (
    fresh_pages,
    started,  # noqa: F401
)
from tests.integration.test_health_facts_sealed import holding
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    SIGNED_HEADS,
    Written,
    verified,
    written,
)
from tests.stream_ids import stream_of_connection, stream_of_feed


def guesses(service: Service, user_id: UUID) -> Iterator[tuple[str, UUID]]:
    """Every id one holding the user's id derives by trying the catalog: each maker's
    connection, and each of its resources' feeds."""
    for slug, entry in service.catalog.items():
        connection_id = legacy_connection_id(user_id, slug)
        yield slug, connection_id
        for resource in entry.supported_resources:
            yield f"{slug}/{resource}", legacy_feed_id(connection_id, resource)


def spellings(stream_id: UUID) -> tuple[bytes, ...]:
    """How an id may be held: SQLite's hex text, PostgreSQL's uuid (16 bytes), a payload's
    hex or dashed form."""
    return (stream_id.hex.encode(), str(stream_id).encode(), stream_id.bytes)


def test_new_streams_are_keyed_found_while_the_user_lives_and_unguessable_after(
    service: Service,
    team: Team,
) -> None:
    headers = team.headers
    start = datetime.now(UTC) + timedelta(hours=1)
    with freeze_time(start) as frozen, TestClient(create_team_api(service)) as client:
        user_id = client.post(
            "/v2/user", json={"client_user_id": "keyed-1"}, headers=headers
        ).json()["user_id"]
        user = UUID(user_id)
        for provider in ("freestyle_libre", "oura"):
            connected = client.post(
                "/v2/link/connect/demo",
                json={"user_id": user_id, "provider": provider},
                headers=headers,
            )
            assert connected.status_code == 200, connected.text
        frozen.tick(60)
        assert service.jobs.run_due_pulls() >= 2
        # Found by (user, provider) through the user's key: not where the old uuid5 was.
        libre_id = stream_of_connection(service, user, "freestyle_libre")
        libre = service.ledger.find(libre_id)
        assert isinstance(libre, Connection) and libre.provider == "freestyle_libre"
        assert libre_id != legacy_connection_id(user, "freestyle_libre")
        glucose_id = stream_of_feed(service, user, "freestyle_libre", "glucose")
        glucose = service.ledger.find(glucose_id)
        assert isinstance(glucose, ResourceFeed) and glucose.connection_id == libre_id
        assert glucose_id != legacy_feed_id(libre_id, "glucose")
        providers = client.get(f"/v2/user/providers/{user_id}", headers=headers).json()
        assert sorted(p["slug"] for p in providers["providers"]) == ["freestyle_libre", "oura"]
        # A deregistration finds it the same way (the keyed id, by the user's key).
        gone = client.delete(f"/v2/user/{user_id}/oura", headers=headers)
        assert gone.status_code == 200, gone.text
        providers = client.get(f"/v2/user/providers/{user_id}", headers=headers).json()
        assert [p["slug"] for p in providers["providers"]] == ["freestyle_libre"]
        oura_id = stream_of_connection(service, user, "oura")
        with service.db.read() as conn:
            streams = set(conn.execute(select(stored_events.c.originator_id).distinct()).scalars())
        assert {libre_id, glucose_id, oura_id} <= streams

        frozen.tick(60)
        assert client.delete(f"/v2/user/{user_id}", headers=headers).status_code == 200
        frozen.tick(service.settings.grace_period.total_seconds() + 60)
        assert service.jobs.sweep_erasures() == 1
    # The key is gone: nobody, the service included, derives the ids any more, so the
    # streams (still in the log) are found by (user, provider) no longer.
    assert service.ledger.find(stream_of_connection(service, user, "freestyle_libre")) is None
    assert isinstance(service.ledger.find(libre_id), Connection)
    # No guess of the catalog's is in any page of the log (SQLite's file and WAL; the
    # pages and files of the log and of the connections' and feeds' tables).
    places = fresh_pages(service)
    assert holding(places, libre_id.hex.encode()) or holding(places, libre_id.bytes)
    tried = list(guesses(service, user))
    assert len(tried) > 100
    for name, guess in tried:
        for spelling in spellings(guess):
            assert holding(places, spelling) == [], name
    # `healthledger verify`'s walk and report.
    out = io.StringIO()
    assert verify_command(service.chain, None, out) == 0, out.getvalue()
    assert out.getvalue().startswith("ok: ")


def test_connections_made_before_keep_their_streams(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    # main-0's oura connection, made by 1809f39 under the uuid5 id: found by (user,
    # provider) as before, and its feeds too; a feed opened now under it takes a keyed id.
    main_0 = UUID(written.user("main-0"))
    oura_id = stream_of_connection(service, main_0, "oura")
    assert oura_id == legacy_connection_id(main_0, "oura")
    oura = service.ledger.find(oura_id)
    assert isinstance(oura, Connection) and oura.provider == "oura"
    sleep_id = stream_of_feed(service, main_0, "oura", "sleep")
    assert sleep_id == legacy_feed_id(oura_id, "sleep")
    assert isinstance(service.ledger.find(sleep_id), ResourceFeed)
    assert stream_of_feed(service, main_0, "oura", "no_such_resource") != legacy_feed_id(
        oura_id, "no_such_resource"
    )
    # A new maker of that user: keyed.
    assert stream_of_connection(service, main_0, "dexcom") != legacy_connection_id(main_0, "dexcom")
    assert verified(service, SIGNED_HEADS).startswith("ok: ")
