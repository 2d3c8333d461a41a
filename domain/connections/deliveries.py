"""Records a maker delivered, merged into the days stored (Garmin's pushes and pings).

A pulled day is read whole from the maker and replaces the day stored. A delivery brings
only what the maker sent this time: a summary of the day (Garmin's daily, its night),
which is the day's whole summary again, or a few items of a day's list (one activity of
the day's workouts, a quarter hour of epochs among the day's samples). So a delivered
day replaces a stored summary, and is merged into a stored list: an item delivered again
(the same session id, the same sample instant) replaces its copy, the others stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from healthledger.domain.connections.sessions import session_key


def merged_day(resource: str, day: date, stored: Any, delivered: Any) -> Any:
    """The day's payload once `delivered` is added to what was `stored` (None: nothing)."""
    if not isinstance(delivered, list) or not isinstance(stored, list):
        return delivered  # a summary (or nothing stored yet): the delivery is the day
    items: dict[str, Any] = {}
    for index, item in enumerate([*stored, *delivered]):
        items[_item_key(resource, day, index, item)] = item
    return sorted(items.values(), key=_item_order)


def _item_key(resource: str, day: date, index: int, item: Any) -> str:
    """A session by its id, a sample by its instant (the same instant delivered again is
    the same sample); anything else keeps its place."""
    if isinstance(item, Mapping):
        if item.get("id") is not None:
            return session_key(resource, day, index, item)
        for name in ("timestamp", "start"):
            if isinstance(item.get(name), str):
                return f"{name}:{item[name]}"
    return f"#{index}"


def _item_order(item: Any) -> tuple[str, str]:
    if not isinstance(item, Mapping):
        return ("", "")
    moment = item.get("time_start") or item.get("timestamp") or item.get("start") or ""
    return (str(moment), str(item.get("id") or ""))
