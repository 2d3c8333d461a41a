"""A clock the tests hand to `build_service(settings, clock=...)` and move on themselves:
time passes only when a test says so (no sleeping, and no freezegun where a real server
thread or an event loop must keep real time)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace


class Clock:
    """Now (or `now`), moved on by `advance`."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = datetime.now(UTC) if now is None else now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


class Stopwatch:
    """Seconds as `time.monotonic` and `time.perf_counter` count them, moved on only by
    `advance`: for code that times its own work, so that a test's outcome does not depend
    on how fast the machine is (a loaded CI runner's database, say)."""

    def __init__(self) -> None:
        self.seconds = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.seconds

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds

    def as_time_module(self) -> SimpleNamespace:
        """A stand-in for a module's `time`: this watch's monotonic and perf_counter, the
        real wall clock and sleep."""
        return SimpleNamespace(monotonic=self, perf_counter=self, time=time.time, sleep=time.sleep)
