"""The aggregate query through the official Python client `vital==2.1.569` (issue 18,
docs/compatibility.md): the real team API under uvicorn, `aggregate.query_one` built from
the client's own request types (RelativeTimeframe, Query, AggregateExpr, the column
expressions, DateTruncExpr, GroupKeyColumnExpr, QueryConfig), its answer parsed by the
client's AggregationResponse and held to what the API answers over plain HTTP; its errors
parsed as the client's. On both databases.

The client asks for `*/*` and parses JSON: the Parquet form is not reachable through it
(tests/integration/test_aggregate_query.py covers that form)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import vital
from healthledger.adapters.composition import Service
from healthledger.domain.context import CommandContext
from vital.core.api_error import ApiError
from vital.errors import UnprocessableEntityError
from vital.types import (
    ActivityColumnExpr,
    ActivityColumnExprActivity,
    AggregateExpr,
    AggregateExprFunc,
    DateTruncExpr,
    DiscreteTimeseriesExpr,
    DiscreteTimeseriesExprField,
    DiscreteTimeseriesExprTimeseries,
    GroupKeyColumnExpr,
    IndexColumnExpr,
    IndexColumnExprIndex,
    Period,
    PeriodUnit,
    Providers,
    Query,
    QueryConfig,
    RelativeTimeframe,
    Select,
    SleepColumnExpr,
    SleepColumnExprSleep,
    SourceColumnExpr,
    SourceColumnExprSource,
)

from tests.conftest import CLIENTS_PARSE_ANSWERS, Team

pytestmark = CLIENTS_PARSE_ANSWERS

PATH = "/aggregate/v1/user/{}/query"


@pytest.fixture
def user_id(api: vital.Vital, service: Service, team: Team) -> str:
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "aggregate_query", True)
    user = api.user.create(client_user_id="oc-aggregate").user_id
    for provider in ("oura", "fitbit"):
        api.link.connect_demo_provider(user_id=user, provider=provider)
    assert service.jobs.run_due_pulls() > 0
    return str(user)


def test_query_one_through_the_client_answers_what_the_api_answers(
    api: vital.Vital,
    base_url: str,
    team: Team,
    user_id: str,
) -> None:
    anchor = datetime.now(UTC).date() - timedelta(days=1)
    timeframe = RelativeTimeframe(
        anchor=anchor.isoformat(), past=Period(value=7, unit=PeriodUnit("day"))
    )
    heart = DiscreteTimeseriesExpr(
        timeseries=DiscreteTimeseriesExprTimeseries("heartrate"),
        field=DiscreteTimeseriesExprField("value"),
    )
    queries = [
        Query(
            select=[
                GroupKeyColumnExpr(group_key=Select("*")),
                AggregateExpr(arg=heart, func=AggregateExprFunc("mean")),
                AggregateExpr(arg=heart, func=AggregateExprFunc("max")),
                AggregateExpr(arg=heart, func=AggregateExprFunc("newest")),
            ],
            group_by=[
                DateTruncExpr(
                    date_trunc=Period(value=1, unit=PeriodUnit("day")),
                    arg=IndexColumnExpr(index=IndexColumnExprIndex("timeseries")),
                )
            ],
            where="value > 40",
        ),
        Query(
            select=[
                IndexColumnExpr(index=IndexColumnExprIndex("sleep")),
                SleepColumnExpr(sleep=SleepColumnExprSleep("duration_second")),
                SleepColumnExpr(sleep=SleepColumnExprSleep("score")),
                SourceColumnExpr(source=SourceColumnExprSource("source_provider")),
            ],
        ),
        Query(
            select=[
                AggregateExpr(
                    arg=ActivityColumnExpr(activity=ActivityColumnExprActivity("steps")),
                    func=AggregateExprFunc("sum"),
                ),
                AggregateExpr(
                    arg=ActivityColumnExpr(
                        activity=ActivityColumnExprActivity("heart_rate_resting")
                    ),
                    func=AggregateExprFunc("median"),
                ),
            ],
        ),
    ]
    config = QueryConfig(provider_priority_overrides=[Providers("fitbit")])
    parsed = api.aggregate.query_one(user_id, timeframe=timeframe, queries=queries, config=config)
    assert len(parsed.results) == 3
    daily, nights, activity = (result.table for result in parsed.results)
    assert list(daily) == ["group_key.0", "mean", "max", "newest"]
    assert len(daily["group_key.0"]) == 7
    assert all(40 < low <= high for low, high in zip(daily["mean"], daily["max"], strict=True))
    # Both devices sleep every night; with fitbit first, a night is fitbit's (but at the
    # window's edges, where only one of the two nights started inside it).
    assert len(nights["source_provider"]) <= 8
    assert nights["source_provider"][1:-1] == ["fitbit"] * (len(nights["source_provider"]) - 2)
    assert all(5 * 3600 <= d <= 9 * 3600 for d in nights["duration_second"])
    assert activity["sum"][0] > 0
    # The same as the API answers over plain HTTP.
    body = {
        "timeframe": timeframe.model_dump(mode="json", exclude_unset=True),
        "queries": [q.model_dump(mode="json", exclude_unset=True) for q in queries],
        "config": config.model_dump(mode="json", exclude_unset=True),
    }
    plain = httpx.post(base_url + PATH.format(user_id), json=body, headers=team.headers, timeout=30)
    assert plain.status_code == 200
    assert [result.model_dump() for result in parsed.results] == plain.json()["results"]


def test_errors_parse_as_the_clients(
    api: vital.Vital,
    service: Service,
    team: Team,
    user_id: str,
) -> None:
    timeframe = RelativeTimeframe(
        anchor=datetime.now(UTC).date().isoformat(), past=Period(value=1, unit=PeriodUnit("day"))
    )
    bad_where = Query(
        select=[
            AggregateExpr(
                arg=SleepColumnExpr(sleep=SleepColumnExprSleep("score")),
                func=AggregateExprFunc("mean"),
            )
        ],
        where="score >> 1",
    )
    with pytest.raises(UnprocessableEntityError) as unprocessable:
        api.aggregate.query_one(user_id, timeframe=timeframe, queries=[bad_where])
    (problem,) = unprocessable.value.body.detail or []
    # The client keeps the items of its HttpValidationError as it read them.
    assert problem["loc"] == ["body", "queries", 0, "where"]
    assert "position 8" in problem["msg"]
    good = Query(
        select=[
            AggregateExpr(
                arg=SleepColumnExpr(sleep=SleepColumnExprSleep("score")),
                func=AggregateExprFunc("mean"),
            )
        ]
    )
    with pytest.raises(ApiError) as missing:
        api.aggregate.query_one(
            "6f1f5c0e-0000-4000-8000-000000000000", timeframe=timeframe, queries=[good]
        )
    assert missing.value.status_code == 404
    service.teams.set_feature(CommandContext.system("test"), team.team_id, "aggregate_query", False)
    with pytest.raises(ApiError) as closed:
        api.aggregate.query_one(user_id, timeframe=timeframe, queries=[bad_where])
    assert closed.value.status_code == 403
    assert closed.value.body["detail"]["error_type"] == "FEATURE_NOT_ENABLED"
