"""The user's fallback time zone held only sealed (issue 29 §1, revision 0042, ADR 0052).

A new user's events hold the zone sealed with its key (`User.Created` version 4, a
change's `sealed_fallback_time_zone`), and so does its users row; the answers open it.
On a database written by main at 1809f39 (tests/data/main_1809f39), whose users' events
and rows held their zones in clear (every user made with `Europe/Berlin`, `main-1`
moved to `America/New_York`), the first start redacts those records into their sealed
form (ADR 0028: reason `sealed`, `removed` for `main-4`, erased already), fills the rows,
and leaves no zone in clear where the database reaches: the SQLite file and its -wal;
on PostgreSQL the pages (pageinspect) and files of the log, the users table and the
snapshots. The chain still verifies and the answers are as 1809f39 gave them
(test_todays_main.py); after `main-2`'s erasure its zone reads as erased."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.http.team_api import create_team_api
from healthledger.adapters.persistence.engine.schema import (
    chain_redactions,
    pending_redactions,
    snapshots,
    stored_events,
    users,
)
from healthledger.adapters.persistence.eventstore.chain import REDACTION_TOPIC
from healthledger.domain.context import CommandContext
from healthledger.domain.personal_data import ERASED_PLACEHOLDER
from healthledger.domain.redaction import REMOVED, SEALED
from healthledger.domain.users.user import User
from sqlalchemy import func, select

from tests.conftest import Team
from tests.integration.test_client_user_id_at_rest import sqlite_bytes
from tests.integration.test_health_facts_sealed import (
    holding,
    postgres_files,
    postgres_pages,
    records_of,
)
from tests.integration.test_todays_main import (  # noqa: F401  (fixtures)
    DATA,
    SIGNED_HEADS,
    Written,
    started,
    verified,
    written,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# The zones 1809f39 stored in clear.
ZONES = ("Europe/Berlin", "America/New_York")
# The key of a zone in clear in a user's event (a Created's field, a change's key).
CLEAR_KEY = '"fallback_time_zone":"'


def stream_states(service: Service, stream_id: UUID) -> list[bytes]:
    with service.db.read() as conn:
        found = conn.execute(
            select(stored_events.c.state).where(stored_events.c.originator_id == stream_id)
        )
        return [bytes(state) for (state,) in found]


def test_a_new_users_events_and_row_hold_its_zone_only_sealed(
    service: Service, team: Team, ctx: CommandContext
) -> None:
    zone, moved = "Pacific/Chatham", "America/Argentina/Ushuaia"
    with freeze_time(T0):
        user = service.users.create_user(
            ctx, team.team_id, client_user_id="zoned", fallback_time_zone=zone
        )
    with freeze_time(T0 + timedelta(minutes=1)):
        service.users.update_user(ctx, team.team_id, user.id, {"fallback_time_zone": moved})
    states = stream_states(service, user.id)
    assert len(states) == 2
    for state in states:
        assert zone.encode() not in state and moved.encode() not in state
        assert CLEAR_KEY.encode() not in state
    created, changed = (json.loads(state) for state in states)
    assert created["class_version"] == 4 and created["fallback_time_zone"] is None
    assert service.key_store.open(user.id, created["sealed_fallback_time_zone"]) == zone
    (sealed,) = changed["changes"].values()
    assert service.key_store.open(user.id, sealed) == moved
    with service.db.read() as conn:
        row = conn.execute(select(users).where(users.c.user_id == user.id)).mappings().one()
    assert "fallback_time_zone" not in row
    assert service.key_store.open(user.id, row["sealed_fallback_time_zone"]) == moved
    # Answered as before: the zone, its source and when it was set.
    answered = service.user_queries.resolved_user(team.team_id, user.id)["fallback_time_zone"]
    assert answered == {
        "id": moved,
        "source_slug": "manual",
        "updated_at": T0 + timedelta(minutes=1),
    }
    # Removed: None in the change, none in the row nor the answer.
    with freeze_time(T0 + timedelta(minutes=2)):
        service.users.update_user(ctx, team.team_id, user.id, {"fallback_time_zone": None})
    assert json.loads(stream_states(service, user.id)[-1])["changes"] == {
        "sealed_fallback_time_zone": None
    }
    assert service.user_queries.resolved_user(team.team_id, user.id)["fallback_time_zone"] is None


def on_disk(service: Service) -> dict[str, bytes]:
    """What this test can read of the database's storage, by place."""
    if service.db.is_sqlite:
        return {"the database file and its -wal": sqlite_bytes(service)}
    tables = (stored_events.name, users.name, snapshots.name)
    places: dict[str, bytes] = {}
    for found in (postgres_pages(service, tables), postgres_files(service, tables)):
        places.update(found or {})
    if not places:
        pytest.skip("neither pageinspect nor the server's files are reachable")
    return places


def test_the_fixture_holds_the_zones_in_clear(written: Written) -> None:  # noqa: F811
    # What this file shows sealed was there in clear, as 1809f39 wrote it.
    if written.url.startswith("sqlite"):
        content = Path(written.url.removeprefix("sqlite:///")).read_bytes()
    else:
        content = gzip.decompress((DATA / "postgres-dump.sql.gz").read_bytes())
    for zone in ZONES:
        assert zone.encode() in content


def test_the_start_seals_the_zones_of_before_and_the_chain_verifies(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    assert verified(service, SIGNED_HEADS).startswith("ok: ")
    main_4 = UUID(written.user("main-4"))
    created = created_records(service)
    changes = records_of(service, User.SettingsChanged.TOPIC)
    assert len(created) == 10 and len(changes) == 1
    # Every user's zone sealed with its key; main-4's (erased before) removed.
    opened = {}
    for stream_id, record in created.items():
        assert record["class_version"] == 4 and record["fallback_time_zone"] is None
        opened[stream_id] = service.key_store.open(stream_id, record["sealed_fallback_time_zone"])
    # main-4 and the deleted team's user, erased before: their zones removed.
    erased = {user_id for user_id in created if not service.key_store.has_key(user_id)}
    assert main_4 in erased and len(erased) == 2
    for user_id in erased:
        assert created[user_id]["sealed_fallback_time_zone"] == ERASED_PLACEHOLDER
    assert {opened[user_id] for user_id in erased} == {None}
    assert {zone for user_id, zone in opened.items() if user_id not in erased} == {"Europe/Berlin"}
    (change,) = changes
    main_1 = UUID(written.user("main-1"))
    sealed = change["changes"]["sealed_fallback_time_zone"]
    assert "fallback_time_zone" not in change["changes"]
    assert service.key_store.open(main_1, sealed) == "America/New_York"
    # The redactions say so: sealed, and removed for main-4's; none left to do.
    reasons = {r["reason"] for r in records_of(service, REDACTION_TOPIC)}
    assert reasons == {SEALED, REMOVED}
    with service.db.read() as conn:
        pending = conn.execute(select(func.count()).select_from(pending_redactions)).scalar()
        redacted = conn.execute(
            select(func.count())
            .select_from(chain_redactions)
            .where(
                chain_redactions.c.original_topic.in_(
                    [User.Created.TOPIC, User.SettingsChanged.TOPIC]
                )
            )
        ).scalar()
        rows = conn.execute(select(users.c.user_id, users.c.sealed_fallback_time_zone)).all()
        kept_snapshots = conn.execute(select(func.count()).select_from(snapshots)).scalar()
    assert pending == 0 and redacted == 11 and kept_snapshots == 0
    # The rows hold the log's own sealed values (a rebuild makes the same rows).
    for user_id, row_sealed in rows:
        user_id = UUID(str(user_id))
        expected = sealed if user_id == main_1 else created[user_id]["sealed_fallback_time_zone"]
        assert row_sealed == expected
    # Answered as 1809f39 answered (the whole list: test_todays_main.py).
    holder = service.ledger.find(main_1)
    assert isinstance(holder, User)
    answered = service.user_queries.resolved_user(holder.team_id, main_1)["fallback_time_zone"]
    assert answered["id"] == "America/New_York" and answered["source_slug"] == "manual"
    places = on_disk(service)
    for needle in (*ZONES, CLEAR_KEY):
        assert holding(places, needle.encode()) == [], needle
    # A second start finds nothing more to redact.
    with freeze_time(written.now):
        again = build_service(written.settings())
    try:
        assert verified(again, SIGNED_HEADS) == verified(service, SIGNED_HEADS)
    finally:
        again.close()


def created_records(service: Service) -> dict[UUID, dict[str, Any]]:
    """The users' Created records, by user."""
    c = stored_events.c
    with service.db.read() as conn:
        found = conn.execute(
            select(c.originator_id, c.state).where(c.topic == User.Created.TOPIC)
        ).all()
    return {UUID(str(stream)): json.loads(state) for stream, state in found}


def test_after_the_erasure_the_users_zone_reads_as_erased(
    written: Written,  # noqa: F811
    started: Service,  # noqa: F811
) -> None:
    service = started
    main_2 = written.user("main-2")
    headers = written.headers("team")
    # Before its deletion (1809f39 deleted it last, on 2026-11-10).
    then = {"as_of": "2026-11-05T00:00:00+00:00"}
    with (
        freeze_time(written.now) as frozen,
        TestClient(create_team_api(service), raise_server_exceptions=False) as client,
    ):
        before = client.get(f"/v2/user/{main_2}", params=then, headers=headers).json()
        assert before["fallback_time_zone"]["id"] == "Europe/Berlin"
        frozen.tick(written.expected["grace_period_days"] * 86400 + 3600)
        assert service.jobs.sweep_erasures() == 1
        assert client.get(f"/v2/user/{main_2}", headers=headers).status_code == 404
        after = client.get(f"/v2/user/{main_2}", params=then, headers=headers).json()
    assert after["fallback_time_zone"] == {**before["fallback_time_zone"], "id": ERASED_PLACEHOLDER}
    assert service.chain.verify().ok
    places = on_disk(service)
    for needle in (*ZONES, CLEAR_KEY):
        assert holding(places, needle.encode()) == [], needle
