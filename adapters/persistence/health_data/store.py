"""The health data store (the domain's HealthDataStore port) on SQL: a user's data of one
provider and resource in sealed columnar blocks, one a calendar month (`blocks.py`, ADR
0033), each version a row of `health_data`, its provider and resource held as keyed
digests under the user's key (`places.py`, ADR 0047)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import health_data, users
from healthledger.adapters.persistence.health_data import blocks
from healthledger.adapters.persistence.health_data import raw as raw_data
from healthledger.adapters.persistence.health_data.blocks import Block, StoredPayload
from healthledger.adapters.persistence.health_data.places import Named, Places, is_keyed
from healthledger.adapters.persistence.health_data.sessions import (
    SessionPlace,
    index_rows,
    session_places,
    write_index,
)
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher, canonical_json
from healthledger.domain.connections.health_data import StoredDay, StoreResult, UserDataGone
from healthledger.domain.connections.raw_payloads import RawPull
from healthledger.domain.errors import InvalidRequest
from healthledger.domain.ledger import Clock
from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)

# Earlier versions of a block kept for reads as of an instant (each written when a sync
# changed a day the block held): older ones are dropped as a new one is kept.
KEPT_VERSIONS = 8

_h = health_data.c
_CURRENT = _h.replaced_at.is_(None)
_THE_BLOCK = and_(
    _h.user_id == bindparam("uid"),
    _h.provider == bindparam("prov"),
    _h.resource == bindparam("res"),
    _h.period == bindparam("per"),
)
INSERT_BLOCK = insert(health_data)
REWRITE_BLOCK = (
    update(health_data)
    .where(_THE_BLOCK, _h.version == bindparam("ver"))
    .values(sealed=bindparam("sealed"), days=bindparam("n"), written_at=bindparam("at"))
)
REPLACE_BLOCK = (
    update(health_data)
    .where(_THE_BLOCK, _h.version == bindparam("ver"))
    .values(replaced_at=bindparam("at"))
)
COMPACT_BLOCK = delete(health_data).where(
    _THE_BLOCK, _h.replaced_at.is_not(None), _h.version <= bindparam("oldest_dropped")
)


COMPACTED = (
    "as_of is before the oldest version of this data that is kept (a block keeps its "
    f"{KEPT_VERSIONS} latest earlier versions): give a later instant."
)


def versions_held(as_of: datetime | Any | None) -> ColumnElement[bool]:
    """The versions a read opens or weighs: the current ones; as of an instant (a value
    or a bind parameter), the version current then and every later one (which tell a
    block made later apart from one whose version of then compaction dropped)."""
    if as_of is None:
        return _CURRENT
    return or_(_CURRENT, _h.replaced_at > as_of)


def sealed_at(as_of: datetime | Any | None) -> Any:
    """The `sealed` column of a read's rows: as of an instant, only the version current
    then carries its bytes (began at or before it; a first version stored before
    `began_at` was kept began with the block), the later ones none."""
    if as_of is None:
        return _h.sealed
    return case((or_(_h.began_at.is_(None), _h.began_at <= as_of), _h.sealed), else_=None).label(
        "sealed"
    )


def versions_of_then(rows: Iterable[Any]) -> list[Any]:
    """Of rows (provider, resource, period, version, sealed: by name or by digest, alike)
    read with `versions_held` and
    `sealed_at` as of an instant, those of the versions current then; InvalidRequest (a
    422 on `as_of`) when compaction dropped the version of then of a block."""
    then: dict[tuple[str, str, date], Any] = {}
    oldest: dict[tuple[str, str, date], int] = {}
    for row in rows:
        place = (row.provider, row.resource, row.period)
        oldest[place] = min(row.version, oldest.get(place, row.version))
        if row.sealed is not None:
            then[place] = row
    if any(place not in then and version > 1 for place, version in oldest.items()):
        raise InvalidRequest(COMPACTED, "as_of", "query")
    return list(then.values())


def block_context(provider: str, resource: str, period: date) -> bytes:
    """What a block's seal is bound to besides the user: its place."""
    return f"health-block\x00{provider}\x00{resource}\x00{period.isoformat()}".encode()


def open_block(
    cipher: UserCipher,
    row: Any,
    keys: Collection[str] | None = None,
    days: tuple[date, date] | None = None,
) -> Block:
    """A `health_data` row (provider, resource, period, sealed; its provider and resource
    by name: `Places.named`) opened (of its items' keys, `keys` only, and of its days,
    those of `days` only, when given)."""
    if is_keyed(row.provider):
        # A row as stored, its names keyed (ADR 0047): named by the user's digests.
        named = Places(cipher.digest).name(row)
        if named is None:
            raise LookupError("a block of no known provider or resource")
        row = named
    context = block_context(row.provider, row.resource, row.period)
    return blocks.decode(cipher.open_raw(bytes(row.sealed), context), keys, days)


def current_blocks(
    user_id: UUID,
    places: Places,
    first: date,
    last: date,
    *,
    resources: Collection[str] | None = None,
    provider: str | None = None,
    as_of: datetime | None = None,
) -> Select[Any]:
    """The user's current blocks holding a day of first..last (as of an instant: the
    versions `versions_held` then, to be chosen by `versions_of_then`), of the resources
    and provider named (asked by their digests: `places.named` names the rows)."""
    query = select(_h.provider, _h.resource, _h.period, _h.version, sealed_at(as_of)).where(
        _h.user_id == user_id,
        versions_held(as_of),
        _h.period >= blocks.period_of(first),
        _h.period <= last,
    )
    if resources is not None:
        query = query.where(_h.resource.in_(places.resources(resources)))
    if provider is not None:
        query = query.where(_h.provider == places.provider(provider))
    return query


def opened_days(
    rows: Iterable[Any],
    cipher: UserCipher,
    first: date,
    last: date,
    as_of: datetime | None = None,
) -> list[StoredDay]:
    """The days in first..last of `health_data` rows (provider, resource, period, sealed),
    opened, in (resource, day, provider) order; as of an instant, those stored by then
    (a version's days added later were written into it in place)."""
    found = [
        StoredDay(
            provider=row.provider,
            resource=row.resource,
            day=day,
            plaintext=text,
            stored_at=stored_at,
            updated_at=updated_at,
            ids=cipher.summary_ids,
        )
        for row in rows
        for day, text, stored_at, updated_at in open_block(
            cipher, row, days=(first, last)
        ).payloads()
        if as_of is None or stored_at <= as_of
    ]
    return sorted(found, key=lambda d: (d.resource, d.day, d.provider))


@dataclass
class _Write:
    """One block's write: its rows' statements."""

    resource: str
    period: date
    sealed: bytes
    days: int
    version: int | None  # the current version, None for a new block
    keeps_earlier: bool  # a stored day changed: the current version is kept as it was


class SqlHealthDataStore:
    def __init__(self, db: Database, key_store: KeyStore, clock: Clock) -> None:
        self.db = db
        self.key_store = key_store
        self.clock = clock
        # The makers' payloads as received, kept by `store` (`*.get_raw`).
        self.raw = raw_data.RawPayloadReads(db, key_store)

    def store(
        self,
        user_id: UUID,
        provider: str,
        data: Mapping[str, Mapping[date, Any]],
        raw: Mapping[str, RawPull] | None = None,
    ) -> dict[str, StoreResult]:
        results = {resource: StoreResult() for resource in data}
        if not any(data.values()) and not raw:
            return results
        by_block: dict[tuple[str, date], list[date]] = {}
        for resource, day in sorted((r, day) for r, days in data.items() for day in days):
            by_block.setdefault((resource, blocks.period_of(day)), []).append(day)
        now = self.clock()
        with self.db.write() as conn:
            team_id, cipher = self._user_and_key(conn, user_id)
            names = Places(cipher.digest)
            resource_of = {names.resource(resource): resource for resource, _ in by_block}
            query = select(_h.provider, _h.resource, _h.period, _h.version, _h.sealed).where(
                _h.user_id == user_id,
                _h.provider == names.provider(provider),
                _CURRENT,
                _h.resource.in_(resource_of),
                _h.period.in_({period for _, period in by_block}),
            )
            if not self.db.is_sqlite:
                query = query.with_for_update()  # a block is read, merged and written back
            current = {
                (resource_of[row.resource], row.period): Named.of(
                    row, provider, resource_of[row.resource]
                )
                for row in conn.execute(query)
            }
            writes = []
            # The sleeps and workouts stored or changed: indexed by their public ids in
            # this transaction (health_data/sessions.py).
            places: list[SessionPlace] = []
            for (resource, period), days in by_block.items():
                row = current.get((resource, period))
                block = open_block(cipher, row) if row is not None else None
                stored = set(block.day_list()) if block is not None else set()
                # A day pulled again is compared with its stored text (canonical JSON, as
                # the block opens it): only those days are made into text, a new day
                # never is (a pull of history writes its columns only).
                again = [day for day in days if day in stored]
                held = {
                    day: (text, stored_at)
                    for day, text, stored_at, _ in (
                        block.only(again).payloads() if block is not None and again else ()
                    )
                }
                changed: dict[date, StoredPayload] = {}
                updated = False
                for day in days:
                    value = data[resource][day]
                    if day not in stored:
                        results[resource].created.append(day)
                        changed[day] = StoredPayload(value, now, now)
                    elif canonical_json(value) != held[day][0]:
                        results[resource].updated.append(day)
                        changed[day] = StoredPayload(value, held[day][1], now)
                        updated = True
                if not changed:
                    continue
                for day in changed:
                    places.extend(session_places(provider, resource, day, data[resource][day]))
                plain = (
                    blocks.merged(block, changed) if block is not None else blocks.encode(changed)
                )
                writes.append(
                    _Write(
                        resource,
                        period,
                        cipher.seal_raw(plain, block_context(provider, resource, period)),
                        len(stored) + sum(1 for day in changed if day not in stored),
                        None if row is None else row.version,
                        updated,
                    )
                )
            self._write(conn, user_id, names, provider, writes, now)
            write_index(conn, self.db.is_sqlite, index_rows(cipher, user_id, team_id, places))
            # The maker's answers the days were mapped from, in the same transaction (a
            # few statements for every pull of the chunk: health_data/raw.py).
            raw_data.write(conn, self.db.is_sqlite, cipher, names, user_id, provider, raw or {})
        return results

    def absorb(
        self,
        conn: Connection,
        cipher: UserCipher,
        user_id: UUID,
        provider: str,
        resource: str,
        period: date,
        days: Mapping[date, StoredPayload],
    ) -> None:
        """`days` (of `period`, with their own times and digests) written into their block
        on `conn`, each checked to open as it was (the conversion of stored days)."""
        places = Places(cipher.digest)
        query = select(_h.version, _h.sealed).where(
            _h.user_id == user_id,
            _h.provider == places.provider(provider),
            _h.resource == places.resource(resource),
            _h.period == period,
            _CURRENT,
        )
        if not self.db.is_sqlite:
            query = query.with_for_update()
        row = conn.execute(query).first()
        context = block_context(provider, resource, period)
        if row is None:
            plain, held = blocks.encode(days, check=True), len(days)
        else:
            block = blocks.decode(cipher.open_raw(bytes(row.sealed), context))
            plain = blocks.merged(block, days, check=True)
            held = len(set(block.day_list()) | set(days))
        write = _Write(
            resource,
            period,
            cipher.seal_raw(plain, context),
            held,
            None if row is None else row.version,
            False,
        )
        self._write(conn, user_id, places, provider, [write], self.clock())

    def _write(
        self,
        conn: Connection,
        user_id: UUID,
        places: Places,
        provider: str,
        writes: list[_Write],
        now: datetime,
    ) -> None:
        inserts, rewrites, replaced, compacted = [], [], [], []
        # The rows hold the provider and resource as keyed digests (ADR 0047).
        prov = places.provider(provider)
        for w in writes:
            res = places.resource(w.resource)
            place = {"uid": user_id, "prov": prov, "res": res, "per": w.period}
            if w.version is not None and not w.keeps_earlier:
                # Days added only: the current version holds them (a read as of before
                # them leaves them out by their stored_at).
                rewrites.append(
                    {**place, "ver": w.version, "sealed": w.sealed, "n": w.days, "at": now}
                )
                continue
            version = 1 if w.version is None else w.version + 1
            inserts.append(
                {
                    "user_id": user_id,
                    "provider": prov,
                    "resource": res,
                    "period": w.period,
                    "version": version,
                    "sealed": w.sealed,
                    "days": w.days,
                    "written_at": now,
                    "replaced_at": None,
                    "began_at": now,
                }
            )
            if w.version is not None:
                replaced.append({**place, "ver": w.version, "at": now})
                if w.version > KEPT_VERSIONS:
                    compacted.append({**place, "oldest_dropped": w.version - KEPT_VERSIONS})
        if replaced:
            conn.execute(REPLACE_BLOCK, replaced)
        if compacted:
            conn.execute(COMPACT_BLOCK, compacted)
        if rewrites:
            conn.execute(REWRITE_BLOCK, rewrites)
        if inserts:
            conn.execute(INSERT_BLOCK, inserts)

    def read(
        self, user_id: UUID, provider: str, resource: str, start: date, end: date
    ) -> dict[date, Any]:
        return {
            d.day: d.value
            for d in self.read_range(user_id, start, end, resources=[resource], provider=provider)
        }

    def read_range(
        self,
        user_id: UUID,
        start: date,
        end: date,
        *,
        resources: Collection[str] | None = None,
        provider: str | None = None,
        as_of: datetime | None = None,
    ) -> list[StoredDay]:
        """The user's stored days in start..end (inclusive), across providers (or of
        one), of some resources (or all), in (resource, day, provider) order (as they
        were at `as_of` when given); none for an erased user."""
        with self.db.read() as conn:
            # The key and the rows in one transaction: an erasure is before both or after.
            cipher = self.key_store.cipher_on(conn, user_id)
            if cipher is None:
                return []
            places = Places(cipher.digest)
            query = current_blocks(
                user_id, places, start, end, resources=resources, provider=provider, as_of=as_of
            )
            rows = places.named(conn.execute(query))
        if as_of is not None:
            rows = versions_of_then(rows)
        return opened_days(rows, cipher, start, end, as_of)

    def count(self, user_id: UUID) -> int:
        """The user's stored days (of every provider and resource)."""
        with self.db.read() as conn:
            return conn.execute(
                select(func.coalesce(func.sum(_h.days), 0)).where(_h.user_id == user_id, _CURRENT)
            ).scalar_one()

    def _user_and_key(self, conn: Connection, user_id: UUID) -> tuple[UUID, UserCipher]:
        """The user's team and key, read in one query on the write's connection (a store
        is one transaction, not a read of the key before it); UserDataGone when the user
        or its key is erased."""
        # On PostgreSQL the row lock orders this write against an erasure deleting the user
        # row (erasure deletes that row before the health data, in one transaction): either
        # these rows are committed first and erased with the rest, or the user is gone here.
        # It is exclusive (FOR NO KEY UPDATE), so a user's writes also follow one another:
        # under a shared lock two processes syncing the same days (two makers' notices at
        # once) both found no block of a new month, both inserted its version 1, and one
        # failed on the primary key (CI saw it); the blocks that exist are locked below.
        keys = self.key_store.tables.keys
        query = (
            select(users.c.team_id, keys.c.wrapped_key)
            .select_from(users.outerjoin(keys, keys.c.user_id == users.c.user_id))
            .where(users.c.user_id == user_id)
        )
        if not self.db.is_sqlite:
            query = query.with_for_update(key_share=True, of=users)
        row = conn.execute(query).first()
        cipher = None if row is None else self.key_store.cipher_of(user_id, row.wrapped_key)
        if row is None or cipher is None:
            raise UserDataGone()
        return row.team_id, cipher
