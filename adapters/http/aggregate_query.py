"""POST /aggregate/v1/user/{user_id}/query (spec endpoint 10, closed beta: the team's
`aggregate_query` switch). The request language is `domain/health_queries/`, the engine
`adapters/answers/health_queries.py` (docs/data.md#aggregate-query).

The answer is JSON `{results: [{table}]}` for `Accept` `*/*`, `application/json` or none,
and a gzipped tarball of Parquet files for `application/vnd.service.tar+gzip+parquet`;
any other `Accept` is a 406.
"""

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from healthledger.adapters.answers.health_queries import (
    PARQUET_MEDIA_TYPE,
    HealthQueries,
    json_body,
    parquet_tarball,
)
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller, TeamCaller
from healthledger.adapters.http.errors import USER_NOT_FOUND, error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations.users import require_feature
from healthledger.adapters.persistence.health_data.batches import HealthDataBatches
from healthledger.domain.health_queries.query import AggregateQueryRequest, InvalidQuery
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

AGGREGATE_QUERY = "aggregate_query"
JSON_MEDIA_TYPE = "application/json"


class AggregationResult(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "table": {
                        "group_key.0": ["2026-11-28T00:00:00+00:00", "2026-11-29T00:00:00+00:00"],
                        "mean": [61.4, 63.0],
                    }
                }
            ]
        }
    )

    table: dict[str, list[Any]] = Field(
        description="The query's result, column-oriented: each selected column's name "
        "(a function's name, group_key.N, timestamp, a column's name) and its values."
    )


class AggregationResponse(BaseModel):
    """One result per query, in the order the queries were declared."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "results": [
                        {
                            "table": {
                                "group_key.0": [
                                    "2024-06-29T00:00:00+00:00",
                                    "2024-06-30T00:00:00+00:00",
                                ],
                                "mean": [63.4, 61.9],
                                "max": [151.0, 139.0],
                            }
                        }
                    ]
                }
            ]
        }
    )

    results: list[AggregationResult]


def negotiated(accept: str | None) -> str:
    """The media type to answer: the acceptable one the caller ranks highest (by `q`, then
    by naming it rather than a wildcard); 406 if neither is acceptable."""
    if accept is None or not accept.strip():
        return JSON_MEDIA_TYPE
    best: tuple[float, int, str] | None = None
    for entry in accept.split(","):
        media, *parameters = (part.strip() for part in entry.split(";"))
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        candidates = {
            JSON_MEDIA_TYPE: (JSON_MEDIA_TYPE, 2),
            "application/*": (JSON_MEDIA_TYPE, 1),
            "*/*": (JSON_MEDIA_TYPE, 0),
            PARQUET_MEDIA_TYPE: (PARQUET_MEDIA_TYPE, 2),
        }
        if media in candidates and quality > 0:
            answer, specificity = candidates[media]
            if best is None or (quality, specificity) > best[:2]:
                best = (quality, specificity, answer)
    if best is None:
        raise HTTPException(
            status_code=406,
            detail=f"Acceptable answers are {JSON_MEDIA_TYPE} (also for */*) and "
            f"{PARQUET_MEDIA_TYPE}.",
        )
    return best[2]


def health_queries(service: CurrentService) -> HealthQueries:
    """The query engine over the service's health data (a few references: made per query)."""
    return HealthQueries(
        HealthDataBatches(service.db, service.key_store), list(service.catalog), service.clock
    )


def beta_caller(service: CurrentService, caller: TeamApiCaller) -> TeamCaller:
    # A dependency, so that a team without the switch is told so before its body is
    # read: a 403 whatever it sent.
    require_feature(service, caller.team_id, AGGREGATE_QUERY)
    return caller


router = APIRouter(tags=["aggregate"], route_class=LedgerRoute)


@router.post(
    "/aggregate/v1/user/{user_id}/query",
    response_model=AggregationResponse,
    responses={
        200: {
            "description": "JSON, or with the Parquet media type a gzipped tar of "
            "0.parquet, 1.parquet, ... (one per query, in declared order).",
            "content": {PARQUET_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(
            401,
            403,
            404,
            406,
            422,
            described={
                **USER_NOT_FOUND,
                403: "The team has not enabled the closed-beta feature aggregate_query.",
                406: "Accept names neither JSON nor the Parquet tarball.",
                422: "The body is not a query we can run: its shape, an unknown table or "
                "column, a function for another type, a where that does not parse (its "
                "position is named), a timeframe ending in the future.",
            },
        ),
    },
)
def aggregate_query(
    service: CurrentService,
    caller: Annotated[TeamCaller, Depends(beta_caller)],
    queries: Annotated[HealthQueries, Depends(health_queries)],
    user_id: UUID,
    body: AggregateQueryRequest,
    as_of: TeamAsOf,
    accept: Annotated[
        str | None,
        Header(description=f"*/* or {JSON_MEDIA_TYPE} (JSON), or {PARQUET_MEDIA_TYPE}."),
    ] = None,
) -> Response:
    """Aggregates over one user's health data (closed beta): per query, a table of
    the selected functions and group keys over one table (sleep, activity, workout,
    body, meal, profile, or one timeseries resource) in the timeframe."""
    media_type = negotiated(accept)
    try:
        tables = queries.run(
            caller.team_id,
            user_id,
            body,
            service.team_queries.source_priorities(caller.team_id),
            as_of,
        )
    except InvalidQuery as error:
        raise RequestValidationError(
            [{"type": "value_error", "loc": error.loc, "msg": error.message, "input": None}]
        ) from error
    if media_type == PARQUET_MEDIA_TYPE:
        return Response(parquet_tarball(tables), media_type=PARQUET_MEDIA_TYPE)
    return Response(json_body(tables), media_type=JSON_MEDIA_TYPE)
