"""Health data blocks (ADR 0033): a period's stored days in typed columns open to the
canonical JSON each day was stored as, byte for byte, whatever the makers sent; merging
days into a block is the same as writing the block anew."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.parquet as pq
from healthledger.adapters.persistence.health_data import blocks
from healthledger.adapters.persistence.health_data.blocks import StoredPayload
from healthledger.adapters.persistence.keys.key_store import canonical_json
from healthledger.adapters.providers.demo import DemoProvider
from healthledger.domain.connections.providers import PullTarget

NOW = datetime(2026, 2, 1, 12, tzinfo=UTC)
USER = UUID(int=7)

# Days as makers send them: what the typed columns must give back unchanged.
AWKWARD: dict[date, Any] = {
    # ints and floats mixed in one key, a null, nested values, a Z and a +05:30 time
    # (printed back as written), a sub-second time, a time without an offset, a bool.
    date(2026, 1, 3): [
        {"timestamp": "2026-01-03T00:00:00+05:30", "value": 72, "unit": "bpm", "ok": True},
        {"timestamp": "2026-01-03T00:01:00Z", "value": 72.5, "unit": "bpm", "tags": ["a"]},
        {"timestamp": "2026-01-03T00:02:00.250000+00:00", "value": None, "unit": "bpm"},
        {"timestamp": "2026-01-03T00:03:00", "value": 1e300, "sport": {"slug": "run"}},
    ],
    # one key's values of several types; a huge int; an empty object
    date(2026, 1, 4): [{"x": 1}, {"x": "one"}, {"x": 2**70}, {}],
    date(2026, 1, 5): [],  # a day with nothing in it
    date(2026, 1, 6): {"calendar_date": "2026-01-06", "score": 81, "hr": {"avg": 61.5}},
    date(2026, 1, 7): None,  # not a list or an object: kept as its text
    date(2026, 1, 8): [1, 2, 3],
    date(2026, 1, 9): [{"@day": "ours", "value": 1}],  # our column names, in a maker's keys
    date(2026, 1, 10): [{"value": -0.0}, {"value": float("1e-7")}, {"value": 3}],
    # Times of isoformat()'s shape that are not times, or that it would write otherwise.
    date(2026, 1, 11): [{"t": "2026-02-30T00:00:00+00:00"}, {"t": "2026-01-11T00:00:00+01:00"}],
    date(2026, 1, 12): [{"t": "2026-01-12T23:59:60+00:00"}],
    date(2026, 1, 13): [{"t": "2026-01-13T10:00:00-00:00"}],
    date(2026, 1, 14): [{"t": "2026-01-14T10:00:00.000000+00:00"}],
    date(2026, 1, 15): [{"t": "2026-01-15T10:00:00+24:00"}, {"t": "0000-01-01T00:00:00+00:00"}],
    date(2026, 1, 16): [{"t": "2026-01-16T10:00:00.000001-03:30"}, {"t": None}],
    date(2026, 1, 17): [{"t": "2026-01-17T10:00:00.000001-03:30"}, {"u": 1}],
    date(2026, 1, 18): [{"n": 2**63}, {"n": -(2**63)}],  # an int beyond 64 bits
    date(2026, 1, 19): [{"n": True}, {"n": 1}, {"n": 1.0}],  # a bool is not an int
}


def payloads(days: dict[date, Any]) -> dict[date, StoredPayload]:
    return {
        day: StoredPayload(value, NOW, NOW + timedelta(hours=1), f"digest-{day}")
        for day, value in days.items()
    }


def opened(data: bytes) -> dict[date, bytes]:
    return {day: text for day, text, _, _ in blocks.decode(data).payloads()}


def test_every_day_opens_to_the_json_it_was_stored_as() -> None:
    for check in (False, True):
        got = opened(blocks.encode(payloads(AWKWARD), check=check))
        assert got == {day: canonical_json(value) for day, value in AWKWARD.items()}
    for day, value in AWKWARD.items():  # each alone: its columns typed by its values only
        assert opened(blocks.encode(payloads({day: value}))) == {day: canonical_json(value)}
    block = blocks.decode(blocks.encode(payloads(AWKWARD)))
    # A converted day's digest is kept with it (a day stored since has none).
    assert {day: p.digest for day, p in block.stored().items()} == {
        day: f"digest-{day}" for day in AWKWARD
    }
    (first,) = [p for p in block.payloads() if p[0] == date(2026, 1, 3)]
    assert first[2] == NOW and first[3] == NOW + timedelta(hours=1)


def test_the_demo_devices_resources_are_typed_columns_that_open_unchanged() -> None:
    for resource in ("heartrate", "sleep", "activity", "workouts", "steps", "blood_pressure"):
        target = PullTarget(USER, "oura", resource, {})
        days = DemoProvider().fetch(target, date(2026, 1, 1), date(2026, 1, 31), NOW, 1)
        data = blocks.encode(payloads(days))
        assert opened(data) == {day: canonical_json(value) for day, value in days.items()}
        items = blocks.decode(data).items
        # No day is kept as text: every key has a typed column.
        assert set(blocks.decode(data).days["shape"].to_pylist()) <= {blocks.LIST, blocks.OBJECT}
        if resource == "heartrate":
            encodings = {f.name: f.metadata[b"enc"] for f in items.schema if f.metadata}
            assert encodings["timestamp"] == b"instant" and encodings["value"] == b"int"
            assert items.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")


def test_merging_days_into_a_block_is_writing_it_anew() -> None:
    target = PullTarget(USER, "oura", "heartrate", {})
    month = DemoProvider().fetch(target, date(2026, 1, 1), date(2026, 1, 31), NOW, 1)
    first = {day: value for day, value in month.items() if day.day <= 20}
    block = blocks.decode(blocks.encode(payloads(first)))
    # Later days added, one day changed (its values now floats: another encoding).
    changed = {day: value for day, value in month.items() if day.day > 20}
    changed[date(2026, 1, 5)] = [{**s, "value": s["value"] + 0.5} for s in month[date(2026, 1, 5)]]
    both = {**first, **changed}
    merged = opened(blocks.merged(block, payloads(changed)))
    assert merged == {day: canonical_json(value) for day, value in both.items()}
    assert list(merged) == sorted(merged)


def test_a_block_opened_for_some_days_decodes_only_them() -> None:
    data = blocks.encode(payloads(AWKWARD))
    cut = blocks.decode(data, days=(date(2026, 1, 4), date(2026, 1, 6)))
    assert [p[0] for p in cut.payloads()] == [date(2026, 1, d) for d in (4, 5, 6)]
    assert set(cut.items[blocks.DAY].to_pylist()) == {date(2026, 1, 4), date(2026, 1, 6)}
    assert blocks.decode(data, days=(date(2025, 1, 1), date(2025, 12, 31))).payloads() == []
    # A month of minute samples spans many row groups: any few days open as stored.
    target = PullTarget(USER, "oura", "heartrate", {})
    month = DemoProvider().fetch(target, date(2026, 1, 1), date(2026, 1, 31), NOW, 1)
    data = blocks.encode(payloads(month))
    whole = {day: text for day, text, _, _ in blocks.decode(data).payloads()}
    for first, last in [(1, 1), (2, 3), (15, 15), (30, 31), (1, 31)]:
        span = (date(2026, 1, first), date(2026, 1, last))
        cut = blocks.decode(data, keys={"timestamp", "value"} if first == 2 else None, days=span)
        expected = {d: t for d, t in whole.items() if span[0] <= d <= span[1]}
        if first == 2:  # the unit left out: the rest of each sample as stored
            assert set(cut.items.column_names) == {
                blocks.DAY,
                "timestamp",
                "@off:timestamp",
                "value",
            }
        else:
            assert {day: text for day, text, _, _ in cut.payloads()} == expected
    groups = pq.ParquetFile(pa.BufferReader(data[12 + int.from_bytes(data[4:12], "big") :]))
    assert groups.metadata.num_row_groups > 10


def test_periods_are_calendar_months() -> None:
    assert blocks.period_of(date(2026, 2, 28)) == date(2026, 2, 1)
    assert blocks.period_of(date(2026, 1, 1)) == date(2026, 1, 1)
