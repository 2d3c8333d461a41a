"""A clock the tests hand to `build_service(settings, clock=...)` and move on themselves:
time passes only when a test says so (no sleeping, and no freezegun where a real server
thread or an event loop must keep real time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class Clock:
    """Now (or `now`), moved on by `advance`."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = datetime.now(UTC) if now is None else now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta
