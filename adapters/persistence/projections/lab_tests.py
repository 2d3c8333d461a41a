"""The labs context's read model of teams' lab tests: one row per `LabTest.Created`."""

from __future__ import annotations

from healthledger.adapters.persistence.engine.schema import lab_tests
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.labs.lab_tests import LabTest
from sqlalchemy import Connection, insert


@handles(LabTest.Created)
def lab_test_created(conn: Connection, e: LabTest.Created) -> None:
    conn.execute(
        insert(lab_tests).values(
            lab_test_id=e.originator_id,
            team_id=e.team_id,
            name=e.name,
            description=e.description,
            method=e.method,
            lab_id=e.lab_id,
            marker_ids=list(e.marker_ids),
            fasting=e.fasting,
            created_at=e.timestamp,
        )
    )
