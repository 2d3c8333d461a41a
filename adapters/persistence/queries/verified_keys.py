"""Team API keys verified once per process on PostgreSQL, forgotten when any key or team
changes (ADR 0042).

Every team API request looks its key up (`TeamQueries.api_key`). On SQLite that is a read
of a local file, microseconds; on PostgreSQL it is a round trip, about a third of a
millisecond, on every request: a fifth of a day's timeseries read (issue 32). A process
therefore keeps the records it read of keys in force, and forgets all of them when a key
is revoked or a team deleted:

- in this process, at once: a commit listener (`forget_after`) sees the revocation's or
  the deletion's event when its transaction commits, before the command answers;
- in every other process, within the time a notification takes: the projection that
  records the revocation or deletion sends `NOTIFY` in its transaction
  (`announce_key_change`), which PostgreSQL delivers when, and only if, it commits; each
  process's listener (`KeyChanges`) forgets all it kept when one arrives.

The cache is only trusted while the listener is listening: before its `LISTEN` is in
force, and from the moment its connection fails until a new one listens again, every
lookup reads the table. Each (re)start of listening forgets what was kept, since a change
may have committed unheard. A read that raced a change is not kept: the generation it
started under must still be the current one when it is stored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from uuid import UUID

from sqlalchemy import Connection, Engine, create_engine, func, select
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)

# The one channel every process listens on. Channels are per database, not per schema:
# a deployment sharing the database with another only forgets more often.
CHANNEL = "healthledger_team_api_keys"
# How long the listener waits for a notification before it looks at its stop flag.
POLL_SECONDS = 0.25
# The longest it waits before connecting again after its connection failed.
MAX_RECONNECT_SECONDS = 30.0
# Keys kept at most; past it, all are forgotten (a process serves a handful of teams).
MAX_KEPT = 10_000


def announce_key_change(conn: Connection) -> None:
    """In a transaction that revokes a key or deletes a team: every process's listener
    hears of it when the transaction commits (PostgreSQL; SQLite keeps no keys)."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_notify(CHANNEL, "")))


class KeyRecord(Protocol):
    revoked: bool


class VerifiedKeys:
    """The records of keys in force that this process read, while `listening`."""

    def __init__(self, read: Callable[[UUID], Any]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._kept: dict[UUID, Any] = {}
        self._generation = 0
        self.listening = False
        # Lookups answered from memory: for the operators' figures and the tests.
        self.hits = 0

    def kept(self, key_id: UUID) -> Any:
        """The record kept of the key (no I/O: an async caller may ask on its event
        loop), or None: then `lookup` reads it."""
        with self._lock:
            if not self.listening:
                return None
            kept = self._kept.get(key_id)
            if kept is not None:
                self.hits += 1
            return kept

    def lookup(self, key_id: UUID) -> Any:
        kept = self.kept(key_id)
        if kept is not None:
            return kept
        with self._lock:
            generation, listening = self._generation, self.listening
        record = self._read(key_id)
        if listening and record is not None and not record.revoked:
            with self._lock:
                # Not if anything was forgotten since the read began: it may be stale.
                if self.listening and self._generation == generation:
                    if len(self._kept) >= MAX_KEPT:
                        self._kept.clear()
                    self._kept[key_id] = record
        return record

    def forget_all(self) -> None:
        with self._lock:
            self._generation += 1
            self._kept.clear()

    def set_listening(self, listening: bool) -> None:
        """Listening starts or stops: either way what was kept may be stale."""
        with self._lock:
            self._generation += 1
            self._kept.clear()
            self.listening = listening

    def forget_after(self, changes: tuple[type, ...]) -> Callable[[Sequence[Any]], None]:
        """A commit listener: forgets all when a commit holds one of `changes`' events."""

        def listener(events: Sequence[Any]) -> None:
            if any(isinstance(event, changes) for event in events):
                self.forget_all()

        return listener


class KeyChanges:
    """The listener: a thread with a connection of its own that `LISTEN`s on `CHANNEL`
    and makes `keys` forget on each notification; reconnects with backoff."""

    def __init__(self, url: URL, keys: VerifiedKeys) -> None:
        self.keys = keys
        # Its own connection, not the pool's: held for the process's life.
        self._engine: Engine = create_engine(url, poolclass=NullPool)
        self._stop = threading.Event()
        self._connection: Any = None
        self._thread = threading.Thread(target=self._run, name="key-changes", daemon=True)

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

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._listen()
                delay = 0.5
            except Exception as exc:  # any failure: the table is read meanwhile
                self.keys.set_listening(False)
                log.warning(
                    "the team API keys' change listener lost its connection (%s): keys "
                    "are read on every request until it listens again",
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
            connection.execute(f"LISTEN {CHANNEL}")
            self._connection = connection
            # From here on no change commits unheard: what was read before is forgotten.
            self.keys.set_listening(True)
            while not self._stop.is_set():
                for _notification in connection.notifies(timeout=POLL_SECONDS):
                    self.keys.forget_all()
        finally:
            self.keys.set_listening(False)
            self._connection = None
            raw.close()
            if self._stop.is_set():
                self._engine.dispose()
