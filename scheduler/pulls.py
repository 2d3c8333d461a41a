"""The pull jobs the scheduler wakes: run due historical pulls, sync connected feeds daily,
and pause or resume connections as users' ingestion bounds pass. Each selects its work
from our own tables and calls idempotent commands, so a missed or doubled wake-up changes
nothing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from healthledger.adapters.composition import Service

log = logging.getLogger("healthledger.scheduler.pulls")

# Work items per query; a job goes on batch after batch while batches come back full,
# up to MAX_BATCHES per wake-up (the next wake-up goes on from there).
BATCH = 200
MAX_BATCHES = 100


def run_due_pulls(service: Service) -> int:
    """Run the pulls that are due; how many were looked at."""
    total = 0
    for _ in range(MAX_BATCHES):
        looked_at = service.pulls.run_due(BATCH)
        total += looked_at
        if looked_at < BATCH:
            break
    return total


class PullWorker:
    """The pull job, with a wake-up that is never lost: a wake-up that arrives while a run
    is going on makes that run go round once more (a second instance of the job would be
    skipped by the scheduler, and the new pulls would wait for the next interval)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._running = False
        self._again = False

    def run(self) -> int:
        with self._lock:
            self._running, self._again = True, False
        total = 0
        try:
            while True:
                total += run_due_pulls(self.service)
                with self._lock:
                    if not self._again:
                        return total
                    self._again = False
        finally:
            with self._lock:
                self._running = False

    def wake(self, start_now: Callable[[], None]) -> None:
        with self._lock:
            if self._running:
                self._again = True
                return
        start_now()


def sync_connected_feeds(service: Service) -> int:
    """Apply ingestion bounds (pause/resume), then sync every feed that is due; how many
    feeds were synced."""
    today = service.clock().date()
    changed = service.pulls.apply_ingestion_bounds(
        service.pull_queries.ingestion_bound_changes(today)
    )
    if changed:
        log.info("paused or resumed %d connections", changed)
    total = 0
    for _ in range(MAX_BATCHES):
        looked_at, synced = service.pulls.sync_due(BATCH)
        total += synced
        # Feeds that failed stay due (first in line): stop when a batch made no progress.
        if looked_at < BATCH or synced == 0:
            break
    return total
