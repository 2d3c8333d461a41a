"""The embedding side learns of deletions and erasures (issue 16): a real service deletes,
undoes and erases users, its dispatcher delivers our own lifecycle types (`user.deleted`,
`user.deletion_undone`, `user.erased`) signed over HTTP to a real receiver under uvicorn,
and the receiver's mirror shows the deletion, the undo, and forgets the user on erasure:
its key destroyed, its rows without the identifiers, its history saying so. On both
databases; the receiver shares the service's database, in its own tables."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import standardwebhooks
from healthledger.adapters.composition import Service, build_service
from healthledger.adapters.mirror.messages import INVALID_DATA, InvalidMessage
from healthledger.adapters.mirror.received_webhooks import APPLIED, RECEIVED
from healthledger.adapters.mirror.receiver import WebhookReceiver, build_receiver
from healthledger.adapters.mirror.receiver_app import create_receiver_app
from healthledger.adapters.persistence.engine.mirror_schema import (
    mirror_snapshots,
    mirror_stored_events,
    mirror_user_keys,
    received_webhooks,
)
from healthledger.adapters.persistence.keys.master_key import FileKeySource
from healthledger.adapters.settings import Settings
from healthledger.adapters.webhooks.signing import new_message_id, signed_headers
from healthledger.domain.context import CommandContext
from healthledger.domain.mirror.mirroring import CLEAR_PLACEHOLDER
from healthledger.domain.mirror.users import ACTIVE, DELETED, ERASED, MirroredUser
from healthledger.domain.personal_data import ERASED_PLACEHOLDER, SEALED_PLACEHOLDER
from healthledger.domain.webhooks.endpoints import new_signing_secret
from sqlalchemy import func, insert, select

from tests.clocks import Clock
from tests.e2e.webhook_team import connected_user, endpoint, the_team
from tests.receivers import free_socket, http_receiver, serving

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
GRACE = timedelta(days=7)
CTX = CommandContext(actor="test:actor", request_id="req-mirror")
LIFECYCLE = ("user.deleted", "user.deletion_undone", "user.erased")


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def svc(settings: Settings, clock: Clock) -> Iterator[Service]:
    built = build_service(settings, clock=clock)
    built.bootstrap()
    yield built
    built.close()


@pytest.fixture
def master_key(tmp_path: Path) -> FileKeySource:
    # The receiver's own master key, in a directory of its own (not the database's).
    return FileKeySource(tmp_path / "receiver-keys" / "mirror.key")


class Mirror:
    """A receiver served over HTTP, and the endpoint that delivers to it."""

    def __init__(self, receiver: WebhookReceiver, endpoint_id: UUID) -> None:
        self.receiver = receiver
        self.endpoint_id = endpoint_id


@pytest.fixture
def mirror(svc: Service, database_url: str, master_key: FileKeySource) -> Iterator[Mirror]:
    sock = free_socket()
    endpoint_id, secret = endpoint(svc, f"http://127.0.0.1:{sock.getsockname()[1]}/webhooks")
    # Snapshots every 2 events, so that the erasure has snapshots to delete.
    receiver = build_receiver(database_url, [secret], master_key=master_key, snapshot_interval=2)
    try:
        with serving(create_receiver_app(receiver), sock):
            yield Mirror(receiver, endpoint_id)
    finally:
        receiver.close()


def delivered(svc: Service) -> None:
    """Follow the log and send what is due; every delivery must have succeeded."""
    svc.jobs.dispatch_webhooks()
    counts = svc.webhook_queries.delivery_counts()
    assert "pending" not in counts and "failed" not in counts, counts


def mirror_rows(receiver: WebhookReceiver, table: Any, user_id: UUID) -> list[Any]:
    column = table.c.user_id if "user_id" in table.c else table.c.originator_id
    with receiver.db.read() as conn:
        return list(conn.execute(select(table).where(column == user_id)))


def raw_bytes(rows: list[Any]) -> bytes:
    """Every value of the rows as bytes, as stored (event states are stored bytes)."""
    return b"\x00".join(
        bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
        for row in rows
        for value in row
    )


# -- deletion and undo ---------------------------------------------------------------------


def test_the_mirror_shows_a_deletion_and_its_undo(
    svc: Service, mirror: Mirror, clock: Clock
) -> None:
    user_id = connected_user(svc, "oura")
    delivered(svc)
    view = mirror.receiver.user(user_id)
    assert view is not None and view.status == ACTIVE
    assert view.client_user_id == "hook-oura-0"

    clock.advance(timedelta(minutes=5))
    deleting = CommandContext(actor="test:actor", request_id="req-delete-1")
    svc.users.delete_user(deleting, the_team(svc), user_id)
    delivered(svc)
    view = mirror.receiver.user(user_id)
    assert view is not None
    assert (view.status, view.deleted_at, view.erasure_due_at) == (
        DELETED,
        clock.now,
        clock.now + GRACE,
    )
    assert view.client_user_id == "hook-oura-0"  # a deleted user is not erased yet
    (deleted,) = [e for e in mirror.receiver.history(user_id) if e.event == "Deleted"]
    assert deleted.event_type == "user.deleted"
    assert deleted.changes["upstream_request_id"] == "req-delete-1"
    assert deleted.summary.startswith(f"deleted upstream at {clock.now.isoformat()}")

    clock.advance(timedelta(hours=1))
    svc.users.undo_deletion(CTX, the_team(svc), user_id)
    delivered(svc)
    view = mirror.receiver.user(user_id)
    assert view is not None
    assert (view.status, view.deleted_at, view.erasure_due_at) == (ACTIVE, None, None)
    assert mirror.receiver.history(user_id)[-1].summary == (
        f"deletion undone upstream at {clock.now.isoformat()}"
    )
    # Each lifecycle message was applied once, as its own message.
    outcomes = {m.event_type: m.outcome for m in mirror.receiver.messages(user_id)}
    assert outcomes["user.deleted"] == outcomes["user.deletion_undone"] == APPLIED


# -- erasure -------------------------------------------------------------------------------------


def test_an_erasure_upstream_makes_the_mirror_forget_the_user(
    svc: Service, mirror: Mirror, clock: Clock
) -> None:
    user_id = connected_user(svc, "oura")
    clock.advance(timedelta(days=1))
    svc.pulls.sync_due()  # daily data messages too: a longer stream, with snapshots
    delivered(svc)
    receiver = mirror.receiver
    before = receiver.user(user_id)
    assert before is not None
    client_user_id = before.client_user_id
    (oura,) = before.connections
    external_user_id = oura.external_user_id
    assert client_user_id == "hook-oura-0"
    assert external_user_id is not None and external_user_id.startswith("demo-oura-")
    assert mirror_rows(receiver, mirror_snapshots, user_id), "no snapshot to erase"
    assert len(mirror_rows(receiver, mirror_user_keys, user_id)) == 1
    # Sealed from the start: no event row ever held either identifier in clear.
    stored = raw_bytes(mirror_rows(receiver, mirror_stored_events, user_id))
    assert client_user_id.encode() not in stored and external_user_id.encode() not in stored
    assert {e.changes.get("sealed_client_user_id") for e in receiver.history(user_id)} >= {
        SEALED_PLACEHOLDER
    }

    svc.users.delete_user(CTX, the_team(svc), user_id)
    delivered(svc)
    clock.advance(GRACE)
    assert svc.jobs.sweep_erasures() == 1
    erased_at = clock.now
    delivered(svc)

    view = receiver.user(user_id)
    assert view is not None
    assert (view.status, view.erased_at) == (ERASED, erased_at)
    assert view.client_user_id is None
    (oura,) = view.connections
    assert oura.external_user_id is None
    assert oura.status == "connected"  # statuses, dates and counts stay: nothing personal
    # Its rows: the key and the snapshots are gone; no row names an identifier.
    assert mirror_rows(receiver, mirror_user_keys, user_id) == []
    assert mirror_rows(receiver, mirror_snapshots, user_id) == []
    for table in (mirror_stored_events, received_webhooks):
        stored = raw_bytes(mirror_rows(receiver, table, user_id))
        assert stored, table.name
        assert client_user_id.encode() not in stored, table.name
        assert external_user_id.encode() not in stored, table.name
    with receiver.db.read() as conn:
        assert conn.execute(select(func.count()).select_from(mirror_user_keys)).scalar() == 0
    # Its history says so, with no personal value, and nothing sealed opens any more.
    history = receiver.history(user_id)
    last = history[-1]
    assert (last.event, last.event_type) == ("Erased", "user.erased")
    assert last.summary.startswith(f"erased upstream at {erased_at.isoformat()}")
    assert last.changes["removed"] == ["mirror_user_key", "mirror_snapshots"]
    assert last.changes["clear_events_left"] == 0
    erased = svc.ledger.events.get(user_id)
    assert last.changes["upstream_removed"] == list(erased_event(erased).removed)
    shown = repr(history)
    assert client_user_id not in shown and external_user_id not in shown
    assert ERASED_PLACEHOLDER in shown and SEALED_PLACEHOLDER not in shown


def erased_event(events: Any) -> Any:
    return next(e for e in events if type(e).__name__ == "Erased")


def test_what_arrives_about_an_erased_user_changes_nothing(
    database_url: str, master_key: FileKeySource
) -> None:
    """Late copies after the erasure: a connection message naming the client_user_id and a
    deletion; and a stale deletion after an undo. Hand-signed messages, the plain function."""
    receiver = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        take = lambda body: receiver.receive(body, headers_for(body)).outcome  # noqa: E731
        assert take(connection_created()) == APPLIED
        assert take(lifecycle("user.deleted", deleted_at=at(1), erasure_due_at=at(8))) == APPLIED
        assert take(lifecycle("user.deletion_undone", undone_at=at(2))) == APPLIED
        # A retried deletion older than the undo: noted, nothing changes.
        events = count(receiver)
        stale = lifecycle("user.deleted", deleted_at=at(1), erasure_due_at=at(8))
        assert take(stale) == RECEIVED
        assert count(receiver) == events
        view = receiver.user(USER)
        assert view is not None and view.status == ACTIVE
        assert take(erased(at(9))) == APPLIED
        events = count(receiver)
        for late in (
            connection_created(),
            lifecycle("user.deleted", deleted_at=at(10), erasure_due_at=at(17)),
            erased(at(11)),
        ):
            assert take(late) == RECEIVED
        assert count(receiver) == events
        view = receiver.user(USER)
        assert view is not None
        assert (view.status, view.client_user_id, view.erased_at) == (ERASED, None, at(9))
        assert view.connections[0].external_user_id is None
        # No key was made again for the user, and no row holds its identifiers.
        assert mirror_rows(receiver, mirror_user_keys, USER) == []
        for table in (mirror_stored_events, received_webhooks, mirror_snapshots):
            stored = raw_bytes(mirror_rows(receiver, table, USER))
            assert b"user-42" not in stored and b"oura-77" not in stored
    finally:
        receiver.close()


def test_a_sqlite_mirror_file_holds_no_identifier_after_an_erasure(
    tmp_path: Path, master_key: FileKeySource
) -> None:
    """The receiver alone on its own SQLite file: neither the database file nor its WAL
    ever holds the identifiers, and after the erasure not the user's wrapped key either
    (the WAL is checkpointed once the erasure commits)."""
    path = tmp_path / "mirror.db"
    receiver = build_receiver(f"sqlite:///{path}", [SECRET], master_key=master_key)

    def files() -> bytes:
        return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(path.name))

    try:
        # Another user first, whose key stays: the scan sees a key where there is one.
        other = connection_created().replace(str(USER).encode(), str(OTHER).encode())
        assert receiver.receive(other, headers_for(other)).outcome == APPLIED
        assert receiver.receive(connection_created(), headers_for(connection_created())).outcome
        (key,) = mirror_rows(receiver, mirror_user_keys, USER)
        (kept,) = mirror_rows(receiver, mirror_user_keys, OTHER)
        assert bytes(key.wrapped_key) in files()
        assert receiver.receive(erased(at(9)), headers_for(erased(at(9)))).outcome == APPLIED
        everything = files()
    finally:
        receiver.close()
    assert b"user-42" not in everything and b"oura-77" not in everything
    assert bytes(key.wrapped_key) not in everything
    assert bytes(kept.wrapped_key) in everything


# -- version 1 events: identifiers in clear ------------------------------------------------------


def test_an_erasure_counts_the_events_that_hold_identifiers_in_clear(
    database_url: str, master_key: FileKeySource
) -> None:
    """A mirror written by version 1 (client_user_id in clear in its events): the erasure
    cannot rewrite the log, and says so; the history never shows the value, nor calls it
    erased."""
    receiver = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        legacy = (
            '{"timestamp":{"_type_":"datetime_iso","_data_":"2026-03-01T12:00:00+00:00"},'
            '"originator_topic":"healthledger:MirroredUser","message_id":"msg_legacy",'
            '"event_type":"provider.connection.created","team_id":{"_type_":"uuid_hex",'
            f'"_data_":"{TEAM.hex}"}},"client_user_id":"user-42"}}'
        )
        with receiver.db.write() as conn:
            conn.execute(
                insert(mirror_stored_events).values(
                    originator_id=USER,
                    originator_version=1,
                    topic=MirroredUser.Created.TOPIC,
                    state=legacy.encode(),
                    timestamp=at(0),
                )
            )
        view = receiver.user(USER)
        assert view is not None and view.client_user_id == "user-42"
        assert receiver.receive(erased(at(9)), headers_for(erased(at(9)))).outcome == APPLIED
        view = receiver.user(USER)
        assert view is not None and view.client_user_id is None
        created, erasure = receiver.history(USER)
        assert created.changes["client_user_id"] == CLEAR_PLACEHOLDER
        assert erasure.changes["clear_events_left"] == 1
        assert "1 event(s) recorded before sealing still hold an identifier in clear" in (
            erasure.summary
        )
        assert "user-42" not in repr(receiver.history(USER))
    finally:
        receiver.close()


# -- what the service sends, and filters ---------------------------------------------------------


def test_endpoint_filters_include_and_exclude_the_lifecycle_types(
    svc: Service, clock: Clock
) -> None:
    with http_receiver() as receiver:
        secrets = {
            name: endpoint(svc, receiver.url(name), filter_types=types)[1]
            for name, types in (
                ("lifecycle", ["user.*"]),
                ("erasures", ["user.erased"]),
                ("providers", ["provider.*"]),
                ("everything", []),
            )
        }
        user_id = connected_user(svc, "oura")
        deleting = CommandContext(actor="test:actor", request_id="req-delete-2")
        svc.users.delete_user(deleting, the_team(svc), user_id)
        delivered(svc)
        clock.advance(timedelta(hours=1))
        svc.users.undo_deletion(CTX, the_team(svc), user_id)
        delivered(svc)
        svc.users.delete_user(deleting, the_team(svc), user_id)
        delivered(svc)
        clock.advance(GRACE)
        assert svc.jobs.sweep_erasures() == 1
        delivered(svc)

        def types(name: str) -> list[str]:
            return [json.loads(r.body)["event_type"] for r in receiver.on(name)]

        expected = ["user.deleted", "user.deletion_undone", "user.deleted", "user.erased"]
        assert types("lifecycle") == expected
        assert types("erasures") == ["user.erased"]
        assert types("providers") == ["provider.connection.created"]
        assert [t for t in types("everything") if t in LIFECYCLE] == expected

        team = str(the_team(svc))
        for message in receiver.on("lifecycle"):
            # Signed like the others: the receivers' own library verifies the raw body.
            headers = {k: v for k, v in message.headers.items() if k.startswith("webhook-")}
            standardwebhooks.Webhook(secrets["lifecycle"]).verify(message.body, headers)
            body = json.loads(message.body)
            assert (body["user_id"], body["team_id"]) == (str(user_id), team)
            # Nothing personal, ever: no client_user_id, in the envelope or the data.
            assert body["client_user_id"] is None
            assert b"hook-oura" not in message.body
            data = body["data"]
            assert data["user_id"] == str(user_id)
            if body["event_type"] == "user.deleted":
                assert set(data) == {
                    "user_id", "team_id", "deleted_at", "erasure_due_at", "request_id",
                }  # fmt: skip
                assert data["request_id"] == "req-delete-2"
                deleted_at = datetime.fromisoformat(data["deleted_at"])
                assert datetime.fromisoformat(data["erasure_due_at"]) == deleted_at + GRACE
            elif body["event_type"] == "user.deletion_undone":
                assert set(data) == {"user_id", "team_id", "undone_at", "request_id"}
                assert datetime.fromisoformat(data["undone_at"]) == T0 + timedelta(hours=1)
            else:
                assert set(data) == {"user_id", "erased_at", "removed"}
                assert datetime.fromisoformat(data["erased_at"]) == clock.now
                assert "user_data_key" in data["removed"]


def test_a_user_erased_message_reaches_a_production_endpoint(svc: Service, clock: Clock) -> None:
    """The erased user's users row (and the environment it kept) is gone when its erasure
    is announced: the environment comes from the log."""
    with http_receiver() as receiver:
        production = svc.webhooks.create(
            CTX, the_team(svc), "production", url=receiver.url("production")
        )
        sandbox, _ = endpoint(svc, receiver.url("sandbox"))
        production_ctx = CommandContext(
            actor="test:actor", request_id="r", environment="production"
        )
        user_id = connected_user(svc, "oura", ctx=production_ctx)
        svc.users.delete_user(CTX, the_team(svc), user_id)
        clock.advance(GRACE)
        assert svc.jobs.sweep_erasures() == 1
        svc.jobs.dispatch_webhooks()
        got = [json.loads(r.body)["event_type"] for r in receiver.on("production")]
        assert got[-1] == "user.erased" and production.id != sandbox
        assert receiver.on("sandbox") == []


# -- invalid lifecycle messages -------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        {"user_id": "U", "erased_at": "2026-03-19T12:00:00"},  # no offset, no removed
        {"user_id": "U", "removed": []},
        {"user_id": str(uuid.uuid4()), "erased_at": "2026-03-19T12:00:00+00:00", "removed": []},
    ],
)
def test_a_user_erased_message_not_as_documented_is_refused(
    database_url: str, master_key: FileKeySource, data: dict[str, Any]
) -> None:
    receiver = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        fields = {k: (str(USER) if v == "U" else v) for k, v in data.items()}
        body = envelope("user.erased", fields)
        with pytest.raises(InvalidMessage) as raised:
            receiver.receive(body, headers_for(body))
        assert raised.value.reason == INVALID_DATA
        assert receiver.user_ids() == []
    finally:
        receiver.close()


def test_a_deletion_naming_another_team_is_refused(
    database_url: str, master_key: FileKeySource
) -> None:
    receiver = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        body = lifecycle(
            "user.deleted", deleted_at=at(1), erasure_due_at=at(8), team_id=str(uuid.uuid4())
        )
        with pytest.raises(InvalidMessage) as raised:
            receiver.receive(body, headers_for(body))
        assert raised.value.reason == INVALID_DATA
    finally:
        receiver.close()


# -- hand-made messages, as the dispatcher sends them ------------------------------------------

SECRET = new_signing_secret()
USER = uuid.UUID("3f1e3b57-8b1a-4e3c-9d2f-0a1b2c3d4e5f")
OTHER = uuid.UUID("4a2f4c68-9c2b-4f4d-8e3a-1b2c3d4e5f60")
TEAM = uuid.UUID("8a0c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d")


def at(days: int) -> datetime:
    return T0 + timedelta(days=days)


def envelope(event_type: str, data: dict[str, Any], client_user_id: str | None = None) -> bytes:
    fields = {
        "event_type": event_type,
        "data": data,
        "user_id": str(USER),
        "client_user_id": client_user_id,
        "team_id": str(TEAM),
    }
    return json.dumps(fields, separators=(",", ":"), default=str).encode()


def connection_created() -> bytes:
    data = {
        "user_id": str(USER),
        "provider": {"name": "Oura", "slug": "oura", "logo": None},
        "resource_availability": {},
        "external_user_id": "oura-77",
    }
    return envelope("provider.connection.created", data, client_user_id="user-42")


def lifecycle(event_type: str, **fields: Any) -> bytes:
    data = {"user_id": str(USER), "team_id": str(TEAM), "request_id": "req-x", **fields}
    return envelope(event_type, {k: _iso(v) for k, v in data.items()})


def erased(moment: datetime) -> bytes:
    data = {"user_id": str(USER), "erased_at": moment.isoformat(), "removed": ["user_data_key"]}
    return envelope("user.erased", data)


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def headers_for(body: bytes) -> dict[str, str]:
    return signed_headers([SECRET], new_message_id(), int(time.time()), body)


def count(receiver: WebhookReceiver) -> int:
    with receiver.db.read() as conn:
        return conn.execute(select(func.count()).select_from(mirror_stored_events)).scalar_one()


def test_the_receivers_master_key_rotates_and_erased_keys_stay_gone(
    database_url: str, master_key: FileKeySource
) -> None:
    """The receiver's key store is the service's, on the receiver's tables: its master key
    rotates like the service's (the horizon after which no copy of an erased user's key
    opens), and the identifiers still open under the new key."""
    receiver = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        other = connection_created().replace(str(USER).encode(), str(OTHER).encode())
        for body in (connection_created(), other, erased(at(9))):
            assert receiver.receive(body, headers_for(body)).outcome == APPLIED
        old_key = master_key.path.read_bytes()
        rotation = receiver.key_store.rotate_master_key()
        assert rotation is not None and rotation.keys_rewrapped == 1  # the erased one is gone
        assert master_key.path.read_bytes() != old_key
        assert [r.master_key_id for r in receiver.key_store.rotations()] == [rotation.master_key_id]
        view = receiver.user(OTHER)
        assert view is not None and view.client_user_id == "user-42"
    finally:
        receiver.close()
    # A receiver started again takes the new key from the file.
    again = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        view = again.user(OTHER)
        assert view is not None and view.connections[0].external_user_id == "oura-77"
    finally:
        again.close()
