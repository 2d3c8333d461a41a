"""The makers' own payloads as received (`raw_payloads`; docs/data.md#raw-payloads, ADR
0046): written by the health data store in the transaction that stores the days mapped
from them (`write`), read back by `RawPayloadReads` for the `*.get_raw` endpoints.

A row is one pull of one (user, provider, resource): the window of days it asked the
maker for and every answer it read, in order. A pull replaces the rows of the same
(user, provider, resource) whose window lies within its own (a sync of the same days, a
notice of one of them): what is kept grows with the days covered, never with how often
they are pulled again. Rows are few per statement: a store writes its pulls with one
SELECT of the overlapping windows (opened from their small sealed `window`, never the
payloads), one DELETE and one INSERT, whatever the number of answers or days. A row's
provider and resource are keyed digests under the user's key (`places.py`, ADR 0047);
its seals stay bound to them by name. Its window is only sealed (no month in clear:
which days a person had data at a maker is a health fact), so a store opens the windows
of every kept pull of the provider's resources it writes, and a read those of the
resource, then fetches only the payloads whose window meets the days asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import raw_payloads, users
from healthledger.adapters.persistence.health_data.places import Places
from healthledger.adapters.persistence.keys.key_store import KeyStore, UserCipher, canonical_json
from healthledger.domain.connections.raw_payloads import RawPull
from healthledger.domain.errors import UserNotFound, UserScheduledForDeletion
from healthledger.domain.users.user import PENDING_ERASURE
from sqlalchemy import Connection, and_, bindparam, delete, insert, select

_r = raw_payloads.c
_INSERT = insert(raw_payloads)
_DELETE = delete(raw_payloads).where(
    _r.user_id == bindparam("uid"),
    _r.provider == bindparam("prov"),
    _r.resource == bindparam("res"),
    _r.slot == bindparam("old_slot"),
)


def _context(kind: str, provider: str, resource: str, slot: str) -> bytes:
    """What a row's seals are bound to besides the user: its place (a payload sealed for
    one row does not open in another)."""
    return f"raw-{kind}\x00{provider}\x00{resource}\x00{slot}".encode()


def _slot(cipher: UserCipher, first: date, last: date) -> str:
    return cipher.digest(f"raw-window:{first.isoformat()}..{last.isoformat()}".encode())


def write(
    conn: Connection,
    is_sqlite: bool,
    cipher: UserCipher,
    places: Places,
    user_id: UUID,
    provider: str,
    raw: Mapping[str, RawPull],
) -> None:
    """Each resource's pull of `raw` kept, in place of the rows it replaces, on `conn`
    (the store's write transaction)."""
    if not raw:
        return
    prov = places.provider(provider)
    resource_of = {places.resource(resource): resource for resource in raw}
    overlapping = select(_r.resource, _r.slot, _r.window).where(
        _r.user_id == user_id,
        _r.provider == prov,
        _r.resource.in_(resource_of),
    )
    if not is_sqlite:
        overlapping = overlapping.with_for_update()
    replaced: list[dict[str, Any]] = []
    for row in conn.execute(overlapping):
        resource = resource_of[row.resource]
        window = json.loads(
            cipher.open_raw(bytes(row.window), _context("window", provider, resource, row.slot))
        )
        pull = raw[resource]
        if pull.first.isoformat() <= window["first"] and window["last"] <= pull.last.isoformat():
            replaced.append(
                {"uid": user_id, "prov": prov, "res": row.resource, "old_slot": row.slot}
            )
    rows = []
    for resource, pull in raw.items():
        slot = _slot(cipher, pull.first, pull.last)
        window = {"first": pull.first.isoformat(), "last": pull.last.isoformat()}
        payload = {
            **window,
            "fetched_at": pull.fetched_at.isoformat(),
            "answers": [{"request": a.request, "answer": a.answer} for a in pull.answers],
        }
        rows.append(
            {
                "user_id": user_id,
                "provider": prov,
                "resource": places.resource(resource),
                "slot": slot,
                "fetched_at": pull.fetched_at,
                "window": cipher.seal_raw(
                    canonical_json(window), _context("window", provider, resource, slot)
                ),
                "payload": cipher.seal_raw(
                    canonical_json(payload), _context("payload", provider, resource, slot)
                ),
            }
        )
        # The same window pulled again: its own row is replaced (found above, or not
        # yet committed by a pull racing this one: the DELETE finds nothing then).
        same = {"uid": user_id, "prov": prov, "res": places.resource(resource), "old_slot": slot}
        if same not in replaced:
            replaced.append(same)
    conn.execute(_DELETE, replaced)
    conn.execute(_INSERT, rows)


@dataclass(frozen=True)
class StoredPull:
    """One kept pull, opened: whose, which window, when, and the maker's answers."""

    provider: str
    resource: str
    slot: str
    first: date
    last: date
    fetched_at: datetime
    answers: list[dict[str, Any]]


class RawPayloadReads:
    """The kept pulls of a live user of a team, for the `*.get_raw` endpoints."""

    def __init__(self, db: Database, key_store: KeyStore) -> None:
        self.db = db
        self.key_store = key_store
        keys = key_store.tables.keys
        # The user's state and wrapped key and the windows of its kept pulls of the
        # resource, in one query: a row per pull, or one with no pull when none is kept.
        # Another team's user is no row at all.
        held = and_(_r.user_id == users.c.user_id, _r.resource == bindparam("resource"))
        self.queries = {
            of_one: select(
                users.c.status,
                keys.c.wrapped_key,
                _r.provider,
                _r.slot,
                _r.window,
            )
            .select_from(
                users.outerjoin(keys, keys.c.user_id == users.c.user_id).outerjoin(
                    raw_payloads,
                    and_(held, _r.provider == bindparam("provider")) if of_one else held,
                )
            )
            .where(users.c.user_id == bindparam("user_id"), users.c.team_id == bindparam("team_id"))
            for of_one in (False, True)
        }
        # The payloads of the pulls whose window meets the days asked for.
        self.payloads = select(_r.provider, _r.slot, _r.fetched_at, _r.payload).where(
            _r.user_id == bindparam("user_id"),
            _r.resource == bindparam("resource"),
            _r.slot.in_(bindparam("slots", expanding=True)),
        )

    def pulls(
        self,
        team_id: UUID,
        user_id: UUID,
        resource: str,
        first: date,
        last: date,
        provider: str | None = None,
    ) -> list[StoredPull]:
        """The user's kept pulls of `resource` whose window meets first..last (inclusive),
        of every provider or of one, in (first day, provider, fetched) order. UserNotFound
        for an unknown, another team's or an erased user; UserScheduledForDeletion."""
        with self.db.read() as conn:
            # The key first, in the same transaction: the rows are asked for by the
            # digests of the names under it (ADR 0047); no key, no row matches "".
            cipher = self.key_store.cipher_on(conn, user_id)
            places = None if cipher is None else Places(cipher.digest)
            values: dict[str, Any] = {
                "user_id": user_id,
                "team_id": team_id,
                "resource": "" if places is None else places.resource(resource),
            }
            if provider is not None:
                values["provider"] = "" if places is None else places.provider(provider)
            rows = conn.execute(self.queries[provider is not None], values).all()
            if not rows:
                raise UserNotFound()
            if rows[0].status == PENDING_ERASURE:
                raise UserScheduledForDeletion()
            if cipher is None or places is None or rows[0].wrapped_key is None:
                raise UserNotFound()  # erased (its row goes in the same transaction)
            # The windows that meet first..last, opened (small): their pulls' payloads only.
            meeting: dict[tuple[str, str], tuple[str, date, date]] = {}
            for row in rows:
                if row.slot is None:
                    continue
                maker = places.provider_of(row.provider)
                if maker is None:
                    continue  # a provider since taken out of the catalog
                context = _context("window", maker, resource, row.slot)
                window = json.loads(cipher.open_raw(bytes(row.window), context))
                pull_first = date.fromisoformat(window["first"])
                pull_last = date.fromisoformat(window["last"])
                if pull_first <= last and first <= pull_last:
                    meeting[(row.provider, row.slot)] = (maker, pull_first, pull_last)
            held = (
                conn.execute(
                    self.payloads, {**values, "slots": sorted({s for _, s in meeting})}
                ).all()
                if meeting
                else []
            )
        found = []
        for kept in held:
            place = meeting.get((kept.provider, kept.slot))
            if place is None:
                continue  # another provider's pull of the same window, not asked for
            maker, pull_first, pull_last = place
            context = _context("payload", maker, resource, kept.slot)
            opened = json.loads(cipher.open_raw(bytes(kept.payload), context))
            found.append(
                StoredPull(
                    provider=maker,
                    resource=resource,
                    slot=kept.slot,
                    first=pull_first,
                    last=pull_last,
                    fetched_at=kept.fetched_at,
                    answers=opened["answers"],
                )
            )
        return sorted(found, key=lambda p: (p.first, p.provider, p.fetched_at, p.last))
