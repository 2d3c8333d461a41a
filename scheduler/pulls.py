"""The pull jobs the scheduler wakes: run due historical pulls, sync connected feeds daily,
and pause or resume connections as users' ingestion bounds pass. Each selects its work
from our own tables and calls idempotent commands, so a missed or doubled wake-up changes
nothing."""

from __future__ import annotations

import logging

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
