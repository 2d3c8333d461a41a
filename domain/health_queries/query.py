"""The aggregate query request (spec 2.11, gaps.md "Aggregate query") and what it means: a
`Plan` per query, checked against the tables, the functions and the `where` language
before anything is read.

The request models accept exactly the shapes the official client's request types
(`vital.types`: RelativeTimeframe, Query, AggregateExpr, the *ColumnExpr, DateTruncExpr,
DatePartExpr, GroupKeyColumnExpr, IndexColumnExpr, SourceColumnExpr, QueryConfig)
serialise to. A rule broken after the shape is valid raises `InvalidQuery`, naming where
in the body (a 422).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from healthledger.domain.errors import LedgerError
from healthledger.domain.health_queries import where as where_language
from healthledger.domain.health_queries.tables import (
    FUNCTIONS,
    INDEX,
    INDEX_OUTPUT,
    INDEX_TABLES,
    NUMERIC,
    SERIES_FAMILY,
    SERIES_FIELD_NAMES,
    SOURCE_FIELDS,
    SUMMARY_TABLES,
    Kind,
    Table,
    series_table,
)
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    WithJsonSchema,
)

MAX_QUERIES = 10
# How far back a timeframe reaches, and how wide a date_trunc bucket is, at most: beyond
# these no data exists and the engine's calendar would overflow.
MAX_WINDOW_YEARS = 20
EARLIEST_ANCHOR = date(1900, 1, 1)
MAX_BUCKET_YEARS = 100
# Rows a query without grouping answers at most: a larger answer is a query to group.
MAX_ROWS = 100_000

PeriodUnit = Literal["minute", "hour", "day", "week", "month", "year"]
Function = Literal["min", "max", "mean", "median", "stddev", "count", "sum", "oldest", "newest"]
DatePart = Literal[
    "minute", "hour", "day", "week", "month", "year", "weekday", "week_of_year", "day_of_year"
]
_UNIT_MINUTES = {"minute": 1, "hour": 60, "day": 1440, "week": 10080}


class InvalidQuery(LedgerError):
    """A query that is well-formed JSON of the right shape but means nothing we can run;
    `loc` is where in the body (as a validation error's `loc`)."""

    def __init__(self, message: str, loc: Sequence[str | int]) -> None:
        super().__init__(message)
        self.loc = tuple(loc)


# -- the request --------------------------------------------------------------------------


def _one_of(names: Sequence[str], what: str) -> Any:
    """A string that must be one of `names`: one clear message, and an enum in OpenAPI."""
    allowed = frozenset(names)

    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"Unknown {what} '{value[:64]}'.")
        return value

    return Annotated[
        str,
        AfterValidator(check),
        WithJsonSchema({"type": "string", "enum": sorted(allowed)}),
    ]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Period(_Strict):
    # The client's Period has `value` optional: left out, it is 1.
    value: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = Field(default=None, examples=[1])
    unit: PeriodUnit = Field(examples=["day"])

    @property
    def count(self) -> int:
        return 1 if self.value is None else self.value


class RelativeTimeframe(_Strict):
    """The window that ends at the end of `anchor` (UTC) and reaches back `past`."""

    type: Literal["relative"] = "relative"
    anchor: date = Field(examples=["2024-06-30"])
    past: Period


# Column names: a string for the type checker, one of the table's names for pydantic.
if TYPE_CHECKING:
    SleepName: TypeAlias = str
    ActivityName: TypeAlias = str
    WorkoutName: TypeAlias = str
    BodyName: TypeAlias = str
    MealName: TypeAlias = str
    ProfileName: TypeAlias = str
    SeriesName: TypeAlias = str
    SeriesField: TypeAlias = str
    IndexName: TypeAlias = str
    SourceName: TypeAlias = str
else:
    SleepName = _one_of(list(SUMMARY_TABLES["sleep"].columns), "sleep column")
    ActivityName = _one_of(list(SUMMARY_TABLES["activity"].columns), "activity column")
    WorkoutName = _one_of(list(SUMMARY_TABLES["workout"].columns), "workout column")
    BodyName = _one_of(list(SUMMARY_TABLES["body"].columns), "body column")
    MealName = _one_of(list(SUMMARY_TABLES["meal"].columns), "meal column")
    ProfileName = _one_of(list(SUMMARY_TABLES["profile"].columns), "profile column")
    SeriesName = _one_of(list(SERIES_FAMILY), "timeseries resource")
    SeriesField = _one_of(SERIES_FIELD_NAMES, "timeseries field")
    IndexName = _one_of(INDEX_TABLES, "index table")
    SourceName = _one_of(SOURCE_FIELDS, "source field")


class SleepColumn(_Strict):
    sleep: SleepName = Field(examples=["duration_second"])


class ActivityColumn(_Strict):
    activity: ActivityName = Field(examples=["steps"])


class WorkoutColumn(_Strict):
    workout: WorkoutName = Field(examples=["calories"])


class BodyColumn(_Strict):
    body: BodyName = Field(examples=["weight_kilogram"])


class MealColumn(_Strict):
    meal: MealName = Field(examples=["calories"])


class ProfileColumn(_Strict):
    profile: ProfileName = Field(examples=["height_centimeter"])


class TimeseriesColumn(_Strict):
    timeseries: SeriesName = Field(examples=["heartrate"])
    field: SeriesField = Field(examples=["value"])


class IndexColumn(_Strict):
    index: IndexName = Field(examples=["timeseries"])


class SourceColumn(_Strict):
    source: SourceName = Field(examples=["source_provider"])


TableColumn = (
    SleepColumn
    | ActivityColumn
    | WorkoutColumn
    | BodyColumn
    | MealColumn
    | ProfileColumn
    | TimeseriesColumn
)


class AggregateExpr(_Strict):
    arg: ColumnArg
    func: Function = Field(examples=["mean"])


class GroupKeyColumn(_Strict):
    group_key: Annotated[int, Field(ge=0, le=63)] | Literal["*"] = Field(examples=["*"])


class DateTruncExpr(_Strict):
    date_trunc: Period
    arg: IndexColumn


class DatePartExpr(_Strict):
    date_part: DatePart = Field(examples=["weekday"])
    arg: IndexColumn


def _tag_by_key(value: Any) -> str | None:
    """Which form an item is, by the key that names it (the client's union members differ
    by their keys): one form is validated, so an error names what is wrong with it."""
    if isinstance(value, dict):
        keys = set(value)
    elif isinstance(value, BaseModel):
        keys = set(type(value).model_fields)
    else:
        return None
    for key in ("func", "group_key", "date_trunc", "date_part", "index", "source", "timeseries"):
        if key in keys:
            return key
    return next((table for table in SUMMARY_TABLES if table in keys), None)


def _forms(*forms: str) -> Discriminator:
    return Discriminator(
        _tag_by_key,
        custom_error_type="unknown_form",
        custom_error_message=f"Not one of the forms allowed here: {', '.join(forms)}.",
    )


_COLUMN_TAGS: tuple[Any, ...] = (
    Annotated[SleepColumn, Tag("sleep")],
    Annotated[ActivityColumn, Tag("activity")],
    Annotated[WorkoutColumn, Tag("workout")],
    Annotated[BodyColumn, Tag("body")],
    Annotated[MealColumn, Tag("meal")],
    Annotated[ProfileColumn, Tag("profile")],
    Annotated[TimeseriesColumn, Tag("timeseries")],
)

if TYPE_CHECKING:
    ColumnArg = TableColumn | IndexColumn
    SelectItem = AggregateExpr | GroupKeyColumn | TableColumn | IndexColumn | SourceColumn
    GroupByItem = DateTruncExpr | DatePartExpr | TableColumn | SourceColumn
else:
    ColumnArg = Annotated[
        Union[(*_COLUMN_TAGS, Annotated[IndexColumn, Tag("index")])],
        _forms(
            '{"<table>": <column>}',
            '{"timeseries": <resource>, "field": <field>}',
            '{"index": <table>}',
        ),
    ]
    SelectItem = Annotated[
        Union[
            (
                Annotated[AggregateExpr, Tag("func")],
                Annotated[GroupKeyColumn, Tag("group_key")],
                *_COLUMN_TAGS,
                Annotated[IndexColumn, Tag("index")],
                Annotated[SourceColumn, Tag("source")],
            )
        ],
        _forms(
            '{"func": <function>, "arg": <column>}',
            '{"group_key": <n> or "*"}',
            '{"<table>": <column>}',
            '{"timeseries": <resource>, "field": <field>}',
            '{"index": <table>}',
            '{"source": <source field>}',
        ),
    ]
    GroupByItem = Annotated[
        Union[
            (
                Annotated[DateTruncExpr, Tag("date_trunc")],
                Annotated[DatePartExpr, Tag("date_part")],
                *_COLUMN_TAGS,
                Annotated[SourceColumn, Tag("source")],
            )
        ],
        _forms(
            '{"date_trunc": <period>, "arg": {"index": <table>}}',
            '{"date_part": <part>, "arg": {"index": <table>}}',
            '{"<table>": <column>}',
            '{"timeseries": <resource>, "field": <field>}',
            '{"source": <source field>}',
        ),
    ]
AggregateExpr.model_rebuild()


class Query(_Strict):
    select: list[SelectItem] = Field(min_length=1, max_length=64)
    group_by: list[GroupByItem] | None = Field(default=None, max_length=8)
    where: str | None = Field(
        default=None,
        max_length=where_language.MAX_WHERE_LENGTH,
        description="Filters the rows before grouping: comparisons (= != > >= < <=) of "
        "columns, numbers and 'strings', with AND, OR, NOT and parentheses.",
        examples=["value > 60 AND source_provider = 'oura'"],
    )


Slug = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}$")]


class QueryConfig(_Strict):
    provider_priority_overrides: list[Slug] | None = Field(
        default=None, max_length=100, examples=[["oura", "fitbit"]]
    )


class AggregateQueryRequest(_Strict):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "timeframe": {
                        "type": "relative",
                        "anchor": "2024-06-30",
                        "past": {"value": 7, "unit": "day"},
                    },
                    "queries": [
                        {
                            "select": [
                                {"group_key": "*"},
                                {
                                    "func": "mean",
                                    "arg": {"timeseries": "heartrate", "field": "value"},
                                },
                                {
                                    "func": "max",
                                    "arg": {"timeseries": "heartrate", "field": "value"},
                                },
                            ],
                            "group_by": [
                                {
                                    "date_trunc": {"value": 1, "unit": "day"},
                                    "arg": {"index": "timeseries"},
                                }
                            ],
                        }
                    ],
                }
            ]
        },
    )

    timeframe: RelativeTimeframe
    queries: list[Query] = Field(min_length=1, max_length=MAX_QUERIES)
    config: QueryConfig | None = None


# -- what a request means -----------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """[start, end): the rows whose index falls in it are read."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Aggregate:
    func: str
    column: str
    kind: Kind


@dataclass(frozen=True)
class GroupKeyRef:
    position: int


@dataclass(frozen=True)
class Value:
    """A column's value per row (a query without grouping)."""

    column: str
    kind: Kind


Selected = Aggregate | GroupKeyRef | Value


@dataclass(frozen=True)
class DateTrunc:
    value: int
    unit: str


@dataclass(frozen=True)
class DatePartKey:
    part: str


@dataclass(frozen=True)
class ColumnKey:
    column: str
    kind: Kind


GroupKey = DateTrunc | DatePartKey | ColumnKey


@dataclass(frozen=True)
class Plan:
    """One query, checked: its table, its output columns in order (name, what), its group
    keys, and its where (columns resolved, literals typed)."""

    table: Table
    outputs: tuple[tuple[str, Selected], ...]
    group_keys: tuple[GroupKey, ...]
    where: where_language.Expression | None

    @property
    def grouped(self) -> bool:
        return bool(self.group_keys) or any(isinstance(s, Aggregate) for _, s in self.outputs)

    @property
    def bucket(self) -> DateTrunc | None:
        return next((key for key in self.group_keys if isinstance(key, DateTrunc)), None)

    def columns(self) -> set[str]:
        """The table's columns it reads (the index is always read)."""
        found = {s.column for _, s in self.outputs if isinstance(s, Aggregate | Value)}
        found |= {key.column for key in self.group_keys if isinstance(key, ColumnKey)}
        if self.where is not None:
            found |= {c.name for c in where_language.columns_of(self.where)}
        return found - {INDEX}


def window(timeframe: RelativeTimeframe, today: date) -> Window:
    """The timeframe's window: from the end of the anchor day (UTC) back `past`."""
    if timeframe.anchor > today:
        raise InvalidQuery(
            "The anchor is in the future: a timeframe ends on a day that has begun.",
            ("body", "timeframe", "anchor"),
        )
    if timeframe.anchor < EARLIEST_ANCHOR:
        raise InvalidQuery(
            f"The anchor is before {EARLIEST_ANCHOR.isoformat()}: no health data is that old.",
            ("body", "timeframe", "anchor"),
        )
    end = datetime.combine(timeframe.anchor + timedelta(days=1), time(0), UTC)
    value, unit = timeframe.past.count, timeframe.past.unit
    too_far = InvalidQuery(
        f"The timeframe reaches back more than {MAX_WINDOW_YEARS} years.",
        ("body", "timeframe", "past", "value"),
    )
    if unit in ("month", "year"):
        months = value * (12 if unit == "year" else 1)
        if months > 12 * MAX_WINDOW_YEARS:
            raise too_far
        return Window(_months_before(end, months), end)
    minutes = value * _UNIT_MINUTES[unit]
    if minutes > MAX_WINDOW_YEARS * 366 * 1440:
        raise too_far
    return Window(end - timedelta(minutes=minutes), end)


def _months_before(moment: datetime, months: int) -> datetime:
    index = moment.year * 12 + moment.month - 1 - months
    year, month = divmod(index, 12)
    # A window ends at a midnight: day 1..31 exists in the earlier month, or its last day.
    for day in range(moment.day, 0, -1):
        try:
            return moment.replace(year=year, month=month + 1, day=day)
        except ValueError:
            continue
    raise AssertionError("every month has a first day")


def plan_request(request: AggregateQueryRequest) -> list[Plan]:
    return [plan_query(query, ("body", "queries", n)) for n, query in enumerate(request.queries)]


def plan_query(query: Query, at: tuple[str | int, ...]) -> Plan:
    table = _table_of(query, at)
    group_keys = tuple(
        _group_key(item, table, (*at, "group_by", n)) for n, item in enumerate(query.group_by or ())
    )
    if sum(isinstance(key, DateTrunc) for key in group_keys) > 1:
        raise InvalidQuery("At most one date_trunc may group a query.", (*at, "group_by"))
    grouped = bool(group_keys) or any(isinstance(item, AggregateExpr) for item in query.select)
    outputs: list[tuple[str, Selected]] = []
    for n, item in enumerate(query.select):
        outputs.extend(_selected(item, table, group_keys, grouped, (*at, "select", n)))
    where = None
    if query.where is not None:
        where = _typed_where(query.where, table, (*at, "where"))
    return Plan(table, tuple(_unique_names(outputs)), group_keys, where)


def _table_of(query: Query, at: tuple[str | int, ...]) -> Table:
    """The one table a query reads, named by its columns and index expressions."""
    named: list[tuple[Table | str, tuple[str | int, ...]]] = []

    def visit(item: Any, loc: tuple[str | int, ...]) -> None:
        if isinstance(item, AggregateExpr | DateTruncExpr | DatePartExpr):
            visit(item.arg, (*loc, "arg"))
        elif isinstance(item, TimeseriesColumn):
            named.append((series_table(item.timeseries), loc))
        elif isinstance(item, IndexColumn):
            named.append((item.index, loc))
        else:
            table = next((t for t in SUMMARY_TABLES if t in type(item).model_fields), None)
            if table is not None:
                named.append((SUMMARY_TABLES[table], loc))

    for n, selected in enumerate(query.select):
        visit(selected, (*at, "select", n))
    for n, grouping in enumerate(query.group_by or ()):
        visit(grouping, (*at, "group_by", n))
    tables = [t for t, _ in named if isinstance(t, Table)]
    if not tables:
        summary = next((t for t, _ in named if isinstance(t, str) and t != "timeseries"), None)
        if summary is None:
            raise InvalidQuery(
                "The query names no table: select a column of sleep, activity, workout, "
                "body, meal or profile, or a timeseries field.",
                (*at, "select"),
            )
        tables = [SUMMARY_TABLES[summary]]
    table = tables[0]
    for other, loc in named:
        name = other.name if isinstance(other, Table) else other
        resource = other.resource if isinstance(other, Table) else table.resource
        if name != table.name or (name == "timeseries" and resource != table.resource):
            raise InvalidQuery(
                f"A query reads one table: this names {_label(other)}, the query reads "
                f"{table.label}.",
                loc,
            )
    return table


def _label(table: Table | str) -> str:
    return table.label if isinstance(table, Table) else table


def _column_of(item: Any, table: Table, loc: tuple[str | int, ...]) -> tuple[str, Kind]:
    """The column an item names in the query's table: (name, kind)."""
    if isinstance(item, IndexColumn):
        return INDEX, Kind.TIMESTAMP
    if isinstance(item, TimeseriesColumn):
        name = item.field
    elif isinstance(item, SourceColumn):
        name = item.source
    else:
        name = getattr(item, table.name)
    kind = table.columns.get(name)
    if kind is None:
        raise InvalidQuery(f"The {table.label} table has no column '{name}'.", loc)
    return name, kind


def _group_key(item: Any, table: Table, loc: tuple[str | int, ...]) -> GroupKey:
    if isinstance(item, DateTruncExpr):
        value, unit = item.date_trunc.count, item.date_trunc.unit
        months = value * {"month": 1, "year": 12}.get(unit, 0)
        minutes = value * _UNIT_MINUTES.get(unit, 0)
        if months > 12 * MAX_BUCKET_YEARS or minutes > MAX_BUCKET_YEARS * 366 * 1440:
            raise InvalidQuery(
                f"A date_trunc bucket is at most {MAX_BUCKET_YEARS} years wide.",
                (*loc, "date_trunc", "value"),
            )
        return DateTrunc(value, unit)
    if isinstance(item, DatePartExpr):
        return DatePartKey(item.date_part)
    return ColumnKey(*_column_of(item, table, loc))


def _selected(
    item: Any,
    table: Table,
    group_keys: tuple[GroupKey, ...],
    grouped: bool,
    loc: tuple[str | int, ...],
) -> list[tuple[str, Selected]]:
    if isinstance(item, AggregateExpr):
        column, kind = _column_of(item.arg, table, (*loc, "arg"))
        if kind not in FUNCTIONS[item.func]:
            kinds = "numbers" if FUNCTIONS[item.func] == NUMERIC else "numbers and times"
            raise InvalidQuery(
                f"{item.func} applies to {kinds}; '{_public(column)}' is {kind.value}.",
                (*loc, "func"),
            )
        return [(item.func, Aggregate(item.func, column, kind))]
    if isinstance(item, GroupKeyColumn):
        if item.group_key == "*":
            return [(f"group_key.{n}", GroupKeyRef(n)) for n in range(len(group_keys))]
        if item.group_key >= len(group_keys):
            raise InvalidQuery(
                f"group_key {item.group_key} does not exist: the query has "
                f"{len(group_keys)} group_by item(s).",
                (*loc, "group_key"),
            )
        return [(f"group_key.{item.group_key}", GroupKeyRef(item.group_key))]
    column, kind = _column_of(item, table, loc)
    name = INDEX_OUTPUT if column == INDEX else column
    if not grouped:
        return [(name, Value(column, kind))]
    # Grouped: a plain column is a group key's value (an index, the date_trunc bucket).
    for n, key in enumerate(group_keys):
        if (column == INDEX and isinstance(key, DateTrunc)) or (
            isinstance(key, ColumnKey) and key.column == column
        ):
            return [(name, GroupKeyRef(n))]
    raise InvalidQuery(
        f"'{_public(column)}' is neither aggregated nor a group key of this grouped query.",
        loc,
    )


def _public(column: str) -> str:
    return INDEX_OUTPUT if column == INDEX else column


def _unique_names(outputs: list[tuple[str, Selected]]) -> list[tuple[str, Selected]]:
    """Output names as gaps.md gives them; a name taken again gets `.1`, `.2`..."""
    seen: dict[str, int] = {}
    named = []
    for name, selected in outputs:
        count = seen.get(name, 0)
        seen[name] = count + 1
        named.append((name if count == 0 else f"{name}.{count}", selected))
    return named


# -- the where ----------------------------------------------------------------------------


def _typed_where(text: str, table: Table, loc: tuple[str | int, ...]) -> where_language.Expression:
    """The where's AST, with each column found in the table and each literal of the type
    it is compared with (a time is a datetime, a day a date)."""
    try:
        expression = where_language.parse(text)
    except where_language.WhereSyntaxError as error:
        raise InvalidQuery(f"Syntax error in where: {error}.", loc) from error
    return _typed(expression, table, loc)


def _typed(
    expression: where_language.Expression, table: Table, loc: tuple[str | int, ...]
) -> where_language.Expression:
    if isinstance(expression, where_language.Not):
        return where_language.Not(_typed(expression.operand, table, loc))
    if isinstance(expression, where_language.And | where_language.Or):
        return type(expression)(tuple(_typed(e, table, loc) for e in expression.operands))
    left, right = expression.left, expression.right
    left_kind, right_kind = _operand_kind(left, table, loc), _operand_kind(right, table, loc)
    if left_kind is not None and right_kind is not None:
        if not (left_kind == right_kind or {left_kind, right_kind} <= NUMERIC):
            raise InvalidQuery(
                f"Cannot compare {left_kind.value} with {right_kind.value} at position "
                f"{left.position} of where.",
                loc,
            )
        kind = left_kind
    else:
        kind = left_kind or right_kind or _literal_kind(left)
    if kind is Kind.BOOLEAN and expression.op not in ("=", "!="):
        raise InvalidQuery(
            f"Booleans compare with = or != only (position {left.position} of where).", loc
        )
    return where_language.Comparison(
        _typed_operand(left, kind, loc), expression.op, _typed_operand(right, kind, loc)
    )


def _operand_kind(
    operand: where_language.Operand, table: Table, loc: tuple[str | int, ...]
) -> Kind | None:
    if isinstance(operand, where_language.Literal_):
        return None
    if operand.name == INDEX_OUTPUT:
        return Kind.TIMESTAMP
    kind = table.columns.get(operand.name)
    if kind is None:
        raise InvalidQuery(
            f"Unknown column '{operand.name[:64]}' at position {operand.position} of where: "
            f"the {table.label} table has {', '.join(sorted(table.columns))} and timestamp.",
            loc,
        )
    return kind


def _literal_kind(operand: where_language.Operand) -> Kind:
    assert isinstance(operand, where_language.Literal_)
    value = operand.value
    if isinstance(value, bool):
        return Kind.BOOLEAN
    return Kind.NUMBER if isinstance(value, int | float) else Kind.TEXT


_PARSERS: dict[Kind, Callable[[str], Any]] = {
    Kind.TIMESTAMP: lambda text: _instant(text),
    Kind.DATE: date.fromisoformat,
}


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _typed_operand(
    operand: where_language.Operand, kind: Kind, loc: tuple[str | int, ...]
) -> where_language.Operand:
    if isinstance(operand, where_language.Column):
        return where_language.Column(
            INDEX if operand.name == INDEX_OUTPUT else operand.name, operand.position
        )
    value = operand.value
    where = f"position {operand.position} of where"
    if kind in NUMERIC:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidQuery(f"Expected a number at {where}.", loc)
        return operand
    if kind is Kind.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidQuery(f"Expected true or false at {where}.", loc)
        return operand
    if not isinstance(value, str):
        raise InvalidQuery(f"Expected a 'quoted' {kind.value} at {where}.", loc)
    parse = _PARSERS.get(kind)
    if parse is None:
        return operand
    try:
        return where_language.Literal_(parse(value), operand.position)
    except ValueError as error:
        raise InvalidQuery(f"Expected an ISO 8601 {kind.value} at {where}.", loc) from error
