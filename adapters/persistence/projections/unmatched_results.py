"""The labs context's read model of unmatched results (`unmatched_results`): one row per
result that arrived without an order, for the team's listing and its filters. Its
contents stay sealed with the result's own key; a decision that destroys the key
(accept, reject), or the team's deletion, clears them from the row, as they no longer
open (ADR 0040)."""

from __future__ import annotations

from typing import Any

from healthledger.adapters.persistence.engine.schema import unmatched_results
from healthledger.adapters.persistence.engine.statements import (
    CompiledStatement,
    UpdatesByKey,
    insert_of,
)
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.labs.unmatched_results import (
    PENDING_CUSTOMER_REVIEW,
    PENDING_OPS_REVIEW,
    RESOLVED,
    UnmatchedResult,
)
from sqlalchemy import Connection

INSERT_RESULT = CompiledStatement(
    insert_of(
        unmatched_results,
        (
            "result_id",
            "team_id",
            "environment",
            "status",
            "decision_code",
            "lab_id",
            "sealed_result",
            "created_at",
            "updated_at",
            "version",
        ),
    )
)
UPDATE_RESULT = UpdatesByKey(unmatched_results, "result_id")


@handles(UnmatchedResult.Received)
def received(conn: Connection, e: UnmatchedResult.Received) -> None:
    INSERT_RESULT.execute(
        conn,
        {
            "result_id": e.originator_id,
            "team_id": e.team_id,
            "environment": e.environment,
            "status": PENDING_CUSTOMER_REVIEW,
            "decision_code": e.decision_code,
            "lab_id": e.lab_id,
            "sealed_result": e.sealed_result,
            "created_at": e.timestamp,
            "updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


@handles(
    UnmatchedResult.Accepted,
    UnmatchedResult.Rejected,
    UnmatchedResult.ResolvedByTeamDeletion,
)
def resolved(conn: Connection, e: Any) -> None:
    """Resolved (decided, or its team deleted): its key is destroyed in this transaction,
    so its contents go too."""
    UPDATE_RESULT.execute(
        conn,
        e.originator_id,
        {
            "status": RESOLVED,
            "sealed_result": None,
            "updated_at": e.timestamp,
            "version": e.originator_version,
        },
    )


@handles(UnmatchedResult.Escalated)
def escalated(conn: Connection, e: UnmatchedResult.Escalated) -> None:
    UPDATE_RESULT.execute(
        conn,
        e.originator_id,
        {"status": PENDING_OPS_REVIEW, "updated_at": e.timestamp, "version": e.originator_version},
    )
