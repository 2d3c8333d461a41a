"""A scheduled job that can also be woken at once, without losing a wake-up.

APScheduler runs a job at its interval; `wake` runs it now (a connect scheduled pulls, an
event was committed). A wake-up that arrives while the job is running makes that run go
round once more: a second instance would be skipped by the scheduler (max_instances=1),
and the new work would wait for the next interval. Latency only: the work itself is
always selected from our own tables.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WakeableJob:
    def __init__(self, work: Callable[[], int]) -> None:
        self.work = work
        self._lock = threading.Lock()
        self._running = False
        self._again = False
        self._start_now: Callable[[], None] | None = None

    def bind(self, start_now: Callable[[], None]) -> None:
        """How to start the job now (set once the scheduler has the job)."""
        self._start_now = start_now

    def run(self) -> int:
        with self._lock:
            self._running, self._again = True, False
        total = 0
        try:
            while True:
                total += self.work()
                with self._lock:
                    if not self._again:
                        return total
                    self._again = False
        finally:
            with self._lock:
                self._running = False

    def wake(self) -> None:
        with self._lock:
            if self._running:
                self._again = True
                return
        if self._start_now is not None:
            self._start_now()
