"""What each recorded event announces to webhook subscribers (spec 6, gaps.md Webhooks).

A pure mapping from a ledger event (and the stream it belongs to) to the public events it
announces, under the rules in force at the event's own time: the same event replayed
today announces what it announced when it was first recorded.

Besides the production service's types, a user's deletion, its undo and its erasure are
announced as our own types (`LIFECYCLE_EVENT_TYPES`), so that a receiver's mirror forgets
an erased user too.

Team-level types (`TEAM_EVENT_TYPES`, ours too) are about no user: an event destination
disabled after failing for the disable period tells the team's admins. Their
announcement names the team environment itself (`environment`) and no user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.resource_feeds import ResourceFeed
from healthledger.domain.labs.appointments import Appointment
from healthledger.domain.labs.orders import Order
from healthledger.domain.users.user import User
from healthledger.domain.webhooks.deprecation_calendar import Rules
from healthledger.domain.webhooks.event_destinations import EventDestination

USER_DELETED = "user.deleted"
USER_DELETION_UNDONE = "user.deletion_undone"
USER_ERASED = "user.erased"
# Ours (the catalog marks them `extension`): each announces one event of a user's stream.
LIFECYCLE_EVENT_TYPES: dict[type, str] = {
    User.Deleted: USER_DELETED,
    User.DeletionUndone: USER_DELETION_UNDONE,
    User.Erased: USER_ERASED,
}

# Ours, about a team environment and no user (issue 35): each announces one event of a
# team's stream, to that environment's webhook endpoints (never to its event
# destinations: a destination disabled is what one of them says).
EVENT_DESTINATION_DISABLED = "event_destination.disabled"
TEAM_EVENT_TYPES: dict[type, str] = {EventDestination.Disabled: EVENT_DESTINATION_DISABLED}

# Lab test orders (issue 14): an order placed, every later change of its status (and a
# test kit's registration, which changes its patient, and a change of its activation
# date), and a completion whose results hold a critical value.
ORDER_CREATED = "labtest.order.created"
ORDER_UPDATED = "labtest.order.updated"
RESULT_CRITICAL = "labtest.result.critical"
ORDER_STATUS_CHANGES = (
    Order.StatusChanged,
    Order.Completed,
    Order.Cancelled,
    Order.Failed,
    Order.KitRegistered,
    Order.ActivationRescheduled,
)
# Appointments (issue 33): the order's first booking or request (the stream's second
# event, after its founding), then every change of it.
APPOINTMENT_CREATED = "labtest.appointment.created"
APPOINTMENT_UPDATED = "labtest.appointment.updated"
APPOINTMENT_CHANGES = (Appointment.Booked, Appointment.Requested, Appointment.Cancelled)
# Whether a completion's results hold a critical value, from the user's id and the sealed
# interpretation: the caller that holds the key answers (False when the key is gone).
IsCritical = Callable[[UUID, str], bool]

# Resources whose events are timeseries events, named `*.timeseries.<resource>.*`: only
# the deprecated hypnogram keeps that form; every other resource is `*.data.<resource>.*`.
_TIMESERIES_FORM = frozenset({"hypnogram"})


@dataclass(frozen=True)
class Announcement:
    event_type: str
    # None for a team-level type, whose `environment` is set instead.
    user_id: UUID | None
    team_id: UUID
    # The daily data event's day (one announcement per day); None otherwise.
    day: date | None = None
    # The session it announces, for a resource kept as sessions (workouts, meals): one
    # announcement per session, each from its own `DailySynced`. None otherwise, and for
    # syncs recorded before sessions (they announced whole days).
    session: str | None = None
    # A team-level announcement's team environment (a user's is the user's own).
    environment: str | None = None


def _data_type(stage: str, resource: str, verb: str) -> str:
    form = "timeseries" if resource in _TIMESERIES_FORM else "data"
    return f"{stage}.{form}.{resource}.{verb}"


def _never_critical(user_id: UUID, sealed: str) -> bool:
    return False


def announcements(
    event: Any, stream: Any, rules: Rules, is_critical: IsCritical | None = None
) -> list[Announcement]:
    """The public events `event` announces; `stream` is its aggregate (for who it is of).
    Only what a stream's first event sets is read of it (its id, user, team, environment,
    resource), so the outbox passes each stream as its first event made it
    (`Ledger.founded_many`)."""
    found: list[Announcement] = []
    lifecycle = LIFECYCLE_EVENT_TYPES.get(type(event))
    team_level = TEAM_EVENT_TYPES.get(type(event))
    if team_level is not None:
        found.append(Announcement(team_level, None, stream.team_id, environment=stream.environment))
    elif lifecycle is not None:
        found.append(Announcement(lifecycle, stream.id, stream.team_id))
    elif isinstance(event, Order.Created):
        found.append(Announcement(ORDER_CREATED, stream.user_id, stream.team_id))
    elif isinstance(event, ORDER_STATUS_CHANGES):
        found.append(Announcement(ORDER_UPDATED, stream.user_id, stream.team_id))
        critical = is_critical or _never_critical
        if isinstance(event, Order.Completed) and critical(
            stream.user_id, event.sealed_interpretation
        ):
            found.append(Announcement(RESULT_CRITICAL, stream.user_id, stream.team_id))
    elif isinstance(event, APPOINTMENT_CHANGES):
        first = event.originator_version == 2
        event_type = APPOINTMENT_CREATED if first else APPOINTMENT_UPDATED
        found.append(Announcement(event_type, stream.user_id, stream.team_id))
    elif isinstance(event, Connection.Created | Connection.Reconnected):
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
                Announcement(event_type, stream.user_id, stream.team_id, day, event.session)
                for day in days
            )
    return [a for a in found if rules.sends(a.event_type)]
