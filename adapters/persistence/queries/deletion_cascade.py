"""What a user's deletion ends with it (the lifecycle's `DeletionCascade` port): its live
connections and its open lab test orders, read in one statement, compiled once (ADR 0014).
On PostgreSQL it is the deletion's first read, and goes with the unit of work's reading
of the log's head (ADR 0025)."""

from __future__ import annotations

from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.statements import CompiledStatement
from healthledger.adapters.persistence.queries.connections import LIVE_CONNECTIONS_OF_USER
from healthledger.adapters.persistence.queries.orders import OPEN_ORDERS_OF_USER
from healthledger.domain.users.lifecycle import DeletionCascade
from sqlalchemy import Integer, literal_column, union_all

CONNECTION, ORDER = 1, 2

DELETION_CASCADE = CompiledStatement(
    union_all(
        LIVE_CONNECTIONS_OF_USER.add_columns(literal_column(str(CONNECTION), Integer)),
        OPEN_ORDERS_OF_USER.add_columns(literal_column(str(ORDER), Integer)),
    )
)


def deletion_cascade(db: Database, user_id: UUID) -> DeletionCascade:
    with db.read() as conn:
        rows = DELETION_CASCADE.rows(conn, {"user_id": user_id})
    return DeletionCascade(
        connection_ids=[row_id for row_id, kind in rows if kind == CONNECTION],
        order_ids=[row_id for row_id, kind in rows if kind == ORDER],
    )
