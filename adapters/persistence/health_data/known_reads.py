"""The stored days a read answered, kept per process until the database says the user's
data changed (PostgreSQL) or anything was committed (SQLite) (ADR 0043).

A day's timeseries read is one query (the user's state, its wrapped key and the blocks
that hold the days: `HealthDataQueries.stored_days`) and the days opened from them, which
`OpenedDays` keeps. On PostgreSQL that query is a round trip of about 0.4 ms, a fifth of
the whole request (issue 32's figure). A process therefore keeps the answers it gave, per
(team, user, resource, days, provider), and forgets a user's as soon as anything an
answer depends on changes for that user: a row of `health_data` (a sync, a compaction,
the erasure), of `users` (a deletion, its undoing, the erasure) or the user's data key
(destroyed by the erasure). Triggers on those three tables (revision 0037) send the
user's id on the `USER_DATA` channel in the writing transaction; PostgreSQL delivers it
when, and only if, the transaction commits: to this process's own connection as its
commit completes, and to every process's listener (`engine/changes.py`).

Nothing is answered from memory unless the listener is listening; an answer is kept only
if nothing of its user was forgotten while it was read (a change that committed meanwhile
may not be in it; another user's change says nothing of it, and on a busy database some
user's data changes all the time); `as_of` reads are never kept (they read the versions
of then). Entries also age out after `max_age`, like the opened days, and the bytes kept
are bounded.

SQLite has no channel to hear on, but a cheaper question: `PRAGMA data_version`, on a
connection of its own that never writes, moves whenever any connection (this process's
writer, another process's) commits anything to the file (`engine/changes.py`'s
`DataVersion`). An answer is kept with the reading taken before its query and given
only while the reading is the same: coarser (any commit of any table forgets every
answer), but a statement of microseconds in place of the read's query and opening.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from uuid import UUID

from healthledger.domain.connections.health_data import StoredDay

# The channel the triggers of revision 0037 notify on, with the user's id.
USER_DATA = "healthledger_user_data"
# The users whose latest forgetting is remembered one by one; beyond them, an older one's
# raises a floor under which every read in flight counts as overtaken.
FORGETTINGS_KEPT = 10_000


@dataclass(frozen=True)
class _Known:
    user_id: UUID
    days: tuple[StoredDay, ...]
    size: int
    at: float
    # The data version it was read at (SQLite), or None.
    version: Hashable


@dataclass(frozen=True)
class Reading:
    """What `get` hands `keep`: the generation and data version a read began at."""

    generation: int
    version: Hashable


class KnownReads:
    """Answers of stored-days reads, forgotten per user when the database says so."""

    def __init__(
        self,
        max_bytes: int = 64 * 1024 * 1024,
        max_age: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        version: Callable[[], Hashable] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        # SQLite: the database's data version, which any commit moves; with it, nothing
        # needs to be heard (always "listening").
        self.version = version
        self.listening = version is not None
        # Reads answered from memory: for the operators' figures and the tests.
        self.hits = 0
        self._lock = threading.Lock()
        self._known: OrderedDict[Hashable, _Known] = OrderedDict()
        self._by_user: dict[UUID, set[Hashable]] = {}
        self._bytes = 0
        self._generation = 0
        # The generation of each user's latest forgetting, and the one of everyone's (or of
        # the users no longer remembered): a read is overtaken by either.
        self._forgotten: OrderedDict[UUID, int] = OrderedDict()
        self._floor = 0

    def get(self, key: Hashable) -> tuple[list[StoredDay] | None, Reading]:
        """The days kept for `key` (None when there are none or they may be stale), and
        the reading to hand `keep` with what is read instead."""
        version = None if self.version is None else self.version()
        with self._lock:
            reading = Reading(self._generation, version)
            if not self.listening:
                return None, reading
            known = self._known.get(key)
            if known is None:
                return None, reading
            if known.version != version:
                # Something was committed since: every answer kept may be stale.
                self._forget_all()
                return None, Reading(self._generation, version)
            if self.clock() - known.at > self.max_age:
                self._drop(key)
                return None, reading
            self._known.move_to_end(key)
            self.hits += 1
            return list(known.days), reading

    def keep(self, key: Hashable, user_id: UUID, days: list[StoredDay], reading: Reading) -> None:
        """Keep what a read found, unless anything was forgotten since it began."""
        size = sum(len(day.plaintext) for day in days)
        if size > self.max_bytes:
            return
        with self._lock:
            if not self.listening or self._overtaken(user_id, reading.generation):
                return
            if key in self._known:
                self._drop(key)
            self._known[key] = _Known(user_id, tuple(days), size, self.clock(), reading.version)
            self._by_user.setdefault(user_id, set()).add(key)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._known)))

    def holds(self, user_id: UUID) -> bool:
        """Whether anything read of the user is kept."""
        with self._lock:
            return bool(self._by_user.get(user_id))

    def heard(self, payload: str) -> None:
        """A change of a user's data committed (the payload is the user's id; anything
        else, or nothing, forgets every user)."""
        try:
            user_id = UUID(payload)
        except ValueError:
            self.forget_all()
            return
        self.forget([user_id])

    def forget(self, user_ids: list[UUID]) -> None:
        with self._lock:
            self._generation += 1
            for user_id in user_ids:
                self._forgotten[user_id] = self._generation
                self._forgotten.move_to_end(user_id)
                for key in self._by_user.pop(user_id, ()):
                    self._drop(key, keep_user=True)
            while len(self._forgotten) > FORGETTINGS_KEPT:
                _, generation = self._forgotten.popitem(last=False)
                self._floor = max(self._floor, generation)

    def _overtaken(self, user_id: UUID, began: int) -> bool:
        """Whether the user's data (or everyone's) was forgotten since a read began."""
        return max(self._floor, self._forgotten.get(user_id, 0)) > began

    def forget_all(self) -> None:
        with self._lock:
            self._forget_all()

    def _forget_all(self) -> None:
        self._generation += 1
        self._floor = self._generation
        self._forgotten.clear()
        self._known.clear()
        self._by_user.clear()
        self._bytes = 0

    def set_listening(self, listening: bool) -> None:
        with self._lock:
            self._forget_all()
            self.listening = listening

    def _drop(self, key: Hashable, keep_user: bool = False) -> None:
        known = self._known.pop(key, None)
        if known is None:
            return
        self._bytes -= known.size
        if not keep_user:
            keys = self._by_user.get(known.user_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_user[known.user_id]
