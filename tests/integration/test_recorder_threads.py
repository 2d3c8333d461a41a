"""Threads of one process writing through one recorder, outside units of work (as
eventsourcing's contract test `test_concurrent_no_conflicts` writes): each write links
onto the chain's head the writes before it left.

SQLite links a write onto the head this recorder's last write left, without reading it,
while the writer's change mark says no other connection committed since (ADR 0020). That
mark does not move for this writer's own commits, so the head must be known before the
next write of any thread begins. It once was set only after the write's lock was let go:
a write of another thread in between linked onto the head before, and failed on the
UNIQUE chain_position (the contract test failed so once in CI, about once in twenty runs
on a busy machine). The interleaving is forced here, at the moment another thread could
first write: on SQLite when this thread lets go of the process's write lock, on
PostgreSQL (no process lock) right after its commit, where the head this process
remembers is a guess checked under the recorder's table lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from types import TracebackType
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.domain import AggregateEvent
from eventsourcing.persistence import StoredEvent
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import stored_events
from healthledger.adapters.persistence.eventstore.chain import GENESIS
from healthledger.adapters.persistence.eventstore.recorder import Inserted, LedgerRecorder
from sqlalchemy import select

# How long the forced write of the other thread may take (it waits for no one).
OTHER_WRITE_SECONDS = 30.0


@pytest.fixture
def recorder(database_url: str) -> Iterator[LedgerRecorder]:
    db = Database(database_url)
    try:
        yield LedgerRecorder(db)
    finally:
        db.dispose()


def write_one(recorder: LedgerRecorder) -> None:
    """One event of a new stream, with its domain event (as the ledger passes it)."""
    originator_id = uuid4()
    recorder.insert_events(
        [StoredEvent(originator_id, 1, "topic", b"state")],
        aggregate_events=[
            AggregateEvent(
                originator_id=originator_id, originator_version=1, timestamp=datetime.now(UTC)
            )
        ],
    )


class ThenOnce:
    """A write of another thread, run once, to its end, from a hook in this thread."""

    def __init__(self, recorder: LedgerRecorder) -> None:
        self.recorder = recorder
        self.thread = threading.get_ident()
        self.ran = False
        self.failure: BaseException | None = None

    def due(self) -> bool:
        return not self.ran and threading.get_ident() == self.thread

    def run(self) -> None:
        self.ran = True

        def other() -> None:
            try:
                write_one(self.recorder)
            except BaseException as exc:  # the test asserts there was none
                self.failure = exc

        writer = threading.Thread(target=other)
        writer.start()
        writer.join(OTHER_WRITE_SECONDS)
        assert not writer.is_alive(), "the other thread's write did not end"


class LetGoHook:
    """SQLite: the process's write lock (re-entrant), calling `hook` right after the
    thread it is due in let go of it altogether: when another thread may write."""

    def __init__(self, lock: Any, due: Callable[[], bool], hook: Callable[[], None]) -> None:
        self.lock = lock
        self.due = due
        self.hook = hook
        self.depth = threading.local()

    def __enter__(self) -> bool:
        entered = bool(self.lock.__enter__())
        self.depth.value = getattr(self.depth, "value", 0) + 1
        return entered

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.lock.__exit__(kind, error, traceback)
        self.depth.value -= 1
        if self.depth.value == 0 and kind is None and self.due():
            self.hook()


def force_a_write_after_the_next(
    recorder: LedgerRecorder, monkeypatch: pytest.MonkeyPatch
) -> ThenOnce:
    """The next write of this thread is followed, as soon as another thread could write,
    by a whole write of another thread, before this thread goes on."""
    other = ThenOnce(recorder)
    db = recorder.db
    if db.is_sqlite:
        monkeypatch.setattr(db.units, "lock", LetGoHook(db.units.lock, other.due, other.run))
        return other
    write = recorder.write

    def write_then_other(*args: Any, **kwargs: Any) -> Inserted:
        inserted = write(*args, **kwargs)
        if other.due():
            other.run()
        return inserted

    monkeypatch.setattr(recorder, "write", write_then_other)
    return other


def assert_one_whole_chain(recorder: LedgerRecorder, count: int) -> None:
    """Every row on the chain, at positions 1 to `count`, each linked onto the one before."""
    c = stored_events.c
    with recorder.db.read() as conn:
        rows = conn.execute(
            select(
                c.originator_id,
                c.originator_version,
                c.topic,
                c.state,
                c.timestamp,
                c.chain_position,
                c.chain_hash,
            ).order_by(c.chain_position)
        ).all()
        chain = recorder.chain
        assert chain is not None
        links = chain.links(conn, [tuple(row[:5]) for row in rows], (0, GENESIS))
    assert [(int(row[5]), bytes(row[6])) for row in rows] == links
    assert [position for position, _ in links] == list(range(1, count + 1))


def test_a_write_of_another_thread_right_after_a_commit_links_onto_its_rows(
    recorder: LedgerRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_one(recorder)  # the recorder now knows the head (SQLite: with its mark)
    other = force_a_write_after_the_next(recorder, monkeypatch)
    write_one(recorder)
    assert other.ran
    assert other.failure is None, other.failure
    if not recorder.db.is_sqlite:
        # PostgreSQL: the other thread guessed the head before this thread's write, its
        # check failed under the table lock, and it was done again with the head read.
        assert recorder.unguessed > 0
    # And the write after both links onto the other thread's rows, not onto this one's.
    write_one(recorder)
    assert_one_whole_chain(recorder, 4)
