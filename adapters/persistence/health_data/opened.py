"""Days opened from sealed blocks, kept a short while for the reads that ask for them
again (a dashboard polling today's heart rate; the timeseries read figure of issue 32).

Opening a day costs the key's unwrap, the block's decryption, its Parquet row groups and
the day's canonical JSON made from the columns: several times the read's SQL. A read
that `known_reads.KnownReads` cannot answer (ADR 0043: asked for the first time, or
after a change) fetches the block's row (and the user's state and wrapped key) in its
one query, then looks the opened days up by the row's seal: its nonce is random per seal, so a
version rewritten in place (days added) or a new version is another entry, and nothing
is answered that the database does not hold now. An erased user's rows and key are gone,
so its entries can no longer be reached: the process that erased the user drops them at
once (`forget`, after each erasure batch: scheduler/erasure.py); any other process's leave
its memory when they age out (`max_age`) or are pushed out (`max_bytes`), whichever is
first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.health_data.store import opened_days
from healthledger.adapters.persistence.keys.key_store import UserCipher
from healthledger.domain.connections.health_data import StoredDay

# The seal's leading bytes: its AES-GCM nonce (`UserCipher.seal_raw`).
_NONCE = 12


@dataclass(frozen=True)
class _Entry:
    days: list[StoredDay]
    size: int
    at: float


class OpenedDays:
    """A bounded, short-lived map from (user, block version's seal, days asked) to the
    days it opened to."""

    def __init__(
        self,
        max_bytes: int = 16 * 1024 * 1024,
        max_age: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def days(
        self,
        user_id: UUID,
        rows: Iterable[Any],
        cipher: Callable[[], UserCipher],
        first: date,
        last: date,
        as_of: datetime | None = None,
    ) -> list[StoredDay]:
        """`opened_days` of the rows (provider, resource, period, version, sealed), each
        block opened once a while; the cipher made only when one is opened."""
        found: list[StoredDay] = []
        opened: UserCipher | None = None
        for row in rows:
            seal = bytes(row.sealed[:_NONCE])
            key = (user_id, row.provider, row.resource, row.period, row.version, seal, first, last)
            days = self._get(key)
            if days is None:
                opened = opened or cipher()
                days = opened_days([row], opened, first, last)
                self._put(key, days)
            found.extend(d for d in days if as_of is None or d.stored_at <= as_of)
        return sorted(found, key=lambda d: (d.resource, d.day, d.provider))

    def forget(self, user_ids: Iterable[UUID]) -> int:
        """Drop every entry of these users (their erasure committed): how many went."""
        gone = set(user_ids)
        with self._lock:
            keys = [key for key in self._entries if key[0] in gone]
            for key in keys:
                self._drop(key)
        return len(keys)

    def _get(self, key: tuple[Any, ...]) -> list[StoredDay] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if self.clock() - entry.at > self.max_age:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return entry.days

    def _put(self, key: tuple[Any, ...], days: list[StoredDay]) -> None:
        size = sum(len(d.plaintext) for d in days)
        if size > self.max_bytes // 4:
            return  # a long range: opened for its read only, never pushing all else out
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = _Entry(days, size, self.clock())
            self._bytes += size
            now = self.clock()
            while self._entries and (
                self._bytes > self.max_bytes
                or now - next(iter(self._entries.values())).at > self.max_age
            ):
                self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[Any, ...]) -> None:
        self._bytes -= self._entries.pop(key).size
