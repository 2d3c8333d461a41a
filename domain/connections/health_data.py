"""The health data store port: a user's pulled data, one payload per (provider, resource,
day), sealed under the user's key and erased with the user.

The pull engine stores each chunk window as it arrives (every resource of a connection in
one transaction); `store` tells which days were new and which changed, which is what the
daily sync records as daily data created and updated.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cached_property
from typing import Any, Protocol
from uuid import UUID

from healthledger.domain.connections.raw_payloads import RawPull
from healthledger.domain.connections.summary_ids import SummaryIds
from healthledger.domain.errors import LedgerError


class UserDataGone(LedgerError):
    """The user was erased (their key is gone): nothing of theirs may be stored again."""

    def __init__(self) -> None:
        super().__init__("The user's data was erased.")


@dataclass
class StoreResult:
    created: list[date] = field(default_factory=list)
    updated: list[date] = field(default_factory=list)


@dataclass(frozen=True)
class StoredDay:
    """One stored (provider, resource, day) of a user, opened: its JSON text as stored,
    when it was first stored and last changed, and the user's summary ids (which come
    with the key that opened it)."""

    provider: str
    resource: str
    day: date
    # The canonical JSON the pull stored: a summary object, a day's sessions or samples.
    plaintext: bytes
    stored_at: datetime
    updated_at: datetime
    # Derived from the key, not part of what was stored: two reads of a day are equal.
    ids: SummaryIds = field(compare=False, repr=False)

    @cached_property
    def value(self) -> Any:
        return json.loads(self.plaintext)


class HealthDataStore(Protocol):
    def store(
        self,
        user_id: UUID,
        provider: str,
        data: Mapping[str, Mapping[date, Any]],
        raw: Mapping[str, RawPull] | None = None,
    ) -> dict[str, StoreResult]:
        """Upsert one payload per resource and day, in one transaction; per resource, the
        days that were new and the days that changed. `raw`: per resource, the maker's
        answers the payloads were mapped from (raw_payloads.py), kept in the same
        transaction in place of the earlier pulls of the days they cover. Raises
        UserDataGone for an erased user."""
        ...

    def read(
        self, user_id: UUID, provider: str, resource: str, start: date, end: date
    ) -> dict[date, Any]:
        """The stored payloads for start..end (inclusive), opened."""
        ...

    def read_range(
        self,
        user_id: UUID,
        start: date,
        end: date,
        *,
        resources: Collection[str] | None = None,
        provider: str | None = None,
    ) -> list[StoredDay]:
        """The user's stored days in start..end (inclusive) across providers (or of one),
        of the given resources (or all), opened; none for an erased user."""
        ...
