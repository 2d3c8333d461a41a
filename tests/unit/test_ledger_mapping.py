"""The ledger's transcoder, mapper and claim ids store exactly what eventsourcing's own
(and `uuid.uuid5`) would: the faster paths change the cost, never a stored byte."""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from eventsourcing.persistence import (
    JSONTranscoder,
    Mapper,
    TranscodingNotRegisteredError,
)
from freezegun import freeze_time
from healthledger.domain.context import CommandContext
from healthledger.domain.identifiers import new_uuid, uuid_from_int, uuid_hex
from healthledger.domain.ledger import Ledger, LedgerMapper, LedgerTranscoder
from healthledger.domain.timestamps import iso_text
from healthledger.domain.users.user import CLAIM_NAMESPACE, ClientUserIdClaim, User, event_builder

CTX = CommandContext(actor="team_api_key:k", request_id="req-1")
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _transcoders() -> tuple[LedgerTranscoder, JSONTranscoder]:
    ours, stock = LedgerTranscoder(), JSONTranscoder()
    Ledger.register_transcodings(Ledger.__new__(Ledger), ours)
    Ledger.register_transcodings(Ledger.__new__(Ledger), stock)
    return ours, stock


def _event_fields(version: int = 1) -> dict[str, Any]:
    """The fields every event of ours has."""
    return {
        "originator_id": uuid.uuid4(),
        "originator_version": version,
        "timestamp": T0,
        "actor": "a",
        "request_id": "r",
    }


STATES: list[dict[str, Any]] = [
    {},
    {"a": "plain", "b": None, "c": 3, "d": True, "e": False, "f": -7, "g": 2.5},
    {"timestamp": T0, "team_id": uuid.uuid4(), "day": date(2026, 2, 28)},
    {"money": Decimal("12.30"), "when": datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))},
    # Escapes, non-ASCII (written as is: ensure_ascii=False), separators in strings.
    {"text": 'quote " backslash \\ tab \t nl \n nul \x00 ü 漢 \u2028 😀', "k:,": "{}[]"},
    # Nested values go through the default hook.
    {"changes": {"ingestion_start": date(2026, 1, 2), "fallback_time_zone": None}},
    {"fields": ["sex", "birth_date"], "ids": [uuid.uuid4(), {"at": T0}]},
    {"n": 10**30, "f": float("nan"), "i": float("inf")},
    # Keys that are not strings (written as the C encoder writes them), a str subclass.
    {"a": 1, 2: "two", None: "none"},
    {"name": type("Name", (str,), {})("subclassed"), "at": T0, "again": T0},
]


@pytest.mark.parametrize("state", STATES)
def test_the_transcoder_writes_the_bytes_eventsourcings_writes(state: dict[str, Any]) -> None:
    ours, stock = _transcoders()
    encoded = ours.encode(state)
    assert encoded == stock.encode(state)
    assert repr(ours.decode(encoded)) == repr(stock.decode(encoded))


def test_an_unregistered_type_is_refused_as_eventsourcing_refuses_it() -> None:
    ours, stock = _transcoders()
    for transcoder in (ours, stock):
        with pytest.raises(TranscodingNotRegisteredError):
            transcoder.encode({"x": object()})


def test_frozen_time_datetimes_store_as_real_ones() -> None:
    # freezegun's FakeDatetime subclasses datetime: found by its base class, stored as
    # the same text a real datetime of that instant gives (eventsourcing refuses it).
    ours, _ = _transcoders()
    with freeze_time("2026-03-01 12:00:00.123456"):
        fake = datetime.now(UTC)
    assert type(fake) is not datetime
    assert ours.encode({"at": fake}) == ours.encode({"at": T0})


def _events() -> list[Any]:
    team_id, user_id = uuid.uuid4(), uuid.uuid4()
    user = User.register(
        CTX,
        T0,
        user_id=user_id,
        team_id=team_id,
        client_user_id="client-ü",
        fallback_time_zone="Europe/Berlin",
        sealed_birth_date="sealed",
        ingestion_start=date(2026, 1, 1),
        ingestion_end=None,
    )
    user.change_settings(CTX, T0, {"ingestion_end": date(2026, 5, 1), "fallback_time_zone": None})
    user.record_demographics(CTX, T0, "sealed-demographics", ["sex"])
    user.delete(CTX, T0, T0 + timedelta(days=7))
    claim = ClientUserIdClaim.start(CTX, T0, team_id, "client-ü", user_id)
    claim.release(CTX, T0, user_id)
    return [*user.collect_events(), *claim.collect_events()]


def test_the_mapper_stores_what_eventsourcings_mapper_stores() -> None:
    ours, stock = _transcoders()
    mapper, reference = LedgerMapper(ours), Mapper(stock)
    events = _events()
    assert len(events) == 6
    for event in events:
        stored = mapper.to_stored_event(event)
        assert stored == reference.to_stored_event(event)
        assert mapper.to_domain_event(stored) == event
    # Looked up once per class, then from the mapper's own table: still the same.
    assert [mapper.to_stored_event(e) for e in events] == [
        reference.to_stored_event(e) for e in events
    ]


def test_a_class_version_is_stored_as_eventsourcing_stores_it() -> None:
    class Versioned(User.Event):
        class_version = 2
        note: str

    ours, stock = _transcoders()
    event = Versioned(**_event_fields(version=2), note="n")
    stored = LedgerMapper(ours).to_stored_event(event)
    assert stored == Mapper(stock).to_stored_event(event)
    assert b'"class_version":2' in stored.state


def test_claim_ids_are_uuid5_of_the_team_and_the_client_user_id() -> None:
    rng = random.Random(5)
    alphabet = "abcXYZ019-_.:@+ üé漢😀\x1f"
    # A few teams, so that consecutive claims are of the same team or not (the bytes
    # up to the client_user_id are kept for the last team).
    teams = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(3)]
    for _ in range(2000):
        team_id = rng.choice(teams)
        client_user_id = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40)))
        expected = uuid.uuid5(CLAIM_NAMESPACE, f"{team_id}\x1f{client_user_id}")
        found = ClientUserIdClaim.id_for(team_id, client_user_id)
        assert found == expected
        assert (found.version, found.variant) == (5, uuid.RFC_4122)


def test_ids_made_without_uuid_init_are_the_standard_librarys() -> None:
    for _ in range(2000):
        made = new_uuid()
        reference = uuid.UUID(bytes=made.bytes, version=4)
        assert made == reference and hash(made) == hash(reference)
        assert (made.version, made.variant) == (4, uuid.RFC_4122)
        assert str(made) == str(reference) and made.is_safe is reference.is_safe
        assert uuid_hex(made) == made.hex
    value = random.Random(7).getrandbits(128)
    assert uuid_from_int(value) == uuid.UUID(int=value)
    assert uuid_from_int(value).is_safe is uuid.UUID(int=value).is_safe


def test_random_ids_are_never_handed_out_twice_across_threads_or_a_fork() -> None:
    # new_uuid reads os.urandom 4,096 bytes at a time and keeps what it has not used.
    made: list[uuid.UUID] = []

    def take() -> None:
        made.extend(new_uuid() for _ in range(3000))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == len(made) == 12000
    # A forked child must not hand out the numbers its parent kept.
    new_uuid()  # the pool is not empty at the fork
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side
        os.write(writer, new_uuid().bytes)
        os._exit(0)
    os.close(writer)
    os.waitpid(child, 0)
    from_child = uuid.UUID(bytes=os.read(reader, 16))
    os.close(reader)
    assert from_child not in {new_uuid() for _ in range(300)}


def test_events_made_without_their_init_are_the_dataclass_ones_in_attribute_order() -> None:
    # The fields every Created event of ours has (`event_builder` needs them all).
    common = {**_event_fields(), "team_id": uuid.uuid4(), "client_user_id": "c"}
    user_fields = dict(
        fallback_time_zone=None,
        sealed_birth_date="s",
        ingestion_start=date(2026, 1, 1),
        ingestion_end=None,
    )
    for cls, fields in (
        (User.Created, {"originator_topic": "healthledger:User", **common, **user_fields}),
        (
            ClientUserIdClaim.Created,
            {
                "originator_topic": "healthledger:ClientUserIdClaim",
                **common,
                "user_id": uuid.uuid4(),
            },
        ),
    ):
        build = event_builder(cls)
        assert build.__name__ == "build"  # the one-step builder, not the class's __init__
        # Given in another order than the fields': the event's follows the class.
        ours, theirs = build(dict(reversed(fields.items()))), cls(**fields)
        assert type(ours) is cls and ours == theirs
        # The same attributes in the same order: the stored JSON follows it.
        assert list(vars(ours).items()) == list(vars(theirs).items())
        with pytest.raises(TypeError, match="actor"):
            build({k: v for k, v in fields.items() if k != "actor"})  # all required
        with pytest.raises(TypeError, match="note"):
            build({**fields, "note": "n"})  # and no others
        with pytest.raises(TypeError, match="actor"):
            build({**{k: v for k, v in fields.items() if k != "actor"}, "note": "n"})


def test_an_event_with_defaults_keeps_its_own_init() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithDefault(User.Event):
        note: str = "n"

    build = event_builder(WithDefault)
    assert build.__name__ == "construct"  # the class's own __init__, which sets defaults
    event = build(_event_fields())
    assert type(event) is WithDefault and event.note == "n"


def test_the_iso_text_of_a_datetime_is_its_isoformat() -> None:
    rng = random.Random(17)
    zones = [UTC, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(0))]
    values = [
        datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),  # no microseconds: isoformat leaves them out
        datetime(2026, 1, 1, 10, 0, 0, 10, tzinfo=UTC),
    ]
    for _ in range(5000):
        moment = datetime(1, 1, 1, tzinfo=UTC) + timedelta(
            microseconds=rng.randrange(315_537_897_600_000_000)
        )
        values.append(moment.astimezone(rng.choice(zones)))
    for value in values:
        assert iso_text(value) == value.isoformat()
    with freeze_time("2026-03-01 12:00:00.000123"):
        now = datetime.now(UTC)
        assert iso_text(now) == now.isoformat() == "2026-03-01T12:00:00.000123+00:00"


def test_a_datetime_is_written_as_its_own_isoformat_after_another() -> None:
    # `_datetime_text` remembers the last datetime: a different one (even an equal
    # instant in another zone) is written as its own.
    ours, stock = _transcoders()
    other_zone = T0.astimezone(timezone(timedelta(hours=-5)))
    for state in ({"at": T0}, {"at": other_zone}, {"at": T0 + timedelta(microseconds=1)}):
        assert ours.encode(state) == stock.encode(state)
