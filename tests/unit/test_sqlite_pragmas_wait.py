"""A new SQLite connection's PRAGMA that SQLite answers "database is locked" without
calling its busy handler (journal_mode while another process holds the file for a
moment: seen in CI as a second `serve` failing to start) is tried again, for a while."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from healthledger.adapters.persistence.engine import sqlite as sqlite_engine


class Cursor:
    """Answers "database is locked" `locked` times, then runs the statement."""

    def __init__(self, locked: int, error: str = "database is locked") -> None:
        self.locked = locked
        self.error = error
        self.ran: list[str] = []

    def execute(self, statement: str) -> Any:
        if self.locked:
            self.locked -= 1
            raise sqlite3.OperationalError(self.error)
        self.ran.append(statement)


def test_a_locked_pragma_is_tried_again_until_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_engine, "PRAGMA_RETRY_PAUSE", 0.0)
    cursor = Cursor(locked=3)
    sqlite_engine.execute_waiting(cursor, "PRAGMA journal_mode=WAL")  # type: ignore[arg-type]
    assert cursor.ran == ["PRAGMA journal_mode=WAL"] and cursor.locked == 0


def test_another_error_or_a_lock_held_too_long_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_engine, "PRAGMA_RETRY_PAUSE", 0.0)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        sqlite_engine.execute_waiting(Cursor(1, "disk I/O error"), "PRAGMA x")  # type: ignore[arg-type]
    monkeypatch.setattr(sqlite_engine, "PRAGMA_RETRY_SECONDS", 0.0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite_engine.execute_waiting(Cursor(10**6), "PRAGMA x")  # type: ignore[arg-type]
