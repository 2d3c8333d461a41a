"""The ledger's transcoder, mapper and claim ids store exactly what eventsourcing's own
(and `uuid.uuid5`) would: the faster paths change the cost, never a stored byte."""

from __future__ import annotations

import random
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
from healthledger.domain.ledger import Ledger, LedgerMapper, LedgerTranscoder
from healthledger.domain.users import CLAIM_NAMESPACE, ClientUserIdClaim, User

CTX = CommandContext(actor="team_api_key:k", request_id="req-1")
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _transcoders() -> tuple[LedgerTranscoder, JSONTranscoder]:
    ours, stock = LedgerTranscoder(), JSONTranscoder()
    Ledger.register_transcodings(Ledger.__new__(Ledger), ours)
    Ledger.register_transcodings(Ledger.__new__(Ledger), stock)
    return ours, stock


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
    event = Versioned(
        originator_id=uuid.uuid4(),
        originator_version=2,
        timestamp=T0,
        actor="a",
        request_id="r",
        note="n",
    )
    stored = LedgerMapper(ours).to_stored_event(event)
    assert stored == Mapper(stock).to_stored_event(event)
    assert b'"class_version":2' in stored.state


def test_claim_ids_are_uuid5_of_the_team_and_the_client_user_id() -> None:
    rng = random.Random(5)
    alphabet = "abcXYZ019-_.:@+ üé漢😀\x1f"
    for _ in range(2000):
        team_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        client_user_id = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40)))
        expected = uuid.uuid5(CLAIM_NAMESPACE, f"{team_id}\x1f{client_user_id}")
        found = ClientUserIdClaim.id_for(team_id, client_user_id)
        assert found == expected
        assert (found.version, found.variant) == (5, uuid.RFC_4122)
