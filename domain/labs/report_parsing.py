"""The lab report parser: a team uploads a user's lab report (PDF) and reads back the
results found in it (the official clients' `lab_report.parser_create_job` and
`parser_get_job`; docs/labs.md, the lab report parser).

One stream per job:

    Created (started) -> ParsingStarted -> Completed   (the parsed report, sealed)
                                        -> Failed      (a fixed reason)

The upload is kept sealed with the user's data key until its job ends (the uploads port:
`ReportUploads`), and is the worker's queue: a worker claims a job by recording
`ParsingStarted` at the version it read (two workers that pick the same job both try to
record it at that version, and only one succeeds). A worker that dies leaves the job
started; once its lease has passed the job is due again, and after `max_attempts` claims
without an outcome it fails (a file that kills its reader is not read for ever).

The parsed report (the patient's name and birth date as the report prints them, every
result) is personal health data: `Completed` holds it only sealed with the user's key
(`PERSONAL_FIELDS`), so the user's erasure takes it with the key. The events otherwise
hold counts and codes, never a value of the file.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID, uuid4

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from healthledger.domain.audited import Audited, UserStream
from healthledger.domain.context import SCHEDULER, CommandContext
from healthledger.domain.errors import LedgerError
from healthledger.domain.labs.report_reading import (
    FILE_GONE,
    GAVE_UP,
    USER_GONE,
    ReportRefused,
)
from healthledger.domain.ledger import Clock, Ledger
from healthledger.domain.users.user import ACTIVE, User

log = logging.getLogger("healthledger.lab_reports")

# The official clients' ParsingJobStatus (`upload_pending` is never ours: the file is
# with us when the job is created).
STARTED = "started"
COMPLETED = "completed"
FAILED = "failed"


class ParsingJobNotFound(LedgerError):
    def __init__(self) -> None:
        super().__init__("Parsing job not found.")


class ReportUploads(Protocol):
    """Where uploaded reports wait for their job, sealed with the user's key."""

    def keep(self, job_id: UUID, team_id: UUID, user_id: UUID, files: Sequence[bytes]) -> bool:
        """Keep the files; False when the user has no data key (erased meanwhile)."""
        ...

    def open(self, job_id: UUID, user_id: UUID) -> list[bytes] | None:
        """The files as uploaded; None when they are gone (or their key is)."""
        ...

    def discard(self, job_id: UUID) -> None: ...

    def waiting(self) -> list[tuple[UUID, datetime]]:
        """The jobs whose files are still kept, with when they were uploaded, oldest
        first."""
        ...


class ReportReader(Protocol):
    """Reads uploaded files into a report (the adapter of the file format)."""

    def check(self, files: Sequence[bytes]) -> None:
        """Cheap checks at the upload (raises ReportRefused): each file a PDF, not empty,
        not too large, not too many pages."""
        ...

    def read(self, files: Sequence[bytes]) -> dict[str, Any]:
        """The report's `ParsedLabReportData` (raises ReportRefused)."""
        ...


# Seals a value with the user's key, never making one: None when the user has none.
Sealer = Callable[[UUID, Any], str | None]


class LabReportParsingJob(Audited, created_event_name="Created"):
    TOPIC = "healthledger:LabReportParsingJob"
    USER_STREAM = UserStream("lab_report_parsing_job")

    class Event(Audited.Event):
        pass

    class Created(Event, Aggregate.Created):
        TOPIC = "healthledger:LabReportParsingJob.Created.v1"
        ANNOUNCES = ()
        user_id: UUID
        team_id: UUID
        needs_human_review: bool
        # How many files, and their bytes together.
        file_count: int
        size_bytes: int

    class ParsingStarted(Event):
        TOPIC = "healthledger:LabReportParsingJob.ParsingStarted.v1"
        ANNOUNCES = ()
        attempt: int

        def apply(self, job: LabReportParsingJob) -> None:
            job.attempts = self.attempt
            job.started_at = self.timestamp

    class Completed(Event):
        TOPIC = "healthledger:LabReportParsingJob.Completed.v1"
        ANNOUNCES = ()
        PERSONAL_FIELDS = ("sealed_data",)
        # The ParsedLabReportData, sealed with the user's key.
        sealed_data: str
        result_count: int

        def apply(self, job: LabReportParsingJob) -> None:
            job.status = COMPLETED
            job.sealed_data = self.sealed_data
            job.result_count = self.result_count
            job.ended_at = self.timestamp

    class Failed(Event):
        TOPIC = "healthledger:LabReportParsingJob.Failed.v1"
        ANNOUNCES = ()
        # Ours (report_reading.py's codes) and the clients' (ParsingJobFailureReason).
        failure_code: str
        failure_reason: str
        # Why, in our words (a fixed text: never a value of the file).
        message: str

        def apply(self, job: LabReportParsingJob) -> None:
            job.status = FAILED
            job.failure_code = self.failure_code
            job.failure_reason = self.failure_reason
            job.failure_message = self.message
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
        needs_human_review: bool,
        file_count: int,
        size_bytes: int,
    ) -> None:
        self.user_id: UUID = user_id
        self.team_id: UUID = team_id
        self.needs_human_review: bool = needs_human_review
        self.file_count: int = file_count
        self.size_bytes: int = size_bytes
        self.created_at: datetime = timestamp
        self.status: str = STARTED
        self.attempts: int = 0
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None
        self.sealed_data: str | None = None
        self.result_count: int | None = None
        self.failure_code: str | None = None
        self.failure_reason: str | None = None
        self.failure_message: str | None = None

    @property
    def has_ended(self) -> bool:
        return self.status in (COMPLETED, FAILED)

    def start(self, ctx: CommandContext, now: datetime) -> None:
        self.record(ctx, now, self.ParsingStarted, attempt=self.attempts + 1)

    def complete(self, ctx: CommandContext, now: datetime, sealed_data: str, count: int) -> None:
        self.record(ctx, now, self.Completed, sealed_data=sealed_data, result_count=count)

    def fail(self, ctx: CommandContext, now: datetime, refused: ReportRefused) -> None:
        self.record(
            ctx,
            now,
            self.Failed,
            failure_code=refused.code,
            failure_reason=refused.failure_reason,
            message=refused.message,
        )


@dataclass(frozen=True)
class ParsingPolicy:
    # How long a started parse is trusted to be running.
    lease: timedelta = timedelta(minutes=5)
    # Claims without an outcome after which the job fails (its file kills its reader).
    max_attempts: int = 3
    # How long files whose job was never recorded are kept before they are discarded.
    orphan_after: timedelta = timedelta(hours=1)


class ReportParsing:
    """The use cases of the parser: accept an upload, parse due jobs, read one."""

    def __init__(
        self,
        ledger: Ledger,
        clock: Clock,
        uploads: ReportUploads,
        reader: ReportReader,
        seal: Sealer,
        *,
        policy: ParsingPolicy = ParsingPolicy(),
        holder: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.uploads = uploads
        self.reader = reader
        self.seal = seal
        self.policy = policy
        self.holder = holder or f"{os.getpid()}-{uuid4().hex[:12]}"

    def _context(self) -> CommandContext:
        return CommandContext.system(SCHEDULER, f"lab-report-{self.holder}-{uuid4().hex[:8]}")

    # -- accepting ----------------------------------------------------------------------

    def create(
        self,
        ctx: CommandContext,
        user: User,
        files: Sequence[bytes],
        needs_human_review: bool,
    ) -> LabReportParsingJob:
        """A job for the live `user`'s uploaded files: checked (ReportRefused), kept
        sealed, then recorded. The parse runs in the background."""
        user.require_live()
        self.reader.check(files)
        job_id = uuid.uuid4()
        if not self.uploads.keep(job_id, user.team_id, user.id, files):
            user.require_live()  # erased meanwhile: its key is gone
            raise ParsingJobNotFound()
        job = LabReportParsingJob.new(
            ctx,
            self.clock(),
            id=job_id,
            user_id=user.id,
            team_id=user.team_id,
            needs_human_review=needs_human_review,
            file_count=len(files),
            size_bytes=sum(len(f) for f in files),
        )
        try:
            self.ledger.save(job)
        except BaseException:
            self.uploads.discard(job_id)
            raise
        return job

    def find(self, team_id: UUID, job_id: UUID) -> LabReportParsingJob:
        """The team's job; ParsingJobNotFound for any other."""
        job = self.ledger.find(job_id)
        if not isinstance(job, LabReportParsingJob) or job.team_id != team_id:
            raise ParsingJobNotFound()
        return job

    # -- parsing ------------------------------------------------------------------------

    def is_due(self, job: LabReportParsingJob, now: datetime) -> bool:
        if job.has_ended:
            return False
        return job.attempts == 0 or job.modified_on + self.policy.lease <= now

    def run_due(self) -> int:
        """Parse every job that is due (its files kept); how many this worker ended."""
        ended = 0
        for job_id, uploaded_at in self.uploads.waiting():
            job = self.ledger.find(job_id)
            if not isinstance(job, LabReportParsingJob):
                # Files whose job was never recorded (the upload failed after keeping
                # them): left while its recording may still be under way.
                if uploaded_at + self.policy.orphan_after <= self.clock():
                    self.uploads.discard(job_id)
                continue
            if job.has_ended:
                self.uploads.discard(job_id)  # ended, its files left behind by a crash
                continue
            if self.run(job_id) is not None:
                ended += 1
        return ended

    def run(self, job_id: UUID) -> str | None:
        """Take one job to its end: its status after, or None when it was not due (or
        another worker claimed it)."""
        ctx = self._context()
        job = self.ledger.find(job_id)
        if not isinstance(job, LabReportParsingJob) or not self.is_due(job, self.clock()):
            return None
        if job.attempts >= self.policy.max_attempts:
            job.fail(ctx, self.clock(), ReportRefused(GAVE_UP, "The report could not be read."))
        else:
            job.start(ctx, self.clock())
            if not self._save(job):
                return None
            try:
                data = self._parse(job)
                sealed = self.seal(job.user_id, data)
                if sealed is None:
                    raise ReportRefused(USER_GONE, "The user was erased.")
                job.complete(ctx, self.clock(), sealed, len(data["results"]))
            except ReportRefused as refused:
                job.fail(ctx, self.clock(), refused)
            except Exception as exc:  # a defect of the reader: final, logged without data
                log.error("lab report job %s failed: %s", job_id, type(exc).__name__)
                job.fail(ctx, self.clock(), ReportRefused(GAVE_UP, "The report could not be read."))
        if not self._save(job):
            return None  # taken over after our lease ended
        self.uploads.discard(job_id)
        return job.status

    def _parse(self, job: LabReportParsingJob) -> dict[str, Any]:
        user = self.ledger.find(job.user_id)
        if not isinstance(user, User) or user.status != ACTIVE:
            raise ReportRefused(USER_GONE, "The user was deleted or erased.")
        files = self.uploads.open(job.id, job.user_id)
        if files is None:
            raise ReportRefused(FILE_GONE, "The uploaded file is no longer kept.")
        return self.reader.read(files)

    def _save(self, *aggregates: Any) -> bool:
        try:
            self.ledger.save(*aggregates)
        except IntegrityError:
            return False
        return True
