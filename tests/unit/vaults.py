"""The PersonalDataVault port in memory, for the domain's tests (and the receiver's e2e
tests, which hand the mirror a vault they can look into)."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Any
from uuid import UUID


class DictVault:
    """The PersonalDataVault port in memory: a "key" per user, sealed values numbered in
    the order they were sealed (so stored forms are deterministic), gone with the key."""

    def __init__(self) -> None:
        self.values: dict[UUID, dict[str, Any]] = {}
        self.sealed = 0

    def seal(self, user_id: UUID, value: Any) -> str:
        self.sealed += 1
        text = f"sealed-{self.sealed}"
        self.values.setdefault(user_id, {})[text] = value
        return text

    def open(self, user_id: UUID, sealed: str) -> Any | None:
        key = self.values.get(user_id)
        return None if key is None else key[sealed]

    def has_key(self, user_id: UUID) -> bool:
        return user_id in self.values

    def discard(self, user_id: UUID) -> None:
        self.values.pop(user_id, None)


class DigestKeys:
    """The UsersDigests port in memory: a random key per user, made on first use (every
    live user has one), gone with `erase`."""

    def __init__(self) -> None:
        self.keys: dict[UUID, bytes] = {}
        self.erased: set[UUID] = set()

    def users_digest(self, user_id: UUID) -> Callable[[bytes], str] | None:
        if user_id in self.erased:
            return None
        key = self.keys.setdefault(user_id, os.urandom(32))
        return lambda data: hmac.new(key, data, hashlib.sha256).hexdigest()

    def erase(self, user_id: UUID) -> None:
        self.keys.pop(user_id, None)
        self.erased.add(user_id)
