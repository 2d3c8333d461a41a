"""The pull jobs the scheduler wakes: run due historical pulls, sync connected feeds daily,
and pause or resume connections as users' ingestion bounds pass. Each selects its work
from our own tables and calls idempotent commands, so a missed or doubled wake-up changes
nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import date
from uuid import UUID

from healthledger.domain.connections.notice_intake import MakerNotices, NoticeReceipt
from healthledger.domain.connections.pulling import Pulls
from healthledger.domain.connections.resource_feeds import ResourceFeed

log = logging.getLogger("healthledger.scheduler.pulls")

# Work items per query; a job goes on batch after batch while batches come back full,
# up to MAX_BATCHES per wake-up (the next wake-up goes on from there).
BATCH = 200
MAX_BATCHES = 100

# The connections whose user's ingestion bounds changed their state by `today`.
IngestionBoundChanges = Callable[[date], Sequence[UUID]]


def makes_a_pull_due(event: object) -> bool:
    """Whether a committed event makes a pull due at once, so the pull worker should run
    now rather than at its next interval: a pull was scheduled (a connect, a reconnect),
    a maker's notice was recorded, or a failed attempt's retry is already due (a retry
    due later waits for an interval).
    """
    if isinstance(event, ResourceFeed.PullScheduled | NoticeReceipt.Received):
        return True  # a pull scheduled, or a maker's notice recorded (its sync is due)
    return isinstance(event, ResourceFeed.PullRetrying) and event.retry_at <= event.timestamp


def run_due_pulls(pulls: Pulls, notices: MakerNotices | None = None) -> int:
    """Run the makers' notices and then the pulls that are due; how many were looked at.
    Notices first: a maker's webhook waits for its window's sync, a history can wait."""
    total = 0
    if notices is not None:
        for _ in range(MAX_BATCHES):
            looked_at = notices.run_due(BATCH)
            total += looked_at
            if looked_at < BATCH:
                break
    for _ in range(MAX_BATCHES):
        looked_at = pulls.run_due(BATCH)
        total += looked_at
        if looked_at < BATCH:
            break
    return total


def sync_connected_feeds(pulls: Pulls, ingestion_bound_changes: IngestionBoundChanges) -> int:
    """Apply ingestion bounds (pause/resume), then sync every feed that is due; how many
    feeds were synced."""
    changed = pulls.apply_ingestion_bounds(ingestion_bound_changes(pulls.clock().date()))
    if changed:
        log.info("paused or resumed %d connections", changed)
    total = 0
    for _ in range(MAX_BATCHES):
        looked_at, synced = pulls.sync_due(BATCH)
        total += synced
        # Feeds that failed stay due (first in line): stop when a batch made no progress.
        if looked_at < BATCH or synced == 0:
            break
    return total
