"""The ledger's transcoder writes what eventsourcing's JSON transcoder writes, and also
stores freezegun's datetimes (found by their base class), as the real ones they stand for."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    TranscodingNotRegisteredError,
    UUIDAsHex,
)
from freezegun import freeze_time
from healthledger.adapters.persistence.eventstore.transcoder import DateAsISO, LedgerTranscoder

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _transcoders() -> tuple[LedgerTranscoder, JSONTranscoder]:
    ours, stock = LedgerTranscoder(), JSONTranscoder()
    # What the ledger registers (eventsourcing's three; ours brings the date's).
    for transcoder in (ours, stock):
        for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
            transcoder.register(transcoding)
    stock.register(DateAsISO())
    return ours, stock


STATES: list[dict[str, Any]] = [
    {},
    {"a": "plain", "b": None, "c": 3, "d": True, "e": False, "f": -7, "g": 2.5},
    {"timestamp": T0, "team_id": uuid.uuid4(), "day": date(2026, 2, 28)},
    {"money": Decimal("12.30"), "when": datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))},
    # Escapes, non-ASCII (written as is: ensure_ascii=False), separators in strings.
    {"text": 'quote " backslash \\ tab \t nl \n nul \x00 ü 漢 \u2028 😀', "k:,": "{}[]"},
    # Nested values.
    {"changes": {"ingestion_start": date(2026, 1, 2), "fallback_time_zone": None}},
    {"fields": ["sex", "birth_date"], "ids": [uuid.uuid4(), {"at": T0}]},
]


@pytest.mark.parametrize("state", STATES)
def test_the_transcoder_writes_the_bytes_eventsourcings_writes(state: dict[str, Any]) -> None:
    ours, stock = _transcoders()
    encoded = ours.encode(state)
    assert encoded == stock.encode(state)
    assert ours.decode(encoded) == stock.decode(encoded) == state


def test_an_unregistered_type_is_refused_as_eventsourcing_refuses_it() -> None:
    ours, stock = _transcoders()
    for transcoder in (ours, stock):
        with pytest.raises(TranscodingNotRegisteredError):
            transcoder.encode({"x": object()})


def test_frozen_time_datetimes_store_as_real_ones() -> None:
    # freezegun's FakeDatetime and FakeDate subclass datetime and date: found by their
    # base class, stored as the text a real value of that instant gives. eventsourcing's
    # transcoder, which looks types up exactly, refuses them.
    ours, stock = _transcoders()
    with freeze_time("2026-03-01 12:00:00.123456"):
        fake_now = datetime.now(UTC)
        fake_today = date.today()
    assert type(fake_now) is not datetime and type(fake_today) is not date
    state = {"at": fake_now, "day": fake_today}
    assert ours.encode(state) == ours.encode({"at": T0, "day": date(2026, 3, 1)})
    with pytest.raises(TranscodingNotRegisteredError):
        stock.encode(state)
    assert ours.decode(ours.encode(state)) == {"at": T0, "day": date(2026, 3, 1)}
