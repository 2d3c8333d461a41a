"""Claims on due erasures: how the erasure sweeps of several processes share the work
(ADR 0021).

A sweeper claims a batch of due users in a short transaction of its own: it sets their
`pending_erasures.claimed_until`, choosing rows nobody holds (`FOR UPDATE SKIP LOCKED` on
PostgreSQL: a row another sweeper is claiming is skipped, not waited for; SQLite has one
writer). The erasure deletes the rows. A claim's time passes if its sweeper died; a
sweeper that could not erase its batch gives the claims back at once. Claims only share
the work: exactly-once comes from the event store (one Erased event per user wins).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, Mapper
from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import pending_erasures
from healthledger.adapters.persistence.engine.statements import among
from healthledger.domain.users.user import User
from sqlalchemy import and_, or_, select, update


class ErasureClaims:
    def __init__(self, db: Database, lease: timedelta) -> None:
        self.db = db
        self.lease = lease

    def claim(self, now: datetime, limit: int) -> list[UUID]:
        """Claim up to `limit` users whose grace period ended by `now` and whom no other
        sweeper holds, the longest due first; their ids."""
        p = pending_erasures.c
        due = (
            select(p.user_id)
            .where(p.due_at <= now, or_(p.claimed_until.is_(None), p.claimed_until <= now))
            .order_by(p.due_at, p.user_id)
            .limit(limit)
        )
        if not self.db.is_sqlite:
            due = due.with_for_update(skip_locked=True)
        claiming = (
            update(pending_erasures)
            .where(p.user_id.in_(due.scalar_subquery()))
            .values(claimed_until=now + self.lease)
            .returning(p.user_id)
        )
        with self.db.write() as conn:
            return list(conn.execute(claiming).scalars())

    def release(self, user_ids: Sequence[UUID]) -> None:
        """Give back the claims on these users (the rows of those erased are gone)."""
        if not user_ids:
            return
        p = pending_erasures.c
        with self.db.write() as conn:
            postgres = conn.dialect.name == "postgresql"
            conn.execute(
                update(pending_erasures)
                .where(among(p.user_id, "ids", postgres=postgres))
                .values(claimed_until=None),
                {"ids": list(user_ids)},
            )


class OverdueByTheLog:
    """The users whose grace period ended according to the log, whatever the read models
    say (issue 30 §3): the erasure sweep's cross-check of its due list.

    The claims above read `pending_erasures`, a read model that whoever holds the database
    can change without touching the log (a removed row, or a later `due_at`, and the user
    is never erased). The users read model (`status`, `erasure_due_at`) would be as cheap
    to ask and is as easy to change. So this follows the log itself, which the hash chain
    and the signed heads prove: only the events that start or end a grace period
    (`User.Deleted`, `User.DeletionUndone`, `User.Erased`, selected by topic), from the
    last position it read, and keeps in memory the users whose latest such event is a
    deletion, with the log's `erasure_due_at`. The first call of a process reads those
    events of the whole log once (a position kept in the database could be moved by the
    same holder); each later call reads only the new ones. No user is replayed unless its
    grace period ended by the log, and the erasure itself loads the user from the log and
    erases only what `User.is_due_for_erasure` says is due. Memory: one entry per user in
    its grace period.
    """

    TOPICS = (User.Deleted.TOPIC, User.DeletionUndone.TOPIC, User.Erased.TOPIC)

    def __init__(
        self,
        db: Database,
        recorder: ApplicationRecorder,
        mapper: Mapper[Any],
        lease: timedelta,
        *,
        page: int = 1000,
    ) -> None:
        self.db = db
        self.recorder = recorder
        self.mapper = mapper
        self.lease = lease
        self.page = page
        self._position = 0
        self._due: dict[UUID, datetime] = {}
        self._lock = threading.Lock()

    def overdue(self, now: datetime) -> list[UUID]:
        """The users whose grace period ended by `now` in the log and that the log does not
        show erased (nor undone), less those whose pending row the claims take care of: a
        row due by `now`, free or claimed within one lease (a sweeper is erasing it, or
        could not and gave it back: the next sweep tries again). A missing row, a later
        `due_at` or a claim further off than a sweeper ever makes is not trusted. Longest
        due first."""
        with self._lock:
            self._follow()
            due = sorted((at, user_id) for user_id, at in self._due.items() if at <= now)
        if not due:
            return []
        ids = [user_id for _at, user_id in due]
        p = pending_erasures.c
        handled: set[UUID] = set()
        with self.db.read() as conn:
            postgres = conn.dialect.name == "postgresql"
            claimable = select(p.user_id).where(
                and_(
                    among(p.user_id, "ids", postgres=postgres),
                    p.due_at <= now,
                    or_(p.claimed_until.is_(None), p.claimed_until <= now + self.lease),
                )
            )
            for start in range(0, len(ids), 1000):
                handled.update(
                    conn.execute(claimable, {"ids": ids[start : start + 1000]}).scalars()
                )
        return [user_id for user_id in ids if user_id not in handled]

    def _follow(self) -> None:
        """Read the grace periods' events after the last position read."""
        while True:
            page = self.recorder.select_notifications(
                self._position, self.page, topics=self.TOPICS, inclusive_of_start=False
            )
            for notification in page:
                user_id = notification.originator_id
                if not isinstance(user_id, UUID):
                    user_id = UUID(user_id)
                if notification.topic == User.Deleted.TOPIC:
                    event = self.mapper.to_domain_event(notification)
                    assert isinstance(event, User.Deleted)
                    self._due[user_id] = event.erasure_due_at
                else:
                    self._due.pop(user_id, None)
                self._position = notification.id
            if len(page) < self.page:
                return
