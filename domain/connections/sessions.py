"""Sessions: the summary resources a provider reports as several items a day (workouts,
meals), each its own object for the official client, announced one per event.

The health data store keeps one payload per (user, provider, resource, day), which for
these resources is the day's list of sessions. A session is named by a key that is stable
across syncs: the provider's own id of it when it gives one, else its place in the day's
list (a device appends a day's sessions in time order, so an earlier session keeps its
place as the day goes on). The daily sync compares a day's sessions before and after it
stored them, and records one `DailySynced` per session that is new or changed, so that
each announces one session (issue 17).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

# Summary resources kept as a list of sessions per day.
SESSION_RESOURCES = frozenset({"workouts", "meal"})


def session_key(resource: str, day: date, index: int, item: Mapping[str, Any]) -> str:
    """The session's stable key: the provider's id, or `<day>-<resource>-<index>`."""
    own = item.get("id")
    return str(own) if own is not None else f"{day.isoformat()}-{resource}-{index}"


def sessions_of(resource: str, day: date, value: Any) -> dict[str, Mapping[str, Any]]:
    """A stored day's sessions by key, in the day's order."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return {}
    return {
        session_key(resource, day, index, item): item
        for index, item in enumerate(value)
        if isinstance(item, Mapping)
    }


@dataclass(frozen=True)
class SessionChange:
    day: date
    key: str
    created: bool


def session_changes(
    resource: str,
    before: Mapping[date, Any],
    after: Mapping[date, Any],
    changed_days: Sequence[date],
) -> list[SessionChange]:
    """The sessions of `changed_days` that `after` holds new (absent from `before`) or
    different, in day and session order. A session that disappeared is not announced: the
    client has no event for a removed summary."""
    found: list[SessionChange] = []
    for day in sorted(changed_days):
        old = sessions_of(resource, day, before.get(day))
        for key, item in sessions_of(resource, day, after.get(day)).items():
            if key not in old:
                found.append(SessionChange(day, key, created=True))
            elif old[key] != item:
                found.append(SessionChange(day, key, created=False))
    return found


def days_created_by(changes: Sequence[SessionChange], new_days: Collection[date]) -> list[int]:
    """Per session change, in order, how many days of the store it created: 1 for the
    first new session of a day the sync stored new, else 0. A sync records one event per
    session, yet its count of created days (`DailySynced.days_created`, which the
    deletion report sums after the days themselves are gone) must count days: two
    workouts of a new day are one day, and a new workout on a day held before is none."""
    counted: set[date] = set()
    found = []
    for change in changes:
        first = change.created and change.day in new_days and change.day not in counted
        if first:
            counted.add(change.day)
        found.append(1 if first else 0)
    return found
