"""Changes committed in the database, heard by every process of the service on PostgreSQL
(`LISTEN`/`NOTIFY`): what lets a process keep what it read in memory and still answer
what the database holds now (ADR 0042: the team API keys; ADR 0043: the stored days a
read answered).

- Another process's commits are heard by a `ChangeListener`: a thread with a connection
  of its own that listens on the channels of its subscribers and hands each notification
  to the channel's subscriber, reconnecting with backoff. A subscriber trusts what it
  kept only while the listener is listening (`set_listening`): before its `LISTEN` is in
  force, and from the moment its connection fails until a new one listens again, nothing
  is answered from memory, and each (re)start of listening forgets what was kept, since
  a change may have committed unheard.
- This process's own commits are heard at once by `hear_own_commits`: every connection
  of the engine's pool listens too, and PostgreSQL hands a session the notifications of
  its own transaction as its COMMIT completes, which psycopg passes to the handler before
  the commit returns. So a write is forgotten before the command that made it answers,
  and never before it committed (a read racing it in another thread cannot keep what was
  there before it: the subscribers keep a read only when nothing was forgotten while it
  ran). The notifications another process sends reach an idle pooled connection too, and
  wait in its socket until it is next used: then they only make this process forget
  again what the listener already made it forget.

SQLite has no notifications; `DataVersion` reads what moves when anything is committed.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)

# How long the listener waits for a notification before it looks at its stop flag.
POLL_SECONDS = 0.25
# The longest it waits before connecting again after its connection failed.
MAX_RECONNECT_SECONDS = 30.0


class Subscriber(Protocol):
    """What keeps reads of one channel's data."""

    def heard(self, payload: str) -> None:
        """A change was committed (the payload says of what, or "" for anything)."""

    def set_listening(self, listening: bool) -> None:
        """Listening starts or stops: either way what was kept may be stale."""


def hear_own_commits(engine: Engine, channel: str, heard: Callable[[str], None]) -> None:
    """Every connection `engine`'s pool opens from now on listens on `channel` and hands
    each of its payloads to `heard`, in the thread using the connection (psycopg's notify
    handler): this process's commits are heard as they complete. Call it before the pool
    opens a connection."""

    @event.listens_for(engine, "connect")
    def _listen(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True  # LISTEN in force now, not at a later COMMIT
        try:
            dbapi_connection.execute(f"LISTEN {channel}")
        finally:
            dbapi_connection.autocommit = autocommit
        dbapi_connection.add_notify_handler(
            lambda notification: (
                heard(notification.payload) if notification.channel == channel else None
            )
        )


class ChangeListener:
    """The listener: a thread with a connection of its own that `LISTEN`s on each of
    `subscribers`' channels and hands each notification to its channel's subscriber."""

    def __init__(self, url: URL, subscribers: Mapping[str, Subscriber]) -> None:
        self.subscribers = dict(subscribers)
        # Its own connection, not the pool's: held for the process's life.
        self._engine: Engine = create_engine(url, poolclass=NullPool)
        self._stop = threading.Event()
        self._connection: Any = None
        self._thread = threading.Thread(target=self._run, name="db-changes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stops listening without waiting: the thread sees the flag within POLL_SECONDS
        and closes its connection itself (a close that waited for the wait to end would
        hold every service's close for up to that long)."""
        self._stop.set()

    def backend_pid(self) -> int | None:
        """The server process of the listening connection (for the tests that cut it)."""
        connection = self._connection
        return None if connection is None else int(connection.info.backend_pid)

    def _set_listening(self, listening: bool) -> None:
        for subscriber in self.subscribers.values():
            subscriber.set_listening(listening)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._listen()
                delay = 0.5
            except Exception as exc:  # any failure: the tables are read meanwhile
                self._set_listening(False)
                log.warning(
                    "the database change listener lost its connection (%s): what it "
                    "guards is read from the database until it listens again",
                    type(exc).__name__,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, MAX_RECONNECT_SECONDS)

    def _listen(self) -> None:
        raw = self._engine.raw_connection()
        try:
            connection = raw.driver_connection
            assert connection is not None
            connection.autocommit = True
            for channel in self.subscribers:
                connection.execute(f"LISTEN {channel}")
            self._connection = connection
            # From here on no change commits unheard: what was read before is forgotten.
            self._set_listening(True)
            while not self._stop.is_set():
                for notification in connection.notifies(timeout=POLL_SECONDS):
                    subscriber = self.subscribers.get(notification.channel)
                    if subscriber is not None:
                        subscriber.heard(notification.payload)
        finally:
            self._set_listening(False)
            self._connection = None
            raw.close()
            if self._stop.is_set():
                self._engine.dispose()


class DataVersion:
    """SQLite: `PRAGMA data_version` read on a connection of its own, which never writes:
    a number that moves whenever any other connection, of this process (the writer) or of
    another, commits to the file (SQLite's documented use of it)."""

    def __init__(self, path: Path) -> None:
        # Shared by the threads that read (one statement at a time, under the lock).
        self._connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            version: int = self._connection.execute("PRAGMA data_version").fetchone()[0]
            return version

    def close(self) -> None:
        with self._lock:
            self._connection.close()
