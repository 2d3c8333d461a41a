"""Imports: a user's data uploaded as a maker's export file (Apple Health's `export.zip`)
rather than pulled from a maker's API, read in the background as a tracked job.

One stream per import:

    received -> in_progress -> success
                            -> failure   (the file refused, with a fixed reason)

The upload is kept as a file until its import ends (the reader's port); a worker claims
the import by recording `ImportStarted` at the version it read, as a pull is claimed
(pulling.py): two workers that pick the same import both try to record it at the same
version and only one succeeds. `ImportProgressed` both reports how far it got and renews
the worker's lease; a worker that dies leaves the import `in_progress`, and once its lease
has ended the import is due again and is taken over from the start (the days it stored
are stored again unchanged).

What an import stores goes through the health data store as a pull's does, under the
import's provider (`apple_health_kit`): the user gets that connection if it has none, and
each resource's feed records the import as a pull would. A resource's first data is a
historical pull that succeeded (`historical.data.<resource>.created`); later imports are
recorded as daily syncs naming the days they created and changed (`daily.data.*`), one
per session for sessions (workouts). An export imported again changes no day, and records
nothing on the feeds. The events hold counts and codes, never a value of the file.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.connections.connection import Connection
from healthledger.domain.connections.health_data import HealthDataStore, UserDataGone
from healthledger.domain.connections.resource_feeds import (
    FAILURE,
    IN_PROGRESS,
    ResourceFeed,
)
from healthledger.domain.connections.sessions import (
    SESSION_RESOURCES,
    days_created_by,
    session_changes,
)
from healthledger.domain.connections.stream_ids import StreamIds
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.errors import LedgerError
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.personal_data import PersonalDataVault
from healthledger.domain.users.user import ACTIVE, User

log = logging.getLogger("healthledger.imports")

RECEIVED = "received"
IMPORT_STATES = (RECEIVED, IN_PROGRESS, "success", FAILURE)

# Why an import failed (the job's `failure_reason`: fixed texts, no value of the file).
NOT_A_ZIP = "not_a_zip"
NO_EXPORT = "no_export_xml"
TOO_LARGE = "too_large"
MALFORMED = "malformed_xml"
ENTITIES = "entities_refused"
NOT_AN_EXPORT = "not_an_export"
ANOTHER_PERSON = "export_of_another_person"
USER_GONE = "user_erased"
FILE_GONE = "upload_missing"
UNEXPECTED = "unexpected_error"


class ImportRefused(Exception):
    """The file cannot be imported: `code` is one of the reasons above, `message` a fixed
    text safe to show (it never quotes the file)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ImportNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Import not found.")


class ExportReading(Protocol):
    """One read of an uploaded export, by the adapter of its format."""

    # How far the read is, 0..1 (by the bytes of the file read, then the days stored).
    progress: float
    # Records read, mapped, skipped (of types not mapped), and the like.
    counts: dict[str, int]

    def prepare(self, progressed: Callable[[], None]) -> None:
        """Read the whole file (raises ImportRefused): nothing is stored before it is
        known to be whole and well-formed. `progressed` is called as it goes (the job's
        progress is recorded from it, which renews the worker's lease)."""
        ...

    def person(self) -> Mapping[str, Any]:
        """What the file says of the person (birth_date, sex), for the wrong-user check."""
        ...

    def batches(self) -> Iterator[Mapping[str, Mapping[date, Any]]]:
        """The file's data as the pull engine's chunks: resource -> day -> payload, each
        day of a resource whole, in bounded batches."""
        ...

    def close(self) -> None: ...


class ImportFiles(Protocol):
    """Where uploads wait for their import (the adapter keeps them as files)."""

    def open(self, import_id: UUID, user_id: UUID) -> ExportReading:
        """The upload's reading; raises ImportRefused(FILE_GONE) when it is not there."""
        ...

    def discard(self, import_id: UUID) -> None: ...

    def waiting(self) -> list[UUID]:
        """The imports whose file is still kept (not ended, as far as the files know)."""
        ...


Availability = Callable[[Sequence[str]], dict[str, Any]]


class DataImport(Audited, created_event_name="Received"):
    TOPIC = "healthledger:DataImport"
    USER_STREAM = UserStream("import")

    class Event(Audited.Event):
        pass

    class Received(Event, Aggregate.Created):
        TOPIC = "healthledger:DataImport.Received.v1"
        ANNOUNCES = ()
        user_id: UUID
        team_id: UUID
        provider: str
        # The format of the file (`apple_health_export`) and its size in bytes.
        file_format: str
        size_bytes: int

    # The founding event is called Received; Created names it too (see LinkToken).
    Created = Received

    class ImportStarted(Event):
        TOPIC = "healthledger:DataImport.ImportStarted.v1"
        ANNOUNCES = ()
        attempt: int

        def apply(self, job: DataImport) -> None:
            job.status = IN_PROGRESS
            job.attempts = self.attempt
            job.progress = 0.0
            job.started_at = self.timestamp

    class ImportProgressed(Event):
        TOPIC = "healthledger:DataImport.ImportProgressed.v1"
        ANNOUNCES = ()
        progress: float
        counts: dict[str, int]

        def apply(self, job: DataImport) -> None:
            job.progress = self.progress
            job.counts = dict(self.counts)

    class ImportSucceeded(Event):
        TOPIC = "healthledger:DataImport.ImportSucceeded.v1"
        ANNOUNCES = ()
        counts: dict[str, int]
        oldest_day: date | None
        newest_day: date | None

        def apply(self, job: DataImport) -> None:
            job.status = "success"
            job.progress = 1.0
            job.counts = dict(self.counts)
            job.oldest_day = self.oldest_day
            job.newest_day = self.newest_day
            job.ended_at = self.timestamp

    class ImportFailed(Event):
        TOPIC = "healthledger:DataImport.ImportFailed.v1"
        ANNOUNCES = ()
        failure_code: str
        # Why, in our words (a fixed text: never a value of the file).
        reason: str

        def apply(self, job: DataImport) -> None:
            job.status = FAILURE
            job.failure_code = self.failure_code
            job.failure_reason = self.reason
            job.ended_at = self.timestamp

    def __init__(
        self,
        *,
        id: UUID,
        timestamp: datetime,
        actor: str,
        request_id: str,
        user_id: UUID,
        team_id: UUID,
        provider: str,
        file_format: str,
        size_bytes: int,
    ) -> None:
        self.user_id: UUID = user_id
        self.team_id: UUID = team_id
        self.provider: str = provider
        self.file_format: str = file_format
        self.size_bytes: int = size_bytes
        self.received_at: datetime = timestamp
        self.status: str = RECEIVED
        self.attempts: int = 0
        self.progress: float = 0.0
        self.counts: dict[str, int] = {}
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None
        self.oldest_day: date | None = None
        self.newest_day: date | None = None
        self.failure_code: str | None = None
        self.failure_reason: str | None = None

    @property
    def has_ended(self) -> bool:
        return self.status in ("success", FAILURE)

    def start(self, ctx: CommandContext, now: datetime) -> None:
        self.record(ctx, now, self.ImportStarted, attempt=self.attempts + 1)

    def progressed(
        self, ctx: CommandContext, now: datetime, progress: float, counts: Mapping[str, int]
    ) -> None:
        self.record(
            ctx, now, self.ImportProgressed, progress=round(progress, 4), counts=dict(counts)
        )

    def succeed(
        self,
        ctx: CommandContext,
        now: datetime,
        counts: Mapping[str, int],
        oldest_day: date | None,
        newest_day: date | None,
    ) -> None:
        self.record(
            ctx,
            now,
            self.ImportSucceeded,
            counts=dict(counts),
            oldest_day=oldest_day,
            newest_day=newest_day,
        )

    def fail(self, ctx: CommandContext, now: datetime, code: str, reason: str) -> None:
        self.record(ctx, now, self.ImportFailed, failure_code=code, reason=reason)


@dataclass
class _Stored:
    """What an import's stores found, per resource: the days it created and changed, and
    the sessions those days held before (to tell new sessions from changed ones)."""

    created: set[date] = field(default_factory=set)
    updated: set[date] = field(default_factory=set)
    before: dict[date, Any] = field(default_factory=dict)
    after: dict[date, Any] = field(default_factory=dict)
    days: int = 0
    oldest: date | None = None
    newest: date | None = None


@dataclass(frozen=True)
class ImportPolicy:
    # How long a started import is trusted to be running without a progress report.
    lease: timedelta = timedelta(minutes=10)
    # How often progress is recorded (each record renews the lease).
    progress_every: timedelta = timedelta(seconds=20)


class Imports:
    """The use cases of imports: accept an upload, run due imports, read one."""

    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        store: HealthDataStore,
        vault: PersonalDataVault,
        files: ImportFiles,
        availability: Availability,
        resources: Sequence[str],
        *,
        streams: StreamIds,
        policy: ImportPolicy = ImportPolicy(),
        holder: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.store = store
        self.vault = vault
        self.streams = streams
        self.files = files
        self.availability = availability
        self.resources = tuple(resources)
        self.policy = policy
        self.holder = holder or f"{os.getpid()}-{uuid4().hex[:12]}"

    def _context(self) -> CommandContext:
        return CommandContext.system(SCHEDULER, f"import-{self.holder}-{uuid4().hex[:8]}")

    # -- accepting ----------------------------------------------------------------------

    def receive(
        self,
        ctx: CommandContext,
        import_id: UUID,
        user: User,
        provider: str,
        file_format: str,
        size_bytes: int,
    ) -> DataImport:
        """Record an upload kept under `import_id` for the live `user`."""
        user.require_live()
        job = DataImport.new(
            ctx,
            self.clock(),
            id=import_id,
            user_id=user.id,
            team_id=user.team_id,
            provider=provider,
            file_format=file_format,
            size_bytes=size_bytes,
        )
        self.ledger.save(job)
        return job

    def find(self, team_id: UUID, user_id: UUID, import_id: UUID) -> DataImport:
        """The team's user's import; ImportNotFound for any other."""
        job = self.ledger.find(import_id)
        if not isinstance(job, DataImport) or job.team_id != team_id or job.user_id != user_id:
            raise ImportNotFound()
        return job

    # -- running ------------------------------------------------------------------------

    def is_due(self, job: DataImport, now: datetime) -> bool:
        if job.status == RECEIVED:
            return True
        return job.status == IN_PROGRESS and job.modified_on + self.policy.lease <= now

    def run_due(self) -> int:
        """Run every import that is due (their files kept); how many this worker ran."""
        ran = 0
        for import_id in self.files.waiting():
            job = self.ledger.find(import_id)
            if not isinstance(job, DataImport):
                continue  # a file whose Received was never recorded: the upload failed
            if job.has_ended:
                self.files.discard(import_id)  # ended, and its file left behind by a crash
                continue
            if self.run(import_id, on_progress=None) is not None:
                ran += 1
        return ran

    def run(
        self, import_id: UUID, on_progress: Callable[[float, Mapping[str, int]], None] | None
    ) -> str | None:
        """Take one import to its end: its status after, or None when it was not due (or
        another worker claimed it)."""
        ctx = self._context()
        job = self.ledger.find(import_id)
        if not isinstance(job, DataImport) or not self.is_due(job, self.clock()):
            return None
        job.start(ctx, self.clock())
        if not self._save(job):
            return None
        try:
            outcome = self._import(ctx, job, on_progress)
        except ImportRefused as exc:
            job.fail(ctx, self.clock(), exc.code, exc.message)
            outcome = self._save(job)
        except UserDataGone:
            job.fail(ctx, self.clock(), USER_GONE, "The user was erased.")
            outcome = self._save(job)
        except _LostClaim:
            return None
        except Exception as exc:  # a defect: final, logged without data
            log.error("import %s failed unexpectedly: %s", import_id, type(exc).__name__)
            job.fail(ctx, self.clock(), UNEXPECTED, type(exc).__name__)
            outcome = self._save(job)
        if outcome:
            self.files.discard(import_id)
        fresh = self.ledger.find(import_id)
        assert isinstance(fresh, DataImport)
        return fresh.status

    def _import(
        self,
        ctx: CommandContext,
        job: DataImport,
        on_progress: Callable[[float, Mapping[str, int]], None] | None,
    ) -> bool:
        user = self.ledger.find(job.user_id)
        if not isinstance(user, User) or user.status != ACTIVE:
            raise ImportRefused(USER_GONE, "The user was deleted or erased.")
        reading = self.files.open(job.id, job.user_id)
        reported = [self.clock()]

        def report(force: bool = False) -> None:
            # Throttled: recorded every `progress_every`, each record renewing the lease.
            if on_progress is not None:
                on_progress(reading.progress, reading.counts)
            now = self.clock()
            if force or now - reported[0] >= self.policy.progress_every:
                reported[0] = now
                job.progressed(ctx, now, reading.progress, reading.counts)
                if not self._save(job):
                    raise _LostClaim()  # taken over after our lease ended

        try:
            reading.prepare(report)
            report(force=True)
            self._check_person(user, reading.person())
            found: dict[str, _Stored] = {}
            for batch in reading.batches():
                kept = _within_bounds(batch, user)
                self._store(job, kept, found)
                report()
        finally:
            reading.close()
        return self._record(ctx, job, found, dict(reading.counts))

    def _check_person(self, user: User, person: Mapping[str, Any]) -> None:
        """An export whose birth date is not the user's (as recorded) is another
        person's: refused before anything of it is stored."""
        born = person.get("birth_date")
        if not born or user.sealed_birth_date is None:
            return
        recorded = self.vault.open(user.id, user.sealed_birth_date[0])
        if recorded is not None and str(recorded) != str(born):
            raise ImportRefused(
                ANOTHER_PERSON,
                "The export's date of birth is not the user's: it is another person's.",
            )

    def _store(
        self, job: DataImport, batch: Mapping[str, Mapping[date, Any]], found: dict[str, _Stored]
    ) -> None:
        before: dict[str, dict[date, Any]] = {}
        for resource in SESSION_RESOURCES & set(batch):
            days = batch[resource]
            if days:
                before[resource] = self.store.read(
                    job.user_id, job.provider, resource, min(days), max(days)
                )
        results = self.store.store(job.user_id, job.provider, batch)
        for resource, days in batch.items():
            if not days:
                continue
            stored = found.setdefault(resource, _Stored())
            result = results[resource]
            stored.created.update(result.created)
            stored.updated.update(result.updated)
            stored.days += len(days)
            stored.oldest = min(days) if stored.oldest is None else min(stored.oldest, *days)
            stored.newest = max(days) if stored.newest is None else max(stored.newest, *days)
            if resource in before:
                for day in [*result.created, *result.updated]:
                    stored.before[day] = before[resource].get(day)
                    stored.after[day] = days[day]

    def _record(
        self,
        ctx: CommandContext,
        job: DataImport,
        found: dict[str, _Stored],
        counts: dict[str, int],
    ) -> bool:
        """The connection, the feeds and the job's success in one transaction; read again
        and redone if another writer moved one of them on meanwhile (a daily sync)."""
        counts = {
            **counts,
            "days_created": sum(len(s.created) for s in found.values()),
            "days_updated": sum(len(s.updated) for s in found.values()),
        }
        oldest = min((s.oldest for s in found.values() if s.oldest), default=None)
        newest = max((s.newest for s in found.values() if s.newest), default=None)
        for _ in range(5):
            now = self.clock()
            fresh = self.ledger.find(job.id)
            assert isinstance(fresh, DataImport)
            if fresh.version != job.version:
                raise _LostClaim()
            connection = self._connection(ctx, job, now)
            feeds = [
                feed
                for resource, stored in sorted(found.items())
                if (feed := self._feed(ctx, connection, resource, stored, now)) is not None
            ]
            job.succeed(ctx, now, counts, oldest, newest)
            pending = [connection] if connection.pending_events else []
            if self._save(job, *pending, *feeds):
                return True
            job = fresh  # the job as stored (its success was not), and try again
        raise _LostClaim()

    def _connection(self, ctx: CommandContext, job: DataImport, now: datetime) -> Connection:
        """The user's connection to the import's provider, connected if it is not."""
        connection_id = self.streams.connection_id(job.user_id, job.provider)
        connection = self.ledger.find(connection_id)
        availability = self.availability(self.resources)
        if connection is None:
            return Connection.connect_new(
                ctx,
                now,
                id=connection_id,
                user_id=job.user_id,
                team_id=job.team_id,
                provider=job.provider,
                sealed_external_user_id=None,
                resource_availability=availability,
                demo=False,
            )
        assert isinstance(connection, Connection)
        if not connection.is_live:
            connection.reconnect(
                ctx,
                now,
                sealed_external_user_id=None,
                resource_availability=availability,
                demo=False,
            )
        return connection

    def _feed(
        self,
        ctx: CommandContext,
        connection: Connection,
        resource: str,
        stored: _Stored,
        now: datetime,
    ) -> ResourceFeed | None:
        """The resource's feed with the import recorded: a historical pull that succeeded
        for its first data, else a daily sync of the days created and changed (nothing,
        when none changed)."""
        feed_id = self.streams.feed_id(connection.id, connection.user_id, resource)
        feed = self.ledger.find(feed_id)
        if feed is None:
            feed = ResourceFeed.open(
                ctx,
                now,
                id=feed_id,
                connection_id=connection.id,
                user_id=connection.user_id,
                team_id=connection.team_id,
                provider=connection.provider,
                resource=resource,
            )
        assert isinstance(feed, ResourceFeed)
        if feed.status in (None, FAILURE):
            assert stored.oldest is not None and stored.newest is not None
            feed.schedule_pull(
                ctx,
                now,
                range_start=datetime.combine(stored.oldest, time(0), UTC),
                range_end=datetime.combine(stored.newest + timedelta(days=1), time(0), UTC),
                connection_created_at=connection.created_on,
            )
            feed.start_attempt(ctx, now)
            feed.succeed(
                ctx,
                now,
                days_with_data=stored.days,
                oldest_day=stored.oldest,
                newest_day=stored.newest,
            )
            return feed
        if not stored.created and not stored.updated:
            return None
        if resource in SESSION_RESOURCES:
            changed = sorted(stored.created | stored.updated)
            changes = session_changes(resource, stored.before, stored.after, changed)
            # Each new day counted once, by its first new session (not once per session).
            counts = days_created_by(changes, stored.created)
            for change, days in zip(changes, counts, strict=True):
                feed.synced(
                    ctx,
                    now,
                    created_days=[change.day] if change.created else [],
                    updated_days=[] if change.created else [change.day],
                    session=change.key,
                    days_created=days,
                )
            return feed if feed.pending_events else None
        feed.synced(
            ctx, now, created_days=sorted(stored.created), updated_days=sorted(stored.updated)
        )
        return feed

    def _save(self, *aggregates: Any) -> bool:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError:
            return False
        return True


class _LostClaim(Exception):
    """Another worker took the import over (our lease ended): this one stops."""


def _within_bounds(
    batch: Mapping[str, Mapping[date, Any]], user: User
) -> dict[str, dict[date, Any]]:
    """The batch cut to the user's ingestion bounds, as a pull's range is."""
    first, last = user.ingestion_start, user.ingestion_end
    return {
        resource: {
            day: value
            for day, value in days.items()
            if (first is None or day >= first) and (last is None or day <= last)
        }
        for resource, days in batch.items()
    }


def new_import_id() -> UUID:
    return uuid.uuid4()
