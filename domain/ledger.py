"""The event-sourced application every use case writes through: one log, one outbox.

The infrastructure (recorders, transcoder, repository) is injected by the composition
root; the ledger hands the recorder the domain events next to their stored form, so that
read models and erasure effects are written in the same transaction as the events that
cause them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    Repository,
)
from eventsourcing.domain import (
    Aggregate,
    DomainEventProtocol,
    MutableOrImmutableAggregate,
)
from eventsourcing.persistence import EventStore, InfrastructureFactory, Recording

Clock = Callable[[], datetime]

# Builds the ledger's repository from its event store, snapshot store and cache size.
RepositoryFactory = Callable[[EventStore[UUID], EventStore[UUID] | None, int], Repository[UUID]]


def utc_now() -> datetime:
    return datetime.now(UTC)


@runtime_checkable
class KeepsSaved(Protocol):
    """A repository that keeps what a save committed (ADR 0011): `saving` before the
    commit (no copy from before it is handed out until `saved`), `keep_saved` after it,
    in the save's unit of work (True if it kept them), `forget` if the save failed, and
    `saved` once the save is over, whatever became of it."""

    def saving(self, aggregate_ids: Iterable[UUID]) -> None: ...

    def keep_saved(self, aggregates: Sequence[Any]) -> bool: ...

    def forget(self, aggregate_ids: Iterable[UUID]) -> None: ...

    def saved(self, aggregate_ids: Iterable[UUID]) -> None: ...


@runtime_checkable
class ReadsManyStreams(Protocol):
    """A recorder that reads many aggregates' stored events in one query: per id that has
    any, its events in version order."""

    def select_streams(self, originator_ids: Sequence[UUID]) -> Mapping[UUID, Sequence[Any]]: ...


@runtime_checkable
class ReadsFoundingEvents(Protocol):
    """A recorder that reads many aggregates' first stored events in one query."""

    def select_founding(self, originator_ids: Sequence[UUID]) -> Mapping[UUID, Any]: ...


# The attribute an aggregate may define to refuse a snapshot (an erased user: erasure
# deletes its snapshots, and a snapshot taken after would bring its state back).
MAY_BE_SNAPSHOTTED = "may_be_snapshotted"


class Ledger(Application[UUID]):
    name = "healthledger"

    def __init__(
        self,
        factory: InfrastructureFactory,
        *,
        snapshot_intervals: Mapping[type, int] | None = None,
        aggregate_cache_size: int = 10_000,
        unit_of_work: Callable[[], AbstractContextManager[Any]] = nullcontext,
        repository: RepositoryFactory | None = None,
    ):
        # Public names: the attributes a subclass of `Application` sets stay clear of the
        # library's own private ones.
        self.infrastructure = factory
        self.repository_factory = repository
        self.cache_size = aggregate_cache_size
        # The scope of one command's loads and saves (the persistence adapter decides
        # what it holds for them; each save is still its own transaction).
        self.unit_of_work: Callable[[], AbstractContextManager[Any]] = unit_of_work
        # Per aggregate class: every how many events it is snapshotted.
        self.snapshot_intervals: dict[type, int] = dict(snapshot_intervals or {})
        env = {"IS_SNAPSHOTTING_ENABLED": "y"}
        if aggregate_cache_size > 0:
            # An LRU cache of aggregates, fast-forwarded from the log on every get (one
            # query for newer events), so it is right when other processes write too.
            env[self.AGGREGATE_CACHE_MAXSIZE] = str(aggregate_cache_size)
            env[self.AGGREGATE_CACHE_FASTFORWARD] = "y"
        super().__init__(env=env)
        repository_ = self.repository
        self.keeper = repository_ if isinstance(repository_, KeepsSaved) else None

    def construct_factory(self, env: Any) -> InfrastructureFactory:
        return self.infrastructure

    def construct_repository(self) -> Repository[UUID]:
        if self.repository_factory is None:
            return super().construct_repository()
        return self.repository_factory(self.events, self.snapshots, self.cache_size)

    def save(
        self,
        *objs: MutableOrImmutableAggregate[UUID] | DomainEventProtocol[UUID] | None,
        **kwargs: Any,
    ) -> list[Recording[UUID]]:
        """Save aggregates' pending events in one transaction; with `tracking`, also a
        follower's position in the notification log (the outbox's exactly-once step).

        The recorder gets the domain events beside their stored form (`EventStore.put`
        passes keyword arguments on to `insert_events`): it projects them into the read
        models and applies erasure effects in the transaction that stores them. A save
        is a unit of work of its own, or part of the caller's."""
        tracking = kwargs.pop("tracking", None)
        events: list[DomainEventProtocol[UUID]] = []
        aggregates: dict[UUID, Aggregate] = {}
        for obj in objs:
            # What `ProcessingEvent.collect_events` does, with a class check instead of
            # its runtime protocol checks, which cost more than a statement.
            if isinstance(obj, Aggregate):
                events.extend(obj.collect_events())
                aggregates[obj.id] = obj
            elif isinstance(obj, DomainEventProtocol):
                events.append(obj)
            elif obj is not None:
                raise TypeError(f"the ledger saves mutable aggregates and events, not {obj!r}")
        keeper = self.keeper
        with self.unit_of_work():
            # From the commit until what it saved is kept, another thread's unit of work
            # can read the head this commit left (on PostgreSQL, the same epoch as
            # before it): the copies kept from before the commit are not handed out.
            if keeper is not None:
                keeper.saving(aggregates)
            try:
                try:
                    recordings = self.events.put(
                        events, tracking=tracking, aggregate_events=events, **kwargs
                    )
                except BaseException:
                    # Nothing kept may stand for what was not committed.
                    if keeper is not None:
                        keeper.forget(aggregates)
                    raise
                # What was saved is the freshest copy there is: a repository that keeps
                # aggregates known current keeps it now, committed, before the unit of
                # work ends (with a mark its persistence vouches for: ADR 0011, ADR 0020).
                kept = keeper is not None and keeper.keep_saved(list(aggregates.values()))
            finally:
                if keeper is not None:
                    keeper.saved(aggregates)
            # Otherwise the saved aggregates go to eventsourcing's cache, from which
            # loads fast-forward.
            cache = self.repository.cache
            if not kept and cache is not None:
                for aggregate_id, aggregate in aggregates.items():
                    cache.put(aggregate_id, aggregate)
        self.take_due_snapshots(events, aggregates)
        return recordings

    def take_due_snapshots(
        self,
        events: Sequence[DomainEventProtocol[UUID]],
        aggregates: Mapping[UUID, Aggregate],
    ) -> None:
        """Snapshot each aggregate of a type in `snapshot_intervals` whose event of this
        save lands on a multiple of its interval, unless it refuses (an erased user)."""
        intervals = self.snapshot_intervals
        if not intervals or self.snapshots is None:
            return
        for event in events:
            aggregate = aggregates.get(event.originator_id)
            interval = intervals.get(type(aggregate))
            if interval is None or event.originator_version % interval:
                continue
            if getattr(aggregate, MAY_BE_SNAPSHOTTED, True):
                self.take_snapshot(event.originator_id, version=event.originator_version)

    def find(self, aggregate_id: UUID, version: int | None = None) -> Aggregate | None:
        """The aggregate (at `version`, or its latest), or None if there is none."""
        try:
            return self.repository.get(aggregate_id, version=version)
        except AggregateNotFoundError:
            return None

    def find_many(
        self, aggregate_ids: Sequence[UUID], versions: Mapping[UUID, int] | None = None
    ) -> dict[UUID, Aggregate]:
        """The latest of each of these aggregates that exists (or, of those `versions`
        names, the aggregate at that version: a read as of an instant), read from the
        store in two queries (the snapshots, the events), whatever their number: what a
        batch (a sweep's erasures, a page read as of an instant) loads. Recorders that
        cannot read many streams at once are read one aggregate at a time."""
        versions = versions or {}
        events, snapshots = self.events.recorder, self.snapshots
        if not isinstance(events, ReadsManyStreams) or (
            snapshots is not None and not isinstance(snapshots.recorder, ReadsManyStreams)
        ):
            found = {i: self.find(i, version=versions.get(i)) for i in aggregate_ids}
            return {key: aggregate for key, aggregate in found.items() if aggregate is not None}
        taken: Mapping[UUID, Sequence[Any]] = {}
        if snapshots is not None:
            assert isinstance(snapshots.recorder, ReadsManyStreams)
            taken = snapshots.recorder.select_streams(aggregate_ids)
        stored = events.select_streams(aggregate_ids)
        loaded: dict[UUID, Aggregate] = {}
        for aggregate_id in aggregate_ids:
            aggregate: Any = None
            after = 0
            upto = versions.get(aggregate_id)
            held = [
                snap
                for snap in taken.get(aggregate_id, ())
                if upto is None or snap.originator_version <= upto
            ]
            if held and snapshots is not None:
                snapshot: Any = snapshots.mapper.to_domain_event(held[-1])
                aggregate, after = snapshot.mutate(None), snapshot.originator_version
            to_domain_event = self.mapper.to_domain_event
            for event in stored.get(aggregate_id, ()):
                if upto is not None and event.originator_version > upto:
                    break
                if event.originator_version > after:
                    # What `project_aggregate` does, without its runtime protocol check
                    # per event (which costs more than the event's own mutation).
                    mutating: Any = to_domain_event(event)
                    aggregate = mutating.mutate(aggregate)
            if isinstance(aggregate, Aggregate):
                loaded[aggregate_id] = aggregate
        return loaded

    def founded_many(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, Aggregate]:
        """Each of these aggregates that exists as its first event made it (what never
        changes after it: whose it is, its team, its kind), read in one query and one
        event decoded each, whatever the length of its stream. Recorders that cannot read
        many first events at once: the latest of each (`find_many`)."""
        events = self.events.recorder
        if not isinstance(events, ReadsFoundingEvents):
            return self.find_many(aggregate_ids)
        to_domain_event = self.mapper.to_domain_event
        founded: dict[UUID, Aggregate] = {}
        for aggregate_id, stored in events.select_founding(aggregate_ids).items():
            first: Any = to_domain_event(stored)
            aggregate = first.mutate(None)
            if isinstance(aggregate, Aggregate):
                founded[aggregate_id] = aggregate
        return founded


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
