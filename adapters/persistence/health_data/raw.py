"""The makers' own payloads as received (`raw_payloads`; docs/data.md#raw-payloads, ADR
0046): written by the health data store in the transaction that stores the days mapped
from them (`write`), read back by `RawPayloadReads` for the `*.get_raw` endpoints.

A row is one pull of one (user, provider, resource): the window of days it asked the
maker for and every answer it read, in order. A pull replaces the rows of the same
(user, provider, resource) whose window lies within its own (a sync of the same days, a
notice of one of them): what is kept grows with the days covered, never with how often
they are pulled again. Rows are few per statement: a store writes its pulls with one
SELECT of the overlapping windows (opened from their small sealed `window`, never the
payloads), one DELETE and one INSERT, whatever the number of answers or days.
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
from healthledger.adapters.persistence.health_data.blocks import period_of
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
    user_id: UUID,
    provider: str,
    raw: Mapping[str, RawPull],
) -> None:
    """Each resource's pull of `raw` kept, in place of the rows it replaces, on `conn`
    (the store's write transaction)."""
    if not raw:
        return
    first = min(pull.first for pull in raw.values())
    last = max(pull.last for pull in raw.values())
    overlapping = select(_r.resource, _r.slot, _r.window).where(
        _r.user_id == user_id,
        _r.provider == provider,
        _r.resource.in_(list(raw)),
        _r.period <= period_of(last),
        _r.last_period >= period_of(first),
    )
    if not is_sqlite:
        overlapping = overlapping.with_for_update()
    replaced: list[dict[str, Any]] = []
    for row in conn.execute(overlapping):
        window = json.loads(
            cipher.open_raw(bytes(row.window), _context("window", provider, row.resource, row.slot))
        )
        pull = raw[row.resource]
        if pull.first.isoformat() <= window["first"] and window["last"] <= pull.last.isoformat():
            replaced.append(
                {"uid": user_id, "prov": provider, "res": row.resource, "old_slot": row.slot}
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
                "provider": provider,
                "resource": resource,
                "slot": slot,
                "period": period_of(pull.first),
                "last_period": period_of(pull.last),
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
        same = {"uid": user_id, "prov": provider, "res": resource, "old_slot": slot}
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
        # The user's state and wrapped key and the rows overlapping the months asked for,
        # in one query (one round trip): a row per pull, or one with no pull when none is
        # kept. Another team's user is no row at all.
        held = and_(
            _r.user_id == users.c.user_id,
            _r.resource == bindparam("resource"),
            _r.period <= bindparam("last"),
            _r.last_period >= bindparam("first"),
        )
        self.queries = {
            of_one: select(
                users.c.status,
                keys.c.wrapped_key,
                _r.provider,
                _r.resource,
                _r.slot,
                _r.fetched_at,
                _r.payload,
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
        values = {
            "user_id": user_id,
            "team_id": team_id,
            "resource": resource,
            "first": period_of(first),
            "last": period_of(last),
        }
        if provider is not None:
            values["provider"] = provider
        with self.db.read() as conn:
            rows = conn.execute(self.queries[provider is not None], values).all()
        if not rows:
            raise UserNotFound()
        if rows[0].status == PENDING_ERASURE:
            raise UserScheduledForDeletion()
        cipher = self.key_store.cipher_of(user_id, rows[0].wrapped_key)
        if cipher is None:
            raise UserNotFound()  # erased (its row goes in the same transaction)
        found = []
        for row in rows:
            if row.slot is None:
                continue
            context = _context("payload", row.provider, row.resource, row.slot)
            opened = json.loads(cipher.open_raw(bytes(row.payload), context))
            pull = StoredPull(
                provider=row.provider,
                resource=row.resource,
                slot=row.slot,
                first=date.fromisoformat(opened["first"]),
                last=date.fromisoformat(opened["last"]),
                fetched_at=row.fetched_at,
                answers=opened["answers"],
            )
            if pull.first <= last and first <= pull.last:
                found.append(pull)
        return sorted(found, key=lambda p: (p.first, p.provider, p.fetched_at, p.last))
