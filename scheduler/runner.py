"""The in-process APScheduler that wakes the sweeps up.

Facts that shape it (see docs/adr/0003-scheduling.md): a 3.x job is removed from its
store before it runs, a default misfire grace of one second silently skips a job that
fell due while the process was down, and two schedulers sharing a job store run jobs
twice. So: an in-memory store, interval jobs that sweep our own tables, a first run at
start (what fell due while the service was down is erased, or applied, at once), no
misfire skips.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from healthledger.adapters.composition import Service
from healthledger.scheduler.deprecations import apply_cut_overs
from healthledger.scheduler.erasure import sweep_erasures
from healthledger.scheduler.pulls import run_due_pulls, sync_connected_feeds
from healthledger.scheduler.wakeups import WakeableJob
from healthledger.scheduler.webhooks import dispatch_webhooks


class LedgerScheduler(BackgroundScheduler):
    """APScheduler, plus the jobs that can be woken outside it: shutting down stops their
    wake-ups and waits for them first."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.wakeables: list[WakeableJob] = []

    def shutdown(self, wait: bool = True) -> None:
        for wakeable in self.wakeables:
            wakeable.close()
        super().shutdown(wait)


def start_scheduler(service: Service) -> LedgerScheduler:
    scheduler = LedgerScheduler(
        timezone=UTC,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
    )
    scheduler.add_job(
        sweep_erasures,
        "interval",
        seconds=service.settings.erasure_sweep_interval.total_seconds(),
        args=[service],
        id="erasure-sweep",
        next_run_time=datetime.now(UTC),
    )
    settings = service.settings
    pulls = _wakeable(
        scheduler, "pull-worker", settings.pull_poll_interval, lambda: run_due_pulls(service)
    )
    # A connect just scheduled pulls: run the worker now, not at its next interval.
    service.wake_pull_worker = pulls.wake
    webhooks = _wakeable(
        scheduler,
        "webhook-dispatcher",
        settings.webhook_poll_interval,
        lambda: dispatch_webhooks(service),
    )
    # Every commit in this process may hold an event to announce: dispatch it now. Other
    # processes' commits are found at the next interval.
    service.recorder.add_commit_listener(webhooks.wake)
    scheduler.add_job(
        sync_connected_feeds,
        "interval",
        seconds=settings.daily_sync_sweep_interval.total_seconds(),
        args=[service],
        id="daily-sync",
        next_run_time=datetime.now(UTC),
    )
    scheduler.add_job(
        apply_cut_overs,
        "interval",
        seconds=settings.deprecation_sweep_interval.total_seconds(),
        args=[service],
        id="deprecation-cut-overs",
        next_run_time=datetime.now(UTC),
    )
    scheduler.start()
    return scheduler


def _wakeable(
    scheduler: LedgerScheduler, job_id: str, interval: timedelta, work: Callable[[], int]
) -> WakeableJob:
    wakeable = WakeableJob(job_id, work)
    scheduler.add_job(
        wakeable.run,
        "interval",
        seconds=interval.total_seconds(),
        id=job_id,
        next_run_time=datetime.now(UTC),
    )
    scheduler.wakeables.append(wakeable)
    return wakeable
