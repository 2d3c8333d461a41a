"""Which provider and resource a row of `health_data` or `raw_payloads` is of, held as
keyed digests (issue 29 §1, ADR 0047).

A block's or a kept pull's provider and resource say something of the person's health (a
glucose monitor; `blood_pressure`), and the user's id beside them stays in clear. The rows
hold them as 128 bits (32 hex digits) of HMAC-SHA256 under the user's digest key (the
user's `UserCipher.digest`, the key ADR 0045 derives stream ids with) over a label and
the name. Once the erasure destroys the key, nobody, the service included, can test a
slug against a digest.

A read knows the user and the names it asks for: it computes their digests. A row's names
are found again by computing the digests of the known names: the provider catalog's
slugs and the spec's resources (small closed sets), and any name computed forward. A
block's seal stays bound to its names in clear (`store.block_context`), so a row found
under the wrong name would not open.

`PlaceDigests` keeps a user's computed digests per process for a short while (the reads
need them before their one query): the erasure drops them (`forget`, as for the opened
days), and they hold no key, only digests of catalog names.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, get_args
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    health_data,
    place_digest_backfill,
    raw_payloads,
)
from healthledger.adapters.persistence.keys.key_store import KeyStore
from healthledger.adapters.reference import Resource, provider_catalog
from healthledger.domain.connections.stream_ids import UsersDigest
from sqlalchemy import delete, select, update

log = logging.getLogger("healthledger.health_data")
# What a keyed name looks like: no provider slug or resource is 32 hex digits.
_KEYED = re.compile(r"[0-9a-f]{32}")

_PROVIDER = b"health-provider\x1f"
_RESOURCE = b"health-resource\x1f"


def is_keyed(name: str) -> bool:
    """Whether a row's provider or resource is a keyed digest (or a name in clear, as
    rows were written before revision 0039)."""
    return _KEYED.fullmatch(name) is not None


def provider_digest(digest: UsersDigest, provider: str) -> str:
    """What a row's `provider` column holds for `provider`, under the user's key."""
    return digest(_PROVIDER + provider.encode())[:32]


def resource_digest(digest: UsersDigest, resource: str) -> str:
    """What a row's `resource` column holds for `resource`, under the user's key."""
    return digest(_RESOURCE + resource.encode())[:32]


@functools.cache
def known_providers() -> tuple[str, ...]:
    """Every provider a row may be of: the catalog's slugs."""
    return tuple(entry.slug for entry in provider_catalog())


@functools.cache
def known_resources() -> tuple[str, ...]:
    """Every resource a row may be of: the spec's (and any of the catalog's)."""
    named = set(get_args(Resource))
    for entry in provider_catalog():
        named.update(entry.supported_resources)
    return tuple(sorted(named))


class Places:
    """One user's provider and resource names and their digests, both ways: computed
    forward on demand, backward from the known names (and those computed forward).
    `frozen()` is a copy with every known name computed and no key: what a process
    keeps (`PlaceDigests`)."""

    def __init__(self, digest: UsersDigest | None) -> None:
        self._digest = digest
        self._providers: dict[str, str] = {}
        self._resources: dict[str, str] = {}
        self._provider_names: dict[str, str] | None = None
        self._resource_names: dict[str, str] | None = None

    def provider(self, name: str) -> str:
        found = self._providers.get(name)
        if found is None:
            found = self._providers[name] = provider_digest(self._key(), name)
            if self._provider_names is not None:
                self._provider_names[found] = name
        return found

    def resource(self, name: str) -> str:
        found = self._resources.get(name)
        if found is None:
            found = self._resources[name] = resource_digest(self._key(), name)
            if self._resource_names is not None:
                self._resource_names[found] = name
        return found

    def resources(self, names: Iterable[str]) -> list[str]:
        return [self.resource(name) for name in names]

    def knows(self, *, provider: str | None = None, resource: str | None = None) -> bool:
        """Whether the digests of these names are at hand (always, with the key)."""
        return self._digest is not None or (
            (provider is None or provider in self._providers)
            and (resource is None or resource in self._resources)
        )

    def provider_of(self, digest: str) -> str | None:
        """The provider a row's digest is of; None for none known."""
        if self._provider_names is None:
            for name in known_providers():
                self.provider(name)
            self._provider_names = {d: n for n, d in self._providers.items()}
        return self._provider_names.get(digest)

    def resource_of(self, digest: str) -> str | None:
        """The resource a row's digest is of; None for none known."""
        if self._resource_names is None:
            for name in known_resources():
                self.resource(name)
            self._resource_names = {d: n for n, d in self._resources.items()}
        return self._resource_names.get(digest)

    def named(self, rows: Iterable[Any]) -> list[Named]:
        """Rows with `provider` and `resource` digests as rows with their names; a row of
        no known name (a provider since taken out of the catalog) is left out."""
        return [named for named in map(self.name, rows) if named is not None]

    def name(self, row: Any) -> Named | None:
        """One row by name (`named`); None for a row of no known name."""
        provider = self.provider_of(row.provider)
        resource = self.resource_of(row.resource)
        if provider is None or resource is None:
            return None
        return Named.of(row, provider, resource)

    def frozen(self) -> Places:
        """A copy holding the digests of every known name (and those computed), no key."""
        self.provider_of("")
        self.resource_of("")
        copy = Places(None)
        copy._providers = dict(self._providers)
        copy._resources = dict(self._resources)
        copy._provider_names = dict(self._provider_names or {})
        copy._resource_names = dict(self._resource_names or {})
        return copy

    def _key(self) -> UsersDigest:
        if self._digest is None:
            raise LookupError("a name not known without the user's key")
        return self._digest


@dataclass(frozen=True)
class Named:
    """A row of `health_data` (provider, resource, period, version, sealed) with its
    provider and resource by name."""

    provider: str
    resource: str
    period: Any
    version: int
    sealed: Any

    @classmethod
    def of(cls, row: Any, provider: str, resource: str) -> Named:
        return cls(provider, resource, row.period, row.version, row.sealed)


@dataclass
class _Kept:
    places: Places
    at: float


class PlaceDigests:
    """A process's `Places` of users read lately: bounded in count, aged out after
    `max_age`, a user's dropped at its erasure (`forget`)."""

    def __init__(
        self,
        max_users: int = 4096,
        max_age: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_users = max_users
        self.max_age = max_age
        self.clock = clock
        self._kept: OrderedDict[UUID, _Kept] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: UUID) -> Places | None:
        with self._lock:
            kept = self._kept.get(user_id)
            if kept is None:
                return None
            if self.clock() - kept.at > self.max_age:
                del self._kept[user_id]
                return None
            self._kept.move_to_end(user_id)
            return kept.places

    def keep(self, user_id: UUID, places: Places) -> Places:
        with self._lock:
            self._kept[user_id] = _Kept(places, self.clock())
            self._kept.move_to_end(user_id)
            while len(self._kept) > self.max_users:
                self._kept.popitem(last=False)
        return places

    def forget(self, user_ids: Iterable[UUID]) -> None:
        with self._lock:
            for user_id in user_ids:
                self._kept.pop(user_id, None)


# Users unlisted a statement (well within SQLite's 32,766 bound values).
UNLISTED_AT_ONCE = 1_000


def key_stored_places(db: Database, key_store: KeyStore) -> int:
    """Every user the migration listed (rows written before revision 0039, their
    provider and resource in clear) keyed, one user a transaction (a start that stops
    halfway goes on at the next): its rows of `health_data` and `raw_payloads` renamed to
    the digests of their names (an erased user's deleted). Then both tables rewritten: on
    PostgreSQL the rows of before stay in the tables' files as dead versions, names and
    all, until then (`Database.rewrite`). Only then are the users unlisted, so that a
    start that stopped before the rewrite rewrites at the next (its rows keyed already).
    The rows keyed or deleted; logs counts only."""
    with db.read() as conn:
        pending = list(conn.execute(select(place_digest_backfill.c.user_id)).scalars())
    if not pending:
        return 0
    keyed = 0
    for number, user_id in enumerate(pending, 1):
        with db.write() as conn:
            cipher = key_store.cipher_on(conn, user_id)
            for table in (health_data, raw_payloads):
                c = table.c
                mine = c.user_id == user_id
                if cipher is None:
                    # Erased (its rows went with its key): none a key opens is kept.
                    keyed += conn.execute(delete(table).where(mine)).rowcount
                    continue
                places = Places(cipher.digest)
                named = conn.execute(select(c.provider, c.resource).where(mine).distinct()).all()
                for provider, resource in named:
                    if is_keyed(provider) and is_keyed(resource):
                        continue  # keyed already (by a store since the migration)
                    keyed += conn.execute(
                        update(table)
                        .where(mine, c.provider == provider, c.resource == resource)
                        .values(
                            provider=places.provider(provider),
                            resource=places.resource(resource),
                        )
                    ).rowcount
        log.info("health data places: %d of %d users keyed", number, len(pending))
    db.rewrite(health_data.name, raw_payloads.name)
    listed = place_digest_backfill.c.user_id
    for start in range(0, len(pending), UNLISTED_AT_ONCE):
        with db.write() as conn:
            conn.execute(
                delete(place_digest_backfill).where(
                    listed.in_(pending[start : start + UNLISTED_AT_ONCE])
                )
            )
    return keyed
