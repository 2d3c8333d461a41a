"""Continuous queries and their tasks in SQL (issue 34, ADR 0044): the registrations a team
manages, the queue of runs a worker leases, and the latest sealed result.

A task row is both the history entry and the job: the next run waits as `scheduled`; a
worker claims it by one conditional UPDATE (its holder and lease), so that two processes
never run it twice, and a run whose process died is taken over once its lease has passed.
The run's end, the query's new result and the next task are written in one transaction,
and only while the claim is still the worker's own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.schema import (
    continuous_queries,
    continuous_query_tasks,
    users,
)
from healthledger.domain.errors import UserNotFound
from healthledger.domain.health_queries.continuous import (
    MAX_PER_USER,
    ContinuousQuery,
    ContinuousQueryDefinition,
    ContinuousQueryNotFound,
    ContinuousQuerySlugTaken,
    Task,
    TaskStatus,
    TooManyContinuousQueries,
)
from healthledger.domain.users.user import ACTIVE
from sqlalchemy import Connection, Row, and_, delete, insert, or_, select, tuple_, update
from sqlalchemy.exc import IntegrityError

Q = continuous_queries.c
T = continuous_query_tasks.c


@dataclass(frozen=True)
class Claimed:
    """A task a worker holds: what its run needs."""

    task_id: UUID
    query_id: UUID
    team_id: UUID
    user_id: UUID
    definition: ContinuousQueryDefinition
    scheduled_at: datetime


def _query(row: Row[Any]) -> ContinuousQuery:
    return ContinuousQuery(
        query_id=row.query_id,
        team_id=row.team_id,
        user_id=row.user_id,
        definition=ContinuousQueryDefinition.model_validate(row.definition),
        created_at=row.created_at,
        result_at=row.result_at,
    )


def _task(row: Row[Any]) -> Task:
    return Task(
        task_id=row.task_id,
        query_id=row.query_id,
        user_id=row.user_id,
        status=TaskStatus(row.status),
        scheduled_at=row.scheduled_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        error_details=row.error_details,
    )


def _id_or_slug(id_or_slug: str) -> Any:
    try:
        return Q.query_id == UUID(id_or_slug)
    except ValueError:
        return Q.slug == id_or_slug


class ContinuousQueryStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- what the team manages ---------------------------------------------------------

    def _require_user(self, conn: Connection, team_id: UUID, user_id: UUID) -> None:
        # Another team's user, an unknown one, or one deleted: a 404 alike.
        found = conn.execute(
            select(users.c.user_id).where(
                users.c.user_id == user_id, users.c.team_id == team_id, users.c.status == ACTIVE
            )
        ).first()
        if found is None:
            raise UserNotFound()

    def create(
        self, team_id: UUID, user_id: UUID, definition: ContinuousQueryDefinition, now: datetime
    ) -> ContinuousQuery:
        """Register the query; its first run is due at once."""
        query_id = uuid.uuid4()
        with self.db.write() as conn:
            self._require_user(conn, team_id, user_id)
            slugs = set(conn.execute(select(Q.slug).where(Q.user_id == user_id)).scalars())
            if definition.slug in slugs:
                raise ContinuousQuerySlugTaken()
            if len(slugs) >= MAX_PER_USER:
                raise TooManyContinuousQueries()
            try:
                self._insert(conn, query_id, team_id, user_id, definition, now)
            except IntegrityError as error:  # the same slug registered meanwhile
                raise ContinuousQuerySlugTaken() from error
            self._schedule(conn, query_id, user_id, now)
        return ContinuousQuery(query_id, team_id, user_id, definition, now, None)

    @staticmethod
    def _insert(
        conn: Connection,
        query_id: UUID,
        team_id: UUID,
        user_id: UUID,
        definition: ContinuousQueryDefinition,
        now: datetime,
    ) -> None:
        # A unique violation rolls the whole registration back (the caller raises).
        conn.execute(
            insert(continuous_queries).values(
                query_id=query_id,
                team_id=team_id,
                user_id=user_id,
                slug=definition.slug,
                definition=definition.model_dump(mode="json", exclude_none=True),
                interval_minutes=definition.interval_minutes,
                created_at=now,
            )
        )

    def queries(self, team_id: UUID, user_id: UUID) -> list[ContinuousQuery]:
        with self.db.read() as conn:
            self._require_user(conn, team_id, user_id)
            rows = conn.execute(
                select(continuous_queries)
                .where(Q.team_id == team_id, Q.user_id == user_id)
                .order_by(Q.created_at, Q.query_id)
            )
            return [_query(row) for row in rows]

    def find(self, team_id: UUID, user_id: UUID, id_or_slug: str) -> ContinuousQuery:
        with self.db.read() as conn:
            return _query(self._row(conn, team_id, user_id, id_or_slug))

    def _row(self, conn: Connection, team_id: UUID, user_id: UUID, id_or_slug: str) -> Row[Any]:
        self._require_user(conn, team_id, user_id)
        row = conn.execute(
            select(continuous_queries).where(
                Q.team_id == team_id, Q.user_id == user_id, _id_or_slug(id_or_slug)
            )
        ).first()
        if row is None:
            raise ContinuousQueryNotFound()
        return row

    def delete(self, team_id: UUID, user_id: UUID, id_or_slug: str) -> None:
        """The query, its result and its history: a run going on meanwhile finds its
        claim gone and stores nothing."""
        with self.db.write() as conn:
            query_id = self._row(conn, team_id, user_id, id_or_slug).query_id
            conn.execute(delete(continuous_query_tasks).where(T.query_id == query_id))
            conn.execute(delete(continuous_queries).where(Q.query_id == query_id))

    def sealed_result(self, team_id: UUID, user_id: UUID, id_or_slug: str) -> str | None:
        """The latest completed run's table, sealed with the user's key (None: no run has
        completed yet)."""
        with self.db.read() as conn:
            sealed: str | None = self._row(conn, team_id, user_id, id_or_slug).sealed_result
            return sealed

    def tasks(
        self,
        team_id: UUID,
        user_id: UUID,
        id_or_slug: str,
        after: tuple[datetime, UUID] | None,
        limit: int,
    ) -> list[Task]:
        """A page of the query's runs, the latest scheduled first, after the cursor's
        (scheduled_at, task_id); one more than `limit` tells that another page follows."""
        with self.db.read() as conn:
            query_id = self._row(conn, team_id, user_id, id_or_slug).query_id
            statement = select(continuous_query_tasks).where(T.query_id == query_id)
            if after is not None:
                statement = statement.where(
                    tuple_(T.scheduled_at, T.task_id) < tuple_(*after)
                    if conn.dialect.name == "postgresql"
                    else or_(
                        T.scheduled_at < after[0],
                        and_(T.scheduled_at == after[0], T.task_id < after[1]),
                    )
                )
            rows = conn.execute(
                statement.order_by(T.scheduled_at.desc(), T.task_id.desc()).limit(limit + 1)
            )
            return [_task(row) for row in rows]

    # -- what the worker does ----------------------------------------------------------

    @staticmethod
    def _schedule(conn: Connection, query_id: UUID, user_id: UUID, at: datetime) -> None:
        conn.execute(
            insert(continuous_query_tasks).values(
                task_id=uuid.uuid4(),
                query_id=query_id,
                user_id=user_id,
                status=TaskStatus.scheduled,
                scheduled_at=at,
            )
        )

    def claim_due(self, now: datetime, holder: str, lease: timedelta, limit: int) -> list[Claimed]:
        """Lease up to `limit` due tasks of active users: scheduled ones whose time has
        come, and started ones whose worker's lease has passed."""
        due = or_(
            and_(T.status == TaskStatus.scheduled, T.scheduled_at <= now),
            and_(T.status == TaskStatus.started, T.lease_expires_at < now),
        )
        claimed = []
        with self.db.write() as conn:
            candidates = conn.execute(
                select(T.task_id, T.query_id, T.scheduled_at, Q.team_id, Q.user_id, Q.definition)
                .join(continuous_queries, Q.query_id == T.query_id)
                .join(users, users.c.user_id == Q.user_id)
                .where(due, users.c.status == ACTIVE)
                .order_by(T.scheduled_at)
                .limit(limit)
            ).all()
            for row in candidates:
                taken = conn.execute(
                    update(continuous_query_tasks)
                    .where(T.task_id == row.task_id, due)
                    .values(
                        status=TaskStatus.started,
                        started_at=now,
                        holder=holder,
                        lease_expires_at=now + lease,
                    )
                )
                if taken.rowcount == 1:
                    claimed.append(
                        Claimed(
                            row.task_id,
                            row.query_id,
                            row.team_id,
                            row.user_id,
                            ContinuousQueryDefinition.model_validate(row.definition),
                            row.scheduled_at,
                        )
                    )
        return claimed

    def finish(
        self,
        task: Claimed,
        holder: str,
        now: datetime,
        sealed_result: str | None,
        error: str | None,
        next_at: datetime,
    ) -> bool:
        """Record the run's end (its result, or its error) and schedule the next run, if the
        claim is still this worker's and the query still exists; whether it was."""
        with self.db.write() as conn:
            ended = conn.execute(
                update(continuous_query_tasks)
                .where(
                    T.task_id == task.task_id,
                    T.holder == holder,
                    T.status == TaskStatus.started,
                )
                .values(
                    status=TaskStatus.error if error is not None else TaskStatus.completed,
                    ended_at=now,
                    error_details=error,
                    holder=None,
                    lease_expires_at=None,
                )
            )
            if ended.rowcount != 1:
                return False
            if sealed_result is not None:
                conn.execute(
                    update(continuous_queries)
                    .where(Q.query_id == task.query_id)
                    .values(sealed_result=sealed_result, result_at=now)
                )
            self._schedule(conn, task.query_id, task.user_id, next_at)
            return True
