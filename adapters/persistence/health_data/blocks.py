"""A period of one user's stored data of one provider and resource as a columnar block
(ADR 0033): the bytes that are sealed, and how they are written and opened.

A block holds two Arrow tables: the days as an IPC stream, the items as zstd Parquet:

- **days** (uncompressed): one row per stored day: `day`, `stored_at`, `updated_at`,
  `digest` (the keyed digest of the day's canonical JSON in blocks written before a pull
  compared a day with its stored text instead; null since), its `shape` (a list of items,
  one object, or any other JSON kept as its text in `raw`) and its number of `items`;
- **items**: one row per item (a sample, a session, a day's summary object) in day order,
  `@day` its day, then one typed column per key the items carry.

A key's column is typed from all its values in the block (its `enc` in the field's
metadata): `int`, `float`, `number` (ints and floats mixed: a double and an `@int:` flag
column), `bool`, `str`, `instant` (ISO 8601 texts with an offset that print back
unchanged: UTC microseconds and an `@off:` column of the offset in seconds), or `json`
(anything else, e.g. nested objects or a null, as canonical JSON text). An absent key is
a null. Opening a day gives back values equal in type and value to the stored ones, so
its canonical JSON is byte for byte the one stored (`encode` checks it, and stores a day
that would not come back as its JSON text instead).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from itertools import accumulate
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from healthledger.adapters.persistence.keys.key_store import canonical_json

# The shapes of a stored day.
LIST, OBJECT, RAW = 0, 1, 2
DAY, INT_FLAG, OFFSET = "@day", "@int:", "@off:"
_MAGIC = b"HLB1"
# Items per Parquet row group: a read of a day or a few decodes a few groups of a month's
# block, not the month (a day of minute samples is about 1,400 items).
ROW_GROUP = 4096
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_EXACT = 2**53
# The days table uncompressed: a month's is a few kB, and opening a zstd stream costs more
# than reading it (0.3 ms against 0.01 ms a block, measured).
_IPC = pa.ipc.IpcWriteOptions(compression=None)
_DAYS_SCHEMA = pa.schema(
    [
        ("day", pa.date32()),
        ("stored_at", pa.timestamp("us", tz="UTC")),
        ("updated_at", pa.timestamp("us", tz="UTC")),
        ("digest", pa.string()),
        ("shape", pa.int8()),
        ("items", pa.int32()),
        ("raw", pa.large_string()),
    ]
)


def period_of(day: date) -> date:
    """The first day of the block that holds `day`: blocks are calendar months."""
    return day.replace(day=1)


@dataclass(frozen=True)
class StoredPayload:
    """One day to write into a block: its value as the pull gave it, when it was first
    stored and last changed (and, for a day converted from the days table, the keyed
    digest it was stored with)."""

    value: Any
    stored_at: datetime
    updated_at: datetime
    digest: str | None = None


@dataclass(frozen=True)
class Block:
    """A block opened: its days and items tables."""

    days: pa.Table
    items: pa.Table

    def day_list(self) -> list[date]:
        return list(self.days["day"].to_pylist())

    def only(self, days: Iterable[date]) -> Block:
        """The block of the given days only."""
        kept = pa.array(sorted(set(days)), pa.date32())
        return Block(
            self.days.filter(pc.is_in(self.days["day"], kept)),
            self.items.filter(pc.is_in(self.items[DAY], kept)),
        )

    def without(self, days: Iterable[date]) -> Block:
        """The block less the given days."""
        dropped = pa.array(sorted(set(days)), pa.date32())
        if len(dropped) == 0:
            return self
        return Block(
            self.days.filter(pc.invert(pc.is_in(self.days["day"], dropped))),
            self.items.filter(pc.invert(pc.is_in(self.items[DAY], dropped))),
        )

    def stored_by(self, instant: datetime) -> Block:
        """The block less the days stored after `instant` (added to a version in place)."""
        kept = pc.less_equal(self.days["stored_at"], pa.scalar(instant, _DAYS_SCHEMA[1].type))
        days = self.days.filter(kept)
        return Block(days, self.items.filter(pc.is_in(self.items[DAY], days["day"])))

    def payloads(self) -> list[tuple[date, bytes, datetime, datetime]]:
        """Each day's canonical JSON as stored, with its stored_at and updated_at."""
        counts = self.days["items"].combine_chunks()
        # Each day's items' texts joined by Arrow: a list per day (offsets from the counts).
        offsets = pa.concat_arrays(
            [pa.array([0], pa.int32()), pc.cumulative_sum(counts).cast(pa.int32())]
        )
        joined = pc.binary_join(pa.ListArray.from_arrays(offsets, _item_texts(self.items)), ",")
        found = []
        for day, stored_at, updated_at, shape, text, raw in zip(
            *(self.days[c].to_pylist() for c in ("day", "stored_at", "updated_at", "shape")),
            joined.to_pylist(),
            self.days["raw"].to_pylist(),
            strict=True,
        ):
            if shape == RAW:
                payload = raw
            elif shape == OBJECT:
                payload = text
            else:
                payload = "[" + text + "]"
            found.append((day, payload.encode(), stored_at, updated_at))
        return found

    def stored(self) -> dict[date, StoredPayload]:
        """Every day as a payload to write again (a block being rewritten)."""
        digests = dict(zip(self.day_list(), self.days["digest"].to_pylist(), strict=True))
        return {
            day: StoredPayload(json.loads(text), stored_at, updated_at, digests[day])
            for day, text, stored_at, updated_at in self.payloads()
        }


def encode(days: Mapping[date, StoredPayload], *, check: bool = False) -> bytes:
    """The block's bytes (to be sealed) for `days`. Each column's encoding gives its values
    back exactly; `check` opens the block again and compares each day's JSON (the
    conversion of stored days does, once)."""
    return _bytes(tables(days, check=check))


def tables(days: Mapping[date, StoredPayload], *, check: bool = False) -> Block:
    """The block of `days` as its two tables, not yet written as bytes (`encode`)."""
    rows: list[dict[str, Any]] = []
    day_rows: dict[str, list[Any]] = {name: [] for name in _DAYS_SCHEMA.names}
    for day in sorted(days):
        stored = days[day]
        value = stored.value
        if isinstance(value, _Raw):
            shape, items, value = RAW, [], value.value
        elif isinstance(value, list) and set(map(type, value)) <= {dict}:
            shape, items = LIST, value
        elif isinstance(value, dict):
            shape, items = OBJECT, [value]
        else:
            shape, items = RAW, []
        day_rows["day"].append(day)
        day_rows["stored_at"].append(stored.stored_at)
        day_rows["updated_at"].append(stored.updated_at)
        day_rows["digest"].append(stored.digest)
        day_rows["shape"].append(shape)
        day_rows["items"].append(len(items))
        day_rows["raw"].append(canonical_json(value).decode() if shape == RAW else None)
        rows.extend(items)
    by_key = _values_by_key(rows)
    keys = sorted(by_key)
    if any(key.startswith("@") for key in keys):
        # Our column names among a maker's keys: those days kept as text, never confused.
        return tables(
            {
                day: StoredPayload(_Raw(p.value), p.stored_at, p.updated_at, p.digest)
                if _named_like_ours(p.value)
                else p
                for day, p in days.items()
            },
            check=check,
        )
    columns: dict[str, pa.Array] = {DAY: _repeated(day_rows["day"], day_rows["items"])}
    fields = [pa.field(DAY, pa.date32())]
    for key in keys:
        for field, array in _column(key, by_key[key]):
            columns[field.name] = array
            fields.append(field)
    items_table = pa.Table.from_arrays(list(columns.values()), schema=pa.schema(fields))
    days_table = pa.Table.from_pydict(day_rows, schema=_DAYS_SCHEMA)
    block = Block(days_table, items_table)
    if not check:
        return block
    # Every day must open to the JSON it was: a day that would not is kept as its text.
    expected = {day: canonical_json(_plain(days[day].value)) for day in days}
    differing = [day for day, text, _, _ in block.payloads() if text != expected[day]]
    if differing:
        return tables(
            {
                day: StoredPayload(_Raw(days[day].value), p.stored_at, p.updated_at, p.digest)
                if day in differing
                else p
                for day, p in days.items()
            },
            check=True,
        )
    return block


def _repeated(days: list[date], counts: list[int]) -> pa.Array:
    """Each day as many times as it has items, by Arrow (no Python object per item): the
    parent index of each element of a list array of those lengths."""
    offsets = pa.array(list(accumulate(counts, initial=0)), pa.int32())
    lists = pa.ListArray.from_arrays(offsets, pa.nulls(offsets[-1].as_py(), pa.int8()))
    return pa.array(days, pa.date32()).take(pc.list_parent_indices(lists))


def decode(
    data: bytes,
    keys: Collection[str] | None = None,
    days: tuple[date, date] | None = None,
) -> Block:
    """The block whose bytes (opened) are `data`; of its items' keys, only `keys` (with
    their companion columns), and of its days, only those of `days` (first, last), when
    given: the rest is not decoded (the items are read by row groups of ROW_GROUP)."""
    if data[:4] != _MAGIC:
        raise ValueError("not a block of health data")
    (length,) = struct.unpack_from(">Q", data, 4)
    start = 12
    table = pa.ipc.open_stream(pa.py_buffer(data[start : start + length])).read_all()
    # ParquetFile.read: the datasets layer of read_table costs more than a block's read.
    parquet = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data)[start + length :]))
    columns = None
    if keys is not None:
        wanted = {DAY} | {f"{prefix}{key}" for key in keys for prefix in ("", INT_FLAG, OFFSET)}
        columns = [name for name in parquet.schema_arrow.names if name in wanted]
    if days is None:
        return Block(table, parquet.read(columns=columns, use_threads=False))
    # The days asked for are consecutive rows of the days table, and their items
    # consecutive rows of the items: read the row groups that hold those.
    listed = table["day"].to_pylist()
    counts = table["items"].to_pylist()
    inside = [n for n, day in enumerate(listed) if days[0] <= day <= days[1]]
    if not inside:
        return Block(
            table.slice(0, 0),
            parquet.schema_arrow.empty_table().select(columns or parquet.schema_arrow.names),
        )
    first_row = sum(counts[: inside[0]])
    last_row = first_row + sum(counts[inside[0] : inside[-1] + 1])
    groups, offset, skipped = [], 0, None
    for group in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if offset < last_row and offset + rows > first_row:
            groups.append(group)
            skipped = offset if skipped is None else skipped
        offset += rows
    items = (
        parquet.read_row_groups(groups, columns=columns, use_threads=False)
        if groups
        else parquet.schema_arrow.empty_table().select(columns or parquet.schema_arrow.names)
    )
    begin = first_row - (skipped or 0)
    return Block(table.slice(inside[0], len(inside)), items.slice(begin, last_row - first_row))


# -- the columns -------------------------------------------------------------------------------


class _Absent:
    pass


_ABSENT = _Absent()


class _Raw:
    """A day's value that is to be stored as its JSON text (it does not survive columns)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _named_like_ours(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return any(isinstance(i, dict) and any(k.startswith("@") for k in i) for i in items)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, _Raw) else value


def _instant(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None or moment.isoformat() != text:
        return None
    return moment


def _instants(texts: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """A column of texts as UTC times and their offsets in seconds, when every text is a
    time with an offset that isoformat() prints back unchanged; else None. Parsed by
    Arrow's cast and checked by printing them back (`_instant_texts`), else one by one."""
    present = texts.drop_null()
    if len(present) == 0 or _instant(present[0].as_py()) is None:
        return None  # every text must be one: the first is not (units, names, ...)
    parsed = _parsed(texts)
    if parsed is not None:
        return parsed
    moments = [None if t is None else _instant(t) for t in texts.to_pylist()]
    if any(m is None for m, t in zip(moments, texts.to_pylist(), strict=True) if t is not None):
        return None
    micros = [None if m is None else (m - _EPOCH) // timedelta(microseconds=1) for m in moments]
    offsets = [
        None if m is None else int(m.utcoffset().total_seconds())  # type: ignore[union-attr]
        for m in moments
    ]
    return (
        pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(offsets, pa.int32()),
    )


# An offset as isoformat() writes it (of whole minutes; -00:00 is written +00:00).
_OFFSET = re.compile(r"^([+-])(\d\d):(\d\d)$")
# isoformat()'s lengths: seconds, or microseconds when there are some; with the offset.
_SECONDS, _MICROSECONDS = 25, 32


def _parsed(texts: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """Texts parsed by Arrow (its ISO 8601 cast, to UTC, which checks every field's
    range), their offsets read from their last six characters (a few distinct ones: each
    parsed once), when each text has isoformat()'s own shape, so prints back unchanged
    from the two (`_instant_texts`); else None (Python decides, text by text)."""
    try:
        moments = texts.cast(pa.timestamp("us", tz="UTC"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # not times, or a date or an offset that does not exist
    # Texts the cast parsed are ASCII (digits and ISO 8601's separators): their lengths in
    # bytes are in characters, read from the offsets without scanning the texts.
    lengths = pc.binary_length(texts)
    if not pc.all(pc.is_in(lengths, pa.array([_SECONDS, _MICROSECONDS], pa.int32()))).as_py():
        return None
    # The first "T" at 10 (a search, with no text made per row): the date's ten
    # characters hold none.
    if not pc.all(pc.equal(pc.find_substring(texts, "T"), 10)).as_py():
        return None
    if pc.any(pc.starts_with(texts, "0000")).as_py():
        return None  # year 0, which Python has not
    if pc.max(lengths).as_py() == _MICROSECONDS:
        # ".ffffff" before the offset, never ".000000" (isoformat() leaves those out).
        fraction = pc.utf8_slice_codeunits(texts, 19, 26)
        longer = pc.equal(lengths, _MICROSECONDS)
        good = pc.and_(pc.starts_with(fraction, "."), pc.not_equal(fraction, ".000000"))
        if not pc.all(pc.or_(pc.invert(longer), good)).as_py():
            return None
    # A pull's texts mostly share one offset: checked by their ends, with no text made per
    # row; else each distinct one parsed once.
    first = texts.drop_null()[0].as_py()[-6:]
    if pc.all(pc.ends_with(texts, first)).as_py():
        second = _zone_seconds(first)
        if second is None:
            return None
        offset = pa.scalar(second, pa.int32())
        return moments, pc.if_else(pc.is_valid(texts), offset, pa.scalar(None, pa.int32()))
    zones = pc.utf8_slice_codeunits(texts, -6).dictionary_encode()
    seconds = [_zone_seconds(zone) for zone in zones.dictionary.to_pylist()]
    if None in seconds:
        return None
    return moments, pa.array(seconds, pa.int32()).take(zones.indices)


def _zone_seconds(zone: str) -> int | None:
    """An offset as isoformat() writes it, in seconds; None for any other text."""
    match = _OFFSET.match(zone)
    if match is None or zone == "-00:00":
        return None
    sign, hours, minutes = match.groups()
    return (1 if sign == "+" else -1) * (int(hours) * 3600 + int(minutes) * 60)


def _values_by_key(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each key's values in the items, in item order (`_ABSENT` where an item has not
    the key). Items of one key set (a day of samples of one kind) are read key by key
    with no object per item: as many keys as the first, each of which every item has."""
    if rows:
        first = list(rows[0])
        if set(map(len, rows)) == {len(first)}:
            try:
                return {key: list(map(itemgetter(key), rows)) for key in first}
            except KeyError:
                pass  # items of another key set among them
    shapes = set(map(tuple, rows))
    everywhere = set.intersection(*map(set, shapes)) if shapes else set()
    return {
        key: list(map(itemgetter(key), rows))
        if key in everywhere
        else [row.get(key, _ABSENT) for row in rows]
        for key in {key for shape in shapes for key in shape}
    }


def _inferred(values: Sequence[Any]) -> pa.Array | None:
    """The values as Arrow infers them (in one pass in C), when every value converts and
    none is None or absent; else None."""
    try:
        array = pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return None  # an absent key, a type Arrow has not, ints and texts mixed, ...
    return array if array.null_count == 0 else None


def _column(key: str, values: Sequence[Any]) -> list[tuple[pa.Field, pa.Array]]:
    def field(arrow_type: pa.DataType, enc: str, name: str = key) -> pa.Field:
        return pa.field(name, arrow_type, metadata={"enc": enc})

    # Arrow infers int64 only of ints (a bool among them fails), bool only of bools and
    # string only of texts: such a column needs no pass over its values' types in Python.
    # A double may hold ints or bools too: those are told apart below.
    inferred = _inferred(values)
    if inferred is not None:
        if inferred.type == pa.int64():
            return [(field(pa.int64(), "int"), inferred)]
        if inferred.type == pa.bool_():
            return [(field(pa.bool_(), "bool"), inferred)]
        if inferred.type == pa.string():
            return _text_column(key, inferred)
    kinds = set(map(type, values))
    absent = _Absent in kinds
    kinds.discard(_Absent)

    def typed(arrow_type: pa.DataType) -> list[Any]:
        return [None if v is _ABSENT else v for v in values] if absent else list(values)

    if kinds == {int}:
        try:
            return [(field(pa.int64(), "int"), pa.array(typed(pa.int64()), pa.int64()))]
        except OverflowError:
            pass  # beyond 64 bits: kept as JSON text below
    if kinds == {float}:
        if inferred is not None:
            return [(field(pa.float64(), "float"), inferred)]
        return [(field(pa.float64(), "float"), pa.array(typed(pa.float64()), pa.float64()))]
    present = [v for v in values if v is not _ABSENT] if absent else values
    if kinds == {int, float} and all(abs(v) < _MAX_EXACT for v in present if type(v) is int):
        numbers = [None if v is _ABSENT else float(v) for v in values]
        flags = [None if v is _ABSENT else type(v) is int for v in values]
        return [
            (field(pa.float64(), "number"), pa.array(numbers, pa.float64())),
            (field(pa.bool_(), "flag", INT_FLAG + key), pa.array(flags, pa.bool_())),
        ]
    if kinds == {bool}:
        return [(field(pa.bool_(), "bool"), pa.array(typed(pa.bool_()), pa.bool_()))]
    if kinds == {str}:
        return _text_column(key, pa.array(typed(pa.string()), pa.string()))
    texts = [None if v is _ABSENT else canonical_json(v).decode() for v in values]
    return [(field(pa.large_string(), "json"), pa.array(texts, pa.large_string()))]


def _text_column(key: str, texts: pa.Array) -> list[tuple[pa.Field, pa.Array]]:
    """A column of texts (null where absent): times with an offset as `instant`, any
    other texts as `str`, by dictionary."""
    instants = _instants(texts)
    if instants is not None:
        moments, offsets = instants
        return [
            (pa.field(key, pa.timestamp("us", tz="UTC"), metadata={"enc": "instant"}), moments),
            (pa.field(OFFSET + key, pa.int32(), metadata={"enc": "offset"}), offsets),
        ]
    return [
        (
            pa.field(key, pa.dictionary(pa.int32(), pa.string()), metadata={"enc": "str"}),
            texts.dictionary_encode(),
        )
    ]


def _item_values(items: pa.Table) -> list[dict[str, Any]]:
    """The items as the stored values: each key's values decoded by its encoding."""
    rows: list[dict[str, Any]] = [{} for _ in range(items.num_rows)]
    for field in items.schema:
        enc = (field.metadata or {}).get(b"enc", b"").decode()
        if enc in ("", "flag", "offset"):
            continue
        values = _decoded(items, field.name, enc)
        for row, value in zip(rows, values, strict=True):
            if value is not _ABSENT:
                row[field.name] = value
    return rows


def _item_texts(items: pa.Table) -> pa.Array:
    """Each item's canonical JSON (sorted keys, no spaces, ASCII), made column by column:
    `"key":value` per key (null where the item has no such key), joined per row."""
    if items.num_rows == 0:
        return pa.array([], pa.string())
    keys, values = [], []
    for field in items.schema:
        enc = (field.metadata or {}).get(b"enc", b"").decode()
        if enc not in ("", "flag", "offset"):
            keys.append(json.dumps(field.name) + ":")
            values.append(_value_texts(items, field.name, enc))
    if not keys:
        return pa.nulls(items.num_rows, pa.string()).fill_null("{}")
    if not any(v.null_count for v in values):
        # Every item has every key (a day of samples of one kind): `"key":value` joined.
        parts = [pc.binary_join_element_wise(k, v, "") for k, v in zip(keys, values, strict=True)]
        joined = pc.binary_join_element_wise(*parts, ",")
    else:
        # `"key":value,` where the item has the key, nothing where it has not; a JSON
        # value never ends in a comma, so the trailing one is the last key's.
        parts = [
            pc.fill_null(pc.binary_join_element_wise(k, v, ",", ""), "")
            for k, v in zip(keys, values, strict=True)
        ]
        joined = pc.utf8_rtrim(pc.binary_join_element_wise(*parts, ""), characters=",")
    texts: pa.Array = pc.binary_join_element_wise("{", joined, "}", "")
    return texts


def _value_texts(items: pa.Table, key: str, enc: str) -> pa.Array:
    """The JSON text of each value of a key's column (null where absent)."""
    column = items[key].combine_chunks()
    if enc == "int":
        return column.cast(pa.string())
    if enc == "json":
        return column.cast(pa.string())
    if enc == "bool":
        return pc.if_else(column, "true", pc.if_else(pc.is_null(column), None, "false"))
    if enc == "str":
        if isinstance(column, pa.DictionaryArray):
            dictionary = pa.array(
                [json.dumps(v) for v in column.dictionary.to_pylist()], pa.string()
            )
            return dictionary.take(column.indices)
        return pa.array(
            [None if v is None else json.dumps(v) for v in column.to_pylist()], pa.string()
        )
    if enc == "instant":
        return _instant_texts(column, items[OFFSET + key].combine_chunks())
    # float and number: Python's own repr is JSON's (json.dumps writes floats with it).
    decoded = _decoded(items, key, enc)
    return pa.array([None if v is _ABSENT else json.dumps(v) for v in decoded], pa.string())


def _instant_texts(moments: pa.Array, offsets: pa.Array) -> pa.Array:
    """`datetime.isoformat()` of each time in its own offset, as Arrow computes it."""
    shifted = pc.add(moments.cast(pa.int64()), pc.multiply(offsets.cast(pa.int64()), 1_000_000))
    local = shifted.cast(pa.timestamp("us"))
    # Arrow's cast to text is ISO 8601 with a space (and microseconds for a `us` time,
    # which isoformat() writes only when there are some); strftime is ten times slower.
    whole = pc.equal(local, pc.floor_temporal(local, unit="second"))
    stamps = local.cast(pa.timestamp("s"), safe=False).cast(pa.string())
    if not pc.all(whole).as_py():
        stamps = pc.if_else(whole, stamps, local.cast(pa.string()))
    stamps = pc.replace_substring(stamps, " ", "T", max_replacements=1)
    distinct = pc.unique(offsets).drop_null().to_pylist()
    zones = {
        off: datetime(2000, 1, 1, tzinfo=timezone(timedelta(seconds=off))).isoformat()[19:]
        for off in distinct
    }
    if len(zones) == 1:
        (suffix,) = zones.values()  # one offset, the common case: no lookup per row
        return pc.binary_join_element_wise('"', stamps, suffix + '"', "")
    suffixes = pa.array(list(zones.values()), pa.string()).take(
        pc.index_in(offsets, value_set=pa.array(list(zones), pa.int32()))
    )
    return pc.binary_join_element_wise('"', stamps, suffixes, '"', "")


def _decoded(items: pa.Table, key: str, enc: str) -> list[Any]:
    raw = items[key].to_pylist()
    if enc == "number":
        flags = items[INT_FLAG + key].to_pylist()
        return [
            _ABSENT if v is None else (int(v) if flag else v)
            for v, flag in zip(raw, flags, strict=True)
        ]
    if enc == "instant":
        offsets = items[OFFSET + key].to_pylist()
        zones: dict[int, timezone] = {}
        return [
            _ABSENT
            if v is None
            else v.astimezone(zones.setdefault(off, timezone(timedelta(seconds=off)))).isoformat()
            for v, off in zip(raw, offsets, strict=True)
        ]
    if enc == "json":
        return [_ABSENT if v is None else json.loads(v) for v in raw]
    return [_ABSENT if v is None else v for v in raw]


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _parquet(table: pa.Table) -> bytes:
    # Times and counts delta-encoded (a minute apart: a few bits each), texts by dictionary.
    delta = [
        f.name
        for f in table.schema
        if pa.types.is_timestamp(f.type) or pa.types.is_int64(f.type) or f.name == DAY
    ]
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=ROW_GROUP,
        # Min and max per group: nothing reads them (the days table places the rows).
        write_statistics=False,
        compression="zstd",
        store_schema=True,
        use_dictionary=[f.name for f in table.schema if f.name not in delta],
        column_encoding=dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
    )
    return sink.getvalue().to_pybytes()


def _bytes(block: Block) -> bytes:
    days = _ipc(block.days)
    return _MAGIC + struct.pack(">Q", len(days)) + days + _parquet(block.items)


def merged(block: Block, days: Mapping[date, StoredPayload], *, check: bool = False) -> bytes:
    """The bytes of `block` with `days` written over it (new days added, changed days
    replaced), merged as columns: the block's other days are not decoded. Falls back to
    writing every day again when a key's encoding differs between the two."""
    held = block.day_list()
    # Days only added (a pull of history): nothing of the block is dropped.
    kept = block.without(days) if not set(held).isdisjoint(days) else block
    added = tables(days, check=check)
    items = _concatenated(kept.items, added.items)
    if items is None:
        return encode({**block.stored(), **days}, check=check)
    all_days = pa.concat_tables([kept.days, added.days]).combine_chunks()
    if held and days and max(held) >= min(days):
        all_days = all_days.take(pc.sort_indices(all_days, [("day", "ascending")]))
        # A stable sort: a day's items keep their order.
        items = items.take(pc.sort_indices(items, [(DAY, "ascending")]))
    # Else the new days follow the block's: concatenated, both are in day order already.
    return _bytes(Block(all_days, items))


def _concatenated(first: pa.Table, second: pa.Table) -> pa.Table | None:
    fields = {f.name: f for f in first.schema}
    for f in second.schema:
        if f.name in fields and not fields[f.name].equals(f, check_metadata=True):
            return None
        fields.setdefault(f.name, f)
    names = [DAY, *sorted(n for n in fields if n != DAY)]
    schema = pa.schema([fields[n] for n in names])
    parts = [
        pa.Table.from_arrays(
            [
                table[n] if n in table.column_names else pa.nulls(table.num_rows, fields[n].type)
                for n in names
            ],
            schema=schema,
        )
        for table in (first, second)
    ]
    return pa.concat_tables(parts).combine_chunks()
