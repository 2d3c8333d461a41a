"""eventsourcing's repository, plus the aggregates the ledger knows to be current
(ADR 0011).

eventsourcing's cache is fast-forwarded on every get: one SELECT for events newer than
the cached copy, because another process may have written some. Here a cheaper question
answers it when it can: `log_mark()` is a reading that stays the same while no writer
other than this ledger changes the log (`Database.change_mark`: SQLite's
`data_version`, read in a unit of work). An aggregate this ledger saved or loaded when
the mark read M is still current while the mark reads M, so a copy of it is handed out
without a query.

Why it is right: the mark is read before the load, or before the save's commit, it is
stored with, so a change by another writer after it changes the mark and forces the
fast-forward; this ledger's own saves run in a unit of work, under the same lock as
every marked get, and keep what they save before their commit (a failed commit takes it
back), all before releasing the lock. A mark of None (PostgreSQL, or no unit of work)
always takes the fast-forward. A stale copy could only cost a command a version
conflict, never a wrong write: the event store refuses it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from copy import deepcopy
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.application import ProjectorFunction, Repository, project_aggregate
from eventsourcing.persistence import EventStore


class LogMark(Protocol):
    """A reading of the log's "changed by another writer" counter, taken at the first
    call of a unit of work if none was; with `existing`, only a reading taken before the
    call (None if there is none)."""

    def __call__(self, *, existing: bool = False) -> Hashable | None: ...


class KnownCurrentRepository(Repository[UUID]):
    def __init__(
        self,
        event_store: EventStore[UUID],
        snapshot_store: EventStore[UUID] | None,
        cache_size: int,
        *,
        log_mark: LogMark,
    ) -> None:
        super().__init__(
            event_store,
            snapshot_store=snapshot_store,
            cache_maxsize=cache_size or None,
            fastforward=True,
        )
        self.log_mark = log_mark
        self.maxsize = max(cache_size, 1)
        # Per aggregate saved by this ledger: the mark it is known current at, its
        # version then, and the saved object. Apart from eventsourcing's cache (whose
        # entries a get outside any unit of work fast-forwards in place). Least recently
        # used first. Read and written only in a unit of work (under its lock), except
        # `forget`, whose dict operations are atomic.
        self.current: OrderedDict[UUID, tuple[Hashable, int, Any]] = OrderedDict()

    def get(
        self,
        aggregate_id: UUID,
        *,
        version: int | None = None,
        projector_func: ProjectorFunction[Any, Any] = project_aggregate,
        fastforward_skipping: bool = False,
        deepcopy_from_cache: bool = True,
    ) -> Any:
        """The aggregate, as a copy of the caller's own (`copy.deepcopy`, as
        eventsourcing's repository copies from its cache)."""
        plain = (
            version is None
            and projector_func is project_aggregate
            and not fastforward_skipping
            and deepcopy_from_cache
        )
        mark = self.log_mark() if plain else None
        if mark is not None:
            entry = self.current.get(aggregate_id)
            # Still at the version it was saved at: the saver has not changed it since
            # (an aggregate changes only by its events, and each moves its version on).
            if entry is not None and entry[0] == mark and entry[2].version == entry[1]:
                self.current.move_to_end(aggregate_id)
                return deepcopy(entry[2])
            # eventsourcing's get: from its cache, fast-forwarded, or from the log. The
            # caller's own object, kept as a saved one is (`keep_saved`).
            aggregate: Any = super().get(aggregate_id)
            self.keep(mark, aggregate)
            return aggregate
        return super().get(
            aggregate_id,
            version=version,
            projector_func=projector_func,
            fastforward_skipping=fastforward_skipping,
            deepcopy_from_cache=deepcopy_from_cache,
        )

    def keep_saved(self, aggregates: Sequence[Any]) -> bool:
        """Keep aggregates a save is about to commit, with a mark from before the commit
        (the unit's reading, or the last one taken: never a new one, which would vouch
        for whatever another process committed just before it), as eventsourcing's own
        cache keeps the aggregates an application saves: the saved objects themselves,
        copied when a get hands them out. False, and nothing kept of them, when there is
        no mark. `Ledger.save` calls it before its commit and `forget`s them if the commit
        fails, in one unit of work."""
        mark = self.log_mark(existing=True)
        for aggregate in aggregates:
            if mark is None:
                self.current.pop(aggregate.id, None)
            else:
                self.keep(mark, aggregate)
        return mark is not None

    def keep(self, mark: Hashable, aggregate: Any) -> None:
        """Keep `aggregate` as known current at `mark`, the most recently used."""
        current = self.current
        current[aggregate.id] = (mark, aggregate.version, aggregate)
        current.move_to_end(aggregate.id)
        if len(current) > self.maxsize:
            current.popitem(last=False)

    def forget(self, aggregate_ids: Iterable[UUID]) -> None:
        for aggregate_id in aggregate_ids:
            self.current.pop(aggregate_id, None)
