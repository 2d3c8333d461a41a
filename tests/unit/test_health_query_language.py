"""The aggregate query's language on its own: the where tokenizer and parser, the checks
that make a request a plan, the timeframe's window, and the tables held to the official
client's request types (so that what `aggregate.query_one` sends is what we accept)."""

from __future__ import annotations

import enum
import typing
from datetime import UTC, date, datetime
from typing import Any

import pytest
import vital.types as client_types
from healthledger.domain.health_queries import where
from healthledger.domain.health_queries.query import (
    Aggregate,
    AggregateQueryRequest,
    ColumnKey,
    DatePartKey,
    DateTrunc,
    GroupKeyRef,
    InvalidQuery,
    Period,
    RelativeTimeframe,
    Value,
    plan_request,
    window,
)
from healthledger.domain.health_queries.tables import (
    INDEX,
    INDEX_TABLES,
    SERIES_FAMILY,
    SERIES_FIELDS,
    SOURCE_FIELDS,
    SUMMARY_TABLES,
    Kind,
)
from pydantic import ValidationError

# -- the where ------------------------------------------------------------------------------


def test_precedence_not_binds_tighter_than_and_than_or() -> None:
    parsed = where.parse("a = 1 OR NOT b > 2 AND c != 'x'")
    assert parsed == where.Or(
        (
            where.Comparison(where.Column("a", 1), "=", where.Literal_(1, 5)),
            where.And(
                (
                    where.Not(where.Comparison(where.Column("b", 14), ">", where.Literal_(2, 18))),
                    where.Comparison(where.Column("c", 24), "!=", where.Literal_("x", 29)),
                )
            ),
        )
    )


def test_parentheses_group_and_keywords_are_any_case() -> None:
    parsed = where.parse("(a = 1 or b = 2) AnD not (c <= -1.5e1)")
    assert isinstance(parsed, where.And)
    first, second = parsed.operands
    assert isinstance(first, where.Or) and len(first.operands) == 2
    assert second == where.Not(
        where.Comparison(where.Column("c", 27), "<=", where.Literal_(-15.0, 32))
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("'it''s'", "it's"), ("''", ""), ("42", 42), ("4.5", 4.5), ("true", True), ("FALSE", False)],
)
def test_literals(text: str, value: Any) -> None:
    parsed = where.parse(f"x = {text}")
    assert isinstance(parsed, where.Comparison)
    assert isinstance(parsed.right, where.Literal_) and parsed.right.value == value
    assert type(parsed.right.value) is type(value)


def test_an_integer_too_long_for_64_bits_is_a_float() -> None:
    parsed = where.parse("x < " + "9" * 400)
    assert isinstance(parsed, where.Comparison) and isinstance(parsed.right, where.Literal_)
    assert parsed.right.value == float("9" * 400)
    assert where.parse("x = 123456789012345678") == where.Comparison(
        where.Column("x", 1), "=", where.Literal_(123456789012345678, 5)
    )


def test_not_equal_has_two_spellings() -> None:
    assert where.parse("a <> 1") == where.parse("a != 1")


@pytest.mark.parametrize(
    ("text", "position", "says"),
    [
        ("", 1, "empty"),
        ("value >", 8, "end of the expression"),
        ("value > 1;", 10, "';'"),
        ("value > 1 DROP TABLE x", 11, "'DROP'"),
        ("value = 'open", 9, "unterminated"),
        ("(value = 1", 11, "expected ')'"),
        ("value 1", 7, "comparison operator"),
        ("value > 1 AND", 14, "end of the expression"),
        ('value = "x"', 9, "'\"'"),
        ("value = 1 -- comment", 11, "'-'"),
        ("value = 1 /* x */", 11, "'/'"),
        ("value = $1", 9, "'$'"),
        ("value = 1 UNION SELECT 1", 11, "'UNION'"),
        ("valeur\u00e9 = 1", 7, "'é'"),
        ("value = 1)", 10, "')'"),
        ("= 1", 1, "'='"),
    ],
)
def test_malformed_expressions_name_the_position(text: str, position: int, says: str) -> None:
    with pytest.raises(where.WhereSyntaxError) as raised:
        where.parse(text)
    assert raised.value.position == position
    assert says in raised.value.message


def test_nesting_and_length_are_bounded() -> None:
    with pytest.raises(where.WhereSyntaxError, match="nested deeper"):
        where.parse("(" * 40 + "a = 1" + ")" * 40)
    with pytest.raises(where.WhereSyntaxError, match="nested deeper"):
        where.parse("NOT " * 40 + "a = 1")
    assert where.parse("(" * 10 + "a = 1" + ")" * 10) == where.Comparison(
        where.Column("a", 11), "=", where.Literal_(1, 15)
    )
    with pytest.raises(where.WhereSyntaxError, match="longer than"):
        where.parse("a = " + "1" * where.MAX_WHERE_LENGTH)


# -- requests into plans --------------------------------------------------------------------

TIMEFRAME = {"type": "relative", "anchor": "2024-06-30", "past": {"value": 7, "unit": "day"}}
HEART = {"timeseries": "heartrate", "field": "value"}


def plans(*queries: dict[str, Any]) -> list[Any]:
    return plan_request(
        AggregateQueryRequest.model_validate({"timeframe": TIMEFRAME, "queries": list(queries)})
    )


def rejected(*queries: dict[str, Any]) -> InvalidQuery:
    with pytest.raises(InvalidQuery) as raised:
        plans(*queries)
    return raised.value


def test_a_grouped_query_plans_its_outputs_and_keys() -> None:
    (plan,) = plans(
        {
            "select": [
                {"group_key": "*"},
                {"func": "mean", "arg": HEART},
                {"func": "mean", "arg": HEART},
                {"index": "timeseries"},
                {"source": "source_provider"},
            ],
            "group_by": [
                {"date_trunc": {"value": 3, "unit": "hour"}, "arg": {"index": "timeseries"}},
                {"date_part": "weekday", "arg": {"index": "timeseries"}},
                {"source": "source_provider"},
            ],
        }
    )
    assert (plan.table.name, plan.table.resource) == ("timeseries", "heartrate")
    assert plan.group_keys == (
        DateTrunc(3, "hour"),
        DatePartKey("weekday"),
        ColumnKey("source_provider", Kind.TEXT),
    )
    assert plan.outputs == (
        ("group_key.0", GroupKeyRef(0)),
        ("group_key.1", GroupKeyRef(1)),
        ("group_key.2", GroupKeyRef(2)),
        ("mean", Aggregate("mean", "value", Kind.NUMBER)),
        ("mean.1", Aggregate("mean", "value", Kind.NUMBER)),
        ("timestamp", GroupKeyRef(0)),
        ("source_provider", GroupKeyRef(2)),
    )
    assert plan.columns() == {"value", "source_provider"}


def test_an_ungrouped_query_answers_rows() -> None:
    (plan,) = plans({"select": [{"index": "sleep"}, {"sleep": "score"}], "where": "score > 70"})
    assert not plan.grouped and plan.table.name == "sleep"
    assert plan.outputs == (
        ("timestamp", Value(INDEX, Kind.TIMESTAMP)),
        ("score", Value("score", Kind.NUMBER)),
    )


def test_where_literals_take_the_type_of_their_column() -> None:
    (plan,) = plans(
        {
            "select": [{"func": "count", "arg": {"activity": "steps"}}],
            "where": "date >= '2024-06-01' AND timestamp < '2024-06-30T12:00:00+02:00' "
            "AND wheelchair_use = false",
        }
    )
    assert isinstance(plan.where, where.And)
    day, moment, flag = (c.right.value for c in plan.where.operands)  # type: ignore[union-attr]
    assert day == date(2024, 6, 1)
    assert moment == datetime(2024, 6, 30, 10, tzinfo=UTC)
    assert flag is False
    assert plan.where.operands[1].left == where.Column(INDEX, 26)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("query", "loc", "says"),
    [
        ({"select": [{"func": "mean", "arg": {"sleep": "type"}}]}, ("select", 0, "func"), "mean"),
        (
            {"select": [{"func": "sum", "arg": {"index": "sleep"}}]},
            ("select", 0, "func"),
            "sum applies to numbers",
        ),
        (
            {"select": [{"func": "mean", "arg": {"sleep": "score"}}, {"activity": "steps"}]},
            ("select", 1),
            "one table",
        ),
        (
            {
                "select": [
                    {"func": "mean", "arg": HEART},
                    {"timeseries": "glucose", "field": "value"},
                ]
            },
            ("select", 1),
            "one table",
        ),
        (
            {"select": [{"timeseries": "blood_pressure", "field": "value"}]},
            ("select", 0),
            "no column 'value'",
        ),
        (
            {"select": [{"func": "mean", "arg": HEART}, {"source": "source_provider"}]},
            ("select", 1),
            "neither aggregated nor a group key",
        ),
        (
            {"select": [{"group_key": 1}, {"func": "mean", "arg": HEART}]},
            ("select", 0, "group_key"),
            "does not exist",
        ),
        ({"select": [{"index": "timeseries"}]}, ("select",), "names no table"),
        (
            {
                "select": [{"func": "mean", "arg": HEART}],
                "group_by": [
                    {"date_trunc": {"value": 1, "unit": "day"}, "arg": {"index": "timeseries"}},
                    {"date_trunc": {"value": 1, "unit": "hour"}, "arg": {"index": "timeseries"}},
                ],
            },
            ("group_by",),
            "At most one date_trunc",
        ),
        (
            {
                "select": [{"func": "mean", "arg": HEART}],
                "group_by": [
                    {"date_trunc": {"value": 101, "unit": "year"}, "arg": {"index": "timeseries"}}
                ],
            },
            ("group_by", 0, "date_trunc", "value"),
            "at most 100 years",
        ),
        (
            {
                "select": [{"func": "mean", "arg": HEART}],
                "group_by": [{"date_part": "hour", "arg": {"index": "sleep"}}],
            },
            ("group_by", 0, "arg"),
            "one table",
        ),
        (
            {"select": [HEART], "where": "nope = 1"},
            ("where",),
            "Unknown column 'nope' at position 1",
        ),
        (
            {"select": [HEART], "where": "value = 'x'"},
            ("where",),
            "Expected a number at position 9",
        ),
        ({"select": [HEART], "where": "type > 3"}, ("where",), "Expected a 'quoted' text"),
        (
            {"select": [HEART], "where": "value = type"},
            ("where",),
            "Cannot compare number with text",
        ),
        ({"select": [HEART], "where": "timestamp > 'soon'"}, ("where",), "ISO 8601 timestamp"),
        (
            {"select": [{"activity": "steps"}], "where": "wheelchair_use > true"},
            ("where",),
            "Booleans",
        ),
        ({"select": [HEART], "where": "value >> 1"}, ("where",), "position 8"),
    ],
)
def test_queries_that_mean_nothing_are_refused_with_where(
    query: dict[str, Any], loc: tuple[Any, ...], says: str
) -> None:
    refused = rejected(query)
    assert refused.loc == ("body", "queries", 0, *loc)
    assert says in refused.message


@pytest.mark.parametrize(
    "body",
    [
        {"queries": [{"select": [HEART]}] * 11},
        {"queries": []},
        {"queries": [{"select": []}]},
        {"queries": [{"select": [{"sleep": "nope"}]}]},
        {"queries": [{"select": [{"timeseries": "nope", "field": "value"}]}]},
        {"queries": [{"select": [{"value_macro": "sleep_score"}]}]},
        {"queries": [{"select": [{"func": "mode", "arg": HEART}]}]},
        {"queries": [{"select": [HEART], "extra": 1}]},
        {"timeframe": {**TIMEFRAME, "past": {"value": 0, "unit": "day"}}},
        {"timeframe": {**TIMEFRAME, "past": {"value": -3, "unit": "day"}}},
        {"timeframe": {**TIMEFRAME, "past": {"value": 1, "unit": "fortnight"}}},
        {"timeframe": {"placeholder": True}},
        {
            "queries": [
                {
                    "select": [HEART],
                    "group_by": [
                        {"date_trunc": {"value": 0, "unit": "day"}, "arg": {"index": "timeseries"}}
                    ],
                }
            ]
        },
        {"config": {"provider_priority_overrides": ["Oura; DROP"]}},
    ],
)
def test_bodies_of_the_wrong_shape_fail_validation(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AggregateQueryRequest.model_validate(
            {"timeframe": TIMEFRAME, "queries": [{"select": [HEART]}], **body}
        )


# -- the window -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unit", "start"),
    [
        (None, "day", datetime(2024, 3, 31, tzinfo=UTC)),
        (90, "minute", datetime(2024, 3, 31, 22, 30, tzinfo=UTC)),
        (2, "week", datetime(2024, 3, 18, tzinfo=UTC)),
        (1, "month", datetime(2024, 3, 1, tzinfo=UTC)),
        # From April 1: back one month from the end of the 31st of March is February 29th.
        (2, "year", datetime(2022, 4, 1, tzinfo=UTC)),
    ],
)
def test_the_window_ends_at_the_end_of_the_anchor_day(
    value: int | None, unit: str, start: datetime
) -> None:
    timeframe = RelativeTimeframe(anchor=date(2024, 3, 31), past=Period(value=value, unit=unit))  # type: ignore[arg-type]
    span = window(timeframe, today=date(2024, 4, 1))
    assert span.end == datetime(2024, 4, 1, tzinfo=UTC)
    assert span.start == start


def test_a_month_back_from_a_day_the_earlier_month_lacks_is_its_last_day() -> None:
    timeframe = RelativeTimeframe(anchor=date(2024, 3, 30), past=Period(value=1, unit="month"))
    assert window(timeframe, date(2024, 4, 1)).start == datetime(2024, 2, 29, tzinfo=UTC)


def test_an_anchor_in_the_future_or_a_window_too_long_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="future") as future:
        window(
            RelativeTimeframe(anchor=date(2024, 4, 2), past=Period(unit="day")), date(2024, 4, 1)
        )
    assert future.value.loc == ("body", "timeframe", "anchor")
    for period in (Period(value=21, unit="year"), Period(value=10**9, unit="week")):
        with pytest.raises(InvalidQuery, match="20 years"):
            window(RelativeTimeframe(anchor=date(2024, 4, 1), past=period), date(2024, 4, 1))


# -- the client's names ---------------------------------------------------------------------


def enum_values(name: str) -> set[str]:
    members = getattr(client_types, name)
    assert issubclass(members, enum.Enum)
    return {m.value for m in members if not m.name.startswith("_")}


@pytest.mark.parametrize(
    ("table", "enum_name"),
    [
        ("sleep", "SleepColumnExprSleep"),
        ("activity", "ActivityColumnExprActivity"),
        ("workout", "WorkoutColumnExprWorkout"),
        ("body", "BodyColumnExprBody"),
        ("meal", "MealColumnExprMeal"),
        ("profile", "ProfileColumnExprProfile"),
    ],
)
def test_table_columns_are_the_clients(table: str, enum_name: str) -> None:
    assert set(SUMMARY_TABLES[table].columns) == enum_values(enum_name)


def test_timeseries_resources_fields_and_the_rest_are_the_clients() -> None:
    families = {
        "discrete": ("DiscreteTimeseriesExpr", "DiscreteTimeseriesExprTimeseries"),
        "interval": ("IntervalTimeseriesExpr", "IntervalTimeseriesExprTimeseries"),
        "temperature": ("TemperatureTimeseriesExpr", "TemperatureTimeseriesExprTimeseries"),
        "blood_pressure": ("BloodPressureTimeseriesExpr", None),
        "workout_duration": ("WorkoutDurationTimeseriesExpr", None),
        "note": ("NoteTimeseriesExpr", None),
    }
    for family, (model_name, resources_enum) in families.items():
        model = getattr(client_types, model_name)
        fields_enum = typing.get_type_hints(model)["field"]
        assert set(SERIES_FIELDS[family]) == {
            m.value for m in fields_enum if not m.name.startswith("_")
        }
        if resources_enum is None:
            (literal,) = typing.get_args(typing.get_type_hints(model)["timeseries"])
            resources = {literal}
        else:
            resources = enum_values(resources_enum)
        assert {r for r, f in SERIES_FAMILY.items() if f == family} == resources
    assert set(INDEX_TABLES) == enum_values("IndexColumnExprIndex")
    assert set(SOURCE_FIELDS) == enum_values("SourceColumnExprSource")
    assert {p for p in typing.get_args(Period.model_fields["unit"].annotation)} == enum_values(
        "PeriodUnit"
    )


def test_what_the_client_sends_is_accepted() -> None:
    """The client's own models, serialised as `aggregate.query_one` sends them."""
    query = client_types.Query(
        select=[
            client_types.GroupKeyColumnExpr(group_key=client_types.Select("*")),
            client_types.AggregateExpr(
                arg=client_types.SleepColumnExpr(
                    sleep=client_types.SleepColumnExprSleep("hrv_mean_rmssd")
                ),
                func=client_types.AggregateExprFunc("median"),
            ),
            client_types.AggregateExpr(
                arg=client_types.IndexColumnExpr(index=client_types.IndexColumnExprIndex("sleep")),
                func=client_types.AggregateExprFunc("count"),
            ),
        ],
        group_by=[
            client_types.DateTruncExpr(
                date_trunc=client_types.Period(unit=client_types.PeriodUnit("week")),
                arg=client_types.IndexColumnExpr(index=client_types.IndexColumnExprIndex("sleep")),
            ),
            client_types.DatePartExpr(
                date_part=client_types.DatePartExprDatePart("weekday"),
                arg=client_types.IndexColumnExpr(index=client_types.IndexColumnExprIndex("sleep")),
            ),
        ],
        where="score >= 70 AND source_provider != 'fitbit'",
    )
    body = {
        "timeframe": client_types.RelativeTimeframe(
            anchor="2024-06-30",
            past=client_types.Period(value=3, unit=client_types.PeriodUnit("month")),
        ).model_dump(mode="json", exclude_unset=True),
        "queries": [query.model_dump(mode="json", exclude_unset=True)],
        "config": client_types.QueryConfig(
            provider_priority_overrides=[client_types.Providers("oura")]
        ).model_dump(mode="json", exclude_unset=True),
    }
    (plan,) = plan_request(AggregateQueryRequest.model_validate(body))
    assert plan.group_keys == (DateTrunc(1, "week"), DatePartKey("weekday"))
    assert [name for name, _ in plan.outputs] == ["group_key.0", "group_key.1", "median", "count"]
