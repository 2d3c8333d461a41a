"""The public webhook event types and the filters an endpoint subscribes with.

The catalog itself is reference data (`adapters/reference/webhook_event_types.json`,
expanded over spec 2.6's resources); this module holds what a catalog is and the filter
rules, so the management API and, later, the dispatcher match alike.

A filter entry is either an exact event type (`daily.data.sleep.created`) or a prefix: a
dotted stem followed by `.*` (`daily.data.*`, `historical.*`), matching every type that
starts with the stem and a dot. An entry must match at least one type of the catalog, so a
typo is refused instead of silently matching nothing. An endpoint without filter entries
receives every event type.

The catalog holds the production service's types and a few of our own, marked
`extension` (the user lifecycle types that tell a receiver's mirror of deletions and
erasures); filters treat both alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date

PREFIX_SUFFIX = ".*"

# Lower-case dotted names: what an event type, or the stem of a prefix entry, looks like.
_DOTTED = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")


@dataclass(frozen=True)
class EventType:
    name: str
    description: str
    # Set on deprecated types: the date from which they are no longer sent, and successor.
    removed_on: date | None = None
    replaced_by: str | None = None
    # Ours, not the production service's (`user.deleted`, `user.deletion_undone`,
    # `user.erased`): its official client has no model for them (docs/compatibility.md).
    extension: bool = False

    @property
    def deprecated(self) -> bool:
        return self.removed_on is not None


class EventTypeCatalog:
    """Every event type a webhook endpoint may receive, in catalog order."""

    def __init__(self, event_types: Iterable[EventType]) -> None:
        self.types: tuple[EventType, ...] = tuple(event_types)
        self.names: frozenset[str] = frozenset(t.name for t in self.types)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def filter_problem(self, entry: str) -> str | None:
        """Why `entry` is not a filter of this catalog (a message), or None."""
        stem = entry.removesuffix(PREFIX_SUFFIX)
        if not _DOTTED.match(stem):
            return (
                f"'{_shown(entry)}' is neither an event type nor a prefix ending in "
                f"'{PREFIX_SUFFIX}' (such as 'daily.data.*')."
            )
        if stem == entry:
            if entry not in self.names:
                return f"'{entry}' is not a known event type."
        elif not any(filter_matches(entry, name) for name in self.names):
            return f"'{entry}' matches no known event type."
        return None


def filter_matches(entry: str, event_type: str) -> bool:
    """Whether one filter entry (an exact type or `stem.*`) selects `event_type`."""
    if entry.endswith(PREFIX_SUFFIX):
        return event_type.startswith(entry[: -len(PREFIX_SUFFIX)] + ".")
    return entry == event_type


def subscribed(filter_types: Sequence[str], event_type: str) -> bool:
    """Whether an endpoint with these filter entries receives `event_type` (none: every)."""
    return not filter_types or any(filter_matches(entry, event_type) for entry in filter_types)


def _shown(entry: str) -> str:
    # A filter entry is the caller's own input: echo a bounded, printable part of it only.
    return "".join(c if c.isprintable() else "?" for c in entry[:80])
