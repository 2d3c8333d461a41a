"""The read models' one entry point: `project` runs every context's projection inside
the transaction that stores the events (so a read model is never behind its log), and
`rebuild` runs it again, page by page, over the whole log into recreated tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import ApplicationRecorder, Mapper
from healthledger.adapters.persistence.database import Database
from healthledger.adapters.persistence.projections import (
    connections,
    stream_owners,
    teams,
    users,
    webhooks,
)
from healthledger.adapters.persistence.schema import READ_MODEL_TABLES, metadata
from sqlalchemy import Connection


class ReadModels:
    def __init__(self, db: Database, open_sealed: users.OpenSealed | None = None) -> None:
        """`open_sealed` (the key store's `open_on`) opens the client_user_ids that users'
        events hold sealed; a log with none (written before they were) needs none."""
        self.db = db
        self.handlers = {
            **users.HANDLERS,
            **(users.opening_handlers(open_sealed) if open_sealed is not None else {}),
            **teams.HANDLERS,
            **connections.HANDLERS,
            **webhooks.HANDLERS,
        }

    def project(self, conn: Connection, events: Sequence[DomainEventProtocol[Any]]) -> None:
        handlers = self.handlers
        for event in events:
            handler = handlers.get(type(event))
            if handler is not None:
                handler(conn, event)
        stream_owners.project(conn, events)

    def rebuild(
        self,
        recorder: ApplicationRecorder,
        mapper: Mapper[Any],
        progress: Callable[[int], None] = lambda n: None,
        page_size: int = 500,
    ) -> int:
        """Drop and recreate every read model from the log, in one transaction.

        Writers wait for it (SQLite: the one writer; PostgreSQL: the event table lock).
        On SQLite readers keep seeing the old tables until it commits; on PostgreSQL the
        dropped tables are locked, so reads wait for the commit. Returns the events
        replayed.
        """
        replayed = 0
        with self.db.write() as conn:
            if not self.db.is_sqlite:
                conn.exec_driver_sql("LOCK TABLE stored_events IN EXCLUSIVE MODE")
            metadata.drop_all(conn, tables=list(READ_MODEL_TABLES))
            metadata.create_all(conn, tables=list(READ_MODEL_TABLES))
            position = 0
            while True:
                page = recorder.select_notifications(position, page_size, inclusive_of_start=False)
                if not page:
                    break
                self.project(conn, [mapper.to_domain_event(n) for n in page])
                position = page[-1].id
                replayed += len(page)
                progress(len(page))
        return replayed
