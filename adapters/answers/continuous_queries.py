"""The continuous query worker (issue 34, ADR 0044): the scheduler wakes it at its interval;
it leases the due tasks (adapters/persistence/queries/continuous_queries.py), runs each
query with the aggregate query's engine over the window ending today, seals the table with
the user's key and schedules the next run.

A failed run is an `error` task with our reason (the query refused, the user gone), never
an exception out of the scheduler's job: the next run is scheduled all the same, so that a
query whose data or team settings change recovers by itself.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.answers.health_queries import HealthQueries, json_body
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.adapters.persistence.queries.continuous_queries import (
    Claimed,
    ContinuousQueryStore,
)
from healthledger.domain.errors import LedgerError
from healthledger.domain.health_queries.query import InvalidQuery
from healthledger.domain.ledger import Clock

log = logging.getLogger("healthledger.continuous_queries")

# How long a worker holds a task before another may take it over (a run reads one user's
# data for one window: seconds; a process that died leaves its task this long).
LEASE = timedelta(minutes=5)
# Tasks one round of the worker runs at most (the next wake-up takes the rest).
BATCH = 50
# What a run that failed for a reason of ours says (the exception is logged, not shown).
INTERNAL_FAILURE = "The query could not be run; it will be run again at its next time."


def result_table(tables: Sequence[Any]) -> dict[str, list[Any]]:
    """The first (only) result table, column-oriented, as the aggregate query answers it."""
    answered: dict[str, Any] = json.loads(json_body(tables))
    table: dict[str, list[Any]] = answered["results"][0]["table"]
    return table


class ContinuousQueryRunner:
    def __init__(
        self,
        store: ContinuousQueryStore,
        queries: HealthQueries,
        key_store: KeyStore,
        source_priorities: Callable[[UUID], Mapping[str, Sequence[str]]],
        clock: Clock,
    ) -> None:
        self.store = store
        self.queries = queries
        self.key_store = key_store
        self.source_priorities = source_priorities
        self.clock = clock
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"

    def run_due(self) -> int:
        """Run the due tasks, a batch at a time; how many this worker ended."""
        ended = 0
        while True:
            claimed = self.store.claim_due(self.clock(), self.holder, LEASE, BATCH)
            for task in claimed:
                ended += self._run(task)
            if len(claimed) < BATCH:
                return ended

    def _run(self, task: Claimed) -> int:
        sealed: str | None = None
        error: str | None = None
        try:
            tables = self.queries.run(
                task.team_id,
                task.user_id,
                # The window ends with the day the run runs: a late run reads up to now.
                task.definition.request_on(self.clock().date()),
                {k: list(v) for k, v in self.source_priorities(task.team_id).items()},
            )
            # Never a key minted here: an erased user has none, and gets none back.
            cipher = self.key_store.cipher(task.user_id)
            if cipher is None:
                error = "The user's data is no longer held."
            else:
                sealed = cipher.seal(result_table(tables))
        except InvalidQuery as refused:
            error = f"The query was refused: {refused.message}"
        except LedgerError as refused:
            error = refused.message
        except Exception:
            log.exception("continuous query %s: the run failed", task.query_id)
            error = INTERNAL_FAILURE
        now = self.clock()
        interval = timedelta(minutes=task.definition.interval_minutes)
        # The next run keeps the query's rhythm, but never falls due in the past: runs
        # missed while no process ran are not made up one by one.
        missed = max(0, (now - task.scheduled_at) // interval)
        next_at = task.scheduled_at + (missed + 1) * interval
        return int(self.store.finish(task, self.holder, now, sealed, error, next_at))
