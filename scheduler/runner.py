"""The in-process APScheduler that wakes the sweeps up.

Facts that shape it (see docs/adr/0003-scheduling.md): a 3.x job is removed from its
store before it runs, a default misfire grace of one second silently skips a job that
fell due while the process was down, and two schedulers sharing a job store run jobs
twice. So: an in-memory store, interval jobs that sweep our own tables, a first run at
start (what fell due while the service was down is erased, or applied, at once), no
misfire skips.

The jobs come bound to the ports they need (the composition root builds `Jobs`), and
the workers that a commit can give work to are woken by `LedgerScheduler.committed`, the
commit listener of the event store: one way, whoever made the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from apscheduler.schedulers.background import BackgroundScheduler
from healthledger.domain.connections.revocation import ends_a_grant
from healthledger.scheduler.imports import makes_an_import_due
from healthledger.scheduler.lab_orders import makes_an_order_step_due
from healthledger.scheduler.lab_reports import makes_a_parse_due
from healthledger.scheduler.pulls import makes_a_pull_due
from healthledger.scheduler.wakeups import WakeableJob

log = logging.getLogger("healthledger.scheduler")
T = TypeVar("T")

PULL_WORKER = "pull-worker"
GRANT_REVOCATION = "grant-revocation"
WEBHOOK_DISPATCHER = "webhook-dispatcher"
SANDBOX_LAB = "sandbox-lab"
MASTER_KEY_ROTATION = "master-key-rotation"
CHAIN_HEAD_SIGNING = "chain-head-signing"
INTEGRITY_CHECK = "integrity-check"
IMPORT_WORKER = "import-worker"
LAB_REPORT_PARSER = "lab-report-parser"
# How often the rotation job looks whether a rotation is due (or its interval, if less):
# the interval counts from the latest rotation, not from the process's start.
ROTATION_CHECK = timedelta(hours=1)
# Likewise, how often the integrity check's job looks whether a check is due.
INTEGRITY_LOOK = timedelta(hours=1)


@dataclass(frozen=True)
class Jobs:
    """The scheduler's work, each job bound to its ports; each returns what it did."""

    sweep_erasures: Callable[[], int]
    run_due_pulls: Callable[[], int]
    sync_connected_feeds: Callable[[], int]
    dispatch_webhooks: Callable[[], int]
    apply_cut_overs: Callable[[], list[str]]
    # Rotates the master key when due (scheduler/key_rotation.py); data keys rewrapped.
    rotate_master_key: Callable[[], int] = lambda: 0
    # Signs the hash chain's head if it moved since the last signed one (1, else 0).
    sign_chain_head: Callable[[], int] = lambda: 0
    # Whether a commit of this process makes signing the head due at once: enough events
    # were committed here since it last did (HEALTHLEDGER_CHAIN_SIGN_EVERY). Never, unless
    # told otherwise.
    makes_head_signing_due: Callable[[Sequence[object]], bool] = lambda _events: False
    # The simulated lab: due sandbox orders one step on (scheduler/lab_orders.py).
    progress_lab_orders: Callable[[], int] = lambda: 0
    # The chain walked and the read models compared with the log, if the latest recorded
    # check is an interval old (scheduler/integrity.py): 1 if it ran, else 0.
    check_integrity: Callable[[], int] = lambda: 0
    # Revocations at the makers of the grants of ended connections, when due
    # (domain/connections/revocation.py): the number ended.
    revoke_grants: Callable[[], int] = lambda: 0
    # Whether a committed event gives the webhook dispatcher work at once (it announces
    # something, or makes a delivery due): other commits do not wake it, and its interval
    # moves its position past them. Every event, unless told otherwise.
    gives_webhooks_work: Callable[[object], bool] = lambda _event: True
    # Uploaded exports whose import is due, run (scheduler/imports.py).
    run_due_imports: Callable[[], int] = lambda: 0
    # Bulk operations still in progress resumed where they stopped
    # (domain/connections/bulk_operations.py): the number run.
    run_due_bulk_operations: Callable[[], int] = lambda: 0
    # Continuous queries whose next run is due, run (adapters/answers/continuous_queries.py):
    # the number of runs ended.
    run_due_continuous_queries: Callable[[], int] = lambda: 0
    # Uploaded lab reports whose parsing job is due, parsed (scheduler/lab_reports.py):
    # the number of jobs ended.
    parse_lab_reports: Callable[[], int] = lambda: 0
    # Why a run failed for a passing reason, the database unavailable (its driver's code:
    # `OperationalError (SQLITE_FULL)`), or None for any other failure, which is raised
    # and logged whole as before. Never, unless told otherwise.
    unavailable: Callable[[BaseException], str | None] = lambda _exc: None


@dataclass(frozen=True)
class Intervals:
    """How often each job runs when nothing wakes it."""

    erasure_sweep: timedelta
    pull_worker: timedelta
    webhook_dispatcher: timedelta
    daily_sync: timedelta
    deprecation_cut_overs: timedelta
    # The master key's rotation interval; None: never rotated by the scheduler. The job
    # looks at most hourly whether one is due (`ROTATION_CHECK`).
    master_key_rotation: timedelta | None = None
    # How often the chain's head is signed (HEALTHLEDGER_CHAIN_SIGN_INTERVAL).
    chain_sign: timedelta = timedelta(hours=1)
    # How often the simulated lab looks for due sandbox orders (a commit that makes a step
    # due at once also wakes it).
    sandbox_lab: timedelta = timedelta(seconds=5)
    # How often the integrity check runs (HEALTHLEDGER_INTEGRITY_CHECK_INTERVAL); None:
    # never. The job looks at most hourly whether one is due (`INTEGRITY_LOOK`).
    integrity_check: timedelta | None = None
    # How often the import worker looks for due imports (an upload also wakes it).
    import_worker: timedelta = timedelta(seconds=30)
    # How often owed grant revocations are looked for (a deregistration committed in
    # this process wakes the job at once; a retry's delay is the job's own).
    grant_revocation: timedelta = timedelta(seconds=30)
    # How often bulk operations left in progress (a restart, no wait) are resumed.
    bulk_operations: timedelta = timedelta(seconds=30)
    # How often due runs of continuous queries are looked for: a registration's first run
    # and each next one start at most this late (their tasks say when they were due).
    continuous_queries: timedelta = timedelta(seconds=30)
    # How often the lab report parser looks for due jobs (an upload also wakes it).
    lab_report_parser: timedelta = timedelta(seconds=30)


class LedgerScheduler(BackgroundScheduler):
    """APScheduler with the service's jobs, plus the workers that a commit wakes at once:
    shutting down stops their wake-ups and waits for them first."""

    def __init__(self, jobs: Jobs, intervals: Intervals) -> None:
        super().__init__(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self.unavailable = jobs.unavailable
        # The jobs whose last run found the database unavailable (each says so once).
        self._waiting: set[str] = set()
        self.pull_worker = self.wakeable(PULL_WORKER, intervals.pull_worker, jobs.run_due_pulls)
        self.webhook_dispatcher = self.wakeable(
            WEBHOOK_DISPATCHER, intervals.webhook_dispatcher, jobs.dispatch_webhooks
        )
        self.gives_webhooks_work = jobs.gives_webhooks_work
        self.chain_signer = self.wakeable(
            CHAIN_HEAD_SIGNING, intervals.chain_sign, jobs.sign_chain_head
        )
        self.makes_head_signing_due = jobs.makes_head_signing_due
        self.sandbox_lab = self.wakeable(
            SANDBOX_LAB, intervals.sandbox_lab, jobs.progress_lab_orders
        )
        self.import_worker = self.wakeable(
            IMPORT_WORKER, intervals.import_worker, jobs.run_due_imports
        )
        self.grant_revoker = self.wakeable(
            GRANT_REVOCATION, intervals.grant_revocation, jobs.revoke_grants
        )
        self.lab_report_parser = self.wakeable(
            LAB_REPORT_PARSER, intervals.lab_report_parser, jobs.parse_lab_reports
        )
        for job_id, interval, work in (
            ("erasure-sweep", intervals.erasure_sweep, jobs.sweep_erasures),
            ("daily-sync", intervals.daily_sync, jobs.sync_connected_feeds),
            ("deprecation-cut-overs", intervals.deprecation_cut_overs, jobs.apply_cut_overs),
            ("bulk-operations", intervals.bulk_operations, jobs.run_due_bulk_operations),
            (
                "continuous-queries",
                intervals.continuous_queries,
                jobs.run_due_continuous_queries,
            ),
        ):
            self.every(job_id, interval, work)
        if intervals.master_key_rotation is not None:
            self.every(
                MASTER_KEY_ROTATION,
                min(intervals.master_key_rotation, ROTATION_CHECK),
                jobs.rotate_master_key,
            )
        if intervals.integrity_check is not None:
            # Not at start: a rebuild of every read model is no work for every process
            # starting at once (the first look comes an hour, or the interval, later).
            self.every(
                INTEGRITY_CHECK,
                min(intervals.integrity_check, INTEGRITY_LOOK),
                jobs.check_integrity,
                at_start=False,
            )

    def committed(self, events: Sequence[object]) -> None:
        """A commit of this process stored `events`: wake the workers they give work to.
        Only an event that announces something (or makes a delivery due) gives the webhook
        dispatcher work (`Jobs.gives_webhooks_work`: a create alone does not wake it, which
        would cost every command a follow of the log); only a scheduled or due retry of a
        pull gives the pull worker work. Commits of
        other processes are found at the next interval. Called on the committing thread:
        it only starts wake-ups, it waits for nothing."""
        if any(makes_a_pull_due(event) for event in events):
            self.pull_worker.wake()
        if any(makes_an_order_step_due(event) for event in events):
            self.sandbox_lab.wake()
        if any(makes_an_import_due(event) for event in events):
            self.import_worker.wake()
        if any(makes_a_parse_due(event) for event in events):
            self.lab_report_parser.wake()
        if any(self.gives_webhooks_work(event) for event in events):
            self.webhook_dispatcher.wake()
        if self.makes_head_signing_due(events):
            self.chain_signer.wake()
        if any(ends_a_grant(event) for event in events):
            self.grant_revoker.wake()

    def every(
        self,
        job_id: str,
        interval: timedelta,
        work: Callable[[], object],
        *,
        at_start: bool = True,
    ) -> None:
        """Run `work` every `interval`, and once at start (unless not `at_start`)."""
        now = datetime.now(UTC)
        self.add_job(
            self._through_outages(job_id, work, None),
            "interval",
            seconds=interval.total_seconds(),
            id=job_id,
            next_run_time=now if at_start else now + interval,
        )

    def wakeable(self, job_id: str, interval: timedelta, work: Callable[[], int]) -> WakeableJob:
        """`every`, and woken at once by `WakeableJob.wake`."""
        job = WakeableJob(job_id, self._through_outages(job_id, work, 0))
        self.every(job_id, interval, job.run)
        return job

    def _through_outages(self, job_id: str, work: Callable[[], T], failed: T) -> Callable[[], T]:
        """`work`, whose runs while the database is unavailable end with `failed` and one
        warning when the outage starts and one when it ends, instead of a traceback at
        every run (a sweep every half second, for as long as the outage lasts). The next
        run tries again, as it would anyway; any other failure is raised as before."""

        def run() -> T:
            try:
                done = work()
            except Exception as exc:
                reason = self.unavailable(exc)
                if reason is None:
                    raise
                if job_id not in self._waiting:
                    self._waiting.add(job_id)
                    log.warning(
                        "%s: database unavailable: %s; each run tries again", job_id, reason
                    )
                return failed
            if job_id in self._waiting:
                self._waiting.discard(job_id)
                log.warning("%s: the database answers again", job_id)
            return done

        return run

    def shutdown(self, wait: bool = True) -> None:
        for job in (
            self.pull_worker,
            self.webhook_dispatcher,
            self.sandbox_lab,
            self.chain_signer,
            self.import_worker,
            self.grant_revoker,
            self.lab_report_parser,
        ):
            job.close()
        super().shutdown(wait)
