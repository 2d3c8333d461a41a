"""What a user's deletion ends with it (the lifecycle's `deletion_targets`, per participant
of the `UserDeletionCascade`): its live connections and its open lab test orders, read in
one statement, compiled once (ADR 0014). On PostgreSQL it is the deletion's first read,
and goes with the unit of work's reading of the log's head (ADR 0025)."""

from __future__ import annotations

from uuid import UUID

from healthledger.adapters.persistence.engine.database import Database
from healthledger.adapters.persistence.engine.statements import CompiledStatement
from healthledger.adapters.persistence.queries.connections import LIVE_CONNECTIONS_OF_USER
from healthledger.adapters.persistence.queries.orders import OPEN_ORDERS_OF_USER
from healthledger.domain.connections.user_deletion import UserConnections
from healthledger.domain.labs.user_deletion import UserOrders
from healthledger.domain.users.deletion_cascade import DeletionTargets
from sqlalchemy import Integer, literal_column, union_all

# Each participant's select of the ids it ends (by the user_id parameter), numbered from 1:
# a row's number says whose it is.
TARGETS = {
    UserConnections.name: LIVE_CONNECTIONS_OF_USER,
    UserOrders.name: OPEN_ORDERS_OF_USER,
}
_NAMES = dict(enumerate(TARGETS, start=1))

DELETION_CASCADE = CompiledStatement(
    union_all(
        *(
            select.add_columns(literal_column(str(kind), Integer))
            for kind, select in enumerate(TARGETS.values(), start=1)
        )
    )
)


def deletion_targets(db: Database, user_id: UUID) -> DeletionTargets:
    with db.read() as conn:
        rows = DELETION_CASCADE.rows(conn, {"user_id": user_id})
    targets: dict[str, list[UUID]] = {}
    for row_id, kind in rows:
        targets.setdefault(_NAMES[kind], []).append(row_id)
    return targets
