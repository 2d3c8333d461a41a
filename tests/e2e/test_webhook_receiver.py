"""Webhooks in: the receiver a customer embeds, as a plain function and as an ASGI app under
a real uvicorn server, on both databases. Messages are signed with our `signing.py` and
with the `standardwebhooks` and `svix` libraries, so the receiver is proven against
independent signers; the end-to-end test builds the messages from what the service itself
answers and compares the mirror with `GET /v2/user/providers/{user_id}`."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks
import svix.webhooks
import uvicorn
from fastapi.testclient import TestClient
from freezegun import freeze_time
from healthledger.adapters.composition import Service
from healthledger.adapters.mirror.messages import (
    INVALID_DATA,
    INVALID_ENVELOPE,
    MALFORMED_JSON,
    InvalidMessage,
)
from healthledger.adapters.mirror.received_webhooks import APPLIED, RECEIVED
from healthledger.adapters.mirror.receiver import (
    DUPLICATE,
    TEAM_MISMATCH,
    WebhookReceiver,
    build_receiver,
)
from healthledger.adapters.mirror.receiver_app import create_receiver_app
from healthledger.adapters.persistence.engine.mirror_schema import (
    mirror_snapshots,
    mirror_stored_events,
)
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.keys.master_key import FileKeySource
from healthledger.adapters.webhooks.signing import (
    INVALID_SIGNATURE,
    MALFORMED_HEADERS,
    MISSING_HEADERS,
    TIMESTAMP_IN_FUTURE,
    TIMESTAMP_TOO_OLD,
    SigningError,
    VerificationError,
    new_message_id,
    signed_headers,
)
from healthledger.domain.mirror.mirroring import SAVE_ATTEMPTS
from healthledger.domain.mirror.users import (
    CONNECTED,
    ERROR,
    ConnectionCreated,
    ConnectionErrored,
    DailyDataAnnounced,
    Envelope,
    MirroredUser,
)
from healthledger.domain.webhooks.endpoints import new_signing_secret
from sqlalchemy import func, select

from tests.conftest import Team, create_user
from tests.e2e.servers import free_port
from tests.integration.api_calls import connect, provider_status, pulls_of
from tests.unit.vaults import DictVault

SECRET = new_signing_secret()
USER = uuid.UUID("3f1e3b57-8b1a-4e3c-9d2f-0a1b2c3d4e5f")
TEAM = uuid.UUID("8a0c1d2e-3f40-4a5b-8c6d-7e8f9a0b1c2d")
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)

OURA = {"name": "Oura", "slug": "oura", "logo": "https://logos.example/oura.png"}
AVAILABILITY = {
    "sleep": {
        "status": "available",
        "scope_requirements": {
            "user_granted": {"required": ["daily"], "optional": []},
            "user_denied": {"required": [], "optional": []},
        },
    }
}


def message(event_type: str, data: dict[str, Any], **envelope: Any) -> bytes:
    """A body as the dispatcher sends it: compact JSON of the envelope."""
    fields = {
        "event_type": event_type,
        "data": data,
        "user_id": str(USER),
        "client_user_id": "user-42",
        "team_id": str(TEAM),
        **envelope,
    }
    return json.dumps(fields, separators=(",", ":")).encode()


def connection_created(**extra: Any) -> bytes:
    data = {
        "user_id": str(USER),
        "provider": OURA,
        "resource_availability": AVAILABILITY,
        "external_user_id": "oura-77",
        **extra,
    }
    return message("provider.connection.created", data)


def connection_error() -> bytes:
    data = {
        "provider": "oura",
        "user_id": str(USER),
        "message": "The user revoked access.",
        "error_type": "token_refresh_failed",
    }
    return message("provider.connection.error", data)


def daily_sleep(day: str = "2026-03-09", change: str = "created") -> bytes:
    # The summary object itself, as the service sends it (the official client's shape).
    data = {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"sleep/{day}")),
        "user_id": str(USER),
        "provider": "oura",
        "calendar_date": day,
        "date": f"{day}T00:00:00+00:00",
        "score": 88,
        "source": {"provider": "oura", "type": "ring", "app_id": None},
        "created_at": f"{day}T09:00:00+00:00",
        "updated_at": f"{day}T09:00:00+00:00",
    }
    return message(f"daily.data.sleep.{change}", data)


def headers_for(
    body: bytes,
    *,
    secrets: list[str] | None = None,
    message_id: str | None = None,
    timestamp: int | None = None,
) -> dict[str, str]:
    stamp = int(time.time()) if timestamp is None else timestamp
    return signed_headers(secrets or [SECRET], message_id or new_message_id(), stamp, body)


def only(headers: dict[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.startswith(f"{prefix}-")}


def library_headers(body: bytes, secret: str = SECRET, message_id: str | None = None) -> dict:
    """Signed by the standardwebhooks library, not by our code."""
    message_id = message_id or new_message_id()
    now = datetime.now(UTC)
    signature = standardwebhooks.Webhook(secret).sign(message_id, now, body.decode())
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }


@pytest.fixture
def master_key(tmp_path: Path) -> FileKeySource:
    """The receiver's own master key: a file in a private directory of its own, made on
    first use (never beside the database, whose directory is `tmp_path` on SQLite)."""
    return FileKeySource(tmp_path / "receiver-keys" / "mirror.key")


@pytest.fixture
def receiver(database_url: str, master_key: FileKeySource) -> Iterator[WebhookReceiver]:
    built = build_receiver(database_url, [SECRET], master_key=master_key)
    yield built
    built.close()


def mirror_event_count(receiver: WebhookReceiver) -> int:
    with receiver.db.read() as conn:
        return conn.execute(select(func.count()).select_from(mirror_stored_events)).scalar_one()


def refused(receiver: WebhookReceiver, body: bytes, headers: dict[str, str]) -> str:
    """The reason a delivery is refused; it must leave nothing behind."""
    before = mirror_event_count(receiver)
    with pytest.raises((VerificationError, InvalidMessage)) as raised:
        receiver.receive(body, headers)
    assert mirror_event_count(receiver) == before
    assert receiver.user_ids() == []
    assert isinstance(raised.value, VerificationError | InvalidMessage)
    return raised.value.reason


# -- the mirror, as a domain model (no I/O) ----------------------------------------------


def test_the_mirrored_user_follows_connections_and_announced_data() -> None:
    vault = DictVault()
    envelope = Envelope("msg_1", "provider.connection.created", USER, TEAM, "user-42")
    user = MirroredUser.start(envelope, T0, vault)
    created = ConnectionCreated("oura", "Oura", None, AVAILABILITY, None)
    user.announce(envelope, T0, created, vault)
    assert user.connections["oura"]["status"] == CONNECTED
    errored = Envelope("msg_2", "provider.connection.error", USER, TEAM, "user-42")
    user.announce(errored, T0, ConnectionErrored("oura", "token_refresh_failed", "gone"), vault)
    assert user.connections["oura"]["status"] == ERROR
    assert user.connections["oura"]["name"] == "Oura"  # kept through the error
    for n, change in enumerate(("created", "created", "updated")):
        daily = Envelope(f"msg_d{n}", f"daily.data.sleep.{change}", USER, TEAM, "user-42")
        announced = DailyDataAnnounced("oura", "sleep", date(2026, 3, 9 - n), change)
        user.announce(daily, T0, announced, vault)
    sleep = user.resources["oura"]["sleep"]
    assert (sleep["days_created"], sleep["days_updated"]) == (2, 1)
    assert (sleep["first_calendar_date"], sleep["last_calendar_date"]) == (
        date(2026, 3, 7),
        date(2026, 3, 9),
    )
    # Every event names the message that caused it.
    message_ids = []
    for event in user.collect_events():
        assert isinstance(event, MirroredUser.Event)
        message_ids.append(event.message_id)
    assert message_ids == [
        "msg_1", "msg_1", "msg_2", "msg_d0", "msg_d1", "msg_d2",
    ]  # fmt: skip


# -- the plain function ------------------------------------------------------------------


@pytest.mark.parametrize("signer", ["ours", "standardwebhooks"])
def test_a_valid_message_is_applied(receiver: WebhookReceiver, signer: str) -> None:
    body = connection_created()
    headers = headers_for(body) if signer == "ours" else library_headers(body)
    receipt = receiver.receive(body, headers)
    assert (receipt.outcome, receipt.event_type) == (APPLIED, "provider.connection.created")
    user = receiver.user(USER)
    assert user is not None
    assert (user.team_id, user.client_user_id) == (TEAM, "user-42")
    oura = user.connection("oura")
    assert oura is not None
    assert (oura.status, oura.name, oura.logo) == (CONNECTED, "Oura", OURA["logo"])
    assert oura.resource_availability == AVAILABILITY
    assert oura.external_user_id == "oura-77"
    assert oura.error_details is None
    recorded = receiver.message(receipt.message_id)
    assert recorded is not None
    assert (recorded.outcome, recorded.user_id) == (APPLIED, USER)


def test_the_same_message_twice_is_applied_once(receiver: WebhookReceiver) -> None:
    body = daily_sleep()
    message_id = new_message_id()
    assert receiver.receive(body, headers_for(body, message_id=message_id)).outcome == APPLIED
    events = mirror_event_count(receiver)
    # A retry: same id and body, a new attempt timestamp (so a new signature).
    retry = headers_for(body, message_id=message_id, timestamp=int(time.time()) + 1)
    assert receiver.receive(body, retry).outcome == DUPLICATE
    assert mirror_event_count(receiver) == events
    user = receiver.user(USER)
    assert user is not None
    sleep = user.resource("oura", "sleep")
    assert sleep is not None and sleep.days_created == 1
    assert [m.message_id for m in receiver.messages(USER)] == [message_id]


def test_concurrent_copies_of_one_message_apply_once(receiver: WebhookReceiver) -> None:
    receiver.receive(connection_created(), headers_for(connection_created()))
    body = daily_sleep()
    headers = headers_for(body)
    copies = 8
    barrier = threading.Barrier(copies)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def deliver() -> None:
        barrier.wait()
        try:
            outcomes.append(receiver.receive(body, headers).outcome)
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=deliver) for _ in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sorted(outcomes) == [APPLIED] + [DUPLICATE] * (copies - 1)
    user = receiver.user(USER)
    assert user is not None
    sleep = user.resource("oura", "sleep")
    assert sleep is not None and sleep.days_created == 1
    # Created + connected, then one announcement: the other copies recorded nothing.
    assert mirror_event_count(receiver) == 3


def test_concurrent_messages_about_one_user_all_apply(receiver: WebhookReceiver) -> None:
    """Different messages race on the user's stream version; the losers re-read and apply."""
    count = 6
    bodies = [daily_sleep(f"2026-03-0{n + 1}") for n in range(count)]
    assert count <= SAVE_ATTEMPTS  # each failed try means another message applied
    barrier = threading.Barrier(count)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def deliver(body: bytes) -> None:
        barrier.wait()
        try:
            outcomes.append(receiver.receive(body, headers_for(body)).outcome)
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(b,)) for b in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert outcomes == [APPLIED] * count
    user = receiver.user(USER)
    assert user is not None
    sleep = user.resource("oura", "sleep")
    assert sleep is not None and sleep.days_created == count


def test_forged_signatures_and_wrong_secrets_are_refused(receiver: WebhookReceiver) -> None:
    body = connection_created()
    headers = headers_for(body)
    signature = headers["webhook-signature"]
    # A character in the middle: the last ones before "=" carry padding bits, and some
    # changes to them decode to the same bytes.
    middle = len("v1,") + 10
    flipped = (
        signature[:middle] + ("A" if signature[middle] != "A" else "B") + signature[middle + 1 :]
    )
    forged = {**headers, "webhook-signature": flipped, "svix-signature": flipped}
    assert refused(receiver, body, forged) == INVALID_SIGNATURE
    other_secret = headers_for(body, secrets=[new_signing_secret()])
    assert refused(receiver, body, other_secret) == INVALID_SIGNATURE
    # Another message's valid signature, under our secret, does not carry over.
    other_id = {**headers, "webhook-id": "msg_other", "svix-id": "msg_other"}
    assert refused(receiver, body, other_id) == INVALID_SIGNATURE
    # An unknown signature scheme alone matches nothing.
    scheme = {**only(headers, "webhook"), "webhook-signature": "v1a," + signature[3:]}
    assert refused(receiver, body, scheme) == INVALID_SIGNATURE


def test_during_a_rotation_either_secret_verifies(
    database_url: str, master_key: FileKeySource
) -> None:
    old, new = new_signing_secret(), new_signing_secret()
    rotated = build_receiver(database_url, [new, old], master_key=master_key)
    try:
        for n, secrets in enumerate(([old], [new], [new, old])):
            body = daily_sleep(f"2026-03-0{n + 1}")
            assert rotated.receive(body, headers_for(body, secrets=secrets)).outcome == APPLIED
    finally:
        rotated.close()
    # A receiver still holding only the old secret takes what the sender signs with both.
    lagging = build_receiver(database_url, [old], master_key=master_key)
    try:
        body = daily_sleep("2026-03-05")
        assert lagging.receive(body, headers_for(body, secrets=[new, old])).outcome == APPLIED
        body = daily_sleep("2026-03-06")
        with pytest.raises(VerificationError):
            lagging.receive(body, headers_for(body, secrets=[new]))
    finally:
        lagging.close()


def test_stale_and_future_timestamps_are_refused(receiver: WebhookReceiver) -> None:
    body = connection_created()
    signed_at = int(T0.timestamp())
    headers = headers_for(body, timestamp=signed_at)
    with freeze_time(T0 + timedelta(minutes=5, seconds=1)):
        assert refused(receiver, body, headers) == TIMESTAMP_TOO_OLD
    with freeze_time(T0 - timedelta(minutes=5, seconds=1)):
        assert refused(receiver, body, headers) == TIMESTAMP_IN_FUTURE
    with freeze_time(T0 + timedelta(minutes=4, seconds=59)):
        assert receiver.receive(body, headers).outcome == APPLIED


def test_the_tolerance_is_configurable(database_url: str, master_key: FileKeySource) -> None:
    strict = build_receiver(
        database_url, [SECRET], master_key=master_key, tolerance=timedelta(seconds=30)
    )
    try:
        body = connection_created()
        headers = headers_for(body, timestamp=int(T0.timestamp()))
        with freeze_time(T0 + timedelta(seconds=31)), pytest.raises(VerificationError) as err:
            strict.receive(body, headers)
        assert err.value.reason == TIMESTAMP_TOO_OLD
        with freeze_time(T0 + timedelta(seconds=29)):
            assert strict.receive(body, headers).outcome == APPLIED
    finally:
        strict.close()


def test_a_reserialised_body_is_refused(receiver: WebhookReceiver) -> None:
    body = connection_created()
    headers = headers_for(body)
    same_json = json.dumps(json.loads(body), indent=2).encode()
    assert json.loads(same_json) == json.loads(body)
    assert refused(receiver, same_json, headers) == INVALID_SIGNATURE
    reordered = json.dumps(dict(reversed(json.loads(body).items())), separators=(",", ":"))
    assert refused(receiver, reordered.encode(), headers) == INVALID_SIGNATURE
    assert receiver.receive(body, headers).outcome == APPLIED


@pytest.mark.parametrize("missing", ["id", "timestamp", "signature"])
def test_missing_headers_are_refused(receiver: WebhookReceiver, missing: str) -> None:
    body = connection_created()
    headers = {k: v for k, v in headers_for(body).items() if not k.endswith(f"-{missing}")}
    assert refused(receiver, body, headers) == MISSING_HEADERS
    assert refused(receiver, body, {}) == MISSING_HEADERS


def test_malformed_headers_are_refused(receiver: WebhookReceiver) -> None:
    body = connection_created()
    headers = only(headers_for(body), "webhook")
    assert refused(receiver, body, {**headers, "webhook-timestamp": "soon"}) == MALFORMED_HEADERS
    assert refused(receiver, body, {**headers, "webhook-id": "a b"}) == MALFORMED_HEADERS
    assert refused(receiver, body, {**headers, "webhook-signature": "v1,!!"}) == (INVALID_SIGNATURE)


@pytest.mark.parametrize("family", ["webhook", "svix"])
def test_either_header_family_alone_is_enough(receiver: WebhookReceiver, family: str) -> None:
    body = connection_created()
    headers = {k.upper(): v for k, v in only(headers_for(body), family).items()}
    assert receiver.receive(body, headers).outcome == APPLIED


def test_svix_signed_messages_verify(receiver: WebhookReceiver) -> None:
    body = connection_created()
    message_id = new_message_id()
    now = datetime.now(UTC)
    headers = {
        "svix-id": message_id,
        "svix-timestamp": str(int(now.timestamp())),
        "svix-signature": svix.webhooks.Webhook(SECRET).sign(message_id, now, body.decode()),
    }
    assert receiver.receive(body, headers).outcome == APPLIED


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", MALFORMED_JSON),
        (b"\xff\xfe\x00", MALFORMED_JSON),
        (b"[1, 2]", INVALID_ENVELOPE),
        (b'"provider.connection.created"', INVALID_ENVELOPE),
        (message("daily.data.sleep.created", {}, team_id=None), INVALID_ENVELOPE),
        (message("daily.data.sleep.created", {}, user_id="user-42"), INVALID_ENVELOPE),
        (json.dumps({"event_type": "x.y", "data": {}}).encode(), INVALID_ENVELOPE),
        (message("provider.connection.created", {"user_id": str(USER)}), INVALID_DATA),
        (message("provider.connection.error", {"provider": "oura"}), INVALID_DATA),
        (
            message("daily.data.sleep.created", {"user_id": str(USER), "provider": "oura"}),
            INVALID_DATA,
        ),
        (  # a summary resource's data with neither the summary's source nor `summary`
            message(
                "daily.data.sleep.created",
                {"user_id": str(USER), "provider": "oura", "calendar_date": "2026-03-09"},
            ),
            INVALID_DATA,
        ),
        (
            message(
                "daily.data.heartrate.created",
                {"user_id": str(USER), "provider": "oura", "calendar_date": "2026-03-09"},
            ),
            INVALID_DATA,
        ),
        (
            message(
                "historical.data.sleep.created",
                {
                    "user_id": str(uuid.uuid4()),  # not the envelope's user
                    "provider": "oura",
                    "start_date": "2026-02-01T00:00:00+00:00",
                    "end_date": "2026-03-01T00:00:00+00:00",
                },
            ),
            INVALID_DATA,
        ),
    ],
)
def test_signed_bodies_that_are_not_messages_are_refused(
    receiver: WebhookReceiver, body: bytes, reason: str
) -> None:
    assert refused(receiver, body, headers_for(body)) == reason


def test_an_unknown_event_type_is_received_and_recorded_only(receiver: WebhookReceiver) -> None:
    body = message("lab_test.order.created", {"order_id": "o-1", "anything": [1, 2]})
    message_id = new_message_id()
    receipt = receiver.receive(body, headers_for(body, message_id=message_id))
    assert receipt.outcome == RECEIVED
    assert receiver.user(USER) is None  # nothing mirrored
    assert mirror_event_count(receiver) == 0
    recorded = receiver.message(message_id)
    assert recorded is not None
    assert (recorded.event_type, recorded.outcome, recorded.user_id) == (
        "lab_test.order.created",
        RECEIVED,
        USER,
    )
    # Its copies are duplicates too.
    again = headers_for(body, message_id=message_id)
    assert receiver.receive(body, again).outcome == DUPLICATE
    assert len(receiver.messages(USER)) == 1


def test_deprecated_shapes_are_read(receiver: WebhookReceiver) -> None:
    """Before their removal dates: `source` beside `provider`, `is_final`, hypnograms."""
    bodies = [
        connection_created(source=OURA),
        message(
            "historical.data.sleep.created",
            {
                "user_id": str(USER),
                "provider": "oura",
                "start_date": "2024-05-01T00:00:00+00:00",
                "end_date": "2024-06-01T00:00:00+00:00",
                "is_final": True,
            },
        ),
        message(
            "historical.timeseries.hypnogram.created",
            {
                "user_id": str(USER),
                "provider": "oura",
                "start_date": "2024-05-01T00:00:00+00:00",
                "end_date": "2024-06-01T00:00:00+00:00",
            },
        ),
        # The daily summary shape sent before issue 17: the summary under `summary`.
        message(
            "daily.data.sleep.created",
            {
                "user_id": str(USER),
                "provider": "oura",
                "calendar_date": "2024-05-31",
                "summary": {"score": 88},
                "source": {"provider": "oura", "name": "Oura", "slug": "oura", "logo": None},
            },
        ),
        message(
            "daily.timeseries.hypnogram.updated",
            {
                "user_id": str(USER),
                "provider": "oura",
                "calendar_date": "2024-05-31",
                "data": [{"stage": "deep", "start": "2024-05-31T01:00:00+00:00"}],
                "source": {"provider": "oura", "name": "Oura", "slug": "oura", "logo": None},
            },
        ),
    ]
    for body in bodies:
        assert receiver.receive(body, headers_for(body)).outcome == APPLIED
    user = receiver.user(USER)
    assert user is not None
    sleep, hypnogram = user.resource("oura", "sleep"), user.resource("oura", "hypnogram")
    assert sleep is not None and hypnogram is not None
    assert sleep.historical is not None
    assert sleep.historical["start_date"] == datetime(2024, 5, 1, tzinfo=UTC)
    assert sleep.historical["end_date"] == datetime(2024, 6, 1, tzinfo=UTC)
    assert sleep.days_created == 1
    assert hypnogram.historical_announcements == 1
    assert (hypnogram.days_created, hypnogram.days_updated) == (0, 1)
    assert hypnogram.last_event_type == "daily.timeseries.hypnogram.updated"


def test_a_message_naming_another_team_for_a_known_user_is_refused(
    receiver: WebhookReceiver,
) -> None:
    receiver.receive(connection_created(), headers_for(connection_created()))
    body = message("provider.connection.error", json.loads(connection_error())["data"])
    body = body.replace(str(TEAM).encode(), str(uuid.uuid4()).encode())
    with pytest.raises(InvalidMessage) as raised:
        receiver.receive(body, headers_for(body))
    assert raised.value.reason == TEAM_MISMATCH
    oura = receiver.user(USER).connection("oura")  # type: ignore[union-attr]
    assert oura is not None and oura.status == CONNECTED


def test_a_new_client_user_id_is_followed(receiver: WebhookReceiver) -> None:
    receiver.receive(connection_created(), headers_for(connection_created()))
    renamed = message("provider.connection.error", json.loads(connection_error())["data"])
    renamed = renamed.replace(b'"user-42"', b'"user-43"')
    receiver.receive(renamed, headers_for(renamed))
    user = receiver.user(USER)
    assert user is not None and user.client_user_id == "user-43"


def test_a_receiver_needs_good_secrets(database_url: str, master_key: FileKeySource) -> None:
    with pytest.raises(SigningError):
        build_receiver(database_url, [], master_key=master_key)
    with pytest.raises(SigningError):
        build_receiver(database_url, ["not-a-secret"], master_key=master_key)


# -- the ASGI app under a real server --------------------------------------------------------


@contextmanager
def serving(receiver: WebhookReceiver) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(
        create_receiver_app(receiver), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the receiver did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/webhooks"
    finally:
        server.should_exit = True
        thread.join(15)


def test_the_app_answers_each_case_over_http(receiver: WebhookReceiver) -> None:
    body = connection_created()
    headers = headers_for(body)
    with serving(receiver) as url, httpx.Client(timeout=10) as http:
        applied = http.post(url, content=body, headers=headers)
        assert applied.status_code == 200
        assert applied.json() == {"outcome": "applied", "message_id": headers["webhook-id"]}
        again = http.post(url, content=body, headers=headers)
        assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")

        def refusal(content: bytes, sent: dict[str, str]) -> tuple[int, str]:
            answer = http.post(url, content=content, headers=sent)
            detail = answer.json()["detail"]
            assert set(detail) == {"error_type", "error_message"}
            # Never an echo of the payload or the headers.
            for value in ("oura-77", "user-42", str(USER), *sent.values()):
                assert value not in answer.text
            return answer.status_code, detail["error_type"]

        secret_body = message("lab_test.order.created", {"secret": "oura-77"})
        pretty = json.dumps(json.loads(secret_body), indent=2).encode()
        assert refusal(pretty, headers_for(secret_body)) == (401, INVALID_SIGNATURE)
        assert refusal(body, headers_for(body, secrets=[new_signing_secret()])) == (
            401,
            INVALID_SIGNATURE,
        )
        stale = headers_for(body, timestamp=int(time.time()) - 3600)
        assert refusal(body, stale) == (401, TIMESTAMP_TOO_OLD)
        assert refusal(body, {}) == (400, MISSING_HEADERS)
        bad_json = b'{"user_id": "oura-77", '
        assert refusal(bad_json, headers_for(bad_json)) == (400, MALFORMED_JSON)
        shape = json.dumps({"user_id": "user-42", "data": "oura-77"}).encode()
        assert refusal(shape, headers_for(shape)) == (400, INVALID_ENVELOPE)

        unknown = http.post(url, content=secret_body, headers=headers_for(secret_body))
        assert (unknown.status_code, unknown.json()["outcome"]) == (200, "received")
        svix_only = library_headers(daily_sleep())
        svix_only = {k.replace("webhook-", "svix-"): v for k, v in svix_only.items()}
        assert http.post(url, content=daily_sleep(), headers=svix_only).status_code == 200
        assert http.get(url).status_code == 405


def test_a_body_over_the_limit_is_413(receiver: WebhookReceiver) -> None:
    port = free_port()
    app = create_receiver_app(receiver, path="/in", max_body_bytes=100)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        body = connection_created()
        answer = httpx.post(f"http://127.0.0.1:{port}/in", content=body, headers=headers_for(body))
        assert answer.status_code == 413
        assert receiver.user_ids() == []
    finally:
        server.should_exit = True
        thread.join(15)


def test_end_to_end_the_mirror_matches_the_service(
    service: Service, client: TestClient, team: Team, database_url: str, master_key: FileKeySource
) -> None:
    """A connection created, then in error, then its data announced: the messages are built
    from the service's own answers, as the dispatcher builds them, delivered over HTTP, and
    the mirror (in the same database, in its own tables) reads back what the service says."""
    user_id = create_user(client, team, "e2e-1")["user_id"]
    connect(
        client,
        team,
        user_id,
        "fitbit",
        demo_failures={"activity": {"code": "token_refresh_failed", "times": None}},
    )
    connected = provider_status(client, team, user_id)
    service.jobs.run_due_pulls()
    errored = provider_status(client, team, user_id)
    assert errored["status"] == "error"
    sleep_pull = pulls_of(client, team, user_id, "fitbit")["pulled"]["sleep"]
    assert sleep_pull["status"] == "success"

    def envelope(event_type: str, data: dict[str, Any]) -> bytes:
        fields = {
            "event_type": event_type,
            "data": {"user_id": user_id, **data},
            "user_id": user_id,
            "client_user_id": "e2e-1",
            "team_id": str(team.team_id),
        }
        return json.dumps(fields, separators=(",", ":")).encode()

    provider = {k: connected[k] for k in ("name", "slug", "logo")}
    messages = [
        envelope(
            "provider.connection.created",
            {
                "provider": provider,
                "resource_availability": connected["resource_availability"],
                "external_user_id": connected["external_user_id"],
            },
        ),
        envelope(
            "provider.connection.error",
            {
                "provider": "fitbit",
                "message": errored["error_details"]["error_message"],
                "error_type": errored["error_details"]["error_type"],
            },
        ),
        envelope(
            "historical.data.sleep.created",
            {
                "start_date": sleep_pull["range_start"],
                "end_date": sleep_pull["range_end"],
                "provider": "fitbit",
            },
        ),
        envelope(
            "daily.data.sleep.created",
            {
                "provider": "fitbit",
                "calendar_date": date.today().isoformat(),
                "score": 80,
                "source": {"provider": "fitbit", "type": "watch", "app_id": None},
            },
        ),
    ]
    service_events = _count(service, stored_events)
    mirror = build_receiver(database_url, [SECRET], master_key=master_key)
    try:
        with serving(mirror) as url, httpx.Client(timeout=10) as http:
            for body in messages:
                answer = http.post(url, content=body, headers=headers_for(body))
                assert answer.status_code == 200, answer.text
                assert answer.json()["outcome"] == "applied"
        view = mirror.user(uuid.UUID(user_id))
    finally:
        mirror.close()

    assert view is not None
    assert (view.team_id, view.client_user_id) == (team.team_id, "e2e-1")
    (fitbit,) = view.connections
    assert fitbit.provider == errored["slug"] == "fitbit"
    assert (fitbit.name, fitbit.logo) == (errored["name"], errored["logo"])
    assert fitbit.status == errored["status"] == "error"
    assert fitbit.resource_availability == errored["resource_availability"]
    assert fitbit.external_user_id == errored["external_user_id"]
    assert fitbit.error_details is not None
    for key in ("error_type", "error_message"):
        assert fitbit.error_details[key] == errored["error_details"][key]
    (sleep,) = view.resources
    assert (sleep.provider, sleep.resource) == ("fitbit", "sleep")
    assert sleep.historical is not None
    assert sleep.historical["start_date"] == datetime.fromisoformat(sleep_pull["range_start"])
    assert sleep.historical["end_date"] == datetime.fromisoformat(sleep_pull["range_end"])
    assert (sleep.days_created, sleep.days_updated) == (1, 0)
    assert sleep.last_calendar_date == date.today()
    # The mirror wrote none of the service's rows.
    assert _count(service, stored_events) == service_events


def _count(service: Service, table: Any) -> int:
    with service.db.read() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def test_the_mirror_survives_a_restart_through_its_snapshots(
    database_url: str, master_key: FileKeySource
) -> None:
    first = build_receiver(database_url, [SECRET], master_key=master_key, snapshot_interval=3)
    try:
        for body in [connection_created(), *(daily_sleep(f"2026-03-0{n}") for n in range(1, 6))]:
            assert first.receive(body, headers_for(body)).outcome == APPLIED
        before = first.user(USER)
    finally:
        first.close()
    again = build_receiver(database_url, [SECRET], master_key=master_key, snapshot_interval=3)
    try:
        with again.db.read() as conn:
            snapshots = conn.execute(
                select(func.count()).select_from(mirror_snapshots)
            ).scalar_one()
        assert snapshots >= 2
        after = again.user(USER)
        assert after == before
        assert after is not None
        sleep = after.resource("oura", "sleep")
        assert sleep is not None
        assert (sleep.days_created, sleep.last_calendar_date) == (5, date(2026, 3, 5))
        # Applying on top of the snapshot goes on from it.
        body = daily_sleep("2026-03-06", "updated")
        assert again.receive(body, headers_for(body)).outcome == APPLIED
        sleep = again.user(USER).resource("oura", "sleep")  # type: ignore[union-attr]
        assert sleep is not None and (sleep.days_created, sleep.days_updated) == (5, 1)
    finally:
        again.close()
