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
  process's listener (`engine/changes.py`'s `ChangeListener`) makes it forget all it
  kept when one arrives.

The cache is only trusted while the listener is listening: before its `LISTEN` is in
force, and from the moment its connection fails until a new one listens again, every
lookup reads the table. Each (re)start of listening forgets what was kept, since a change
may have committed unheard. A read that raced a change is not kept: the generation it
started under must still be the current one when it is stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from uuid import UUID

from sqlalchemy import Connection, func, select

# The one channel every process listens on. Channels are per database, not per schema:
# a deployment sharing the database with another only forgets more often.
CHANNEL = "healthledger_team_api_keys"
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

    def heard(self, payload: str) -> None:
        """A key was revoked or a team deleted, in some process (the payload is empty)."""
        self.forget_all()

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
