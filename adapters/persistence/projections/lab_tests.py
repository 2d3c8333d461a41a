"""The labs context's read model of teams' lab tests: one row per `LabTest.Created`,
changed by each `LabTest.Updated` (its name, whether it is active, when)."""

from __future__ import annotations

from healthledger.adapters.persistence.engine.schema import lab_tests
from healthledger.adapters.persistence.projections import handles
from healthledger.domain.labs.lab_tests import LabTest
from sqlalchemy import Connection, insert, update


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
            active=True,
            updated_at=e.timestamp,
        )
    )


@handles(LabTest.Updated)
def lab_test_updated(conn: Connection, e: LabTest.Updated) -> None:
    conn.execute(
        update(lab_tests)
        .where(lab_tests.c.lab_test_id == e.originator_id)
        .values(name=e.name, active=e.active, updated_at=e.timestamp)
    )
