"""The team's source priorities as the reads use them (domain/teams/source_priorities.py):
the order of providers of the present, or of the instant a read travels to."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from healthledger.adapters.compliance.time_travel import aggregate_as_of
from healthledger.domain.errors import TeamNotFound
from healthledger.domain.teams.source_priorities import data_type_of
from healthledger.domain.teams.teams import Team

if TYPE_CHECKING:
    from healthledger.adapters.composition import Service


def source_orders(service: Service, team_id: UUID, as_of: datetime | None) -> dict[str, list[str]]:
    """The team's order of providers per kind of data it has ordered: now, or as it was at
    `as_of` (from the team's events: the reads that travel rank by the order of then)."""
    if as_of is None:
        return service.team_queries.source_priorities(team_id)
    team = aggregate_as_of(service, team_id, as_of)
    if not isinstance(team, Team):
        raise TeamNotFound()
    return {kind: list(order) for kind, order in team.source_priorities.items() if order}


def summary_order(
    service: Service,
    team_id: UUID,
    resource: str,
    provider: str | None,
    as_of: datetime | None = None,
) -> Sequence[str]:
    """The order of a day's providers of a summary resource (HealthDataQueries.summaries'
    `order`): looked up only when several providers may answer and an order covers it."""
    kind = data_type_of(resource, timeseries=False)
    if provider is not None or kind is None:
        return ()
    return source_orders(service, team_id, as_of).get(kind, ())
