"""The aggregate query engine (endpoint 10; ADR 0018): DuckDB over the user's data opened
in memory, one vectorised plan per query.

1. **Open.** For each table the queries read, the user's blocks of its resource (every
   provider's) that hold a day of the timeframe are streamed (`persistence/health_data/
   batches.py`), decrypted, and their typed item columns handed to DuckDB as Arrow, one
   row per item (ADR 0033). DuckDB computes the table's columns that the queries need
   from them, keeps the rows inside the timeframe, and appends them to a table of its
   own. Python touches blocks, never samples, and nothing is JSON but what the maker
   sent nested (parsed by DuckDB's `from_json`).
2. **Aggregate.** Each query is one SQL statement over that table: the `where`, the
   provider priority per time bucket, the grouping and the functions.

No text of a caller is SQL: tables and columns come from the catalogs (`domain/
health_queries/tables.py`, and `_SOURCES` here, whose SQL is ours), numbers are checked
ints, and the where's literals are bound parameters. The DuckDB connection has no access
to files or extensions.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
import time as timer
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from types import MappingProxyType
from typing import Any, Literal
from uuid import UUID

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from healthledger.adapters.persistence.health_data.batches import HealthDataBatches
from healthledger.adapters.persistence.health_data.blocks import DAY, OFFSET, Block
from healthledger.domain.connections.summaries import SOURCE_TYPES, UNKNOWN_SOURCE_TYPE
from healthledger.domain.connections.summary_ids import SummaryIds
from healthledger.domain.health_queries import where as where_language
from healthledger.domain.health_queries.query import (
    MAX_ROWS,
    Aggregate,
    AggregateQueryRequest,
    ColumnKey,
    DatePartKey,
    DateTrunc,
    GroupKeyRef,
    InvalidQuery,
    Plan,
    Value,
    Window,
    plan_request,
    window,
)
from healthledger.domain.health_queries.tables import (
    INDEX,
    SERIES_FIELD_NAMES,
    SUMMARY_TABLES,
    Kind,
    Table,
)
from healthledger.domain.ledger import Clock
from healthledger.domain.teams.source_priorities import SourcePriorities, data_type_of

PARQUET_MEDIA_TYPE = "application/vnd.service.tar+gzip+parquet"

_TYPES = {
    Kind.NUMBER: "DOUBLE",
    Kind.INTEGER: "BIGINT",
    Kind.TEXT: "VARCHAR",
    # Times are UTC without a zone inside the engine: DuckDB's zoned arithmetic goes
    # through ICU's calendar, an order of magnitude slower to bucket. Answers carry UTC.
    Kind.TIMESTAMP: "TIMESTAMP",
    Kind.DATE: "DATE",
    Kind.BOOLEAN: "BOOLEAN",
}


# -- how each column is computed from what the pulls stored ---------------------------------


@dataclass(frozen=True)
class Computed:
    """A column's SQL over `j` (the stored item: a summary, a session, a sample, as a
    struct of the keys read) and `d` (its stored day: provider, source_type, day,
    stored_at, updated_at, summary_id, rank); `reads` is the part of the item it needs,
    with DuckDB types (nested for objects; `INSTANT` for a time with its offset, `OFFSET`
    for that offset in seconds), from which the struct is made (`_item_sql`)."""

    sql: str
    reads: Mapping[str, Any] = field(default_factory=dict)


def _item(*path: str, json_type: str = "DOUBLE") -> Computed:
    reads: Any = json_type
    for key in reversed(path):
        reads = {key: reads}
    return Computed("j." + ".".join(f'"{key}"' for key in path), reads)


# Read types beside DuckDB's: a time with its offset (TIMESTAMPTZ in `j`), and the
# offset of one, in seconds east of UTC (read as the key `@off:` + the time's key).
INSTANT, OFFSET_SECONDS = "INSTANT", "OFFSET"


def _instant(key: str) -> Computed:
    return Computed(f'make_timestamp(epoch_us(j."{key}"))', {key: INSTANT})


def _seconds_between(start: str, end: str) -> Computed:
    return Computed(f'epoch(j."{end}") - epoch(j."{start}")', {start: INSTANT, end: INSTANT})


def _minutes(key: str) -> Computed:
    return Computed(f'j."{key}" * 60', {key: "DOUBLE"})


NULL = Computed("NULL")
DAY_START = Computed("CAST(d.day AS TIMESTAMP)")
_SOURCE = {
    "source_provider": Computed("d.provider"),
    "source_type": Computed("d.source_type"),
    # Set by multi-source apps only; the demo devices and provider clouds record none.
    "source_app_id": NULL,
    "source_device_id": NULL,
    "source_workout_id": NULL,
    "source_sport": NULL,
    "time_zone": NULL,
}
_SPORT_SLUG = (
    """CASE json_type(j."sport") WHEN 'OBJECT' THEN json_extract_string(j."sport", '$.slug') """
    """ELSE json_extract_string(j."sport", '$') END"""
)
# A sport stored as its slug is named as the summaries name it (`domain/connections/summaries.py`).
_SPORT_NAME = (
    """CASE json_type(j."sport") WHEN 'OBJECT' THEN json_extract_string(j."sport", '$.name') """
    """ELSE upper(substr(json_extract_string(j."sport", '$'), 1, 1)) || """
    """lower(replace(substr(json_extract_string(j."sport", '$'), 2), '_', ' ')) END"""
)


@dataclass(frozen=True)
class Source:
    """How a table's rows come out of its stored days: one per day (`object`) or one per
    item of the day's list (`list`); its index; its columns."""

    items: Literal["object", "list"]
    index: Computed
    columns: Mapping[str, Computed]


_SLEEP = Source(
    "object",
    _instant("bedtime_start"),
    {
        "id": Computed("d.summary_id"),
        "session_start": _instant("bedtime_start"),
        "session_end": _instant("bedtime_stop"),
        "state": _item("state", json_type="VARCHAR"),
        # The summaries' default: a night's summary is its main sleep.
        "type": Computed("""coalesce(j."type", 'long_sleep')""", {"type": "VARCHAR"}),
        "duration_second": _item("duration"),
        "stage_asleep_second": _item("total"),
        "stage_awake_second": _item("awake"),
        "stage_light_second": _item("light"),
        "stage_rem_second": _item("rem"),
        "stage_deep_second": _item("deep"),
        "stage_unknown_second": NULL,
        "latency_second": _item("latency"),
        "heart_rate_minimum": _item("hr_lowest"),
        "heart_rate_mean": _item("hr_average"),
        "heart_rate_maximum": NULL,
        "heart_rate_dip": _item("hr_dip"),
        "heart_rate_resting": _item("hr_resting"),
        "efficiency": _item("efficiency"),
        "hrv_mean_rmssd": _item("average_hrv"),
        "hrv_mean_sdnn": NULL,
        "skin_temperature": _item("skin_temperature"),
        "skin_temperature_delta": _item("temperature_delta"),
        "respiratory_rate": _item("respiratory_rate"),
        "score": _item("score"),
        **_SOURCE,
    },
)
_ACTIVITY = Source(
    "object",
    DAY_START,
    {
        "date": Computed("d.day"),
        "calories_total": _item("calories_total"),
        "calories_active": _item("calories_active"),
        "steps": _item("steps"),
        "distance_meter": _item("distance"),
        "floors_climbed": _item("floors_climbed"),
        # The summary's low, medium and high are minutes.
        "duration_active_second": Computed(
            '(coalesce(j."low", 0) + coalesce(j."medium", 0) + coalesce(j."high", 0)) * 60',
            {"low": "DOUBLE", "medium": "DOUBLE", "high": "DOUBLE"},
        ),
        "intensity_sedentary_second": NULL,
        "intensity_low_second": _minutes("low"),
        "intensity_medium_second": _minutes("medium"),
        "intensity_high_second": _minutes("high"),
        "heart_rate_mean": _item("heart_rate", "avg_bpm"),
        "heart_rate_minimum": _item("heart_rate", "min_bpm"),
        "heart_rate_maximum": _item("heart_rate", "max_bpm"),
        "heart_rate_resting": _item("heart_rate", "resting_bpm"),
        "heart_rate_mean_walking": _item("heart_rate", "avg_walking_bpm"),
        "wheelchair_use": _item("wheelchair_use", json_type="BOOLEAN"),
        "wheelchair_push": _item("wheelchair_push"),
        **_SOURCE,
        "time_zone": _item("time_zone", json_type="VARCHAR"),
        "time_zone_offset": _item("timezone_offset"),
    },
)
_WORKOUT = Source(
    "list",
    _instant("time_start"),
    {
        "session_start": _instant("time_start"),
        "session_end": _instant("time_end"),
        "title": _item("title", json_type="VARCHAR"),
        "sport_name": Computed(_SPORT_NAME, {"sport": "JSON"}),
        "sport_slug": Computed(_SPORT_SLUG, {"sport": "JSON"}),
        "duration_active_second": Computed(
            'coalesce(j."moving_time", epoch(j."time_end") - epoch(j."time_start"))',
            {"moving_time": "DOUBLE", "time_start": INSTANT, "time_end": INSTANT},
        ),
        "heart_rate_mean": _item("average_hr"),
        "heart_rate_minimum": NULL,
        "heart_rate_maximum": _item("max_hr"),
        **{
            f"heart_rate_zone_{zone}": Computed(f'j."hr_zones"[{zone}]', {"hr_zones": ["DOUBLE"]})
            for zone in range(1, 7)
        },
        "distance_meter": _item("distance"),
        "calories": _item("calories"),
        "elevation_gain_meter": _item("total_elevation_gain"),
        "elevation_maximum_meter": _item("elev_high"),
        "elevation_minimum_meter": _item("elev_low"),
        "speed_mean": _item("average_speed"),
        "speed_maximum": _item("max_speed"),
        "power_source": NULL,
        "power_mean": _item("average_watts"),
        "power_maximum": _item("max_watts"),
        "power_weighted_mean": _item("weighted_average_watts"),
        "steps": _item("steps"),
        "map_polyline": _item("map", "polyline", json_type="VARCHAR"),
        "map_summary_polyline": _item("map", "summary_polyline", json_type="VARCHAR"),
        **_SOURCE,
        "external_id": _item("id", json_type="VARCHAR"),
    },
)
_BODY = Source(
    "object",
    DAY_START,
    {
        "measured_at": DAY_START,
        "weight_kilogram": _item("weight"),
        "fat_mass_percentage": _item("fat"),
        "water_percentage": _item("water_percentage"),
        "muscle_mass_percentage": _item("muscle_mass_percentage"),
        "visceral_fat_index": _item("visceral_fat_index"),
        "bone_mass_percentage": _item("bone_mass_percentage"),
        "body_mass_index": _item("body_mass_index"),
        "lean_body_mass_kilogram": _item("lean_body_mass_kilogram"),
        "waist_circumference_centimeter": _item("waist_circumference_centimeter"),
        **_SOURCE,
    },
)
# The meal's micronutrients, by the group of the client's Micros that holds each.
_MICROS = {
    "minerals": "sodium potassium calcium phosphorus magnesium iron zinc fluoride chloride",
    "vitamins": "vitamin_a vitamin_b1 riboflavin niacin pantothenic_acid vitamin_b6 biotin "
    "vitamin_b12 vitamin_c vitamin_d vitamin_e vitamin_k folic_acid",
    "trace_elements": "chromium copper iodine manganese molybdenum selenium",
}
_MACROS = {
    "carbohydrate_gram": ("carbs",),
    "protein_gram": ("protein",),
    "alcohol_gram": ("alcohol",),
    "water_gram": ("water",),
    "fibre_gram": ("fibre",),
    "sugar_gram": ("sugar",),
    "cholesterol_gram": ("cholesterol",),
    "saturated_fat_gram": ("fats", "saturated"),
    "monounsaturated_fat_gram": ("fats", "monounsaturated"),
    "polyunsaturated_fat_gram": ("fats", "polyunsaturated"),
    "omega3_fat_gram": ("fats", "omega_3"),
    "omega6_fat_gram": ("fats", "omega_6"),
    "total_fat_gram": ("fats", "total"),
}


def _micro(column: str) -> Computed:
    nutrient = column.rsplit("_", 1)[0]
    group = next(g for g, names in _MICROS.items() if nutrient in names.split())
    return _item("micros", group, nutrient)


_MEAL = Source(
    "list",
    _instant("timestamp"),
    {
        "calories": _item("energy", "value"),
        **{column: _item("macros", *path) for column, path in _MACROS.items()},
        **{
            column: _micro(column)
            for column in SUMMARY_TABLES["meal"].columns
            if column.endswith(("_milligram", "_microgram"))
        },
        "date": Computed(
            "CAST(make_timestamp(epoch_us(j.timestamp)) AS DATE)", {"timestamp": INSTANT}
        ),
        "name": _item("name", json_type="VARCHAR"),
        **_SOURCE,
    },
)
_PROFILE = Source(
    "object",
    DAY_START,
    {
        "height_centimeter": _item("height"),
        "birth_date": Computed('TRY_CAST(j."birth_date" AS DATE)', {"birth_date": "VARCHAR"}),
        "wheelchair_use": _item("wheelchair_use", json_type="BOOLEAN"),
        "gender": _item("gender", json_type="VARCHAR"),
        "sex": _item("sex", json_type="VARCHAR"),
        **_SOURCE,
        "created_at": Computed("d.stored_at"),
        "updated_at": Computed("d.updated_at"),
    },
)
# A timeseries sample: `timestamp`, `value` (blood pressure: systolic and diastolic),
# `unit`; an interval's `start` and `end`; a classified sample's `type`.
_SERIES = Source(
    "list",
    _instant("timestamp"),
    {
        **_SOURCE,
        # Seconds east of UTC, as the sample's timestamp was written.
        "timezone_offset": Computed(
            f'j."{OFFSET}timestamp"', {f"{OFFSET}timestamp": OFFSET_SECONDS}
        ),
        "type": _item("type", json_type="VARCHAR"),
        "value": _item("value"),
        "duration": _seconds_between("start", "end"),
        "systolic": _item("systolic"),
        "diastolic": _item("diastolic"),
        "sensor_location": _item("sensor_location", json_type="VARCHAR"),
        "intensity": _item("intensity", json_type="VARCHAR"),
        "tags": Computed("""array_to_string(j."tags", ',')""", {"tags": ["VARCHAR"]}),
        "content": _item("content", json_type="VARCHAR"),
    },
)
SOURCES: dict[str, Source] = {
    "sleep": _SLEEP,
    "activity": _ACTIVITY,
    "workout": _WORKOUT,
    "body": _BODY,
    "meal": _MEAL,
    "profile": _PROFILE,
    "timeseries": _SERIES,
}
assert set(_SERIES.columns) >= set(SERIES_FIELD_NAMES)


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def _in_utc(table: pa.Table) -> pa.Table:
    """The engine's zoneless UTC times, labelled UTC (the same instants: no conversion)."""
    schema = pa.schema(
        [
            f.with_type(pa.timestamp(f.type.unit, tz="UTC"))
            if pa.types.is_timestamp(f.type) and f.type.tz is None
            else f
            for f in table.schema
        ]
    )
    return table.cast(schema)


def _merge(into: dict[str, Any], reads: Mapping[str, Any]) -> None:
    for key, wanted in reads.items():
        if isinstance(wanted, Mapping):
            _merge(into.setdefault(key, {}), wanted)
        else:
            into[key] = wanted


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- the open ---------------------------------------------------------------------------------


class ProviderRanks:
    """Which provider wins when several report the same resource in a time bucket: those
    of `provider_priority_overrides` in their order, then the team's source priorities for
    the table's kind of data, then the catalog's order, then any other in the order met."""

    def __init__(self, overrides: Sequence[str], catalog: Sequence[str]) -> None:
        self.ranks: dict[str, int] = {}
        for slug in [*overrides, *catalog]:
            self.ranks.setdefault(slug, len(self.ranks))

    def __call__(self, provider: str) -> int:
        return self.ranks.setdefault(provider, len(self.ranks))


@dataclass
class OpenedTable:
    """A table of the queries over the request's opened blocks: `source`, a query whose
    rows are the table's (computed as the plans read them, from the blocks' Arrow items
    registered with DuckDB), with its bound `params`."""

    source: str
    params: list[Any]
    providers: set[str]


class OpenedQuery:
    """The request's data opened in an in-memory DuckDB: run `results()` for the tables."""

    def __init__(self, con: duckdb.DuckDBPyConnection, plans: list[Plan]) -> None:
        self.con = con
        self.plans = plans
        self.tables: dict[tuple[str, str], OpenedTable] = {}
        self.open_seconds = 0.0

    def results(self) -> list[pa.Table]:
        found = []
        for n, plan in enumerate(self.plans):
            opened = self.tables[plan.table.name, plan.table.resource]
            sql, params = plan_sql(plan, opened, len(opened.providers) > 1)
            table = _in_utc(self.con.sql(sql, params=params).to_arrow_table())
            if not plan.grouped and table.num_rows > MAX_ROWS:
                raise InvalidQuery(
                    f"The query answers more than {MAX_ROWS} rows: group it, or narrow "
                    "its timeframe or its where.",
                    ("body", "queries", n),
                )
            found.append(table)
        return found


class HealthQueries:
    def __init__(
        self,
        batches: HealthDataBatches,
        catalog: Sequence[str],
        clock: Clock,
        *,
        threads: int = 2,
        memory_limit: str = "256MB",
    ) -> None:
        self.batches = batches
        self.catalog = list(catalog)
        self.clock = clock
        self.threads = threads
        self.memory_limit = memory_limit

    def run(
        self,
        team_id: UUID,
        user_id: UUID,
        request: AggregateQueryRequest,
        priorities: SourcePriorities = MappingProxyType({}),
        as_of: datetime | None = None,
    ) -> list[pa.Table]:
        """One result table per query, in declared order (over the data as it was at
        `as_of`, when given)."""
        with self.opened(team_id, user_id, request, priorities, as_of) as opened:
            return opened.results()

    @contextmanager
    def opened(
        self,
        team_id: UUID,
        user_id: UUID,
        request: AggregateQueryRequest,
        priorities: SourcePriorities = MappingProxyType({}),
        as_of: datetime | None = None,
    ) -> Iterator[OpenedQuery]:
        """Check the request, then open the data it reads (the user is checked first: an
        unknown, erased or another team's user is a 404 before anything is read).
        `priorities`: the team's source priorities, ranked after the request's own
        overrides and before the catalog's order."""
        plans = plan_request(request)
        # As of an instant, "today" is that instant's: the query as it was answered then.
        span = window(request.timeframe, (as_of or self.clock()).date())
        overrides = request.config.provider_priority_overrides if request.config else None

        def ranks(table: Table) -> ProviderRanks:
            kind = data_type_of(table.resource, timeseries=table.name == "timeseries")
            team_order = priorities.get(kind, ()) if kind is not None else ()
            return ProviderRanks([*(overrides or ()), *team_order], self.catalog)

        con = duckdb.connect(
            ":memory:",
            config={
                "threads": self.threads,
                "memory_limit": self.memory_limit,
                "enable_external_access": False,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            },
        )
        try:
            con.execute("SET TimeZone = 'UTC'")
            opened = OpenedQuery(con, plans)
            started = timer.perf_counter()
            with self.batches.live_user(team_id, user_id, as_of) as data:
                wanted: dict[tuple[str, str], tuple[Table, set[str]]] = {}
                for plan in plans:
                    key = (plan.table.name, plan.table.resource)
                    wanted.setdefault(key, (plan.table, set()))[1].update(plan.columns())
                for number, (key, (table, columns)) in enumerate(wanted.items()):
                    opened.tables[key] = self._open_table(
                        con,
                        f"t{number}",
                        table,
                        sorted(columns),
                        span,
                        ranks(table),
                        data.blocks,
                        # A user with no key has no blocks, and so no ids to derive.
                        None if data.cipher is None else data.cipher.summary_ids,
                    )
            opened.open_seconds = timer.perf_counter() - started
            yield opened
        finally:
            con.close()

    def _open_table(
        self,
        con: duckdb.DuckDBPyConnection,
        name: str,
        table: Table,
        columns: list[str],
        span: Window,
        ranks: ProviderRanks,
        blocks: Callable[[str, date, date, Collection[str]], Iterator[tuple[str, Block]]],
        ids: SummaryIds | None,
    ) -> OpenedTable:
        source = SOURCES[table.name]
        reads: dict[str, Any] = {}
        computed = [source.index, *(source.columns[c] for c in columns)]
        for one in computed:
            _merge(reads, one.reads)
        # The day's columns the computed ones read besides the provider, rank and day.
        per_day = [
            c
            for c in ("stored_at", "updated_at", "summary_id")
            if any(f"d.{c}" in one.sql for one in computed)
        ]
        providers: set[str] = set()
        # Blocks of one layout (the same typed columns) are read as one Arrow table.
        layouts: dict[str, list[pa.Table]] = {}
        # A session starts on the day before the day it is stored under (a night's sleep
        # is stored on the morning it ends): read a day more on each side.
        first, last = span.start.date() - timedelta(days=1), span.end.date()
        keys = {key.removeprefix(OFFSET) for key in reads}
        for provider, block in blocks(table.resource, first, last, keys):
            if block.items.num_rows == 0:
                continue
            providers.add(provider)
            assert ids is not None  # a block is opened with the key the ids come with
            items = _arrow_items(block, table.resource, ids, provider, ranks(provider), per_day)
            layouts.setdefault(items.schema.to_string(show_field_metadata=True), []).append(items)
        window = [_naive(span.start), _naive(span.end)]
        parts, params = [], []
        for number, tables in enumerate(layouts.values()):
            arrow = pa.concat_tables(tables)
            con.register(f"{name}_{number}", arrow)
            parts.append(
                _select_sql(f"{name}_{number}", source, table, columns, reads, arrow.schema)
            )
            params.extend(window)
        if not parts:  # nothing stored: the table's columns, no row
            typed = [
                f"CAST(NULL AS TIMESTAMP) AS {INDEX}",
                "CAST(NULL AS INTEGER) AS __rank",
                "CAST(NULL AS DATE) AS __day",
            ]
            typed += [f"CAST(NULL AS {_TYPES[table.columns[c]]}) AS {_quoted(c)}" for c in columns]
            parts.append(f"SELECT {', '.join(typed)} WHERE false")
        return OpenedTable(" UNION ALL ".join(parts), params, providers)


def _arrow_items(
    block: Block, resource: str, ids: SummaryIds, provider: str, rank: int, per_day: list[str]
) -> pa.Table:
    """The block's items, with their provider, source type and rank (constant columns:
    one dictionary entry each), and the day's columns `per_day` names."""
    items = block.items
    rows = items.num_rows
    constants = {
        "@provider": provider,
        "@source_type": SOURCE_TYPES.get(provider, UNKNOWN_SOURCE_TYPE),
    }
    for column, value in constants.items():
        indices = pa.nulls(rows, pa.int8()).fill_null(0)
        items = items.append_column(
            column, pa.DictionaryArray.from_arrays(indices, pa.array([value], pa.string()))
        )
    items = items.append_column("@rank", pa.nulls(rows, pa.int32()).fill_null(rank))
    if not per_day:
        return items
    at_day = pc.index_in(items[DAY], value_set=block.days["day"])
    day_columns = {
        "stored_at": block.days["stored_at"].cast(pa.timestamp("us")),
        "updated_at": block.days["updated_at"].cast(pa.timestamp("us")),
    }
    if "summary_id" in per_day:
        day_columns["summary_id"] = pa.chunked_array(
            [
                pa.array(
                    [
                        str(ids.summary(provider, resource, d, d.isoformat()))
                        for d in block.days["day"].to_pylist()
                    ],
                    pa.string(),
                )
            ]
        )
    for column in per_day:
        items = items.append_column(f"@{column}", day_columns[column].take(at_day))
    return items


def _item_sql(reads: Mapping[str, Any], schema: pa.Schema) -> str:
    """`j`: the struct of the keys `reads` names, from the block's typed columns."""
    encodings = {f.name: (f.metadata or {}).get(b"enc", b"").decode() for f in schema}
    fields = []
    for key, wanted in reads.items():
        column = f"b.{_quoted(key)}"
        enc = encodings.get(key)
        if wanted == OFFSET_SECONDS:
            of = key.removeprefix(OFFSET)
            text = f"b.{_quoted(of)}"
            sql = (
                f"b.{_quoted(key)}"
                if encodings.get(of) == "instant"
                else f"round(epoch(CAST(substr({text}, 1, 19) AS TIMESTAMP)) - "
                f"epoch(CAST({text} AS TIMESTAMPTZ)))"
                if encodings.get(of) == "str"
                else "CAST(NULL AS INTEGER)"
            )
        elif enc is None:
            sql = _typed_null(wanted)
        elif wanted == INSTANT:
            sql = (
                column
                if enc == "instant"
                else f"CAST(CAST({column} AS VARCHAR) AS TIMESTAMPTZ)"
                if enc == "str"
                else f"CAST(from_json({column}, '\"VARCHAR\"') AS TIMESTAMPTZ)"
                if enc == "json"
                else "CAST(NULL AS TIMESTAMPTZ)"
            )
        elif wanted == "JSON":
            sql = f"CAST({column} AS JSON)" if enc == "json" else f"to_json({column})"
        elif isinstance(wanted, str):
            sql = (
                f"from_json({column}, '{json.dumps(wanted)}')"
                if enc == "json"
                else f"TRY_CAST({column} AS {wanted})"
            )
        else:
            sql = (
                f"from_json({column}, '{json.dumps(wanted)}')"
                if enc == "json"
                else _typed_null(wanted)
            )
        fields.append(f"{_quoted(key)} := {sql}")
    return f"struct_pack({', '.join(fields)})" if fields else "NULL"


def _typed_null(wanted: Any) -> str:
    if wanted == INSTANT:
        return "CAST(NULL AS TIMESTAMPTZ)"
    if wanted == OFFSET_SECONDS:
        return "CAST(NULL AS INTEGER)"
    if isinstance(wanted, str):
        return f"CAST(NULL AS {wanted})"
    return f"from_json(CAST(NULL AS VARCHAR), '{json.dumps(wanted)}')"


def _select_sql(
    registered: str,
    source: Source,
    table: Table,
    columns: list[str],
    reads: Mapping[str, Any],
    schema: pa.Schema,
) -> str:
    """The table's rows from one registered Arrow table of items, inside the window (its
    two bound parameters)."""
    selected = [f"{source.index.sql} AS {INDEX}", "d.rank AS __rank", "d.day AS __day"] + [
        f"CAST({source.columns[c].sql} AS {_TYPES[table.columns[c]]}) AS {_quoted(c)}"
        for c in columns
    ]
    day = ", ".join(
        f'b."@{c}" AS {c}' if f"@{c}" in schema.names else f"NULL AS {c}"
        for c in ("stored_at", "updated_at", "summary_id")
    )
    items = (
        'SELECT b."@provider" AS provider, b."@source_type" AS source_type, '
        f'b."@rank" AS rank, b."{DAY}" AS day, {day}, '
        f"{_item_sql(reads, schema)} AS j FROM {registered} b"
    )
    return (
        f"SELECT * FROM (SELECT {', '.join(selected)} FROM ({items}) d) "
        f"WHERE {INDEX} >= ? AND {INDEX} < ?"
    )


# -- one query ------------------------------------------------------------------------------

_TRUNC_FUNCTIONS = {
    "minute": "to_minutes",
    "hour": "to_hours",
    "day": "to_days",
    "week": "to_weeks",
    "month": "to_months",
    "year": "to_years",
}
_DATE_PARTS = {"weekday": "isodow", "week_of_year": "week", "day_of_year": "doy"}
_OPERATORS = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _key_sql(key: DateTrunc | DatePartKey | ColumnKey) -> str:
    if isinstance(key, DateTrunc):
        # Buckets counted from 2000-01-03 (a Monday) for minutes to weeks, from
        # 2000-01-01 for months and years: DuckDB's time_bucket origins.
        return f"time_bucket({_TRUNC_FUNCTIONS[key.unit]}({int(key.value)}), {INDEX})"
    if isinstance(key, DatePartKey):
        return f"date_part('{_DATE_PARTS.get(key.part, key.part)}', {INDEX})"
    return _quoted(key.column)


def _aggregate_sql(aggregate: Aggregate) -> str:
    column = _quoted(aggregate.column)
    match aggregate.func:
        case "mean":
            return f"avg({column})"
        case "median":
            return f"CAST(median({column}) AS DOUBLE)"
        case "stddev":
            return f"stddev_samp({column})"
        case "sum":
            return f"CAST(sum({column}) AS {_TYPES[aggregate.kind]})"
        case "oldest":
            return f"arg_min({column}, {INDEX})"
        case "newest":
            return f"arg_max({column}, {INDEX})"
        case _:  # min, max, count
            return f"{aggregate.func}({column})"


def where_sql(expression: where_language.Expression, params: list[Any]) -> str:
    """The where as SQL: our identifiers, quoted; every literal a bound parameter."""
    if isinstance(expression, where_language.Comparison):
        sides = []
        for operand in (expression.left, expression.right):
            if isinstance(operand, where_language.Column):
                sides.append(_quoted(operand.name))
            else:
                value = operand.value
                params.append(_naive(value) if isinstance(value, datetime) else value)
                sides.append("?")
        return f"({sides[0]} {_OPERATORS[expression.op]} {sides[1]})"
    if isinstance(expression, where_language.Not):
        return f"(NOT {where_sql(expression.operand, params)})"
    joiner = " AND " if isinstance(expression, where_language.And) else " OR "
    return "(" + joiner.join(where_sql(e, params) for e in expression.operands) + ")"


def plan_sql(plan: Plan, opened: OpenedTable, several_providers: bool) -> tuple[str, list[Any]]:
    params: list[Any] = list(opened.params)
    keys = [f"{_key_sql(key)} AS __k{n}" for n, key in enumerate(plan.group_keys)]
    inner = f"SELECT *{''.join(', ' + k for k in keys)} FROM ({opened.source}) AS opened"
    if plan.where is not None:
        inner += f" WHERE {where_sql(plan.where, params)}"
    by_provider = any(
        isinstance(k, ColumnKey) and k.column == "source_provider" for k in plan.group_keys
    )
    if several_providers and not by_provider:
        # The first provider by rank wins each bucket: the date_trunc's, else the day the
        # data is stored under (a night's sleep, which starts the evening before, is the
        # morning's: each provider's night is the same bucket).
        bucket = plan.bucket
        partition = _key_sql(bucket) if bucket is not None else "__day"
        inner += f" QUALIFY __rank = min(__rank) OVER (PARTITION BY {partition})"
    outputs = []
    for name, selected in plan.outputs:
        if isinstance(selected, Aggregate):
            sql = _aggregate_sql(selected)
        elif isinstance(selected, GroupKeyRef):
            sql = f"__k{selected.position}"
        else:
            assert isinstance(selected, Value)
            sql = _quoted(selected.column)
        outputs.append(f"{sql} AS {_quoted(name)}")
    query = f"SELECT {', '.join(outputs)} FROM ({inner})"
    if plan.group_keys:
        names = ", ".join(f"__k{n}" for n in range(len(plan.group_keys)))
        query += f" GROUP BY {names} ORDER BY {names} NULLS LAST"
    elif not plan.grouped:
        query += f" ORDER BY {INDEX} LIMIT {MAX_ROWS + 1}"
    return query, params


# -- the answers ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def json_body(tables: Sequence[pa.Table]) -> bytes:
    """`{results: [{table: {column: [values]}}]}`, one result per query in order."""
    results = [
        {
            "table": {
                name: [_plain(v) for v in table.column(name).to_pylist()]
                for name in table.column_names
            }
        }
        for table in tables
    ]
    return json.dumps({"results": results}, allow_nan=False, separators=(",", ":")).encode()


def parquet_tarball(tables: Sequence[pa.Table]) -> bytes:
    """A gzipped tar of `0.parquet`, `1.parquet`, ... (one per query, in order)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for number, table in enumerate(tables):
            data = io.BytesIO()
            pq.write_table(table, data)
            member = tarfile.TarInfo(f"{number}.parquet")
            member.size = data.tell()
            member.mode = 0o644
            data.seek(0)
            tar.addfile(member, data)
    return out.getvalue()
