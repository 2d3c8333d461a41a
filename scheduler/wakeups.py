"""A job that runs at its interval and can also be woken at once, without losing a wake-up.

APScheduler runs the job at its interval; `wake` runs it now, on a thread of its own (a
commit gave it work: see `LedgerScheduler.committed`). Only one run goes on at a time: a
run or wake-up that arrives meanwhile makes the running one go round once more. Latency
only: the work itself is always selected from our own tables.

The wake-up does not go through APScheduler (`modify_job`): a job that commits, and so
wakes a job, while the scheduler shuts down would wait for the job store lock that
shutdown holds while it waits for that very job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("healthledger.scheduler")


class WakeableJob:
    def __init__(self, name: str, work: Callable[[], int]) -> None:
        self.name = name
        self.work = work
        self._lock = threading.Lock()
        self._running = False
        self._again = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        # How many runs have ended: a caller can tell that a run it saw start is over.
        self.runs_ended = 0

    def run(self) -> int:
        """Do the work until no wake-up came in meanwhile; 0 if a run was going on."""
        with self._lock:
            if self._running:
                self._again = True
                return 0
            self._running, self._again = True, False
        total = 0
        try:
            while True:
                total += self.work()
                with self._lock:
                    if not self._again or self._closed:
                        return total
                    self._again = False
        finally:
            with self._lock:
                self._running = False
                self.runs_ended += 1

    def wake(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._running:
                self._again = True
                return
            self._threads = [t for t in self._threads if t.is_alive()]
            thread = threading.Thread(target=self._run_logged, name=self.name, daemon=True)
            self._threads.append(thread)
            # Started under the lock: a `close` that copies the list meanwhile would join a
            # thread not yet started, which raises. (`start` returns once the thread runs;
            # its run waits for the lock.)
            thread.start()

    def close(self, timeout: float = 60) -> None:
        """No more wake-ups; wait for the runs they started."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def _run_logged(self) -> None:
        try:
            self.run()
        except Exception:  # a woken run has no scheduler to report it: log it
            log.exception("woken job %s failed", self.name)
