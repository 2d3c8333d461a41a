"""eventsourcing's own recorder test cases (`eventsourcing.tests.persistence`, the
installed 9.5.6) run against our recorders, on a real SQLite file and on PostgreSQL.

`LedgerRecorder` is the ledger's application, process and tracking recorder (what
`LedgerInfrastructure` hands eventsourcing for all three) and `SnapshotRecorder` its
aggregate recorder for snapshots: each is held to the contract of the base class it
implements. The webhook receiver's recorder (its own tables, off the hash chain) is held
to the application recorder's too.

No case is overridden. The one deliberate difference, that the recorder takes each
stored event with its domain event, is bridged by `AsTheLedgerCalls` (as the ledger calls
it) and asserted on its own. Two cases found bugs when this file was written, fixed in
the recorder: a snapshot write of no events failed (an INSERT of default values), and a
follower's position below the one recorded was taken (the row that would have refused
it had been deleted as stale), where eventsourcing's contract refuses it.

The concurrency cases run as eventsourcing wrote them: each takes 1-2 s here.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.domain import AggregateEvent, CanMutateAggregate
from eventsourcing.persistence import StoredEvent, Tracking
from eventsourcing.tests import persistence as contract
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.mirror_schema import MIRROR_TABLES
from healthledger.adapters.persistence.eventstore.recorder import (
    LedgerRecorder,
    SnapshotRecorder,
)

from tests.conftest import POSTGRES_URL, ReusedSchema

# PostgreSQL: set HEALTHLEDGER_TEST_POSTGRES_URL (as for every test on both databases).
needs_postgres = pytest.mark.skipif(
    POSTGRES_URL is None, reason="HEALTHLEDGER_TEST_POSTGRES_URL is not set"
)


class AsTheLedgerCalls(LedgerRecorder):
    """Our recorder, called as the ledger calls it.

    `Ledger.save` passes each stored event with its domain event (`aggregate_events`):
    the recorder writes the event's time into the row (the time-travel index, linked into
    the hash chain with the rest of the row) and refuses stored events without their
    domain events (`test_stored_events_without_domain_events_are_refused`).
    eventsourcing's cases pass stored events only, so this supplies what the ledger
    would: a domain event of the same stream and version, timed now. Everything else
    (the rows, the chain, the notification ids, tracking) is the recorder's own."""

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        aggregate_events: Sequence[CanMutateAggregate[Any]] = (),
        tracking: Tracking | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        if not aggregate_events:
            now = datetime.now(UTC)
            aggregate_events = [
                AggregateEvent(
                    originator_id=UUID(str(stored.originator_id)),
                    originator_version=stored.originator_version,
                    timestamp=now,
                )
                for stored in stored_events
            ]
        return super().insert_events(
            stored_events, aggregate_events=aggregate_events, tracking=tracking, **kwargs
        )


# -- the databases ----------------------------------------------------------------------


class OnSQLite:
    """Each test on a SQLite file of its own, copied from the session's migrated
    template (as the `database_url` fixture makes them)."""

    database: Database

    @pytest.fixture(autouse=True)
    def _database(self, sqlite_template: Path, tmp_path: Path) -> Iterator[None]:
        path = tmp_path / "ledger.db"
        shutil.copyfile(sqlite_template, path)
        self.database = Database(f"sqlite:///{path}")
        yield
        self.database.dispose()


@needs_postgres
class OnPostgres:
    """Each test in the worker's reused schema, migrated and empty, its sequences
    restarted (as the `database_url` fixture takes it)."""

    database: Database

    @pytest.fixture(autouse=True)
    def _database(self, request: pytest.FixtureRequest) -> Iterator[None]:
        schema: ReusedSchema = request.getfixturevalue("reused_schema")
        self.database = Database(schema.take())
        yield
        self.database.dispose()
        schema.give_back()


# -- the cases --------------------------------------------------------------------------


class SnapshotContract(contract.AggregateRecorderTestCase):
    __test__ = False  # a contract; the classes below run it on each database
    database: Database

    def create_recorder(self) -> SnapshotRecorder:
        return SnapshotRecorder(self.database)


class ApplicationContract(contract.ApplicationRecorderTestCase[LedgerRecorder]):
    __test__ = False  # a contract; the classes below run it on each database
    database: Database

    def create_recorder(self) -> LedgerRecorder:
        return AsTheLedgerCalls(self.database)

    def test_stored_events_without_domain_events_are_refused(self) -> None:
        # Ours, not eventsourcing's: a row's timestamp is its domain event's time, so a
        # stored event alone cannot be recorded (the ledger always passes both).
        recorder = self.create_recorder()
        stored = StoredEvent(uuid4(), 1, "topic1", b"state1")
        with pytest.raises(ValueError, match="domain event"):
            LedgerRecorder.insert_events(recorder, [stored])
        assert recorder.max_notification_id() is None


class MirrorApplicationContract(ApplicationContract):
    __test__ = False  # a contract; the classes below run it on each database

    def create_recorder(self) -> LedgerRecorder:
        # As `adapters/mirror/receiver.py` builds it.
        return AsTheLedgerCalls(self.database, tables=MIRROR_TABLES, chained=False)


class ProcessContract(contract.ProcessRecorderTestCase):
    __test__ = False  # a contract; the classes below run it on each database
    database: Database

    def create_recorder(self) -> LedgerRecorder:
        return AsTheLedgerCalls(self.database)


class TrackingContract(contract.TrackingRecorderTestCase):
    __test__ = False  # a contract; the classes below run it on each database
    database: Database

    def create_recorder(self) -> LedgerRecorder:
        return AsTheLedgerCalls(self.database)


class NotificationIdsContract(contract.NonInterleavingNotificationIDsBaseCase):
    __test__ = False  # a contract; the classes below run it on each database
    database: Database

    def create_recorder(self) -> LedgerRecorder:
        return AsTheLedgerCalls(self.database)


class TestSnapshotsOnSQLite(OnSQLite, SnapshotContract):
    __test__ = True


class TestSnapshotsOnPostgres(OnPostgres, SnapshotContract):
    __test__ = True


class TestApplicationOnSQLite(OnSQLite, ApplicationContract):
    __test__ = True


class TestApplicationOnPostgres(OnPostgres, ApplicationContract):
    __test__ = True


class TestMirrorApplicationOnSQLite(OnSQLite, MirrorApplicationContract):
    __test__ = True


class TestMirrorApplicationOnPostgres(OnPostgres, MirrorApplicationContract):
    __test__ = True


class TestProcessOnSQLite(OnSQLite, ProcessContract):
    __test__ = True


class TestProcessOnPostgres(OnPostgres, ProcessContract):
    __test__ = True


class TestTrackingOnSQLite(OnSQLite, TrackingContract):
    __test__ = True


class TestTrackingOnPostgres(OnPostgres, TrackingContract):
    __test__ = True


class TestNotificationIdsOnSQLite(OnSQLite, NotificationIdsContract):
    __test__ = True


class TestNotificationIdsOnPostgres(OnPostgres, NotificationIdsContract):
    __test__ = True
