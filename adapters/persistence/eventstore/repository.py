"""eventsourcing's repository, plus the aggregates the ledger knows to be current
(ADR 0011, ADR 0020).

eventsourcing's cache is fast-forwarded on every get: one SELECT for events newer than
the cached copy, because another process may have written some. Here a cheaper question
answers it when it can: `log_mark()` is a reading that stays the same while no writer
other than this ledger changes the log (`Database.change_mark`: SQLite's
`data_version`; on PostgreSQL the epoch of what this process knows of the chain's head;
read once in a unit of work). An aggregate this ledger saved or loaded when the mark
read M is still current while the mark reads M, so a copy of it is handed out without a
query.

Why it is right: the mark is read before the load, or before the save's commit (or set
by the commit itself, on PostgreSQL), it is stored with, so a change by another writer
after it changes the mark and forces the fast-forward; this ledger's own saves run in a
unit of work and keep what they committed before it ends (on SQLite, under the same lock
as every marked get). On PostgreSQL, whose units take no lock, another thread's get can
run between a save's commit and its keeping, with the mark the commit left (the same
epoch as before it, the commit being this process's own): so from before the commit
until the save is over, its aggregates have no kept copy, and a get keeps none of them
(`saving`, `saved`); it reads the log. A mark of None (no unit of work, or a log this process cannot
follow) always takes the fast-forward. A stale copy could only cost a command a version
conflict, never a wrong write: the event store refuses it.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
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
        shared: bool = False,
    ) -> None:
        """`shared`: units of work of several threads run side by side (PostgreSQL's take
        no lock), so the entries are read and changed under a lock of their own, and a
        kept object may change while it is copied (`unchanged_copy`: ADR 0020)."""
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
        # used first. Read and written in a unit of work (`shared`: under `lock`).
        self.current: OrderedDict[UUID, tuple[Hashable, int, Any]] = OrderedDict()
        self.shared = shared
        self.lock: AbstractContextManager[Any] = threading.Lock() if shared else nullcontext()
        # The aggregates a save of this ledger is committing now (how many saves of each):
        # none is handed out or kept by a get until the saves are over (`saving`).
        self.in_flight: Counter[UUID] = Counter()

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
            with self.lock:
                entry = None if aggregate_id in self.in_flight else self.current.get(aggregate_id)
                if entry is not None and entry[0] == mark:
                    self.current.move_to_end(aggregate_id)
            if entry is not None and entry[0] == mark:
                copied = self.unchanged_copy(entry[2], entry[1])
                if copied is not None:
                    return copied
            # eventsourcing's get: from its cache, fast-forwarded, or from the log. The
            # caller's own object, kept as a saved one is (`keep_saved`).
            aggregate: Any = super().get(aggregate_id)
            self.keep(mark, aggregate, loaded=True)
            return aggregate
        return super().get(
            aggregate_id,
            version=version,
            projector_func=projector_func,
            fastforward_skipping=fastforward_skipping,
            deepcopy_from_cache=deepcopy_from_cache,
        )

    @staticmethod
    def unchanged_copy(kept: Any, version: int) -> Any | None:
        """A copy of the kept object if it is still at the version it was kept at: its
        saver has not changed it since (an aggregate changes only by its events, and
        each event moves its version on before it changes anything else). Checked after
        the copy too: with `shared` units, the saver's thread may go on with it while
        this one copies, and a copy that met a change (its version moved, or its
        attributes changed size under the copy) is not handed out."""
        if kept.version != version:
            return None
        try:
            copied = deepcopy(kept)
        except RuntimeError:
            return None  # changed while it was being copied
        if kept.version != version or copied.version != version:
            return None
        return copied

    def keep_saved(self, aggregates: Sequence[Any]) -> bool:
        """Keep aggregates a save committed, with a mark from before the commit (the
        unit's reading, or the last one taken: never a new one, which would vouch for
        whatever another process committed just before it) or that the commit set (on
        PostgreSQL, the epoch of the head it wrote: ADR 0020), as eventsourcing's own
        cache keeps the aggregates an application saves: the saved objects themselves,
        copied when a get hands them out. False, and nothing kept of
        them, when there is no mark. `Ledger.save` calls it after its commit, in the
        save's unit of work."""
        mark = self.log_mark(existing=True)
        if mark is None:
            self.forget(aggregate.id for aggregate in aggregates)
            return False
        for aggregate in aggregates:
            self.keep(mark, aggregate)
        return True

    def keep(self, mark: Hashable, aggregate: Any, *, loaded: bool = False) -> None:
        """Keep `aggregate` as known current at `mark`, the most recently used. One
        `loaded` (by a get) is not kept while a save of it is committing: it may have
        been read before the commit, and the mark after it can be the same."""
        version = aggregate.version
        with self.lock:
            if loaded and aggregate.id in self.in_flight:
                return
            current = self.current
            entry = current.get(aggregate.id)
            if entry is not None and entry[0] == mark and entry[1] > version:
                # A thread's load that read the log before another thread's save of it
                # committed: the saved one stays.
                return
            current[aggregate.id] = (mark, version, aggregate)
            current.move_to_end(aggregate.id)
            if len(current) > self.maxsize:
                current.popitem(last=False)

    def saving(self, aggregate_ids: Iterable[UUID]) -> None:
        """A save of these aggregates is about to commit: their kept copies are dropped,
        and none is kept by a get, until `saved` (the save's `keep_saved` keeps them)."""
        with self.lock:
            for aggregate_id in aggregate_ids:
                self.in_flight[aggregate_id] += 1
                self.current.pop(aggregate_id, None)

    def saved(self, aggregate_ids: Iterable[UUID]) -> None:
        """The save that `saving` announced is over (kept, or failed and forgotten)."""
        with self.lock:
            for aggregate_id in aggregate_ids:
                left = self.in_flight[aggregate_id] - 1
                if left > 0:
                    self.in_flight[aggregate_id] = left
                else:
                    del self.in_flight[aggregate_id]

    def forget(self, aggregate_ids: Iterable[UUID]) -> None:
        with self.lock:
            for aggregate_id in aggregate_ids:
                self.current.pop(aggregate_id, None)
