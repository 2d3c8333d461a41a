"""A team's source priorities (issue 34; `team.get_source_priorities` and
`update_source_priorities` of the official clients): per kind of data, the providers in
the order in which they win when several report the same day or the same instant.

The kinds are the clients' `PriorityResource`: the four summaries that most makers report
(workouts, activity, sleep, body) each on its own, and every timeseries resource together
(`timeseries`). A provider the team has not listed follows those listed, in the read's
own default order (docs/data.md). The order is a fact of the team (an event on it, so a
read `as_of` an instant sees the order of that instant).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

PRIORITY_DATA_TYPES = ("workouts", "activity", "sleep", "body", "timeseries")
SUMMARY_DATA_TYPES = frozenset(PRIORITY_DATA_TYPES) - {"timeseries"}
# The most providers an order lists (the catalog holds about forty).
MAX_LISTED = 100

SourcePriorities = Mapping[str, Sequence[str]]


def data_type_of(resource: str, *, timeseries: bool) -> str | None:
    """The kind of data whose order decides between the providers of `resource` (None: a
    summary resource that no order covers, such as meals)."""
    if timeseries:
        return "timeseries"
    return resource if resource in SUMMARY_DATA_TYPES else None


def provider_rank(order: Sequence[str]) -> Callable[[str], int]:
    """A sort key of providers: those of `order` first, in its order, then every other
    provider equally (a stable sort keeps the read's own order among them)."""
    ranks = {slug: n for n, slug in enumerate(order)}
    return lambda provider: ranks.get(provider, len(ranks))


def checked_order(providers: Sequence[str], known: Callable[[str], bool]) -> list[str]:
    """The order as given, refused (ValueError, naming the problem) with an unknown
    provider or one listed twice."""
    if len(providers) > MAX_LISTED:
        raise ValueError(f"at most {MAX_LISTED} providers")
    seen: set[str] = set()
    for slug in providers:
        if not known(slug):
            raise ValueError("unknown provider slug")
        if slug in seen:
            raise ValueError("a provider is listed twice")
        seen.add(slug)
    return list(providers)
