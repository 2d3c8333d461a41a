"""A team's source priorities (issue 34; `team.get_source_priorities` and
`team.update_source_priorities` of the official clients): per kind of data, the order in
which providers win (domain/teams/source_priorities.py). The summaries and timeseries
getters list a day's or an instant's providers in that order, and the aggregate query
ranks them after its request's own `provider_priority_overrides` (docs/data.md).

The official clients' update sends no body (their API definition leaves it out); ours is
`{"<data_type>": [provider slugs]}` (`request_options={"additional_body_parameters":
...}` in the clients), and without one it is a 422 naming the body."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query
from healthledger.adapters.composition import Service
from healthledger.adapters.http.as_of import TeamAsOf
from healthledger.adapters.http.auth import TeamApiCaller
from healthledger.adapters.http.errors import error_responses
from healthledger.adapters.http.requests import LedgerRoute
from healthledger.adapters.http.service_dependency import CurrentService
from healthledger.adapters.operations.source_priorities import source_orders
from healthledger.domain.health_queries.query import Slug
from healthledger.domain.teams.source_priorities import MAX_LISTED, PRIORITY_DATA_TYPES
from pydantic import BaseModel, ConfigDict, Field

router = APIRouter(route_class=LedgerRoute, tags=["team"])

DataType = Literal["workouts", "activity", "sleep", "body", "timeseries"]
Order = Annotated[list[Slug] | None, Field(default=None, max_length=MAX_LISTED)]


class PrioritySource(BaseModel):
    name: str
    slug: str
    logo: str | None


class SourcePriority(BaseModel):
    """One provider's place in the order of one kind of data (1 wins)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "data_type": "sleep",
                    "priority": 1,
                    "provider": "oura",
                    "source": {"name": "Oura", "slug": "oura", "logo": None},
                }
            ]
        }
    )
    data_type: str
    priority: int
    provider: str
    source: PrioritySource


class SourcePrioritiesUpdate(BaseModel):
    """Per kind of data, its whole new order (an empty list: back to the default); kinds
    left out keep theirs."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"sleep": ["oura", "whoop"], "timeseries": ["oura"]}]},
    )
    workouts: Order
    activity: Order
    sleep: Order
    body: Order
    timeseries: Order


def _answer(
    service: Service, orders: dict[str, list[str]], data_type: str | None
) -> list[SourcePriority]:
    def source(slug: str) -> PrioritySource:
        entry = service.catalog.get(slug)
        if entry is None:  # a slug the shipped catalog has since dropped
            return PrioritySource(name=slug, slug=slug, logo=None)
        return PrioritySource(name=entry.name, slug=entry.slug, logo=entry.logo)

    return [
        SourcePriority(data_type=kind, priority=n, provider=slug, source=source(slug))
        for kind in PRIORITY_DATA_TYPES
        if data_type in (None, kind)
        for n, slug in enumerate(orders.get(kind, ()), start=1)
    ]


@router.get(
    "/v2/team/source/priorities",
    response_model=list[SourcePriority],
    responses=error_responses(401, 422),
)
def get_source_priorities(
    service: CurrentService,
    caller: TeamApiCaller,
    as_of: TeamAsOf,
    data_type: Annotated[DataType | None, Query()] = None,
) -> Any:
    """The key's team's order of providers, per kind of data (or of one), each provider
    with its place (1 wins); kinds the team has not ordered are absent (their reads keep
    their default order). With `as_of`: the order of that instant."""
    return _answer(service, source_orders(service, caller.team_id, as_of), data_type)


@router.patch(
    "/v2/team/source/priorities",
    response_model=list[SourcePriority],
    responses=error_responses(401, 422),
)
def update_source_priorities(
    service: CurrentService,
    caller: TeamApiCaller,
    update: Annotated[SourcePrioritiesUpdate, Body()],
) -> Any:
    """Set the key's team's order of providers for the kinds of data given (a provider
    not in the catalog, or listed twice, is a 422); answers every kind's order after."""
    orders = update.model_dump(exclude_none=True)
    service.teams.change_source_priorities(
        caller.ctx, caller.team_id, orders, lambda slug: slug in service.catalog
    )
    return _answer(service, service.team_queries.source_priorities(caller.team_id), None)
