"""Days opened from sealed blocks, kept a short while (`health_data/opened.py`): a block
is opened once while its seal is the same, again once it is sealed anew (a version
rewritten in place, or a new one), and entries leave by age and by size."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from types import SimpleNamespace
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.health_data import blocks
from healthledger.adapters.persistence.health_data.blocks import StoredPayload
from healthledger.adapters.persistence.health_data.opened import OpenedDays
from healthledger.adapters.persistence.health_data.store import block_context
from healthledger.adapters.persistence.keys.key_store import UserCipher, canonical_json

USER = UUID(int=11)
MONTH = date(2026, 3, 1)
DAY = date(2026, 3, 2)
NOW = datetime(2026, 3, 3, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sealed_row(cipher: UserCipher, value: Any, version: int = 1) -> SimpleNamespace:
    plain = blocks.encode({DAY: StoredPayload(value, NOW, NOW)})
    sealed = cipher.seal_raw(plain, block_context("oura", "heartrate", MONTH))
    return SimpleNamespace(
        provider="oura", resource="heartrate", period=MONTH, version=version, sealed=sealed
    )


def test_a_block_is_opened_once_per_seal_and_entries_leave_by_age_and_size() -> None:
    cipher = UserCipher(USER, os.urandom(32))
    opened: list[int] = []

    def counted() -> UserCipher:
        opened.append(1)
        return cipher

    clock = Clock()
    cache = OpenedDays(max_bytes=4_000, max_age=60.0, clock=clock)
    first = sealed_row(cipher, [{"value": 60}])

    def read(row: SimpleNamespace) -> list[bytes]:
        return [d.plaintext for d in cache.days(USER, [row], counted, DAY, DAY)]

    assert read(first) == [canonical_json([{"value": 60}])]
    assert read(first) == [canonical_json([{"value": 60}])]
    assert len(opened) == 1  # the second read opened nothing
    # The same version sealed anew (a day added in place): another seal, opened again.
    rewritten = sealed_row(cipher, [{"value": 61}])
    assert read(rewritten) == [canonical_json([{"value": 61}])]
    assert len(opened) == 2
    # Aged out: opened again.
    clock.now += 61
    assert read(rewritten) == [canonical_json([{"value": 61}])]
    assert len(opened) == 3
    # A day larger than a quarter of the bound is never kept.
    big = sealed_row(cipher, [{"value": n} for n in range(200)], version=2)
    read(big)
    read(big)
    assert len(opened) == 5
    # Entries past the bound in bytes (six days of 966 bytes) push the least recently
    # used out.
    rows = [sealed_row(cipher, [{"value": n} for n in range(75)], version=v) for v in range(3, 9)]
    for row in rows:
        read(row)
    before = len(opened)
    read(rows[-1])
    assert len(opened) == before  # the newest is kept
    read(rows[0])
    assert len(opened) == before + 1  # the oldest was pushed out


def test_forget_drops_the_users_entries_only() -> None:
    cipher = UserCipher(USER, os.urandom(32))
    other = UUID(int=12)
    other_cipher = UserCipher(other, os.urandom(32))
    cache = OpenedDays()
    cache.days(USER, [sealed_row(cipher, [{"value": 60}])], lambda: cipher, DAY, DAY)
    cache.days(other, [sealed_row(other_cipher, [{"value": 70}])], lambda: other_cipher, DAY, DAY)
    assert cache.forget([USER]) == 1
    assert cache.forget([USER]) == 0
    assert cache.forget([other]) == 1
