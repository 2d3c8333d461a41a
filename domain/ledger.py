"""The event-sourced application every use case writes through: one log, one outbox.

The recorder is injected by the composition root (an adapter); the ledger hands it the
domain events next to their stored form, so that read models and erasure effects are
written in the same transaction as the events that cause them.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager, nullcontext
from copy import deepcopy
from datetime import UTC, date, datetime
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar
from uuid import UUID

from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    ProcessingEvent,
    Repository,
)
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    InfrastructureFactory,
    JSONTranscoder,
    Recording,
    Tracking,
    Transcoder,
    Transcoding,
    UUIDAsHex,
)
from healthledger.domain.users import ERASED, User

Clock = Callable[[], datetime]


class LogMark(Protocol):
    """A reading of the log's "changed by another writer" counter (`LedgerRepository`);
    with `earlier`, a reading taken earlier in the same unit of work will do."""

    def __call__(self, *, earlier: bool = False) -> Hashable | None: ...


def no_log_mark(*, earlier: bool = False) -> None:
    return None


def utc_now() -> datetime:
    return datetime.now(UTC)


class DateAsISO(Transcoding):
    type = date
    name = "date_iso"

    def encode(self, obj: date) -> str:
        return obj.isoformat()

    def decode(self, data: str) -> date:
        return date.fromisoformat(data)


class LedgerTranscoder(JSONTranscoder):
    """Finds a transcoding by the value's class or any base class.

    freezegun's FakeDatetime (and FakeDate) are subclasses of datetime (and date); an
    exact-type lookup would refuse to store them, so frozen-time tests could not save.
    """

    def _encode_obj(self, o: Any) -> dict[str, Any]:
        # The value's own class first (every UUID and datetime of every event), then its
        # bases.
        transcoding = self.types.get(type(o))
        if transcoding is None:
            for cls in type(o).__mro__[1:]:
                transcoding = self.types.get(cls)
                if transcoding is not None:
                    break
            else:
                return super()._encode_obj(o)
        return {"_type_": transcoding.name, "_data_": transcoding.encode(o)}


class LedgerRepository(Repository[UUID]):
    """eventsourcing's repository, plus the aggregates this ledger knows to be current.

    The cache of `Repository` is fast-forwarded on every get: one SELECT for events newer
    than the cached copy, because another process may have written some. That SELECT and
    its lock bookkeeping were the largest cost of a delete or undo after the commit. Here
    a cheaper question answers it when it can: `log_mark()` is a reading that stays the
    same while no writer other than this ledger changes the log (SQLite's
    `data_version`, read in a unit of work, which holds the process's write lock). An
    aggregate this ledger saved or loaded when the mark read M is still current while
    the mark reads M, so it is handed out without a query.

    Why it is right: the mark is read before the load or save it is stored with, so a
    change by another writer after it changes the mark and forces the fast-forward; this
    ledger's own saves run in a unit of work, under the same lock as every marked get,
    and record what they saved before releasing it. A mark of None (PostgreSQL, or no
    unit of work) always takes the fast-forward. A stale copy could only cost a
    command a version conflict, never a wrong write: the event store refuses it.
    """

    def __init__(self, *args: Any, log_mark: LogMark, maxsize: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log_mark = log_mark
        self._maxsize = maxsize
        # Private copies, apart from eventsourcing's cache (whose entries gets outside any
        # unit of work fast-forward in place); a get hands out a copy of its own. Least
        # recently used first. Read and written only in a unit of work (under its lock),
        # except `forget`, whose one dict operation is atomic.
        # Keyed by the id's int: hashing and comparing a UUID are Python calls.
        self._current: OrderedDict[int, tuple[Hashable, Aggregate]] = OrderedDict()

    def get(self, aggregate_id: UUID, *, version: int | None = None, **kwargs: Any) -> Any:
        mark = self._log_mark() if version is None and not kwargs else None
        if mark is None:
            return super().get(aggregate_id, version=version, **kwargs)
        key = aggregate_id.int
        entry = self._current.get(key)
        if entry is not None and entry[0] == mark:
            self._current.move_to_end(key)
            return copy_aggregate(entry[1])
        aggregate = super().get(aggregate_id)
        self._keep(aggregate_id, mark, copy_aggregate(aggregate))
        return aggregate

    def mark(self) -> Hashable | None:
        """The mark for a save: any reading taken before it is right (see the class)."""
        return self._log_mark(earlier=True)

    def saved(self, aggregates: Iterable[Aggregate], mark: Hashable | None) -> None:
        """Aggregates just saved, with a mark read before saving them (None: unknown).

        Copied: the saved object is also eventsourcing's cache entry, which a get outside
        any unit of work may fast-forward in place at any moment."""
        for aggregate in aggregates:
            if mark is None:
                self._current.pop(aggregate.id.int, None)
            else:
                self._keep(aggregate.id, mark, copy_aggregate(aggregate))

    def forget(self, aggregate_ids: Iterable[UUID]) -> None:
        for aggregate_id in aggregate_ids:
            self._current.pop(aggregate_id.int, None)

    def _keep(self, aggregate_id: UUID, mark: Hashable, aggregate: Aggregate) -> None:
        current = self._current
        key = aggregate_id.int
        current[key] = (mark, aggregate)
        current.move_to_end(key)
        if len(current) > self._maxsize:
            current.popitem(last=False)


def copy_aggregate(aggregate: Any) -> Any:
    """A copy a command may change freely: `CheapCopy`'s copy, called without
    `copy.deepcopy`'s memo and dispatch (every aggregate of the ledger has one)."""
    clone = getattr(aggregate, "__deepcopy__", None)
    return clone({}) if clone is not None else deepcopy(aggregate)


class Ledger(Application[UUID]):
    name = "healthledger"

    def __init__(
        self,
        factory: InfrastructureFactory,
        *,
        user_snapshot_interval: int = 50,
        aggregate_cache_size: int = 10_000,
        unit_of_work: Callable[[], AbstractContextManager[Any]] = nullcontext,
        log_mark: LogMark = no_log_mark,
    ):
        self._given_factory = factory
        self._unit_of_work = unit_of_work
        self._log_mark = log_mark
        # Long-lived users replay from a snapshot; erasure deletes their snapshots.
        self.snapshotting_intervals = {User: user_snapshot_interval}
        env = {"IS_SNAPSHOTTING_ENABLED": "y"}
        if aggregate_cache_size > 0:
            # An LRU cache of aggregates, fast-forwarded from the log on every get (one
            # query for newer events), so it is right when other processes write too.
            env[self.AGGREGATE_CACHE_MAXSIZE] = str(aggregate_cache_size)
            env[self.AGGREGATE_CACHE_FASTFORWARD] = "y"
        super().__init__(env=env)

    def construct_factory(self, env: Any) -> InfrastructureFactory:
        return self._given_factory

    def construct_repository(self) -> LedgerRepository:
        maxsize = int(self.env.get(self.AGGREGATE_CACHE_MAXSIZE) or 0)
        return LedgerRepository(
            self.events,
            snapshot_store=self.snapshots,
            cache_maxsize=maxsize or None,
            fastforward=True,
            log_mark=self._log_mark if maxsize else no_log_mark,
            maxsize=max(maxsize, 1),
        )

    @property
    def repository(self) -> LedgerRepository:
        return self._repository  # type: ignore[return-value]

    def construct_transcoder(self) -> Transcoder:
        transcoder = LedgerTranscoder()
        self.register_transcodings(transcoder)
        return transcoder

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        transcoder.register(UUIDAsHex())
        transcoder.register(DecimalAsStr())
        transcoder.register(DatetimeAsISO())
        transcoder.register(DateAsISO())

    def save(
        self, *objs: Any, tracking: Tracking | None = None, **kwargs: Any
    ) -> list[Recording[UUID]]:
        """Save aggregates' pending events in one transaction; with `tracking`, also a
        follower's position in the notification log (the outbox's exactly-once step).

        Same steps as `Application.save`, minus its runtime-protocol isinstance checks on
        every object (slow in Python 3.11, and we only ever save aggregates). A save is a
        unit of work of its own, or part of the caller's: what it saved is known current
        before another command of this process can load it (`LedgerRepository`).
        """
        processing_event: ProcessingEvent[UUID] = ProcessingEvent(tracking=tracking)
        for aggregate in objs:
            if aggregate is not None:
                processing_event.events.extend(aggregate.collect_events())
                processing_event.aggregates[aggregate.id] = aggregate
        processing_event.saved_kwargs.update(kwargs)
        repository = self.repository
        with self.unit_of_work():
            # Read before writing: another writer's change after this reading moves it.
            mark = repository.mark()
            try:
                recordings = self._record(processing_event)
            except BaseException:
                repository.forget(processing_event.aggregates)
                raise
            repository.saved(processing_event.aggregates.values(), mark)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        return recordings

    def _record(self, processing_event: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        # The recorder gets the domain events too: it projects them into the read
        # models and applies erasure effects inside the transaction that stores them.
        recordings = self.events.put(
            processing_event.events,
            tracking=processing_event.tracking,
            aggregate_events=processing_event.events,
            **processing_event.saved_kwargs,
        )
        # What was just saved is the freshest copy there is: the next command on it (a
        # delete after a create, say) starts from the cache instead of the database.
        cache = self.repository.cache
        if cache is not None:
            for aggregate_id, aggregate in processing_event.aggregates.items():
                cache.put(aggregate_id, aggregate)
        return recordings

    def _take_snapshots(self, processing_event: ProcessingEvent[UUID]) -> None:
        # `Application._take_snapshots`, for aggregates whose events apply themselves (all
        # of ours), in one pass. An aggregate of a type in `snapshotting_intervals` is
        # snapshotted when one of its events lands on a multiple of the interval. Erasure
        # deletes a user's snapshots in its own transaction; a snapshot taken after it
        # (snapshots follow the save) would bring one back: erased users never are.
        if self.snapshots is None:
            return
        intervals = self.snapshotting_intervals
        aggregates = processing_event.aggregates
        for event in processing_event.events:
            aggregate = aggregates.get(event.originator_id)
            interval = intervals.get(type(aggregate))
            if interval is None or event.originator_version % interval:
                continue
            if isinstance(aggregate, User) and aggregate.status == ERASED:
                continue
            self.take_snapshot(event.originator_id, version=event.originator_version)

    def unit_of_work(self) -> AbstractContextManager[Any]:
        """The scope of one command's loads and saves (the persistence adapter decides what
        it holds for them; each save is still its own transaction)."""
        return self._unit_of_work()

    def find(self, aggregate_id: UUID, version: int | None = None) -> Aggregate | None:
        try:
            return self.repository.get(aggregate_id, version=version)
        except AggregateNotFoundError:
            return None


class UsesLedger(Protocol):
    ledger: Ledger


S = TypeVar("S", bound=UsesLedger)
P = ParamSpec("P")
R = TypeVar("R")


def command(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a use case's method in one unit of work of its ledger (`Ledger.unit_of_work`)."""

    @functools.wraps(method)
    def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.ledger.unit_of_work():
            return method(self, *args, **kwargs)

    return run
