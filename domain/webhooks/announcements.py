"""What each recorded event announces to webhook subscribers (spec 6, gaps.md Webhooks).

A pure mapping from a ledger event (and the stream it belongs to) to the public events it
announces, under the rules in force at the event's own time: the same event replayed
today announces what it announced when it was first recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.webhooks.deprecation_calendar import Rules

# Resources whose events are timeseries events, named `*.timeseries.<resource>.*`: only
# the deprecated hypnogram keeps that form; every other resource is `*.data.<resource>.*`.
_TIMESERIES_FORM = frozenset({"hypnogram"})


@dataclass(frozen=True)
class Announcement:
    event_type: str
    user_id: UUID
    team_id: UUID
    # The daily data event's day (one announcement per day); None otherwise.
    day: date | None = None


def _data_type(stage: str, resource: str, verb: str) -> str:
    form = "timeseries" if resource in _TIMESERIES_FORM else "data"
    return f"{stage}.{form}.{resource}.{verb}"


def announcements(event: Any, stream: Any, rules: Rules) -> list[Announcement]:
    """The public events `event` announces; `stream` is its aggregate (for who it is of)."""
    found: list[Announcement] = []
    if isinstance(event, Connection.Created | Connection.Reconnected):
        found.append(Announcement("provider.connection.created", stream.user_id, stream.team_id))
    elif isinstance(event, Connection.Errored):
        found.append(Announcement("provider.connection.error", stream.user_id, stream.team_id))
    elif isinstance(event, ResourceFeed.PullSucceeded):
        found.append(
            Announcement(
                _data_type("historical", stream.resource, "created"),
                stream.user_id,
                stream.team_id,
            )
        )
    elif isinstance(event, ResourceFeed.DailySynced):
        for verb, days in (("created", event.created_days), ("updated", event.updated_days)):
            event_type = _data_type("daily", stream.resource, verb)
            found.extend(
                Announcement(event_type, stream.user_id, stream.team_id, day) for day in days
            )
    return [a for a in found if rules.sends(a.event_type)]
