"""The generic ledger on eventsourcing's in-memory (POPO) infrastructure: no database.

What every save does: the recorder gets the domain events with their stored form, in one
call; snapshots are taken at the intervals the composition root gives, unless the
aggregate refuses one; a repository that keeps saved aggregates is told before the commit
and told to forget them when the commit fails."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import EventStore, IntegrityError, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory
from healthledger.adapters.persistence.eventstore.repository import KnownCurrentRepository
from healthledger.domain.ledger import Ledger, command


class Counter(Aggregate):
    # Declared (rather than named in @event) so that the tests can name them, typed.
    class Incremented(Aggregate.Event):
        pass

    class Sealed(Aggregate.Event):
        pass

    def __init__(self) -> None:
        self.count = 0
        self.sealed = False

    @event(Incremented)
    def increment(self) -> None:
        self.count += 1

    @event(Sealed)
    def seal(self) -> None:
        self.sealed = True

    @property
    def may_be_snapshotted(self) -> bool:
        return not self.sealed


class Other(Aggregate):
    class Touched(Aggregate.Event):
        pass

    @event(Touched)
    def touch(self) -> None:
        pass


class Recorder(POPOApplicationRecorder):
    """eventsourcing's in-memory recorder, noting what each insert was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[list[StoredEvent], dict[str, Any]]] = []
        self.refuse_next = False

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        self.calls.append((list(stored_events), kwargs))
        if self.refuse_next:
            self.refuse_next = False
            raise IntegrityError("refused")
        return super().insert_events(stored_events, **kwargs)


class Factory(POPOFactory):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__(env={})
        self.recorder = recorder

    def application_recorder(self) -> Recorder:
        return self.recorder

    def is_snapshotting_enabled(self) -> bool:
        return True


def _ledger(**options: Any) -> tuple[Ledger, Recorder]:
    recorder = Recorder()
    # The ledger takes an InfrastructureFactory of its default recorder type; eventsourcing's
    # POPOFactory is generic in its own (POPOTrackingRecorder), and the parameter invariant.
    return Ledger(Factory(recorder), **options), recorder  # type: ignore[arg-type]


def test_the_recorder_gets_the_domain_events_with_their_stored_form() -> None:
    ledger, recorder = _ledger()
    counter, other = Counter(), Other()
    counter.increment()
    other.touch()
    ledger.save(counter, None, other)
    (stored, kwargs), *more = recorder.calls
    assert more == []
    events = kwargs["aggregate_events"]
    assert [type(e) for e in events] == [
        Counter.Created,
        Counter.Incremented,
        Other.Created,
        Other.Touched,
    ]
    assert [(s.originator_id, s.originator_version) for s in stored] == [
        (e.originator_id, e.originator_version) for e in events
    ]
    found = ledger.find(counter.id)
    assert isinstance(found, Counter) and found.count == 1 and found is not counter
    assert ledger.find(counter.id, version=1).count == 0  # type: ignore[union-attr]


def test_snapshots_at_the_given_intervals_unless_the_aggregate_refuses() -> None:
    ledger, _ = _ledger(snapshot_intervals={Counter: 2})
    assert ledger.snapshots is not None
    counter, other = Counter(), Other()
    other.touch()
    ledger.save(counter, other)  # Counter v1, Other v2: no interval for Other
    counter.increment()
    counter.increment()
    ledger.save(counter)  # v2 and v3: a snapshot at 2
    assert [s.originator_version for s in ledger.snapshots.get(counter.id)] == [2]
    assert list(ledger.snapshots.get(other.id)) == []
    counter.seal()  # v4, on the interval: refused
    ledger.save(counter)
    assert [s.originator_version for s in ledger.snapshots.get(counter.id)] == [2]


def test_a_save_runs_in_one_unit_of_work_as_does_a_command() -> None:
    entered: list[str] = []

    @contextmanager
    def unit() -> Any:
        entered.append("enter")
        yield
        entered.append("exit")

    ledger, _ = _ledger(unit_of_work=unit)

    class UseCase:
        def __init__(self) -> None:
            self.ledger = ledger

        @command
        def create(self) -> UUID:
            counter = Counter()
            return counter.id

    UseCase().create()
    assert entered == ["enter", "exit"]
    ledger.save(Counter())
    assert entered == ["enter", "exit"] * 2


def _known_current(mark: list[Hashable]) -> Any:
    def log_mark(*, existing: bool = False) -> Hashable:
        return mark[0]

    def build(
        events: EventStore[UUID], snapshots: EventStore[UUID] | None, size: int
    ) -> KnownCurrentRepository:
        return KnownCurrentRepository(events, snapshots, size, log_mark=log_mark)

    return build


def test_what_a_save_keeps_is_handed_out_as_copies_until_the_mark_moves() -> None:
    mark: list[Hashable] = ["m1"]
    ledger, recorder = _ledger(repository=_known_current(mark))
    counter = Counter()
    ledger.save(counter)
    reads_before = len(recorder.calls)
    first, second = ledger.find(counter.id), ledger.find(counter.id)
    assert isinstance(first, Counter) and isinstance(second, Counter)
    assert first is not counter and second is not first
    first.increment()  # the caller's own: nothing kept changes
    again = ledger.find(counter.id)
    assert isinstance(again, Counter) and again.count == 0
    assert len(recorder.calls) == reads_before  # no insert, and the kept copy served
    mark[0] = "m2"  # another writer committed: the log decides again
    counter.increment()  # and this change was never saved
    moved = ledger.find(counter.id)
    assert isinstance(moved, Counter) and moved.count == 0 and moved.version == 1


def test_a_save_that_fails_leaves_nothing_of_itself_kept() -> None:
    mark: list[Hashable] = ["m1"]
    ledger, recorder = _ledger(repository=_known_current(mark))
    counter = Counter()
    ledger.save(counter)
    counter.increment()
    recorder.refuse_next = True
    with pytest.raises(IntegrityError):
        ledger.save(counter)
    found = ledger.find(counter.id)
    assert isinstance(found, Counter) and found.count == 0 and found.version == 1
