"""The event store on both databases: a subscription follows the log, and what today's
code stores is byte for byte what the previous main stored (its SQLite file, written at
bccbead, is in tests/data/legacy_main)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import Notification
from healthledger.adapters.composition import Service
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    READ_MODEL_TABLES,
    event_destination_cursors,
    event_destinations,
    lab_tests,
    maker_notices,
    orders,
    stream_owners,
    unmatched_results,
)
from healthledger.adapters.persistence.eventstore.infrastructure import LedgerInfrastructure
from healthledger.adapters.persistence.eventstore.recorder import LedgerRecorder, SnapshotRecorder
from healthledger.adapters.persistence.eventstore.subscription import PollingSubscription
from healthledger.adapters.persistence.projections.read_models import ReadModels
from healthledger.domain.context import CommandContext
from healthledger.domain.ledger import Ledger
from healthledger.domain.users.user import ClientUserIdClaim
from healthledger.domain.webhooks.deliveries import lifecycle_type_of

from tests.conftest import Team
from tests.recorded import loaded

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy_main" / "sqlite-ledger.db.gz"


def _next_within(subscription: Any, seconds: float) -> Notification:
    found: list[Notification] = []
    reader = threading.Thread(target=lambda: found.append(next(subscription)), daemon=True)
    reader.start()
    reader.join(seconds)
    assert found, f"no notification within {seconds} s"
    return found[0]


def test_a_subscription_follows_the_log(service: Service, team: Team, ctx: CommandContext) -> None:
    start = service.recorder.max_notification_id() or 0
    with service.recorder.subscribe(gt=start) as subscription:
        # Ours: woken by this process's commits (as well as by its poll).
        assert isinstance(subscription, PollingSubscription)
        user = service.users.create_user(ctx, team.team_id, client_user_id="followed")
        created = [_next_within(subscription, 5) for _ in range(2)]
        assert [n.id for n in created] == [start + 1, start + 2]
        assert {n.originator_id for n in created} == {user.id, user.claim_id}
        # A commit of this process wakes it at once, well before its next poll.
        began = time.monotonic()
        service.users.delete_user(ctx, team.team_id, user.id)
        deleted = _next_within(subscription, 5)
        assert time.monotonic() - began < 0.4
        assert deleted.id == start + 3 and deleted.originator_id == user.id
        assert deleted.topic == "healthledger:User.Deleted.v1"
        subscription.stop()
        with pytest.raises(StopIteration):
            next(subscription)
    # Stopped, it is no longer woken by commits.
    assert subscription.wake not in service.recorder.listeners


@pytest.fixture
def legacy_copy(tmp_path: Path) -> Path:
    path = tmp_path / "legacy.db"
    with gzip.open(LEGACY) as packed, path.open("wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    return path


def _ledger(db: Database) -> tuple[Ledger, LedgerRecorder]:
    recorder = LedgerRecorder(db)
    return Ledger(LedgerInfrastructure(recorder, SnapshotRecorder(db))), recorder


def _rows(path: Path, table: str, order: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
    finally:
        conn.close()


def test_events_are_stored_as_the_previous_main_stored_them(
    legacy_copy: Path, tmp_path: Path
) -> None:
    # Every legacy event, read back to its domain form and stored again by today's code
    # into an empty database: the same rows, byte for byte (the JSON state, the UUID as
    # 32 hex digits, the timestamp as SQLite DATETIME text).
    legacy_db = Database(f"sqlite:///{legacy_copy}")
    fresh_db = Database(f"sqlite:///{tmp_path / 'fresh.db'}")
    fresh_db.create_schema()
    try:
        ledger, legacy = _ledger(legacy_db)
        _, fresh = _ledger(fresh_db)
        notifications = legacy.select_notifications(1, 100_000)
        assert len(notifications) > 300
        events = [loaded(ledger.mapper, n) for n in notifications]
        stored = [ledger.mapper.to_stored_event(e) for e in events]
        ids = fresh.insert_events(stored, aggregate_events=events)
        assert ids == [n.id for n in notifications]
    finally:
        legacy_db.dispose()
        fresh_db.dispose()
    order = "notification_id"
    # But for a user's Created event, now of class version 4 (version 2 records the
    # creating key's environment, None for a version 1 event read back; version 3 the
    # sealed client_user_id, None for an older one, and the claim of its clear value;
    # version 4 the sealed time zone, None for an older one, whose clear zone the start
    # redacts),
    # a claim's, now of class version 2 (the digest, None for an older one), a user's
    # Deleted and Erased, now of class version 2: the legacy state with the fields the
    # upcasts add at its end.
    # The chain's two columns (migration 0003) come after the legacy file's six: the
    # legacy rows get theirs from the migration (test_migrations holds them equal).
    restored = [row[:6] for row in _rows(tmp_path / "fresh.db", "stored_events", order)]
    legacy_rows = _rows(legacy_copy, "stored_events", order)
    users_created = claims_created = users_erased = users_deleted = 0
    for index, row in enumerate(legacy_rows):
        state = row[4]
        if row[3] == "healthledger:User.Created.v1":
            users_created += 1
            event = json.loads(state)
            claim_id = ClientUserIdClaim.id_for(
                UUID(event["team_id"]["_data_"]), event["client_user_id"]
            )
            added = (
                ',"environment":null,"sealed_client_user_id":null,"claim_id":'
                '{"_type_":"uuid_hex","_data_":"' + claim_id.hex + '"},'
                '"sealed_fallback_time_zone":null,"class_version":4}'
            )
            state = state[:-1] + added.encode()
        elif row[3] == "healthledger:ClientUserIdClaim.Created.v1":
            claims_created += 1
            state = state[:-1] + b',"digest":null,"class_version":2}'
        elif row[3] == "healthledger:User.Deleted.v1":
            # Version 2 records the request's reason (sealed) and ticket, None for an
            # older deletion.
            users_deleted += 1
            state = state[:-1] + b',"sealed_reason":null,"ticket":null,"class_version":2}'
        elif row[3] == "healthledger:User.Erased.v1":
            # Version 2 records what the erasure checked; a version 1 erasure checked
            # nothing (its `removed` was asserted), read back as an empty `checked`.
            users_erased += 1
            state = state[:-1] + b',"checked":{},"class_version":2}'
        legacy_rows[index] = (*row[:4], state, *row[5:])
    assert users_created == claims_created == 6
    assert users_erased > 0 and users_deleted > 0
    assert restored == legacy_rows


def test_read_models_rebuilt_by_todays_code_are_the_previous_mains(legacy_copy: Path) -> None:
    # The read models of the legacy file, projected again from its log by today's
    # projections: every row the same, byte for byte (erasure effects aside, which a
    # rebuild never runs: the legacy file's rows already show them).
    # stream_owners came after the legacy file (migration 0005): test_audit.py holds its
    # rebuild from this log to what that migration backfills from it. Lab tests and
    # orders (issue 14) came after it too, and its log holds none; so did the makers'
    # notices (migration 0017), the event destinations (migration 0020, issue 35) and
    # their cursors (migration 0051, ADR 0055), and the unmatched lab results (migration
    # 0032, issue 33).
    newer = (
        stream_owners,
        orders,
        lab_tests,
        maker_notices,
        event_destinations,
        event_destination_cursors,
        unmatched_results,
    )
    tables = [t for t in READ_MODEL_TABLES if t not in newer]
    before = {t.name: _rows(legacy_copy, t.name, "1") for t in tables}
    db = Database(f"sqlite:///{legacy_copy}")
    try:
        ledger, recorder = _ledger(db)
        ReadModels(db).rebuild(recorder, ledger.mapper)
    finally:
        db.dispose()
    after = {t.name: _rows(legacy_copy, t.name, "1") for t in tables}
    assert sum(len(rows) for rows in before.values()) > 20
    # The legacy file was written in frozen time, where SQLAlchemy could not type the
    # freezegun datetime a pull's start time was bound with (the driver wrote its own
    # text, "+00:00"); today's projection types it. Every other value is the same.
    before["resource_feeds"] = [
        tuple(_frozen_text(value) for value in row) for row in before["resource_feeds"]
    ]
    # The users read model keeps each user's environment now (migration 0002): rebuilt
    # from version 1 Created events, the creating key's as the rebuilt keys table holds
    # it (the legacy team's one key, a sandbox key; test_migrations holds a production
    # one through migration 0002).
    before["users"] = [(*row, "sandbox") for row in before["users"]]
    # A pending erasure carries a sweeper's lease now (migration 0012): no event sets it,
    # so a rebuilt row holds none, as a row nobody has claimed.
    before["pending_erasures"] = [(*row, None) for row in before["pending_erasures"]]
    # The users read model holds the client_user_id only sealed with the user's key and as
    # the team's digest (migration 0015), never in clear: the clear column (the third) is
    # gone. Projections given no key store and no team secrets (as here) leave both empty;
    # the service fills them at start (test_client_user_id_at_rest.py).
    before["users"] = [(*row[:2], *row[3:5], None, None, *row[5:]) for row in before["users"]]
    # The fallback time zone is held only sealed now (revision 0042, ADR 0052): rebuilt
    # from records the start has not redacted yet (it seals their zones in the log and
    # gives the rows the sealed value), the row holds none, nor its source and time.
    before["users"] = [(*row[:6], None, None, None, *row[9:]) for row in before["users"]]
    # A connection keeps the digest of its maker's account id now (migration 0017): the
    # projection given no key store (as here) leaves it empty; the start fills it
    # (test_maker_webhooks.py). Its provider and resource availability, and a feed's
    # provider and resource, are held only sealed now, with a keyed provider digest
    # (migration 0022, ADR 0032): rebuilt from version 1 events (in clear) and without
    # keys, the row holds neither; the start's redaction and digests fill them
    # (test_connection_facts_sealed.py).
    before["connections"] = [
        (*row[:3], *row[4:6], None, None, None, *row[7:], None) for row in before["connections"]
    ]
    # A feed's pull window and its first and last days with data are held only sealed
    # now, in one sealed_window (migration 0034, ADR 0032): rebuilt without keys, none.
    before["resource_feeds"] = [
        (*row[:4], None, row[6], None, *row[9:20], *row[22:]) for row in before["resource_feeds"]
    ]
    # A webhook delivery's event type likewise (revision 0028, ADR 0028): rebuilt from
    # version 1 events without keys, the row holds no sealed type, and the type in clear
    # only for a user's lifecycle.
    before["webhook_deliveries"] = [
        (*row[:4], None, lifecycle_type_of(row[4], row[3]), *row[5:])
        for row in before["webhook_deliveries"]
    ]
    # A link token's redirect_url and makers (its provider, allowlist and the maker it
    # connected) are held only sealed now, in the row's `sealed_facts` and
    # `sealed_consumption` (revisions 0043 and 0044, ADR 0032): rebuilt from version 1
    # events without keys, the row holds none of them.
    before["link_tokens"] = [(*row[:5], None, *row[8:12], None) for row in before["link_tokens"]]
    # A team's source priorities (revision 0027): a team that never set them holds none.
    before["teams"] = [(*row, None) for row in before["teams"]]
    for name in before:
        assert sorted(after[name], key=repr) == sorted(before[name], key=repr), name


def _frozen_text(value: Any) -> Any:
    """The DATETIME text of a value sqlite3 wrote as `datetime.isoformat(" ")`."""
    if isinstance(value, str) and len(value) == 25 and value.endswith("+00:00"):
        return value[:19] + ".000000"
    return value
